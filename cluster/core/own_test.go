package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node hands its counter of a key over to the key's new owner, which
// goes silent; the node declares it dead while it cannot complete the
// takeover (the third node is silent too), so once the hand-off is given
// up on the counter comes back to wait with what arrives for the key. When
// the owner is listed again, the counter goes to it once more as this
// node's own hand-off, not as counts passed on for others: if this node is
// then declared dead while the owner refuses it, it is a counter this node
// holds, which the owner weighs against the replica it may have started
// the key from (ModeEvicted), not an addition on top of that replica.
func TestAnOwnCounterThatCameBackGoesOutAgainAsAHandoff(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOwnedBy("n1", "n0")
	const quota = 20
	load := newHandLoad(h, k, quota)

	// n0 forgets n1 (it left, never heard leaving) and counts the key as
	// its owner once its hand-off has taken n1's keys over.
	n0 := h.cores["n0"]
	n0.SetMembership(h.now, Membership{Members: []Member{{Name: "n2", Inc: h.incs["n2"], PeerAddr: "n2"}}})
	h.cores["n2"].SetMembership(h.now, Membership{Members: []Member{{Name: "n0", Inc: h.incs["n0"], PeerAddr: "n0"}}})
	h.pump()
	h.advance(2*time.Second, "n0", "n2")
	if n0.HandoffUnderway() {
		t.Fatal("n0 has not taken n1's keys over")
	}
	for range 5 {
		load.spend("n0")
	}
	load.resume()
	if got := h.count("n0", k); load.admitted != 5 || got != 5 {
		t.Fatalf("n0 admitted %d and counts %d; want 5 and 5", load.admitted, got)
	}

	// n1 is listed again but silent: n0's hand-off to it waits.
	h.down["n1"] = true
	h.setMembership("n0", nil)
	h.advance(20*time.Millisecond, "n0")
	// n2 goes silent too, and n0 declares n1 dead: the key moves back to
	// n0, whose takeover waits for n2's seal. Without a majority, n0 keeps
	// its hand-off to n1 (n1 may be alive on the larger side of a split,
	// and get it there); once n2 answers again, n0 has one and gives the
	// hand-off up (n1's lease from n0 ran out).
	h.down["n2"] = true
	h.setMembership("n0", []string{"n1"})
	h.advance(time.Second, "n0")
	if !n0.HandoffUnderway() {
		t.Fatal("n0 completed its takeover without n2's seal")
	}
	if n0.out.moving("n1") == 0 {
		t.Fatal("n0 gave up on its hand-off to n1 without a majority")
	}
	h.down["n2"] = false
	h.advance(time.Second, "n0", "n2")
	if n0.out.moving("n1") != 0 {
		t.Fatal("n0 still holds its hand-off to n1 with a majority")
	}

	// n1 is listed again: the counter goes to it as n0's own.
	h.setMembership("n0", nil)
	var found bool
	n0.out.mu.Lock()
	for _, pt := range n0.out.transfers {
		if pt.to.Name != "n1" || !slices.ContainsFunc(pt.t.States, func(s limiter.State) bool { return s.Key == k }) {
			continue
		}
		found = true
		if pt.purpose != purposeHandoff || pt.t.Mode != ModeAdd || !pt.t.Own {
			t.Errorf("n0's counter goes to n1 as %s %s (own %v); want add handoff, own", pt.t.Mode, pt.purpose, pt.t.Own)
		}
	}
	n0.out.mu.Unlock()
	if !found {
		t.Fatal("n0's counter of the key is not on its way to n1")
	}

	// Once n1 and n2 answer, n1 holds what was admitted.
	h.down["n1"], h.down["n2"] = false, false
	h.setMembership("n1", nil)
	h.setMembership("n2", nil)
	h.advance(2 * time.Second)
	if got := h.count("n1", k); got != int64(load.admitted) {
		t.Errorf("n1 holds %d; %d were admitted", got, load.admitted)
	}
}
