package core

import (
	"slices"
	"testing"
	"time"
)

// A give-back the key's owner applied is given back again, naming it, to
// a node declared dead, in no ring: the units wait there until a ring
// names the key's owner, and go there naming the give-back; the owner,
// which applied it, skips them. The units never came off a counter of
// the node they waited at, so it keeps no record of them as given back
// in the owner's place: when the owner is declared dead in turn, and its
// counters come to that node, which took the key over from its replica,
// nothing is put back into them, and the key counts what was admitted.
func TestUnitsGivenBackAgainThatWaitedForARingAreNotPutBackIntoTheOwnersCounters(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n1", 4)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]

	// n2 spends a unit through n0 and gives it back; n0 applies the
	// give-back, and n1, its replicas lost, does not learn of it.
	tk, given := h.n0AppliesAGiveBackN1Misses(k, load)

	// n1 stops answering; the others declare it dead. It comes back and
	// learns so: in no ring, knowing no member.
	h.standsStillAndIsDeclaredDead("n1")
	h.learnsItWasDeclaredDeadKnowingNoMember("n1", k)

	// n2, taking n0 for dead, gives the unit back again to n1, in place of
	// its give-back to n0.
	n1.handleTransfer(h.now, n2.self, Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: h.now.UnixNano(), Was: given.Seq, WasTo: n0.self}, true)
	h.pump()
	if !n1.unrefunded.waiting() {
		t.Fatal("the units given back again do not wait at n1")
	}

	// n1 joins again; the units go to n0, which skips them.
	h.drops = nil
	for _, name := range h.names {
		h.setMembership(name, nil)
	}
	h.advance(3 * time.Second)
	if !n1.Member() || n1.unrefunded.waiting() {
		t.Fatalf("n1 a member: %v; units still waiting: %v", n1.Member(), n1.unrefunded.waiting())
	}
	if got := h.count("n0", k) + h.count("n1", k) + h.count("n2", k); got != int64(load.admitted) {
		t.Fatalf("the cluster counts %d (n0 %d, n1 %d); %d were admitted", got, h.count("n0", k), h.count("n1", k), load.admitted)
	}

	// n0 stops answering; n1 takes the key over from its replica. n0
	// comes back, learns it was declared dead, and its counters go to n1.
	h.standsStillAndIsDeclaredDead("n0")
	h.advance(time.Second, "n1", "n2")
	if got := h.count("n1", k); got != int64(load.admitted) {
		t.Fatalf("n1 counts %d after taking the key over; %d were admitted", got, load.admitted)
	}
	h.learnsItWasDeclaredDeadAndJoinsAgain("n0")
	h.heldBy(k, load.admitted, h.names...)
	load.spendsToTheLimit(t, "n0", "n1", "n2")
}
