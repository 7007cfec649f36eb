package core

import (
	"testing"
	"time"
)

// As TestACounterBelowTheCopyItHoldsSharesAllOfItWhereTheCounterHereHoldsTheCopyWhole,
// but n2 admits nothing before n0's counter comes: n0's counter (5) is
// all its counter holds (a counter of nothing it joined: a union of it
// alone), and n1's counters (5: 4 of n0's and its one) are weighed
// against that union, all of which they hold a copy of, as holding all
// of it: they add nothing, the unit given back to n1 and the one it
// admitted making up for each other (5 of 5), and the owner admits up
// to the limit, no further.
func TestACounterBelowTheCopyItHoldsSharesAllOfItWhereTheCopyJoinedACounterHereOfNothing(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h, k, load := n1TakesTheKeyOverAndIsGivenBackAUnit(t, bucket)
		load.spend("n1")
		h.n1StopsUnreplicated(t, k, load)
		h.learnsItWasDeclaredDead("n0")
		h.setMembership("n0", []string{"n1"})
		h.advance(time.Second, "n0", "n2", "n3", "n4", "n5")
		h.down["n0"] = true
		if got := h.count("n2", k); got != 5 {
			t.Fatalf("n2 counts %d once n0's counters came; want n0's 5", got)
		}
		h.learnsItWasDeclaredDead("n1")
		h.advance(time.Second, "n1", "n2", "n3", "n4", "n5")
		h.down["n1"] = true
		alive := []string{"n2", "n3", "n4", "n5"}
		h.leaveAlive(alive, "n0", "n1")
		h.countsExactly(k, load, alive)
		load.spendsToTheLimit(t, "n2", "n3", "n4", "n5")
	})
}
