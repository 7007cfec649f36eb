package core

import (
	"slices"
	"testing"
	"time"
)

// n1 takes n0's key over from its replica (5), and a unit n0 admitted is
// given back to it (4: its counter holds less than the copy of n0's it
// holds), replicated to n2. n1 then admits one more (5), not replicated,
// and is declared dead while alive: n2 takes the key over from n1's
// replica (4), and n1's counters, its last word, come to n2. They hold
// the one n1 admitted beyond its replica, and the copy of n0's counter
// both hold: n2 counts the one (5 of 5 admitted), and the owner admits
// up to the limit, no further.
func TestACounterBelowTheCopyItHoldsAddsWhatItAdmittedBeyondItsReplica(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3", "n4", "n5")
		h.bucket.on = bucket
		k := h.keyWhere(func(owner func(names ...string) Member) bool {
			return owner("n0", "n1", "n2", "n3", "n4", "n5").Name == "n0" && owner("n1", "n2", "n3", "n4", "n5").Name == "n1" && owner("n2", "n3", "n4", "n5").Name == "n2"
		})
		load := newHandLoad(h, k, 30)
		for range 4 {
			load.spend("n0")
		}
		tk := load.spend("n2")
		h.advance(100 * time.Millisecond)
		h.down["n0"] = true
		h.declareDead("n0")
		n1, n2 := h.cores["n1"], h.cores["n2"]
		n1.handleTransfer(h.now, n2.self, Transfer{Seq: 900, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: h.now.UnixNano()}, true)
		h.pump()
		load.admitted--
		if got := h.count("n1", k); got != int64(load.admitted) {
			t.Fatalf("n1 counts %d after the give-back; %d were admitted", got, load.admitted)
		}
		h.advance(100 * time.Millisecond) // replicated to n2
		h.drops = func(from string, o Outgoing) bool {
			t, ok := o.Msg.(Transfer)
			return ok && from == "n1" && t.Mode == ModeReplica
		}
		load.spend("n1")
		h.advance(100 * time.Millisecond)
		h.down["n1"] = true
		h.declareDead("n0", "n1")
		if got := h.count("n2", k); got != int64(load.admitted)-1 {
			t.Fatalf("n2 counts %d after taking the key over; want %d (n1's replica)", got, load.admitted-1)
		}
		h.drops = nil
		h.learnsItWasDeclaredDead("n1")
		h.advance(time.Second, "n1", "n2", "n3", "n4", "n5")
		h.down["n1"] = true
		alive := []string{"n2", "n3", "n4", "n5"}
		for _, x := range alive {
			h.setMembership(x, []string{"n0", "n1"})
		}
		h.advance(2*time.Second, alive...)
		var total int64
		for _, name := range alive {
			total += h.count(name, k)
		}
		if total != int64(load.admitted) {
			t.Fatalf("the cluster counts %d (%v); %d were admitted", total, h.counts(k), load.admitted)
		}
		load.spendsToTheLimit(t, "n2", "n3", "n4", "n5")
	})
}
