package core

import "testing"

// As in TestACounterThatHoldsAllTheCountersTheReceiversIsMadeOfAddsNothing,
// but the counter of n2's that n1 applies is an older copy (12, holding 6
// of n1's): n1's counter, 14, holds n1's earlier counter and only part of
// n2's as it was when they joined at n2 (14): it does not hold all the
// join made, and is weighed as before.
func TestACounterHoldingAnOlderCopyOfOnePartIsNotTakenForHoldingTheJoin(t *testing.T) {
	h, k, load, early := n1CountsPastItsReplicaAndStandsStill(t)
	h.n2CountsOn(load, 6)
	old := h.n0sReplicaOfN2s(k, 12)
	h.n2CountsOn(load, 2)
	if got := h.count("n2", k); got != 14 {
		t.Fatalf("n2 counts %d of the key after the takeover; want 14", got)
	}
	h.down["n1"] = false
	h.n1AppliesN2sCounter(k, old, 14)
	h.n2AppliesN1sEarlierCounter(k, early)
	h.n1HearsItWasDeclaredDead(load)
	h.holdsAdmitted(k, load.admitted, "")
	load.spendsToTheLimit(t, "n2", "n0")
}
