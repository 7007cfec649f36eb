package core

import (
	"testing"
	"time"
)

// As TestUnitsGivenBackToANodeDeclaredDeadComeOffWhereTheKeyIsCounted,
// but the ring the node joins names itself the key's owner: it holds
// nothing of the key, whose counter is on its way from the node that
// counted it meanwhile. The units that waited wait on for the counter,
// and come off it once.
func TestUnitsGivenBackToANodeDeclaredDeadComeOffTheKeyItOwnsOnceItJoinsAgain(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyMovingTo("n1", "n2", "n0")
	n0 := h.cores["n0"]
	h.standsStillAndIsDeclaredDead("n0")
	load := h.spent(k, "n1", 5)
	h.learnsItWasDeclaredDeadKnowingNoMember("n0", k)
	h.unitGivenBackWaitsAtN0(k, load)

	h.joinsAgain("n0", 3*time.Second)
	if _, self, _ := n0.placeOf(n0.view.Load(), k); !self || n0.unrefunded.waiting() {
		t.Fatalf("n0 owns the key: %v; the unit still waits: %v", self, n0.unrefunded.waiting())
	}
	h.heldBy(k, load.admitted, h.names...)
	h.heldBy(k, load.admitted, "n0")
	load.spendsToTheLimit(t, "n0", "n1", "n2")
}
