package caddymodule

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tollgate/tollgate/limiter"
)

// zoneOutcome is what a rate zone does beyond spending one unit when a
// request arrives: what the request costs, whether its response settles
// that cost (count_response, cost_header), its ban and its delay. Worked
// out once from the zone's settings by prepareOutcome.
type zoneOutcome struct {
	cost     int64 // what a request costs when Cost has no placeholder
	costText bool  // Cost has placeholders: rendered per request
	settles  bool  // the response decides what the request cost
	banSeed  uint64
	ban      limiter.Limit // one token per ban: taken, it refills after the ban
	delay    *delayQueue   // nil without Delay
	badCost  *throttledLog
}

// Bounds of the outcome settings.
var (
	costBounds       = wholeRange{0, limiter.MaxQuota}
	delayQueueBounds = wholeRange{1, maxDelayQueue}
)

// Defaults and bounds of delays and bans.
const (
	defaultDelayQueue = 100
	maxDelayQueue     = 100000
	maxDelay          = time.Hour
	minBan            = time.Second
)

// Calendar windows as the Caddyfile writes them.
var calendarWindows = map[string]string{"1d": "day", "1w": "week", "1mo": "month"}

// outcomeSettings names the outcome settings z has, for a concurrent zone
// that may have none.
func (z *Zone) outcomeSettings() string {
	var set []string
	for _, s := range []struct {
		name string
		on   bool
	}{
		{"count_response", z.CountResponse != nil},
		{"cost", z.Cost != ""},
		{"cost_header", z.CostHeader != ""},
		{"ban", z.Ban != 0},
		{"delay", z.Delay != 0},
		{"delay_queue", z.DelayQueue != 0},
		{"window_timezone", z.WindowTimezone != ""},
		{"calendar", z.Calendar != ""},
	} {
		if s.on {
			set = append(set, s.name)
		}
	}
	return strings.Join(set, ", ")
}

// validateWindows checks the zone's window: a fixed length, or a calendar
// unit in a time zone, for algorithm alg.
func (z *Zone) validateWindows(alg limiter.Algorithm) error {
	if z.Calendar == "" {
		if z.WindowTimezone != "" {
			return fmt.Errorf("zone %q: window_timezone %q is for calendar windows (limit <N> 1d, 1w or 1mo)", z.Name, z.WindowTimezone)
		}
		if err := validateWindow(time.Duration(z.Window)); err != nil {
			return fmt.Errorf("zone %q: limit window %s: %v", z.Name, time.Duration(z.Window), err)
		}
		return nil
	}
	if _, err := limiter.ParseCalendarUnit(z.Calendar); err != nil {
		return fmt.Errorf("zone %q: calendar %q: must be day, week or month (limit <N> 1d, 1w or 1mo)", z.Name, z.Calendar)
	}
	if z.Window != 0 {
		return fmt.Errorf("zone %q: a calendar window (%s) has no window length; leave window empty", z.Name, z.Calendar)
	}
	if alg == limiter.TokenBucket {
		return fmt.Errorf("zone %q: calendar windows (%s) are for sliding_window and fixed_window, not token_bucket", z.Name, z.Calendar)
	}
	if z.WindowTimezone != "" {
		if _, err := time.LoadLocation(z.WindowTimezone); err != nil {
			return fmt.Errorf("zone %q: window_timezone %q: not a time zone this system knows; use an IANA name such as Europe/Berlin or America/New_York", z.Name, z.WindowTimezone)
		}
	}
	return nil
}

// calendar returns the calendar of z's windows, nil for fixed lengths or
// settings validate refuses.
func (z *Zone) calendar() *limiter.Calendar {
	if z.Calendar == "" {
		return nil
	}
	unit, err := limiter.ParseCalendarUnit(z.Calendar)
	if err != nil {
		return nil
	}
	loc := time.UTC
	if z.WindowTimezone != "" {
		if loc, err = time.LoadLocation(z.WindowTimezone); err != nil {
			return nil
		}
	}
	return &limiter.Calendar{Unit: unit, Location: loc}
}

