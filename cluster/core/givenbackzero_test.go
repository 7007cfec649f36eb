package core

import (
	"testing"
	"time"
)

// As in TestUnitsGivenBackAgainWhereNoCounterHeldThemArePutBackNowhere,
// n1 takes the key over from n0 with no counter of it; here n1 then
// admits a request of the key itself and that request's unit is given
// back: n1 holds a counter of the key, at nothing. The give-back again in
// n0's place comes off nothing (a counter holds no fewer than none), yet
// it was recorded as come off, since a counter of the key is here: n0's
// counters, lacking the unit, came back and got it back (5 counted of 4
// admitted, a window; a bucket at nothing is no counter).
func TestUnitsGivenBackAgainToACounterAtNothingArePutBackNowhere(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3")
		h.bucket.on = bucket
		k := h.keyOwnedBy("n0", "n1")
		load := newHandLoad(h, k, 30)
		g := h.n0GivesBackUnreplicatedAndStops(t, load, 4, 1)
		h.declareDead("n0")
		h.advance(time.Second, "n1", "n2", "n3")
		if got := h.count("n1", k); got != 0 {
			t.Fatalf("n1 counts %d after taking the key over; want 0 (no replica)", got)
		}
		own := load.spend("n1")
		if !own.done || !own.d.Allowed {
			t.Fatalf("n1's request: %+v; want admitted", own.d)
		}
		h.cores["n1"].Settle(h.now, h.now, own.d.Source, false, own.reqs)
		h.pump()
		load.admitted--
		if got := h.count("n1", k); got != 0 {
			t.Fatalf("n1 counts %d after its own request was given back; want 0", got)
		}
		h.givesBackAgainAtN1(g)
		h.pump()
		h.advance(200*time.Millisecond, "n1", "n2", "n3")
		h.n0ComesBackWithout(k, load)
	})
}

// As above, but the give-back is of 2 units and n1's counter holds 1 of
// its own when the give-back again comes: 1 comes off, and n0's counters,
// lacking both, get that 1 back where they come, no more (4 counted of 4
// admitted).
func TestUnitsGivenBackAgainOfWhichTheCounterHereHeldFewerArePutBackAsFarAsTheyCameOff(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3")
		h.bucket.on = bucket
		k := h.keyOwnedBy("n0", "n1")
		load := newHandLoad(h, k, 30)
		g := h.n0GivesBackUnreplicatedAndStops(t, load, 4, 2)
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
