package caddymodule

import (
	"encoding/json"
	"slices"
	"strings"
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

// historyView returns this node's history, or, when all is set and the
// node is part of a cluster, the sum of every node's that answers within the
// lists' deadline.
func (s *state) historyView(all bool) adminapi.History {
	s.mu.Lock()
	node := s.node
	s.mu.Unlock()
	if !all || node == nil || !node.Networked() {
		return s.history.view()
	}
	res := node.Gather(gatherHistory, nil, gatherWithin)
	parts := make(map[string]adminapi.History, len(res.Answers))
	for name, b := range res.Answers {
		var h adminapi.History
		if json.Unmarshal(b, &h) == nil {
			parts[name] = h
		} else {
			res.Unanswered = append(res.Unanswered, name)
		}
	}
	sum := sumHistories(parts)
	if len(res.Unanswered) > 0 {
		sum.Unanswered = slices.Sorted(slices.Values(res.Unanswered))
	}
	return sum
}

// sumHistories adds up the histories of several nodes, by node name: each
// node's step is counted in the step of the sum that ends at the next
// multiple of the step length at or after its own end (nodes sample on
// their own clocks and phases), and only the last hour of steps is kept.
func sumHistories(parts map[string]adminapi.History) adminapi.History {
	step := int64(adminapi.HistoryStep / time.Second)
	out := adminapi.History{StepSeconds: step, Ends: []int64{}, Zones: []adminapi.ZoneHistory{}, Challenges: map[string][]int64{}, Nodes: []string{}}
	ends := map[int64]bool{}
	for name, h := range parts {
		out.Nodes = append(out.Nodes, name)
		for _, end := range h.Ends {
			ends[stepEnding(end, step)] = true
		}
	}
	slices.Sort(out.Nodes)
	for end := range ends {
		out.Ends = append(out.Ends, end)
	}
	slices.Sort(out.Ends)
	out.Ends = out.Ends[max(0, len(out.Ends)-historyLen):]
	at := make(map[int64]int, len(out.Ends))
	for i, end := range out.Ends {
		at[end] = i
	}
	steps := func() []int64 { return make([]int64, len(out.Ends)) }
	add := func(into, from []int64, fromEnds []int64) {
		for i, n := range from[:min(len(from), len(fromEnds))] { // a series longer than its ends has no time for the rest
			if j, ok := at[stepEnding(fromEnds[i], step)]; ok {
				into[j] += n
			}
		}
	}
	zones := map[string]*adminapi.ZoneHistory{}
	for _, name := range out.Nodes {
		h := parts[name]
		for _, z := range h.Zones {
			sum, ok := zones[z.Zone]
			if !ok {
				sum = &adminapi.ZoneHistory{Zone: z.Zone, Allowed: steps(), Denied: steps(), DeniedBy: map[string][]int64{}}
				for _, reason := range denialReasons {
					sum.DeniedBy[reason] = steps()
				}
				zones[z.Zone] = sum
			}
			add(sum.Allowed, z.Allowed, h.Ends)
			add(sum.Denied, z.Denied, h.Ends)
			for reason, ns := range z.DeniedBy {
				if sum.DeniedBy[reason] == nil {
					sum.DeniedBy[reason] = steps()
				}
				add(sum.DeniedBy[reason], ns, h.Ends)
			}
		}
		for result, ns := range h.Challenges {
			if out.Challenges[result] == nil {
				out.Challenges[result] = steps()
			}
			add(out.Challenges[result], ns, h.Ends)
		}
	}
	for _, z := range zones {
		out.Zones = append(out.Zones, *z)
	}
	slices.SortFunc(out.Zones, func(a, b adminapi.ZoneHistory) int { return strings.Compare(a.Zone, b.Zone) })
	return out
}

// stepEnding returns the end of the step of the given length, in Unix
// seconds, that a step ending at end is counted in: the next multiple of
// step at or after end.
func stepEnding(end, step int64) int64 {
	return (end + step - 1) / step * step
}
