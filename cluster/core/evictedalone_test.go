package core

import (
	"testing"
	"time"
)

// As TestUnitsGivenBackToANodeDeclaredDeadComeOffWhereTheKeyIsCounted,
// but the node, knowing no member, counts alone for a while (a side of a
// split: no seed answers) before it joins the others again. Its lone
// ring names it the key's owner, though it holds nothing of the key: the
// units that waited go on waiting (it cannot know that no other node
// counts its keys), and come off where the key is counted once it joins
// the others; given back in its lone ring, they came off nothing.
func TestUnitsGivenBackToANodeDeclaredDeadThatCountsAloneComeOffWhereTheKeyIsCounted(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOwnedBy("n1", "n2")
	load := h.spent(k, "n1", 5)
	n0 := h.cores["n0"]
	h.standsStillAndIsDeclaredDead("n0")
	h.learnsItWasDeclaredDeadKnowingNoMember("n0", k)
	h.unitGivenBackWaitsAtN0(k, load)

	// n0 hears from nobody for a while.
	h.cut["n0"] = true
	h.advance(3 * time.Second)
	t.Logf("n0 alone: member %v, ring %d, units waiting %v", n0.Member(), n0.view.Load().ring.Len(), n0.unrefunded.waiting())
	h.cut["n0"] = false

	h.joinsAgain("n0", 3*time.Second)
	h.heldBy(k, load.admitted, h.names...)
	load.spendsToTheLimit(t, "n1", "n0", "n2")
}
