package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// n0 applies a give-back whose answer is lost; n1 takes the key over from
// n0's stale replica (5) and applies the give-back again in n0's place
// (4). n0's counter (4), evicted, reaches n3, meant for an earlier run of
// n3 that restored the key from a snapshot naming no run: n3 sends it on
// to n1 as a copy naming n0, its last word (see placeEvicted). The record
// of n0's counter n1 holds (5) is above it by the unit given back, which
// n1 gave back already in n0's place. Sent without the list of what n0
// applied, and weighed as below the record by units given back since,
// the unit came off a second time (3 counted of 4 admitted, a window). It
// comes off once: 4, and the owner admits up to the limit and no further.
func TestARunsLastWordSentAsACopyBelowItsRecordByUnitsGivenBackAgainHereTakesThemOffOnce(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3")
		h.bucket.on = bucket
		k, load := h.givesBackAgainInN0sPlace(true, false)
		n0, n2, n3 := h.cores["n0"], h.cores["n2"], h.cores["n3"]
		if n3.self.Inc == 0 {
			t.Skip("n3's run has no earlier run")
		}
		evicted := n0.engine.StatesOf(h.now, []limiter.Key{k})
		if len(evicted) != 1 {
			t.Fatalf("n0 holds %d counters of the key; want 1", len(evicted))
		}
		n3.replicas.noteRestored(n3.mono(h.now), Kept{States: evicted})
		var copied bool
		h.drops = func(from string, o Outgoing) bool {
			if tr, ok := o.Msg.(Transfer); ok && from == "n3" && o.To.Name == "n1" && tr.Mode == ModeCopy && tr.Last && tr.CountersOf == n0.self {
				copied = true
			}
			return false
		}
		n3.handleTransfer(h.now, n0.self, Transfer{Seq: 5000, To: n3.self.Inc, Mode: ModeEvicted, Evicted: n0.self, WasTo: Peer{Name: "n3", Inc: n3.self.Inc - 1},
			Applied: []Applied{{From: n2.self, Seq: 77}}, States: evicted}, true)
		h.pump()
		if !copied {
			t.Fatal("n3 did not send n0's counter on to n1 as a copy, its last word")
		}
		h.advance(200*time.Millisecond, "n1", "n2", "n3")
		h.countsAndLimits(k, load, []string{"n1", "n2", "n3"})
	})
}
