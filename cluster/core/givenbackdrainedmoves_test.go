package core

import (
	"slices"
	"testing"
	"time"
)

// As TestUnitsGivenBackAgainInPlaceOfAllTheDeadOwnerHeldArePutBackWhereItsCountersCome
// (on windows), but the record that the unit came off n1's counter does
// not wait at n1: n1 leaves while n0 is dead, and the record goes with
// the key's counter to its next owner; or n1 is declared dead too, and
// the record goes with the replica of its counter to the node that takes
// the key over from it. n0, coming back, meets the record there, and the
// unit is put back once (1 counted of 1 admitted).
func TestUnitsGivenBackAgainInPlaceOfAllTheDeadOwnerHeldArePutBackWhereTheRecordWent(t *testing.T) {
	for _, how := range []string{"leaves", "dies"} {
		t.Run(how, func(t *testing.T) {
			h := newHandNet(t, "n0", "n1", "n2", "n3")
			k := h.keyOwnedBy("n0", "n1")
			h.drops = func(from string, o Outgoing) bool {
				t, ok := o.Msg.(Transfer)
				return ok && from == "n0" && t.Mode == ModeReplica
			}
			load := newHandLoad(h, k, 30)
			n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
			tk := load.spend("n2")
			if !tk.done || !tk.d.Allowed || tk.d.Source != SourcePeer {
				t.Fatalf("n2's request: %+v; want admitted by its owner", tk.d)
			}
			h.advance(100 * time.Millisecond)
			const refund = 77
			at := h.now.UnixNano()
			n0.handleTransfer(h.now, n2.self, Transfer{Seq: refund, To: n0.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at}, true)
			h.pump()
			load.admitted--
			h.advance(100 * time.Millisecond)
			h.down["n0"] = true
			h.advance(100 * time.Millisecond)
			h.declareDead("n0")
			h.advance(time.Second, "n1", "n2", "n3")
			if own := load.spend("n1"); !own.done || !own.d.Allowed {
				t.Fatalf("n1's request: %+v; want admitted", own.d)
			}
			n1.handleTransfer(h.now, n2.self, Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at, Was: refund, WasTo: n0.self}, true)
			h.pump()
			if got := h.count("n1", k); got != 0 {
				t.Fatalf("n1 counts %d after the give-back again; want 0", got)
			}
			h.advance(500*time.Millisecond, "n1", "n2", "n3")
			if how == "leaves" {
				h.leavesWhileN0IsDead("n1")
			} else {
				h.down["n1"] = true
				h.declareDead("n0", "n1")
				h.advance(2*time.Second, "n2", "n3")
			}
			if how == "leaves" {
				h.n0ComesBackWithout(k, load, "n1")
				return
			}
			// n1 is listed as dead as n0 comes back: not listed at all,
			// it is taken to have left gracefully, and its replica for
			// stale.
			h.drops = nil
			h.learnsItWasDeclaredDead("n0")
			h.advance(2 * time.Second)
			alive := []string{"n0", "n2", "n3"}
			for _, name := range alive {
				h.list(name, h.othersThan(name, "n1"), []Peer{h.member("n1").Peer()})
			}
			h.advance(3 * time.Second)
			h.countsAndLimits(k, load, alive)
		})
	}
}
