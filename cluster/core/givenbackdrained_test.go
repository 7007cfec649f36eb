package core

import (
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
		load := newHandLoad(h, k, 30)
		g := h.n0GivesBackUnreplicatedAndStops(t, load, 0, 1)
		if got := h.count("n0", k); got != 0 {
			t.Fatalf("n0 counts %d after the give-back; want 0", got)
		}
		h.declareDead("n0")
		h.advance(time.Second, "n1", "n2", "n3")
		if got := h.count("n1", k); got != 0 {
			t.Fatalf("n1 counts %d after taking the key over; want 0 (no replica)", got)
		}
		if own := load.spend("n1"); !own.done || !own.d.Allowed {
			t.Fatalf("n1's request: %+v; want admitted", own.d)
		}
		h.givesBackAgainAtN1(g)
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
		load := newHandLoad(h, k, 30)
		g := h.n0GivesBackUnreplicatedAndStops(t, load, 2, 2)
		if got := h.count("n0", k); got != 1 {
			t.Fatalf("n0 counts %d after the give-back; want 1", got)
		}
		h.declareDead("n0")
		h.advance(time.Second, "n1", "n2", "n3")
		for range 2 {
			if own := load.spend("n1"); !own.done || !own.d.Allowed {
				t.Fatalf("n1's request: %+v; want admitted", own.d)
			}
		}
		h.givesBackAgainAtN1(g)
		h.pump()
		if got := h.count("n1", k); got != 0 {
			t.Fatalf("n1 counts %d after the give-back again; want 0", got)
		}
		h.advance(200*time.Millisecond, "n1", "n2", "n3")
		h.n0ComesBackWithout(k, load)
	})
}
