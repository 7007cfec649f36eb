package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner n0 stands still; n1 admits 2 of the key in fallback, of
// its share of the limit (half of 30: n0 told it nothing of the key),
// then sends them to n0 once it answers again: n0 adds them once, and
// counts 2 more than before, on windows and on token buckets alike.
//
// n1's fallback bucket is a bucket of its share (15 an hour, not 30), so
// each unit it admits moves its arrival time on by 4 minutes, two of
// n0's units; added to n0's bucket as that time, the 2 units counted as
// 4 (7 held of 5 admitted, and a request under the limit refused). They
// reach n0 as the units admitted, at n0's rate.
func TestFallbackAdmissionsOfABucketReachTheOwnerAsTheUnitsAdmitted(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2")
		h.bucket.on = bucket
		k := h.keyOwnedBy("n0", "n1")
		load := h.spent(k, "n0", 3)
		h.advance(20 * time.Millisecond)

		h.down["n0"] = true
		h.advance(100 * time.Millisecond)
		for range 2 {
			load.spend("n1")
		}
		load.resume()
		if load.by[SourceFallback] != 2 {
			t.Fatalf("admitted %v; want 2 by fallback", load.by)
		}
		h.down["n0"] = false
		h.advance(time.Second)
		h.heldBy(k, load.admitted, h.names...)
		load.spendsToTheLimit(t, "n0", "n1", "n2")
	})
}

// As above, then a unit n1 admitted of the bucket in fallback, sent on,
// is given back (another key denied the request): it comes off n0's
// counter as one of n0's units, the rate it reached n0 at. Given back
// at n1's share of the rate, it took two of n0's units off, one nobody
// gave back.
func TestAUnitOfABucketAdmittedInFallbackAndSentOnIsGivenBackAtTheOwnersRate(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2")
		h.bucket.on = bucket
		k := h.keyOwnedBy("n0", "n1")
		load := h.spent(k, "n0", 3)
		n0, n1 := h.cores["n0"], h.cores["n1"]

		admit := func() *takeGroup {
			t.Helper()
			req := limiter.Request{Key: k, Zone: 1, Limit: load.limit, Cost: 1}
			g := &takeGroup{reqs: []limiter.Request{req}, res: make([]limiter.Result, 1)}
			n1.decideByFallback(h.now, n1.view.Load(), &TakeOp{op: OpTake}, g)
			if !g.allowed {
				t.Fatal("n1's fallback denies the unit")
			}
			load.admitted++
			return g
		}
		first := admit()
		admit()
		if !n1.reconcileTo(h.now, n1.view.Load(), n0.self) {
			t.Fatal("n1 sends no fallback count")
		}
		h.pump()
		h.heldBy(k, load.admitted, h.names...)

		// Another key denied the first request: its unit goes back.
		n1.giveBack(h.now, first)
		load.admitted--
		h.advance(time.Second)
		h.heldBy(k, load.admitted, h.names...)
		load.spendsToTheLimit(t, "n0", "n1", "n2")
	})
}

// As above, but the first unit is given back through Settle (the
// response cost nothing) while n1's fallback counter still holds it: the
// caller gives it back at the limit's own rate, and it comes off as the
// unit n1's counter counted, at its share's rate. Taken off at the
// owner's rate, half the share's unit stayed in the counter and reached
// n0 (5 held of 4 admitted, a request under the limit refused).
func TestAUnitOfABucketAdmittedInFallbackAndSettledThereComesOffAsTheShareCountedIt(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2")
		h.bucket.on = bucket
		k := h.keyOwnedBy("n0", "n1")
		load := h.spent(k, "n0", 3)
		n0, n1 := h.cores["n0"], h.cores["n1"]

		req := limiter.Request{Key: k, Zone: 1, Limit: load.limit, Cost: 1}
		for range 2 {
			g := &takeGroup{reqs: []limiter.Request{req}, res: make([]limiter.Result, 1)}
			n1.decideByFallback(h.now, n1.view.Load(), &TakeOp{op: OpTake}, g)
			if !g.allowed {
				t.Fatal("n1's fallback denies the unit")
			}
			load.admitted++
		}
		// The response of the first cost nothing: its unit is given back
		// where fallback counted it, at the limit the caller asked for.
		if sent := n1.Settle(h.now, h.now, SourceFallback, false, []limiter.Request{req}); len(sent) != 0 {
			t.Fatalf("the unit is given back in transfers %v; want in n1's fallback counter", sent)
		}
		load.admitted--
		if !n1.reconcileTo(h.now, n1.view.Load(), n0.self) {
			t.Fatal("n1 sends no fallback count")
		}
		h.pump()
		h.heldBy(k, load.admitted, h.names...)
		load.spendsToTheLimit(t, "n0", "n1", "n2")
	})
}

