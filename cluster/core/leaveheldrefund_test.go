package core

import (
	"testing"
	"time"
)

// A leaving node is declared dead and knows no member: in no ring, it
// holds units given back to it until a ring names their key's owner (see
// TestUnitsGivenBackToANodeDeclaredDeadComeOffWhereTheKeyIsCounted). It
// has not handed everything over while they wait: drained and stopped,
// it lost them, and the key's owner kept them counted.
func TestALeavingNodeHoldingUnitsGivenBackIsNotDrained(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOwnedBy("n1", "n2")
	load := newHandLoad(h, k, 30)
	for range 5 {
		load.spend("n1")
	}
	load.resume()
	n0 := h.cores["n0"]
	n0.Leave(h.now)
	h.pump()

	h.down["n0"] = true
	h.advance(100 * time.Millisecond)
	h.setMembership("n1", []string{"n0"})
	h.setMembership("n2", []string{"n0"})
	h.advance(time.Second, "n1", "n2")
	h.learnsItWasDeclaredDead("n0")
	h.list("n0", nil, []Peer{h.member("n1").Peer(), h.member("n2").Peer()})
	if _, _, ok := n0.placeOf(n0.view.Load(), k); ok {
		t.Fatal("n0 knows a place for the key")
	}

	n0.handleTransfer(h.now, h.cores["n2"].self, Transfer{Seq: 500, To: n0.self.Inc, Mode: ModeRefund, Reqs: load.unitOf(k), At: h.now.UnixNano()}, true)
	h.pump()
	load.admitted--
	if !n0.unrefunded.waiting() {
		t.Fatal("the unit given back does not wait at n0")
	}
	h.advance(time.Second)

	if n0.Drained() {
		// Its driver stops it.
		h.down["n0"] = true
	}
	h.list("n0", []Member{h.member("n1"), h.member("n2")}, nil)
	h.advance(3 * time.Second)
	var held int64
	for _, name := range h.names {
		held += h.count(name, k)
	}
	if held != int64(load.admitted) {
		t.Errorf("the cluster counts %d (n1 %d); %d were admitted once the unit was given back (n0 drained: %v)", held, h.count("n1", k), load.admitted, h.down["n0"])
	}
	load.spendsToTheLimit(t, "n1", "n2")
}
