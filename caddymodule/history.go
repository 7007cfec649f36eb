package caddymodule

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tollgate/tollgate/adminapi"
)

// history keeps this node's counts of the last hour for the status page,
// in steps of adminapi.HistoryStep: per zone name, requests allowed and
// denied by reason, and challenge proofs by result. It reads them from
// the metrics' counters: a step's count is the difference between two
// samples. It is part of the pooled state, so it is kept across reloads
// and starts with the node, not with a page. Safe for concurrent use.
type history struct {
	mu    sync.Mutex
	last  map[historySeries]float64 // the counters at the previous sample
	steps []historyStepCounts       // oldest first, at most historyLen
}

// historyLen is how many steps the history holds.
const historyLen = int(adminapi.HistorySpan / adminapi.HistoryStep)

// historySeries names one counted series: a zone's allowed requests
// (kind allowed), its denials by reason (kind denied, label the reason),
// or the proofs of a challenge result (kind challenge, label the result).
type historySeries struct {
	kind, zone, label string
}

const (
	seriesAllowed   = "allowed"
	seriesDenied    = "denied"
	seriesChallenge = "challenge"
)

type historyStepCounts struct {
	end    time.Time
	counts map[historySeries]int64
}

// sample reads the metrics' counters at now and records the step since
// the previous sample.
func (h *history) sample(now time.Time) { h.record(now, readHistoryCounters()) }

// record records the step that ends at now, whose counters read cur. The
// first call only sets where counting starts. A counter lower than before
// started again (its zone was removed and declared again): its whole value
// is the step's.
func (h *history) record(now time.Time, cur map[historySeries]float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last != nil {
		counts := make(map[historySeries]int64, len(cur))
		for s, v := range cur {
			d := v - h.last[s]
			if d < 0 {
				d = v
			}
			if d > 0 {
				counts[s] = int64(d + 0.5)
			}
		}
		h.steps = append(h.steps, historyStepCounts{end: now, counts: counts})
		if len(h.steps) > historyLen {
			h.steps = slices.Delete(h.steps, 0, len(h.steps)-historyLen)
		}
	}
	h.last = cur
}

// view returns the history as GET /tollgate/history answers it.
func (h *history) view() adminapi.History {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := adminapi.History{StepSeconds: int64(adminapi.HistoryStep / time.Second), Ends: make([]int64, len(h.steps)),
		Zones: []adminapi.ZoneHistory{}, Challenges: map[string][]int64{}}
	zones := map[string]*adminapi.ZoneHistory{}
	zoneOf := func(name string) *adminapi.ZoneHistory {
		z, ok := zones[name]
		if !ok {
			z = &adminapi.ZoneHistory{Zone: name, Allowed: make([]int64, len(h.steps)), Denied: make([]int64, len(h.steps)), DeniedBy: map[string][]int64{}}
			for _, reason := range denialReasons {
				z.DeniedBy[reason] = make([]int64, len(h.steps))
			}
			zones[name] = z
		}
		return z
	}
	// Every series a later step knows is shown over the whole hour.
	for s := range h.last {
		switch s.kind {
		case seriesAllowed, seriesDenied:
			zoneOf(s.zone)
		case seriesChallenge:
			out.Challenges[s.label] = make([]int64, len(h.steps))
		}
	}
	for i, st := range h.steps {
		out.Ends[i] = st.end.Unix()
		for s, n := range st.counts {
			switch s.kind {
			case seriesAllowed:
				zoneOf(s.zone).Allowed[i] += n
			case seriesDenied:
				z := zoneOf(s.zone)
				z.Denied[i] += n
				if by, ok := z.DeniedBy[s.label]; ok {
					by[i] += n
				}
			case seriesChallenge:
				if out.Challenges[s.label] == nil {
					out.Challenges[s.label] = make([]int64, len(h.steps))
				}
				out.Challenges[s.label][i] += n
			}
		}
	}
	for _, z := range zones {
		out.Zones = append(out.Zones, *z)
	}
	slices.SortFunc(out.Zones, func(a, b adminapi.ZoneHistory) int {
		if a.Zone < b.Zone {
			return -1
		}
		if a.Zone > b.Zone {
			return 1
		}
		return 0
	})
	return out
}

// lastEnd returns the end of the latest step (zero before the first).
func (h *history) lastEnd() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.steps) == 0 {
		return time.Time{}
	}
	return h.steps[len(h.steps)-1].end
}

// readHistoryCounters reads the counters the history is made of from the
// metrics: decisions allowed by zone, denials by zone and reason, proofs
// by result.
func readHistoryCounters() map[historySeries]float64 {
	initMetrics()
	cur := map[historySeries]float64{}
	collectCounters(metrics.decisions, func(l map[string]string, v float64) {
		if l["outcome"] == decisionAllow {
			cur[historySeries{seriesAllowed, l["zone"], ""}] += v
		}
	})
	collectCounters(metrics.denials, func(l map[string]string, v float64) {
		cur[historySeries{seriesDenied, l["zone"], l["reason"]}] += v
	})
	collectCounters(metrics.challenge, func(l map[string]string, v float64) {
		cur[historySeries{seriesChallenge, "", l["result"]}] += v
	})
	return cur
}

// collectCounters calls f with the labels and value of each counter of c.
func collectCounters(c prometheus.Collector, f func(labels map[string]string, v float64)) {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil || d.Counter == nil {
			continue
		}
		labels := make(map[string]string, len(d.Label))
		for _, lp := range d.Label {
			labels[lp.GetName()] = lp.GetValue()
		}
		f(labels, d.Counter.GetValue())
	}
}
