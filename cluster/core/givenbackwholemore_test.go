package core

import (
	"testing"
	"time"
)

// As TestAUnitGivenBackToACounterBelowACopyComesOffACounterHoldingTheCopyWhole,
// but n2 admits one before n0's counter comes (6: its own and n0's 5, no
// union of n0's alone): n1's counters (4, holding 4 of n0's 5) take the
// unit given back to n1 off the copy n2 holds whole (5 of 5), and the
// owner admits up to the limit, no further.
func TestAUnitGivenBackToACounterBelowACopyComesOffACounterHoldingTheCopyWholeAndMore(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h, k, load := n1TakesTheKeyOverAndIsGivenBackAUnit(t, bucket)
		h.n1StopsUnreplicated(t, k, load)
		load.spend("n3")
		h.advance(100*time.Millisecond, "n2", "n3", "n4", "n5")
		h.learnsItWasDeclaredDead("n0")
		h.setMembership("n0", []string{"n1"})
		h.advance(time.Second, "n0", "n2", "n3", "n4", "n5")
		h.down["n0"] = true
		if got := h.count("n2", k); got != 6 {
			t.Fatalf("n2 counts %d once n0's counters came; want 6 (its own 1, n0's 5)", got)
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
