package core

import (
	"slices"
	"testing"
	"time"
)

// n1 takes n0's key over from its replica (5), a unit n0 admitted is
// given back to it (4, replicated to n2), it admits two (6), a second
// unit n0 admitted is given back to it (5: what it holds of n0's copy
// is not lowered, its counter being above it), and it admits one more
// (6); none of this since the first give-back is replicated. Declared
// dead while alive, n2 takes the key over from n1's replica (4), and
// n1's counters come: weighed against the record of n1's counter (4),
// they add the 2 it holds beyond (6 of 6), whatever they hold of n0's,
// and the owner admits up to the limit, no further.
func TestACounterThatComesBackUpAboveTheCopyItHoldsAndDownAgainAddsWhatItAdmittedBeyondItsReplica(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3", "n4", "n5")
		h.bucket.on = bucket
		k := h.keyOwnedInTurn(4)
		load := newHandLoad(h, k, 30)
		for range 3 {
			load.spend("n0")
		}
		first, second := load.spend("n2"), load.spend("n2")
		h.advance(100 * time.Millisecond) // replicated to n1
		h.down["n0"] = true
		h.declareDead("n0")
		n1, n2 := h.cores["n1"], h.cores["n2"]
		giveBack := func(seq uint64, tk *handTake) {
			n1.handleTransfer(h.now, n2.self, Transfer{Seq: seq, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: h.now.UnixNano()}, true)
			h.pump()
			load.admitted--
		}
		giveBack(900, first)
		h.advance(100 * time.Millisecond) // replicated to n2
		h.drops = func(from string, o Outgoing) bool {
			t, ok := o.Msg.(Transfer)
			return ok && from == "n1" && t.Mode == ModeReplica
		}
		load.spend("n1")
		load.spend("n1")
		giveBack(901, second)
		load.spend("n1")
		h.advance(100 * time.Millisecond)
		if got := h.count("n1", k); got != int64(load.admitted) {
			t.Fatalf("n1 counts %d; %d were admitted", got, load.admitted)
		}
		h.down["n1"] = true
		h.declareDead("n0", "n1")
		h.drops = nil
		if got := h.count("n2", k); got != 4 {
			t.Fatalf("n2 counts %d after taking the key over; want 4 (n1's replica)", got)
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
