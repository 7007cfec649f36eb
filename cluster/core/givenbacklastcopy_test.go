package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// n0 applies a give-back whose answer is lost; n1 takes the key over from
// n0's stale replica (5) and applies the give-back again in n0's place
// (4). n0's last word then comes to n1 as a copy naming n0 (4), sent on
// by a node that restored the key from a snapshot naming no run (see
// placeEvicted): the record of n0's counter n1 holds (5) is above it by
// the unit given back, which n1 gave back already in n0's place. Taken
// for given back since, the unit came off a second time (3 counted of 4
// admitted, a window). It comes off once: 4, and the owner admits up to
// the limit and no further.
func TestARunsLastWordSentAsACopyBelowItsRecordByUnitsGivenBackAgainHereTakesThemOffOnce(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3")
		h.bucket.on = bucket
		k, load := h.givesBackAgainInN0sPlace(true, false)
		n0, n1, n3 := h.cores["n0"], h.cores["n1"], h.cores["n3"]
		last := n0.engine.StatesOf(h.now, []limiter.Key{k})
		if len(last) != 1 {
			t.Fatalf("n0 holds %d counters of the key; want 1", len(last))
		}
		// As placeEvicted sends it on from a node whose earlier run n0
		// sent it to, restored from a snapshot naming no run.
		n1.handleTransfer(h.now, n3.self, Transfer{Seq: 5000, To: n1.self.Inc, Mode: ModeCopy, CountersOf: n0.self, Last: true, States: last}, true)
		h.pump()
		h.advance(200*time.Millisecond, "n1", "n2", "n3")
		h.countsAndLimits(k, load, []string{"n1", "n2", "n3"})
	})
}
