package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// As in TestACounterThatHoldsAllTheCountersTheReceiversIsMadeOfAddsNothing,
// but a unit is given back at n2 after its counter and n1's earlier one
// joined (16, now 15): n1's counter, holding both parts, shares the whole
// 16 the join made, and the unit given back stays off; nothing is added
// and nothing more comes off.
func TestAUnitGivenBackAfterAJoinStaysOffWhenACounterHoldingThePartsArrives(t *testing.T) {
	h, k, load, early, rep := overlappingTakeover(t)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]

	h.down["n1"] = false
	n1.handleTransfer(h.now, n0.self, Transfer{Seq: 1000, To: n1.self.Inc, Epoch: 1, Mode: ModeAdd, CountersOf: rep.owner, States: []limiter.State{rep.state}, Holds: rep.holds}, true)
	if got := h.count("n1", k); got != 16 {
		t.Fatalf("n1 counts %d of the key with n2's counter in; want 16", got)
	}
	n2.handleTransfer(h.now, n0.self, Transfer{Seq: 1001, To: n2.self.Inc, Epoch: 1, Mode: ModeAdd, CountersOf: n1.self, States: early}, true)
	if got := h.count("n2", k); got != 16 {
		t.Fatalf("n2 counts %d of the key with n1's earlier counter in; want 16", got)
	}

	// A unit is given back at n2, the key's counter now.
	n2.handleTransfer(h.now, n0.self, Transfer{Seq: 1002, To: n2.self.Inc, Mode: ModeRefund, Reqs: load.unitOf(k), At: h.now.UnixNano()}, true)
	h.pump()
	load.admitted--
	if got := h.count("n2", k); got != 15 {
		t.Fatalf("n2 counts %d of the key with a unit given back; want 15", got)
	}

	h.advance(2 * time.Second)
	load.resume()
	t.Logf("admitted %d %v; counts n0 %d n1 %d n2 %d", load.admitted, load.by, h.count("n0", k), h.count("n1", k), h.count("n2", k))
	h.holdsAdmitted(k, load.admitted, "")
	load.spendsToTheLimit(t, "n2", "n0")
}
