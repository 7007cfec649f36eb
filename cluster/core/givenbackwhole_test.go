package core

import (
	"testing"
	"time"
)

// n1 takes n0's key over from its replica (5), and a unit n0 admitted is
// given back to it (4: below the copy of n0's counter it holds). None of
// n1's replicas reach n2, which takes the key over from nothing once n1
// is declared dead too. n0, declared dead while alive, sends its counter
// (5, the unit given back to n1 among them) to n2, where it is added
// whole. n1's counters then come: they hold 4 of n0's 5, and the counter
// at n2 holds all 5, the unit given back to n1 still in it: it comes off
// there (4 counted of 4), and the owner admits up to the limit, no
// further. Weighed as holding nothing beyond the copy, they added
// nothing and took nothing off (5 counted of 4).
func TestAUnitGivenBackToACounterBelowACopyComesOffACounterHoldingTheCopyWhole(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h, k, load := n1TakesTheKeyOverAndIsGivenBackAUnit(t, bucket)
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
