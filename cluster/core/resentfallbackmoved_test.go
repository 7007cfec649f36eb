package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// As TestCountsSentAgainPassedOnAreNotTakenOutOfTheCounterThatComesBack,
// but the 2 sent again in place of n4's transfer to n0 come to n1 while
// it owns the key and has no majority: kept in fallback, they go, once
// the majority answers again, to the key's owner by then (n3, which
// joined), with the record of the transfer they replace, and are
// recorded there. n0's counter, saying it applied the transfer, comes to
// n1 and goes on to n3, where the 2 are weighed against it; n3 then
// leaves and hands the key back to n1 with the record of the transfers
// n0 applied. The 2 never joined a counter of n1's: its record of them,
// as counts sent again that it added, must not take them out of the
// counter that comes back.
func TestCountsSentAgainKeptInFallbackAndSentToAnotherOwnerAreNotTakenOutOfTheCounterThatComesBack(t *testing.T) {
	keptInFallbackAndSentOn(t, nil)
}

// As TestCountsSentAgainKeptInFallbackAndSentToAnotherOwnerAreNotTakenOutOfTheCounterThatComesBack,
// but the split heals before n1 hears of n3, so n3 is reachable to it
// from the first, and n1's fallback counts go to n3 by its timed
// reconciliation (see Core.reconcile), not to a node that asks it for a
// seal or answers again (see Core.reconcileTo): the record of the 2 as
// added at n1 goes with them all the same.
func TestCountsSentAgainKeptInFallbackAndReconciledAreNotTakenOutOfTheCounterThatComesBack(t *testing.T) {
	keptInFallbackAndSentOn(t, func(h *handNet, k limiter.Key) {
		n1 := h.cores["n1"]
		n1.reconcile(h.now, n1.view.Load())
		if got := windowCount(n1.fallback.engine.StatesOf(h.now, []limiter.Key{k})); got != 0 {
			t.Fatalf("n1 keeps %d in fallback after reconciling", got)
		}
		n1.replicas.mu.Lock()
		rec, ok := n1.replicas.resent[h.member("n0").Peer()][Applied{From: h.cores["n4"].self, Seq: 50}]
		n1.replicas.mu.Unlock()
		if ok {
			t.Fatalf("n1 still records the counts sent again in place of n4's transfer as added here: %+v", rec)
		}
	})
}

// keptInFallbackAndSentOn plays TestCountsSentAgainKeptInFallbackAndSentToAnotherOwnerAreNotTakenOutOfTheCounterThatComesBack;
// with healed, the split heals before n1 hears of n3 (so it calls n3
// from the first), and healed is called then.
func keptInFallbackAndSentOn(t *testing.T, healed func(h *handNet, k limiter.Key)) {
	h := newHandNet(t, "n0", "n1", "n2", "n4")
	h.names = append(h.names, "n3")
	n3 := h.start("n3", true)
	k := h.keyWhere(func(owner func(names ...string) Member) bool {
		return owner("n0", "n1", "n2", "n4").Name == "n0" && owner("n1", "n2", "n4").Name == "n1" && owner("n1", "n2", "n3", "n4").Name == "n3"
	})
	load := h.spent(k, "n0", 7)
	evicted := h.n0AppliesATransferUnreplicated(k, "n4")
	load.admitted += 2 // n4's transfer, in n0's counter alone
	dead := []Peer{{Name: "n0", Inc: h.incs["n0"]}}
	h.down["n0"] = true
	h.listAll(dead, "n1", "n2", "n4")
	h.advance(time.Second, "n1", "n2", "n4")
	if got := h.count("n1", k); got != 7 {
		t.Fatalf("n1 counts %d after taking the key over; want 7", got)
	}

	h.n1KeepsTheCountsSentAgainInFallback(k, "n1", "n2", "n4")
	n1, n3 := h.cores["n1"], h.cores["n3"]
	n3.Joined(h.now)
	if healed == nil {
		h.listAll(dead, "n1", "n2", "n3", "n4")
		h.cut["n1"], h.cut["n4"] = false, false
	} else {
		h.cut["n1"], h.cut["n4"] = false, false
		h.listAll(dead, "n1", "n2", "n3", "n4")
		healed(h, k)
	}
	h.advance(3 * time.Second)
	if n3.HandoffUnderway() || h.count("n3", k) != int64(load.admitted) {
		t.Fatalf("n3: hand-off under way %v, counts %d; want %d", n3.HandoffUnderway(), h.count("n3", k), load.admitted)
	}
	if got := windowCount(n1.fallback.engine.StatesOf(h.now, []limiter.Key{k})); got != 0 {
		t.Fatalf("n1 still keeps %d in fallback", got)
	}
	h.n0sCounterComesTo("n1", "n4", evicted, n1.self)
	h.advance(time.Second)
	if got := h.count("n3", k); got != int64(load.admitted) {
		t.Fatalf("n3 counts %d; %d were admitted", got, load.admitted)
	}
	h.n3LeavesAndN1TakesTheKeyBack("n1", "n2", "n4")
	h.holdsAdmitted(k, load.admitted, "n0")
	load.spendsToTheLimit(t, "n1", "n2", "n4")
}

// listAll tells each node of names that the others of names are its
// members, and dead dead.
func (h *handNet) listAll(dead []Peer, names ...string) {
	for _, name := range names {
		var ms []Member
		for _, x := range names {
			if x != name {
				ms = append(ms, h.member(x))
			}
		}
		h.list(name, ms, dead)
	}
}
