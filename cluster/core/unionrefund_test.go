package core

import "testing"

// As in TestACounterThatHoldsAllTheCountersTheReceiversIsMadeOfAddsNothing,
// but a unit is given back at n2 after its counter and n1's earlier one
// joined (16, now 15): n1's counter, holding both parts, shares the whole
// 16 the join made, and the unit given back stays off; nothing is added
// and nothing more comes off.
func TestAUnitGivenBackAfterAJoinStaysOffWhenACounterHoldingThePartsArrives(t *testing.T) {
	h, k, load, early, rep := overlappingTakeover(t)
	n0, n2 := h.cores["n0"], h.cores["n2"]
	h.down["n1"] = false
	h.n1AppliesN2sCounter(load, rep, 16)
	h.n2AppliesN1sEarlierCounter(load, early)

	// A unit is given back at n2, the key's counter now.
	n2.handleTransfer(h.now, n0.self, Transfer{Seq: 1002, To: n2.self.Inc, Mode: ModeRefund, Reqs: load.unitOf(k), At: h.now.UnixNano()}, true)
	h.pump()
	load.admitted--
	if got := h.count("n2", k); got != 15 {
		t.Fatalf("n2 counts %d of the key with a unit given back; want 15", got)
	}

	h.n1HearsItWasDeclaredDead(load)
	h.holdsAdmitted(k, load.admitted, "")
	load.spendsToTheLimit(t, "n2", "n0")
}
