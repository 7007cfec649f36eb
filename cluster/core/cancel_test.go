package core

import (
	"testing"
	"time"
)

// A caller gives up on a take item its owner admitted (the answer was
// lost), decides the request by fallback, and sends the owner a cancel,
// which is lost too. When the owner answers a ping again, the caller sends
// it what it admitted in fallback; if that fallback count reached the owner
// without the cancel, a caller that crashed before it sent the cancel again
// would leave the owner holding the request twice: its own admission of
// the item and the fallback count. The fallback count carries the cancel:
// the caller crashes as soon as its fallback count reached the owner, and
// the owner holds the request once.
func TestAFallbackCountReachesTheOwnerWithTheCancelsOfItsKeys(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	const quota = 10
	k := h.keyOwnedBy("n1", "n2")
	c0 := h.cores["n0"]

	// n1 admits the item; its answer is lost, and so is n0's cancel.
	tk := h.admitUnanswered("n0", "n1", k, quota)
	h.down["n1"] = true
	c0.CallFailed(h.now, &tk.op, false)
	h.pump()
	h.drive(tk)
	h.down["n1"] = false
	if !tk.done || !tk.d.Allowed || tk.d.Source != SourceFallback {
		t.Fatalf("the request given up on: %+v; want admitted by fallback", tk.d)
	}

	// n1 answers n0's pings again; n0 crashes as soon as its fallback
	// count of the request has left it.
	for i := 0; i < 200 && !c0.fallback.empty(); i++ {
		h.advance(10 * time.Millisecond)
	}
	if !c0.fallback.empty() {
		t.Fatal("n0's fallback count never reached n1")
	}
	h.down["n0"] = true
	h.advance(time.Second, "n1", "n2")
	if got := h.count("n1", k); got != 1 {
		t.Errorf("n1 holds %d of the key; 1 request was admitted", got)
	}
}

// A caller gives up on a take item its owner admitted (the answer was
// lost), decides the request by fallback, and sends the owner a cancel,
// which is lost: a split cut the owner off. The caller's side declares the
// owner dead, and the caller's fallback count goes to the key's owner by
// that side's ring, the owner's successor, not to the owner the cancel
// was for. The caller then crashes with the cancel unsent; the split
// heals, and the owner, alive all along, counts the key again, the
// successor's counts with it. The fallback count carries the cancel on
// towards the run it was meant for, so the owner gives the item's units
// back: the cluster holds the request once (seed 1795779649768414897 of
// the simulator: a leaving caller's cancel left with it, and the owner
// held the request twice).
func TestAFallbackCountSentElsewhereCarriesTheCancelOnToItsOwner(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	const quota = 10
	k := h.keyOwnedBy("n1", "n2")
	c0 := h.cores["n0"]

	// n1 admits the item; its answer is lost, and so is n0's cancel.
	h.fallbackAfterLostAnswer("n0", "n1", k, quota, "n1")

	// n0 and n2 declare n1 dead: n0's fallback count goes to n2.
	h.setMembership("n0", []string{"n1"})
	h.setMembership("n2", []string{"n1"})
	for i := 0; i < 300 && !c0.fallback.empty(); i++ {
		h.advance(10*time.Millisecond, "n0", "n2")
	}
	if !c0.fallback.empty() {
		t.Fatal("n0's fallback count never reached n2")
	}

	// n0 crashes with its cancel unsent; the split heals.
	h.down["n0"] = true
	h.cut["n1"] = false
	h.setMembership("n1", []string{"n0"})
	h.setMembership("n2", []string{"n0"})
	h.advance(3*time.Second, "n1", "n2")
	if got := h.count("n1", k) + h.count("n2", k); got != 1 {
		t.Errorf("the cluster holds %d of the key (n1 %d, n2 %d); 1 request was admitted", got, h.count("n1", k), h.count("n2", k))
	}
}
