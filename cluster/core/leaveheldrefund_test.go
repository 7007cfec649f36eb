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
	load := h.spent(k, "n1", 5)
	n0 := h.cores["n0"]
	n0.Leave(h.now)
	h.pump()
	h.standsStillAndIsDeclaredDead("n0")
	h.learnsItWasDeclaredDeadKnowingNoMember("n0", k)
	h.unitGivenBackWaitsAtN0(k, load)
	h.advance(time.Second)

	if n0.Drained() {
		// Its driver stops it.
		h.down["n0"] = true
	}
	h.list("n0", []Member{h.member("n1"), h.member("n2")}, nil)
	h.advance(3 * time.Second)
	h.heldBy(k, load.admitted, h.names...)
	load.spendsToTheLimit(t, "n1", "n2")
}
