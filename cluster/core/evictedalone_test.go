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
	load := newHandLoad(h, k, 30)
	for range 5 {
		load.spend("n1")
	}
	load.resume()
	n0 := h.cores["n0"]

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

	// n0 hears from nobody for a while.
	h.cut["n0"] = true
	h.advance(3 * time.Second)
	t.Logf("n0 alone: member %v, ring %d, units waiting %v", n0.Member(), n0.view.Load().ring.Len(), n0.unrefunded.waiting())
	h.cut["n0"] = false

	for _, name := range h.names {
		h.setMembership(name, nil)
	}
	h.advance(3 * time.Second)
	if !n0.Member() {
		t.Fatal("n0 did not join again")
	}
	var held int64
	for _, name := range h.names {
		held += h.count(name, k)
	}
	if held != int64(load.admitted) {
		t.Errorf("the cluster counts %d (n1 %d); %d were admitted once the unit was given back", held, h.count("n1", k), load.admitted)
	}
	load.spendsToTheLimit(t, "n1", "n0", "n2")
}
