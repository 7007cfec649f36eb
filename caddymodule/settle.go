package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/limiter"
)

// afterward is what an admitted request of zones with count_response,
// cost_header or delay still has to do once decided: wait for the slot it
// booked, and settle what it cost once its response is known. It keeps
// copies of the requests it settles, as the decision's scratch memory goes
// back to its pool first. It is the response writer the next handler
// writes to, capturing the status; it comes from a pool, so a request
// through such zones allocates nothing for it.
type afterward struct {
	caddyhttp.ResponseWriterWrapper
	h      *Handler
	src    cluster.Source // who decided
	now    time.Time      // when
	delay  time.Duration  // the longest wait booked
	reqs   []limiter.Request
	at     []int64 // when reqs[i] was counted (Unix ns): the decision, or its booking
	zones  []*Zone
	status int // written by the next handler; 0 if none

	reqBuf  [maxInline]limiter.Request
	atBuf   [maxInline]int64
	zoneBuf [maxInline]*Zone
}

var afterwardPool = sync.Pool{New: func() any { return new(afterward) }}

// afterDecision collects, from a decided batch, what the request must do
// next: nil if nothing (no zone settles or waits, or it was denied). It
// also sets the bans of zones that denied, and lets go of the delay
// queues the request entered but need not wait in.
func (h *Handler) afterDecision(now time.Time, b *batch, o outcome) *afterward {
	if h.extras&extraBan != 0 && !o.allowed && o.source != cluster.SourceBlockedCache {
		h.setBans(now, b)
	}
	var a *afterward
	for i := range b.reqs {
		req := &b.reqs[i]
		if b.dry[i] || req.Limit.Algorithm == limiter.Concurrency {
			continue
		}
		z := b.zoneOfReq(i)
		waits := o.allowed && req.MaxDelay > 0 && b.res[i].Delay > 0
		if req.MaxDelay > 0 && !waits {
			z.outcome.delay.leave(req.Key)
		}
		if !o.allowed || !waits && !z.outcome.settles {
			continue
		}
		if a == nil {
			a = afterwardPool.Get().(*afterward)
			a.h, a.src, a.now, a.delay, a.status = h, o.source, now, 0, 0
			a.reqs, a.at, a.zones = a.reqBuf[:0], a.atBuf[:0], a.zoneBuf[:0]
		}
		a.reqs = append(a.reqs, *req)
		a.at = append(a.at, now.Add(b.res[i].Delay).UnixNano())
		a.zones = append(a.zones, z)
		a.delay = max(a.delay, b.res[i].Delay)
	}
	return a
}

// free returns a to its pool, letting go of the delay queues it holds.
func (a *afterward) free() {
	for i := range a.reqs {
		if a.reqs[i].MaxDelay > 0 && a.at[i] > a.now.UnixNano() {
			a.zones[i].outcome.delay.leave(a.reqs[i].Key)
		}
	}
	clear(a.zoneBuf[:])
	a.ResponseWriter, a.h, a.reqs, a.at, a.zones = nil, nil, nil, nil, nil
	afterwardPool.Put(a)
}

// wait holds the request until the slot it booked, and reports whether it
// may go on: false if its client went away first, when every unit it
// took is given back.
func (a *afterward) wait(ctx context.Context) bool {
	if a.delay <= 0 {
		return true
	}
	for i := range a.reqs {
		if a.reqs[i].MaxDelay > 0 {
			a.zones[i].outcome.delay.waiting.Inc()
		}
	}
	defer func() {
		for i := range a.reqs {
			if a.reqs[i].MaxDelay > 0 {
				a.zones[i].outcome.delay.waiting.Dec()
			}
		}
	}()
	t := time.NewTimer(time.Until(a.now.Add(a.delay)))
	defer t.Stop()
	select {
	case <-t.C:
		outcomeCounters().delayed[delayServed].Inc()
		return true
	case <-ctx.Done():
		outcomeCounters().delayed[delayLeft].Inc()
		now := time.Now()
		for i := range a.reqs {
			a.adjust(now, i, max(a.reqs[i].Cost, 1), false)
		}
		return false
	}
}

// writer returns the response writer the next handler is to write to: w
// itself when no zone settles by the response.
func (a *afterward) writer(w http.ResponseWriter) http.ResponseWriter {
	for _, z := range a.zones {
		if z.outcome.settles {
			a.ResponseWriter = w
			return a
		}
	}
	return w
}

// WriteHeader records the status the response is given.
func (a *afterward) WriteHeader(status int) {
	if a.status == 0 && status >= 200 || status == http.StatusSwitchingProtocols {
		a.status = status
	}
	a.ResponseWriter.WriteHeader(status)
}

// Write records the implicit 200 of a response written without a status.
func (a *afterward) Write(p []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.ResponseWriter.Write(p)
}