// n1 admits a unit of the key in fallback at a share of 15 an hour of 30,
// its fallback ratio is lowered (a configuration reloaded: a share of 7
// an hour), and it admits two more at that share; the first is given
// back (another key denied the request). The counter, counted at two
// rates, reaches n0 as the 2 units it holds: converted at the least
// interval as a whole, each unit of the second share counted as two of
// the owner's and more (7 held of 5 admitted, a request under the limit
// refused).
func TestUnitsOfABucketAdmittedInFallbackAtTwoSharesReachTheOwnerOnceEach(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2")
		h.bucket.on = bucket
		k := h.keyOwnedBy("n0", "n1")
		load := h.spent(k, "n0", 3)
		n0, n1 := h.cores["n0"], h.cores["n1"]

		admit := func() *takeGroup {
			t.Helper()
			req := limiter.Request{Key: k, Zone: 1, Limit: load.limit, Cost: 1}
			g := &takeGroup{reqs: []limiter.Request{req}, res: make([]limiter.Result, 1)}
			n1.decideByFallback(h.now, n1.view.Load(), &TakeOp{op: OpTake}, g)
			if !g.allowed {
				t.Fatal("n1's fallback denies the unit")
			}
			load.admitted++
			return g
		}
		first := admit()
		n1.SetFallback(FallbackLocal, 0.25)
		admit()
		admit()
		n1.giveBack(h.now, first)
		load.admitted--
		if !n1.reconcileTo(h.now, n1.view.Load(), n0.self) {
			t.Fatal("n1 sends no fallback count")
		}
		h.pump()
		h.heldBy(k, load.admitted, h.names...)
		load.spendsToTheLimit(t, "n0", "n1", "n2")
	})
}

// A bucket whose burst (10) is less than its quota (30 an hour): n1's
// share (of what n0 said remained of its burst, a quota of 5 an hour,
// the burst 10 as it is) counts each unit at six times the owner's
// interval, and the 2 it admits reach n0 as 2 of its units: n0, holding
// 5, admits the 5 its burst leaves and refuses the next.
func TestFallbackAdmissionsOfABucketWithABurstBelowItsQuotaReachTheOwnerAsTheUnitsAdmitted(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	h.bucket.on = true
	k := h.keyOwnedBy("n0", "n1")
	load := newHandLoad(h, k, 30)
	load.limit.Burst = 10
	for range 3 {
		load.spend("n0")
	}
	load.resume()
	n0, n1 := h.cores["n0"], h.cores["n1"]
	for range 2 {
		req := limiter.Request{Key: k, Zone: 1, Limit: load.limit, Cost: 1}
		g := &takeGroup{reqs: []limiter.Request{req}, res: make([]limiter.Result, 1)}
		n1.decideByFallback(h.now, n1.view.Load(), &TakeOp{op: OpTake}, g)
		if !g.allowed {
			t.Fatal("n1's fallback denies the unit")
		}
		if got := g.fallback[0].Limit.Interval(); got <= 2*time.Minute {
			t.Fatalf("n1 counts the unit at %v; want longer than 2m, the owner's", got)
		}
		load.admitted++
	}
	if !n1.reconcileTo(h.now, n1.view.Load(), n0.self) {
		t.Fatal("n1 sends no fallback count")
	}
	h.pump()
	h.heldBy(k, load.admitted, h.names...)
	for i := range 6 {
		tk := load.spend("n0")
		load.resume()
		if want := i < 5; tk.d.Allowed != want || want && tk.d.Source != SourceOwner {
			t.Fatalf("the %d. request after the 5 counted: allowed %v by %v; want allowed %v by the owner (counts %v)", i+1, tk.d.Allowed, tk.d.Source, want, h.counts(k))
		}
	}
	h.heldBy(k, 10, h.names...)
}
