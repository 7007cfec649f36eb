package core

import (
	"testing"
	"time"
)

// A node restarts on one side of a split: of four members, it and n3 are
// cut off from n1 and n2. It joins through n3, which has declared n1 dead
// but not yet n2, so its ring is of itself, n2 and n3, with n1 dead: four
// voters. It has heard from nobody yet; n2, on the far side, will never
// answer. Before, a peer counted as answering until a call to it failed:
// itself, n2 and n3 made three of four, and it counted n1's keys as their
// owner from n3's replica, which lacked what n1, counting on the other
// side, had admitted since (seed 1795826658905453632 of the simulator: 22
// admitted of a limit of 16 with 4 by fallback). A peer answers once a
// message from it has come: with n3 alone answering, it has no majority.
func TestARunThatHasHeardFromNoMajorityDoesNotCountAsOwner(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	h.cut["n0"], h.cut["n3"] = true, true
	h.down["n0"] = true
	h.advance(time.Second, "n3")
	n0 := h.start("n0", true)
	n0.Joined(h.now)
	n0.SetMembership(h.now, Membership{
		Members: []Member{h.member("n2"), h.member("n3")},
		Dead:    []Peer{h.member("n1").Peer()},
	})
	for range 3 { // nothing delivered yet
		h.now = h.now.Add(time.Millisecond)
		n0.Tick(h.now)
	}
	if !n0.Member() {
		t.Fatal("the new run of n0 did not enter its ring")
	}
	if n0.majority(n0.view.Load()) {
		t.Error("a new run that has heard from no peer has a majority of four voters")
	}
	h.pump()
	h.advance(20 * time.Millisecond)
	if n0.majority(n0.view.Load()) {
		t.Error("n0 has a majority of four voters with only n3 answering")
	}

	// With n2 answering too, it has one.
	h.cut["n2"] = true
	h.advance(time.Second)
	if !n0.majority(n0.view.Load()) {
		t.Error("n0 has no majority with n2 and n3 answering")
	}
}
