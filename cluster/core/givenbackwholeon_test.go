package core

import (
	"slices"
	"testing"
	"time"
)

// As TestAUnitGivenBackToACounterBelowACopyComesOffACounterHoldingTheCopyWhole,
// but two of n0's units are given back to n1 (4 of n0's 6) and n1 then
// admits one (5), and n2 admits one after n0's counter came and before
// n1's does (7: n0's 6, its own 1). n1's counter holds 4 of n0's 6 and
// one of its own: of the two given back, the one it admitted since
// covers one, and one comes off n2 (6 counted of 6), not both (5) and not
// none (7); the owner admits up to the limit, no further.
func TestUnitsGivenBackToACounterBelowACopyComeOffAsFarAsItAdmittedNoMoreAfterTheCounterHereWentOn(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3", "n4", "n5")
		h.bucket.on = bucket
		k := h.keyOwnedInTurn(4)
		load := newHandLoad(h, k, 30)
		for range 4 {
			load.spend("n0")
		}
		tk := load.spend("n2")
		tk2 := load.spend("n3")
		h.advance(100 * time.Millisecond) // replicated to n1
		h.down["n0"] = true
		h.drops = func(from string, o Outgoing) bool {
			t, ok := o.Msg.(Transfer)
			return ok && from == "n1" && t.Mode == ModeReplica
		}
		h.declareDead("n0")
		n1, n2, n3 := h.cores["n1"], h.cores["n2"], h.cores["n3"]
		n1.handleTransfer(h.now, n2.self, Transfer{Seq: 900, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: h.now.UnixNano()}, true)
		n1.handleTransfer(h.now, n3.self, Transfer{Seq: 901, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk2.reqs), At: h.now.UnixNano()}, true)
		h.pump()
		load.admitted -= 2
		load.spend("n1")
		h.advance(100 * time.Millisecond)
		if got := h.count("n1", k); got != 5 {
			t.Fatalf("n1 counts %d; want 5 (4 of n0's 6, its own 1)", got)
		}
		h.down["n1"] = true
		h.declareDead("n0", "n1")
		h.drops = nil
		if got := h.count("n2", k); got != 0 {
			t.Fatalf("n2 counts %d after taking the key over; want 0 (no replica of n1's)", got)
		}
		h.learnsItWasDeclaredDead("n0")
		h.setMembership("n0", []string{"n1"})
		h.advance(time.Second, "n0", "n2", "n3", "n4", "n5")
		h.down["n0"] = true
		if got := h.count("n2", k); got != 6 {
			t.Fatalf("n2 counts %d once n0's counters came; want n0's 6", got)
		}
		load.spend("n4")
		h.advance(100*time.Millisecond, "n2", "n3", "n4", "n5")
		if got := h.count("n2", k); got != 7 {
			t.Fatalf("n2 counts %d; want 7 (n0's 6, its own 1)", got)
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
