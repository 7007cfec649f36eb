package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// As in TestUnitsGivenBackAgainOfWhichTheCounterHereHeldFewerArePutBackAsFarAsTheyCameOff,
// on a token bucket whose unit of n1's own has mostly refilled when the
// give-back again comes: what came off n1's counter is a fraction of a
// unit, recorded rounded up to a whole one (limiter.UnitsOff), and n0's
// counters, lacking the units, get that whole unit back. The unit put
// back beyond the fraction is what n1's counter refilled while n0's
// refilled too (two counters of the key refilling at once): the cluster
// then holds what one bucket fed every admission would, no more, and
// decides the rest of the key as that bucket does: no request it admits
// refused, none it refuses admitted.
func TestUnitsGivenBackAgainToAPartlyRefilledBucketPutBackNoMoreThanOneBucketHolds(t *testing.T) {
	partlyRefilled(t, 4, 0, 9)
}

// partlyRefilled plays the sequence above: n0 admits own of the key,
// then n2's request, of which it applies a give-back of 2 units; after
// wait tenths of a unit's refill time n1, having taken the key over
// with no replica, admits one of its own; after refill tenths more the
// give-back comes again to n1.
func partlyRefilled(t *testing.T, own int, wait, refill time.Duration) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	h.bucket.on = true
	k := h.keyOwnedBy("n0", "n1")
	h.drops = func(from string, o Outgoing) bool {
		t, ok := o.Msg.(Transfer)
		return ok && from == "n0" && t.Mode == ModeReplica
	}
	load := newHandLoad(h, k, 30)
	one := limiter.New(limiter.Config{}) // the key counted by one bucket, fed every admission
	spend := func(node string) *handTake {
		tk := load.spend(node)
		if tk.done && tk.d.Allowed {
			one.TakeOne(h.now, tk.reqs[0])
		}
		return tk
	}
	for range own {
		spend("n0")
	}
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	tk := spend("n2")
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
	one.RefundAt(h.now, time.Unix(0, at), two[0])
	load.admitted -= 2
	h.advance(100 * time.Millisecond)
	h.down["n0"] = true
	h.advance(100 * time.Millisecond)
	h.declareDead("n0")
	h.advance(time.Second, "n1", "n2", "n3")
	if got := h.count("n1", k); got != 0 {
		t.Fatalf("n1 counts %d after taking the key over; want 0 (no replica)", got)
	}
	every := time.Hour / 30
	h.advance(every*wait/10, "n1", "n2", "n3")
	if own := spend("n1"); !own.done || !own.d.Allowed {
		t.Fatalf("n1's request: %+v; want admitted", own.d)
	}
	h.advance(every*refill/10, "n1", "n2", "n3")
	debt := func(states []limiter.State) time.Duration {
		var d time.Duration
		for _, s := range states {
			if s.Kind < limiter.KindGrant && s.Stamp > h.now.UnixNano() {
				d += time.Duration(s.Stamp - h.now.UnixNano())
			}
		}
		return d
	}
	if d := debt(n1.engine.StatesOf(h.now, []limiter.Key{k})); d <= 0 || d >= every {
		t.Fatalf("n1's counter owes %v; want a fraction of a unit (%v)", d, every)
	}
	n1.handleTransfer(h.now, n2.self, Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(two), At: at, Was: refund, WasTo: n0.self}, true)
	h.pump()
	if got := h.count("n1", k); got != 0 {
		t.Fatalf("n1 counts %d after the give-back again; want 0", got)
	}
	h.advance(200*time.Millisecond, "n1", "n2", "n3")
	h.drops = nil
	h.learnsItWasDeclaredDead("n0")
	h.advance(2 * time.Second)
	for _, name := range h.names {
		h.list(name, h.othersThan(name), nil)
	}
	h.advance(3 * time.Second)
	var held time.Duration
	for _, name := range h.names {
		held += debt(h.cores[name].engine.StatesOf(h.now, []limiter.Key{k})) + debt(h.cores[name].fallback.engine.StatesOf(h.now, []limiter.Key{k}))
	}
	ideal := debt(one.StatesOf(h.now, []limiter.Key{k}))
	t.Logf("the cluster owes %v (%.3f units), one bucket %v (%.3f units); %d admitted", held, float64(held)/float64(every), ideal, float64(ideal)/float64(every), load.admitted)
	if held > ideal {
		t.Errorf("the cluster owes %v; one bucket fed every admission owes %v", held, ideal)
	}
	for i := 0; ; i++ {
		tk := load.spend("n0")
		want := one.TakeOne(h.now, tk.reqs[0]).Allowed
		got := tk.done && tk.d.Allowed
		if got != want {
			t.Fatalf("request %d through n0 (%d admitted): admitted %v, one bucket %v: %+v", i, load.admitted, got, want, tk.d)
		}
		if !want {
			break
		}
	}
}
