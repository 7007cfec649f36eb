package core

import (
	"slices"
	"testing"
	"time"
)

// As TestAUnitGivenBackToACounterBelowACopyComesOffOnceWhereItsStaleReplicaAndTheCopysOwnRunAreCounted,
// but n0, declared dead while alive and cut off, has one of its own units
// given back to it before it sends its counter (4): it comes off n2 when
// n0's last word comes (4), and the unit given back to n1 when n1's
// last word does (3 of 3): two give-backs, two units.
func TestUnitsGivenBackToTwoCountersOfOneCopyBothComeOffWhereAStaleReplicaOfOneIsCounted(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3", "n4", "n5")
		h.bucket.on = bucket
		k := h.keyOwnedInTurn(4)
		load := newHandLoad(h, k, 30)
		var own *handTake
		for range 4 {
			own = load.spend("n0")
		}
		tk := load.spend("n2")
		h.advance(100 * time.Millisecond) // replicated to n1
		h.down["n0"] = true
		h.declareDead("n0")
		h.advance(100 * time.Millisecond) // n1's counter (5) replicated to n2
		h.drops = func(from string, o Outgoing) bool {
			t, ok := o.Msg.(Transfer)
			return ok && from == "n1" && t.Mode == ModeReplica
		}
		n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
		n0.engine.Refund(h.now, own.reqs[0])
		load.admitted--
		n1.handleTransfer(h.now, n2.self, Transfer{Seq: 900, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: h.now.UnixNano()}, true)
		h.pump()
		load.admitted--
		h.advance(100 * time.Millisecond)
		if got := h.count("n1", k); got != 4 {
			t.Fatalf("n1 counts %d; want 4 (n0's 5, one given back to it)", got)
		}
		h.down["n1"] = true
		h.declareDead("n0", "n1")
		h.drops = nil
		if got := h.count("n2", k); got != 5 {
			t.Fatalf("n2 counts %d after taking the key over; want 5 (n1's replica, before the give-back)", got)
		}
		h.learnsItWasDeclaredDead("n0")
		h.setMembership("n0", []string{"n1"})
		h.advance(time.Second, "n0", "n2", "n3", "n4", "n5")
		h.down["n0"] = true
		if got := h.count("n2", k); got != 4 {
			t.Fatalf("n2 counts %d once n0's counters came; want 4 (the copy held, less the unit given back to n0)", got)
		}
		h.learnsItWasDeclaredDead("n1")
		h.advance(time.Second, "n1", "n2", "n3", "n4", "n5")
		h.down["n1"] = true
		alive := []string{"n2", "n3", "n4", "n5"}
		h.leaveAlive(alive, "n0", "n1")
		h.countsExactly(k, load, alive)
		load.spendsToTheLimit(t, "n2", "n3", "n4", "n5")
	})
}