// validateOutcome checks the outcome settings of a rate zone.
func (z *Zone) validateOutcome() error {
	if rm := z.CountResponse; rm != nil {
		if len(rm.StatusCode) == 0 && len(rm.Headers) == 0 {
			return fmt.Errorf("zone %q: count_response needs a status or a header to match, e.g. count_response { status 401 403 }", z.Name)
		}
		for _, code := range rm.StatusCode {
			if !(code >= 1 && code <= 5 || code >= 100 && code <= 599) {
				return fmt.Errorf("zone %q: count_response status %d: must be a status code from 100 to 599, or a class from 1 to 5 (4xx)", z.Name, code)
			}
		}
	}
	if z.Cost != "" && !hasPlaceholder(z.Cost) {
		n, err := costBounds.parse(z.Cost)
		if err == nil && n > z.Limit {
			err = fmt.Errorf("must be at most the limit, %d: a request that costs more could never pass", z.Limit)
		}
		if err != nil {
			return fmt.Errorf("zone %q: cost %q %v, or placeholders that render one", z.Name, z.Cost, err)
		}
	}
	if h := z.CostHeader; h != "" && strings.ContainsAny(h, " \t:{}") {
		return fmt.Errorf("zone %q: cost_header %q: must be a header name, e.g. X-Cost", z.Name, h)
	}
	if ban := time.Duration(z.Ban); ban != 0 && (ban < minBan || ban > limiter.MaxWindow) {
		return fmt.Errorf("zone %q: ban %s: must be from %s to %s", z.Name, ban, minBan, limiter.MaxWindow)
	}
	if d := time.Duration(z.Delay); d != 0 && (d < time.Millisecond || d > maxDelay) {
		return fmt.Errorf("zone %q: delay %s: must be from 1ms to %s", z.Name, d, maxDelay)
	}
	if z.DelayQueue != 0 {
		if z.Delay == 0 {
			return fmt.Errorf("zone %q: delay_queue %d is for zones with delay", z.Name, z.DelayQueue)
		}
		if err := delayQueueBounds.check(z.DelayQueue); err != nil {
			return fmt.Errorf("zone %q: delay_queue %d: %w", z.Name, z.DelayQueue, err)
		}
	}
	return nil
}

// prepareOutcome works out z's outcome settings; h hashes the ban's key.
func (z *Zone) prepareOutcome(h limiter.Hasher) {
	o := &z.outcome
	o.cost = 1
	if z.Cost != "" {
		if hasPlaceholder(z.Cost) {
			o.costText = true
		} else if n, err := strconv.ParseInt(z.Cost, 10, 64); err == nil && n >= 0 {
			o.cost = n
		}
	}
	o.settles = z.CountResponse != nil || z.CostHeader != ""
	if z.Ban > 0 {
		o.ban = limiter.Limit{Algorithm: limiter.TokenBucket, Quota: 1, Burst: 1, Window: time.Duration(z.Ban)}
	}
	if z.Delay > 0 {
		n := z.DelayQueue
		if n == 0 {
			n = defaultDelayQueue
		}
		o.delay = newDelayQueue(n)
	}
}

// costOf returns what request q costs in z: z's cost, or its Cost
// rendered for q. A rendering that is not a whole number of at least 0
// is logged and costs 1; a cost past any limit is cut to one more than
// the largest, which is denied as ever too large.
func (z *Zone) costOf(q *request) int64 {
	if !z.outcome.costText {
		return z.outcome.cost
	}
	s := q.replacer().ReplaceAll(z.Cost, "")
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		z.outcome.badCost.report(z.Name, s)
		return 1
	}
	return min(n, limiter.MaxQuota+1)
}

// costTooHigh reports whether req asks more units than its limit could
// ever grant.
func costTooHigh(req *limiter.Request) bool {
	capacity := req.Limit.Quota
	if req.Limit.Burst > 0 {
		capacity = req.Limit.Burst
	}
	return req.Limit.Algorithm != limiter.Concurrency && req.Cost > capacity
}

// throttledLog logs a problem caused by requests at most once a minute.
type throttledLog struct {
	logger *zap.Logger
	msg    string
	last   atomic.Int64 // Unix ns of the last entry
	count  atomic.Int64 // occurrences since it
}

func (l *throttledLog) report(zone, value string) {
	if l == nil {
		return
	}
	n := l.count.Add(1)
	now := time.Now().UnixNano()
	last := l.last.Load()
	if now-last < int64(time.Minute) || !l.last.CompareAndSwap(last, now) {
		return
	}
	l.count.Store(0)
	l.logger.Error(l.msg, zap.String("zone", zone), zap.String("value", value), zap.Int64("occurrences", n))
}

// extras returns the features of a handler that z uses.
func (z *Zone) extras() extra {
	var x extra
	if z.Ban != 0 {
		x |= extraBan
	}
	if z.outcome.settles || z.Delay != 0 {
		x |= extraAfter
	}
	if usesForm(z.Key) || usesForm(z.Cost) || usesForm(z.Lease) {
		x |= extraForm
	}
	if z.Calendar != "" {
		x |= extraCalendar
	}
	if z.Cost != "" {
		x |= extraCost
	}
	return x
}

// formSizeBounds bounds a handler's form_max_size.
var formSizeBounds = wholeRange{1, maxFormMaxSize}

// quotaAhead is the t of the RateLimit header for a result: for an
// allowed request, the seconds until more quota is available (draft -10),
// which falls back to the full reset when not known; for a denied one,
// when the request would pass, the same as its Retry-After.
func quotaAhead(r *limiter.Result) time.Duration {
	if r.Allowed && r.Next > 0 {
		return r.Next
	}
	return r.Reset
}

// deniedZones returns the names of the zones whose enforced requests were
// denied, for a problem+json's violated-policies.
func deniedZones(b *batch) []string {
	var names []string
	for i := range b.reqs {
		if b.dry[i] || b.res[i].Allowed {
			continue
		}
		if name := b.zoneOfReq(i).Name; !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}
