package core

import (
	"slices"
	"testing"
	"time"
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

		tk := load.spend("n2")
		if !tk.done || !tk.d.Allowed || tk.d.Source != SourcePeer {
			t.Fatalf("n2's request: %+v; want admitted by its owner", tk.d)
		}
		h.advance(100 * time.Millisecond) // replicated to n1
		h.drops = func(from string, o Outgoing) bool {
			t, ok := o.Msg.(Transfer)
			return ok && from == "n0" && o.To.Name == "n1" && t.Mode == ModeReplica
		}
		const refund = 77
		at := h.now.UnixNano()
		n0.handleTransfer(h.now, n2.self, Transfer{Seq: refund, To: n0.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at}, true)
		h.pump()
		load.admitted--
		if got := h.count("n0", k); got != 4 {
			t.Fatalf("n0 counts %d after the give-back; want 4", got)
		}
		h.advance(100 * time.Millisecond)

		// n0 stops answering; n1 takes the key over from its stale replica.
		h.down["n0"] = true
		h.advance(100 * time.Millisecond)
		h.setMembership("n1", []string{"n0"})
		h.setMembership("n2", []string{"n0"})
		h.advance(2*time.Second, "n1", "n2")
		if got := h.count("n1", k); got != 5 {
			t.Fatalf("n1 counts %d after taking the key over; want 5 (the stale replica)", got)
		}

		// n2 gives the unit back again to n1: in place of its give-back
		// to n0, or (chain) in place of a give-back to a run since gone
		// that itself replaced the one to n0.
		again := Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at, Was: refund, WasTo: n0.self}
		if chain {
			gone := Peer{Name: "n9", Inc: 7}
			again.Was, again.WasTo = 500, gone
			again.Earlier = []Replaced{{From: n2.self, Seq: refund, To: n0.self}}
		}
		n1.handleTransfer(h.now, n2.self, again, true)
		h.pump()
		if got := h.count("n1", k); got != int64(load.admitted) {
			t.Fatalf("chain %v: n1 counts %d after the give-back again; %d were admitted", chain, got, load.admitted)
		}

		// n0 comes back, learns it was declared dead; its counters go to n1.
		h.drops = nil
		h.learnsItWasDeclaredDead("n0")
		h.advance(2 * time.Second)
		for _, name := range h.names {
			h.setMembership(name, nil)
		}
		h.advance(3 * time.Second)
		total := h.count("n0", k) + h.count("n1", k) + h.count("n2", k)
		if total != int64(load.admitted) {
			t.Errorf("chain %v: the cluster counts %d (n0 %d, n1 %d, n2 %d); %d were admitted (n2's unit was given back once)", chain, total, h.count("n0", k), h.count("n1", k), h.count("n2", k), load.admitted)
		}
		load.spendsToTheLimit(t, "n0", "n1", "n2")
	}
}
