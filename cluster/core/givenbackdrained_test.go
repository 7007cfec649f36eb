package core

import (
	"slices"
	"testing"
	"time"
)

// n0, the key's owner, admits one request of n2's and applies its
// give-back: its counter of the key is at nothing. Declared dead, its
// replicas lost, n1 takes the key over with no counter of it, admits a
// request of its own, and the give-back comes again to n1 in n0's place:
// it comes off n1's counter, the unit n1 admitted, and is recorded as
// come off. n0's counters, coming back, hold no counter of the key (a
// counter at nothing is none), so none meets the record, and the unit
// was never put back: 0 counted of 1 admitted, and one request past the
// limit admitted. n0's counter at nothing still comes (a window of
// nothing, or a bucket at nothing until the arrival time it had), and
// the unit is put back into it where it meets the record (see
// withUnitsBack). On buckets, n0's bucket at nothing comes to n1 naming
// no transfer n0 applied and joins n1's, at nothing too: merged, it
// stays a counter at nothing until the later of their arrival times, and
// goes back to n0 to meet the record; merged as a bucket whose arrival
// time is now, it was no counter, and the unit was lost.
func TestUnitsGivenBackAgainInPlaceOfAllTheDeadOwnerHeldArePutBackWhereItsCountersCome(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3")
		h.bucket.on = bucket
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
		if got := h.count("n0", k); got != 0 {
			t.Fatalf("n0 counts %d after the give-back; want 0", got)
		}
		h.advance(100 * time.Millisecond)
		h.down["n0"] = true
		h.advance(100 * time.Millisecond)
		h.declareDead("n0")
		h.advance(time.Second, "n1", "n2", "n3")
		if got := h.count("n1", k); got != 0 {
			t.Fatalf("n1 counts %d after taking the key over; want 0 (no replica)", got)
		}
		if own := load.spend("n1"); !own.done || !own.d.Allowed {
			t.Fatalf("n1's request: %+v; want admitted", own.d)
		}
		n1.handleTransfer(h.now, n2.self, Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at, Was: refund, WasTo: n0.self}, true)
		h.pump()
		if got := h.count("n1", k); got != 0 {
			t.Fatalf("n1 counts %d after the give-back again; want 0", got)
		}
		h.advance(200*time.Millisecond, "n1", "n2", "n3")
		h.n0ComesBackWithout(k, load)
	})
}

// As above, but n0's counter, its give-back of 2 units applied, holds 1
// of its own, fewer than the 2 given back again, which come off the 2
// n1 admitted: put back as far as n0's counter held them, 1 came back
// and 1 was lost (2 counted of 3 admitted); both come back now, on
// windows and buckets.
func TestUnitsGivenBackAgainInPlaceOfMoreThanTheDeadOwnerHeldArePutBackWhole(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3")
		h.bucket.on = bucket
		k := h.keyOwnedBy("n0", "n1")
		h.drops = func(from string, o Outgoing) bool {
			t, ok := o.Msg.(Transfer)
			return ok && from == "n0" && t.Mode == ModeReplica
		}
		load := newHandLoad(h, k, 30)
		for range 2 {
			load.spend("n0")
		}
		n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
		tk := load.spend("n2")
		if !tk.done || !tk.d.Allowed || tk.d.Source != SourcePeer {
			t.Fatalf("n2's request: %+v; want admitted by its owner", tk.d)
		}
		two := slices.Clone(tk.reqs)
		two[0].Cost = 2
		h.advance(100 * time.Millisecond)
		const refund = 77
		at := h.now.UnixNano()
		n0.handleTransfer(h.now, n2.self, Transfer{Seq: refund, To: n0.self.Inc, Mode: ModeRefund, Reqs: two, At: at}, true)
		h.pump()
		load.admitted -= 2
		if got := h.count("n0", k); got != 1 {
			t.Fatalf("n0 counts %d after the give-back; want 1", got)
		}
		h.advance(100 * time.Millisecond)
		h.down["n0"] = true
		h.advance(100 * time.Millisecond)
		h.declareDead("n0")
		h.advance(time.Second, "n1", "n2", "n3")
		for range 2 {
			if own := load.spend("n1"); !own.done || !own.d.Allowed {
				t.Fatalf("n1's request: %+v; want admitted", own.d)
			}
		}
		n1.handleTransfer(h.now, n2.self, Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(two), At: at, Was: refund, WasTo: n0.self}, true)
		h.pump()
		if got := h.count("n1", k); got != 0 {
			t.Fatalf("n1 counts %d after the give-back again; want 0", got)
		}
		h.advance(200*time.Millisecond, "n1", "n2", "n3")
		h.n0ComesBackWithout(k, load)
	})
}
