package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A give-back the key's owner applied (its answer lost, its replicas to
// the key's next owner lost) is given back again, in place of it, to a
// run that dies before it applies it, and again, naming both (a chain),
// to the node that took the key over from the owner's stale replica: it
// applies them. When the owner, declared dead, comes back and its
// counters come to that node, they lack the units as its counter does:
// the units are put back once, and the key counts what was admitted.
func TestUnitsGivenBackAgainNamingAChainArePutBackForTheRunThatAppliedTheFirst(t *testing.T) {
	for _, chain := range []bool{false, true} {
		h := newHandNet(t, "n0", "n1", "n2")
		k, load := h.spentKey("n0", "n1", 4)
		n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
		tk, given := h.n0AppliesAGiveBackN1Misses(k, load)

		// n0 stops answering; n1 takes the key over from its stale replica.
		h.standsStillAndIsDeclaredDead("n0")
		h.advance(time.Second, "n1", "n2")
		if got := h.count("n1", k); got != 5 {
			t.Fatalf("n1 counts %d after taking the key over; want 5 (the stale replica)", got)
		}

		// n2 gives the unit back again to n1: in place of its give-back
		// to n0, or (chain) in place of a give-back to a run since gone
		// that itself replaced the one to n0.
		again := Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: given.At, Was: given.Seq, WasTo: n0.self}
		if chain {
			gone := Peer{Name: "n9", Inc: 7}
			again.Was, again.WasTo = 500, gone
			again.Earlier = []Replaced{{From: n2.self, Seq: given.Seq, To: n0.self}}
		}
		n1.handleTransfer(h.now, n2.self, again, true)
		h.pump()
		if got := h.count("n1", k); got != int64(load.admitted) {
			t.Fatalf("chain %v: n1 counts %d after the give-back again; %d were admitted", chain, got, load.admitted)
		}

		// n0 comes back, learns it was declared dead; its counters go to n1.
		h.drops = nil
		h.learnsItWasDeclaredDeadAndJoinsAgain("n0")
		h.heldBy(k, load.admitted, h.names...)
		load.spendsToTheLimit(t, "n0", "n1", "n2")
	}
}

// n0AppliesAGiveBackN1Misses has n2 spend a unit of k through n0, its
// owner, replicated to n1, and give it back: n0 applies the give-back,
// and its replicas to n1 are lost from then on, so n1 does not learn of
// it. It returns n2's request and the give-back.
func (h *handNet) n0AppliesAGiveBackN1Misses(k limiter.Key, load *handLoad) (*handTake, Transfer) {
	h.t.Helper()
	n0, n2 := h.cores["n0"], h.cores["n2"]
	tk := load.spend("n2")
	if !tk.done || !tk.d.Allowed || tk.d.Source != SourcePeer {
		h.t.Fatalf("n2's request: %+v; want admitted by its owner", tk.d)
	}
	h.advance(100 * time.Millisecond) // replicated to n1
	h.drops = func(from string, o Outgoing) bool {
		t, ok := o.Msg.(Transfer)
		return ok && from == "n0" && o.To.Name == "n1" && t.Mode == ModeReplica
	}
	given := Transfer{Seq: 77, To: n0.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: h.now.UnixNano()}
	n0.handleTransfer(h.now, n2.self, given, true)
	h.pump()
	load.admitted--
	if got := h.count("n0", k); got != 4 {
		h.t.Fatalf("n0 counts %d after the give-back; want 4", got)
	}
	h.advance(100 * time.Millisecond)
	return tk, given
}

// learnsItWasDeclaredDeadAndJoinsAgain has name, declared dead by the
// others, come back and learn so; its counters go out, and it joins
// again.
func (h *handNet) learnsItWasDeclaredDeadAndJoinsAgain(name string) {
	h.t.Helper()
	h.learnsItWasDeclaredDead(name)
	h.advance(2 * time.Second)
	h.joinsAgain(name, 3*time.Second)
}