// settle settles what the request cost, now that the next handler
// returned err: a zone whose count_response the response does not match
// gets its units back; a cost_header's cost is given back or charged for
// the difference. The status is the one written, else err's (what Caddy
// will answer), else 200.
func (a *afterward) settle(err error) {
	status := a.status
	if status == 0 {
		status = http.StatusOK
		if err != nil {
			status = http.StatusInternalServerError
			if he, ok := errors.AsType[caddyhttp.HandlerError](err); ok && he.StatusCode != 0 {
				status = he.StatusCode
			}
		}
	}
	var hdr http.Header
	if a.ResponseWriter != nil {
		hdr = a.ResponseWriter.Header()
	}
	now := time.Now()
	for i := range a.reqs {
		z := a.zones[i]
		if !z.outcome.settles {
			continue
		}
		taken := max(a.reqs[i].Cost, 1)
		if rm := z.CountResponse; rm != nil && !rm.Match(status, hdr) {
			a.adjust(now, i, taken, false)
			outcomeCounters().settled[settledRefunded].Inc()
			continue
		}
		if z.CostHeader == "" {
			continue
		}
		cost, ok := reportedCost(hdr, z.CostHeader)
		switch {
		case !ok:
		case cost < taken:
			a.adjust(now, i, taken-cost, false)
			outcomeCounters().settled[settledCostRefunded].Inc()
		case cost > taken:
			a.adjust(now, i, cost-taken, true)
			outcomeCounters().settled[settledCharged].Inc()
		}
	}
}

// reportedCost reads the cost an upstream reported in header name.
func reportedCost(hdr http.Header, name string) (int64, bool) {
	v := hdr.Get(name)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return min(n, limiter.MaxQuota), true
}

// adjust gives back (or, if charge, spends more of) units of request i
// where its key is counted: this node's engine, a peer owner, or the
// fallback counter that admitted it (see cluster.Node.RefundAt). A refund
// comes out of the window that counted the units.
func (a *afterward) adjust(now time.Time, i int, units int64, charge bool) {
	if units <= 0 {
		return
	}
	one := [1]limiter.Request{a.reqs[i]}
	one[0].Cost, one[0].MaxDelay = units, 0
	if charge {
		a.h.app.node.Charge(now, a.src, one[:])
		return
	}
	a.h.app.node.RefundAt(now, time.Unix(0, a.at[i]), a.src, one[:])
}

// Results of settling, in tollgate_settled_total.
const (
	settledRefunded     = iota // the response did not match count_response: given back
	settledCostRefunded        // cost_header reported less than was taken
	settledCharged             // cost_header reported more
)

// Results of waiting, in tollgate_delayed_total.
const (
	delayServed = iota
	delayLeft
)

// outcomeCounters are the counters of settling and waiting, looked up once.
var outcomeCounters = sync.OnceValue(func() (c struct {
	settled [3]prometheus.Counter
	delayed [2]prometheus.Counter
	bans    prometheus.Counter
}) {
	initOutcomeMetrics()
	for i, r := range []string{"refunded", "cost_refunded", "charged"} {
		c.settled[i] = outcomeMetrics.settled.WithLabelValues(r)
	}
	for i, r := range []string{"served", "left"} {
		c.delayed[i] = outcomeMetrics.delayed.WithLabelValues(r)
	}
	c.bans = outcomeMetrics.bans
	return c
})

// Interface guards
var _ http.ResponseWriter = (*afterward)(nil)

// outcomeMetrics are the metrics of settling, waiting and banning; like
// the others, labelled from small fixed sets, never by key.
var outcomeMetrics = struct {
	once    sync.Once
	settled *prometheus.CounterVec
	delayed *prometheus.CounterVec
	waiting *prometheus.GaugeVec
	bans    prometheus.Counter
}{}

func initOutcomeMetrics() {
	outcomeMetrics.once.Do(func() {
		outcomeMetrics.settled = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Name:      "settled_total",
			Help:      "Requests of count_response and cost_header zones settled after their response, by result: refunded (the response did not match count_response), cost_refunded and charged (cost_header reported less or more than was taken). Each is settled where the key is counted, at its owner in a cluster.",
		}, []string{"result"})
		outcomeMetrics.delayed = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Name:      "delayed_total",
			Help:      "Requests of delay zones that waited for their slot, by result: served, or left (the client went away while waiting; its slot was given back).",
		}, []string{"result"})
		outcomeMetrics.waiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace,
			Name:      "delayed_waiting",
			Help:      "Requests waiting now for a slot booked in a delay zone, by zone name and scope.",
		}, []string{"zone", "scope"})
		outcomeMetrics.bans = prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace,
			Name:      "bans_total",
			Help:      "Keys banned by a zone with ban, after the zone denied them.",
		})
	})
}

// outcomeCollectors returns the outcome metrics, to register.
func outcomeCollectors() []prometheus.Collector {
	initOutcomeMetrics()
	return []prometheus.Collector{outcomeMetrics.settled, outcomeMetrics.delayed, outcomeMetrics.waiting, outcomeMetrics.bans}
}
