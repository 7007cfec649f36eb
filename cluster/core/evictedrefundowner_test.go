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

	h.down["n0"] = true
	h.advance(100 * time.Millisecond)
	h.setMembership("n1", []string{"n0"})
	h.setMembership("n2", []string{"n0"})
	h.advance(time.Second, "n1", "n2")
	load := newHandLoad(h, k, 30)
	for range 5 {
		load.spend("n1")
	}
	load.resume()
	h.learnsItWasDeclaredDead("n0")
	if n0.Member() {
		t.Fatal("n0 is a member again at once")
	}
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

	for _, name := range h.names {
		h.setMembership(name, nil)
	}
	h.advance(3 * time.Second)
	if !n0.Member() {
		t.Fatal("n0 did not join again")
	}
	if _, self, _ := n0.placeOf(n0.view.Load(), k); !self || n0.unrefunded.waiting() {
		t.Fatalf("n0 owns the key: %v; the unit still waits: %v", self, n0.unrefunded.waiting())
	}
	var held int64
	for _, name := range h.names {
		held += h.count(name, k)
	}
	if held != int64(load.admitted) || h.count("n0", k) != int64(load.admitted) {
		t.Errorf("the cluster counts %d (n0 %d, n1 %d); %d were admitted once the unit was given back", held, h.count("n0", k), h.count("n1", k), load.admitted)
	}
	load.spendsToTheLimit(t, "n0", "n1", "n2")
}
