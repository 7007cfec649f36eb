package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// n0, the key's owner, and n1 are cut off from the other three: neither
// has a majority. n1 admits 2 of a token bucket in fallback at its share
// and sends them to n0, which keeps them in fallback for the key's owner
// (counted at the owner's rate); n0 then admits 2 more in fallback at its
// own share, in the same counter. The cut heals: n0 counts what the
// counter holds as the 4 units admitted, each once, and admits the rest
// of the limit, no request under it refused.
func TestBucketCountsKeptForTheOwnerAndTakenAtAShareReachTheOwnerOnceEach(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	h.bucket.on = true
	k := h.keyOwnedBy("n0", "n1")
	load := h.spent(k, "n0", 3)
	n0, n1 := h.cores["n0"], h.cores["n1"]

	h.cut["n0"], h.cut["n1"] = true, true
	h.advance(time.Second)
	if n0.majority(n0.view.Load()) || n1.majority(n1.view.Load()) {
		t.Fatal("a node cut off with one other has a majority")
	}
	admit := func(c *Core) { load.admitsInFallback(t, c.self.Name) }
	admit(n1)
	admit(n1)
	if !n1.reconcileTo(h.now, n1.view.Load(), n0.self) {
		t.Fatal("n1 sends no fallback count")
	}
	h.pump()
	if n1.fallback.engine.Has(h.now, k) || !n0.fallback.engine.Has(h.now, k) {
		t.Fatal("n0 keeps nothing in fallback of what n1 sent it")
	}
	admit(n0)
	admit(n0)

	h.cut["n0"], h.cut["n1"] = false, false
	h.advance(3 * time.Second)
	if !n0.majority(n0.view.Load()) {
		t.Fatal("n0 has no majority after the cut healed")
	}
	h.heldBy(k, load.admitted, h.names...)
	load.spendsToTheLimit(t, "n0", "n1", "n2")
}

// As above, but n0 admits one at its share before n1's 2 come, one after,
// and gives the first back: the counter, at the owner's rate as they
// join it, is at the share's again for the next take, and the unit given
// back comes off as one.
func TestBucketCountsKeptForTheOwnerBetweenTakesAtAShareReachTheOwnerOnceEach(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	h.bucket.on = true
	k := h.keyOwnedBy("n0", "n1")
	load := h.spent(k, "n0", 3)
	n0, n1 := h.cores["n0"], h.cores["n1"]

	h.cut["n0"], h.cut["n1"] = true, true
	h.advance(time.Second)
	load.admitsInFallback(t, "n0")
	load.admitsInFallback(t, "n1")
	load.admitsInFallback(t, "n1")
	if !n1.reconcileTo(h.now, n1.view.Load(), n0.self) {
		t.Fatal("n1 sends no fallback count")
	}
	h.pump()
	load.admitsInFallback(t, "n0")
	n0.Settle(h.now, h.now, SourceFallback, false, []limiter.Request{{Key: k, Zone: 1, Limit: load.limit, Cost: 1}})
	load.admitted--
	load.admitsInFallback(t, "n0")

	h.cut["n0"], h.cut["n1"] = false, false
	h.advance(3 * time.Second)
	h.heldBy(k, load.admitted, h.names...)
	load.spendsToTheLimit(t, "n0", "n1", "n2")
}

// A node without a majority admits 2 of a token bucket in fallback at its
// share, is charged one more (at the limit's own rate, the owner's), then
// admits one and gives one back: the counter, converted to the owner's
// rate for the charge and to the share's again for the take, reaches the
// owner as the 3 units it owes, each once (13 held of 6 before).
func TestABucketChargedInFallbackBetweenTakesAtAShareReachesTheOwnerAsTheUnitsOwed(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	h.bucket.on = true
	k := h.keyOwnedBy("n0", "n1")
	load := h.spent(k, "n0", 3)
	n1 := h.cores["n1"]
	unit := []limiter.Request{{Key: k, Zone: 1, Limit: load.limit, Cost: 1}}

	h.cut["n0"], h.cut["n1"] = true, true
	h.advance(time.Second)
	load.admitsInFallback(t, "n1")
	load.admitsInFallback(t, "n1")
	n1.Settle(h.now, h.now, SourceFallback, true, unit)
	load.admitted++
	load.admitsInFallback(t, "n1")
	n1.Settle(h.now, h.now, SourceFallback, false, unit)
	load.admitted--

	h.cut["n0"], h.cut["n1"] = false, false
	h.advance(3 * time.Second)
	h.heldBy(k, load.admitted, h.names...)
	load.spendsToTheLimit(t, "n0", "n1", "n2")
}

// admitsInFallback spends one request through node, and fails the test
// unless its fallback admits it.
func (l *handLoad) admitsInFallback(t *testing.T, node string) {
	t.Helper()
	tk := l.spend(node)
	l.resume()
	if !tk.d.Allowed || tk.d.Source != SourceFallback {
		t.Fatalf("through %s: allowed %v by %v; want admitted by fallback", node, tk.d.Allowed, tk.d.Source)
	}
}

// n0, cut off with n1, admits its share of a token bucket in fallback (6
// of the 27 left, an hour), then keeps a unit n1 sends it for the key's
// owner. 13 minutes later its share has refilled one unit, and it admits
// no more than that (the unit kept takes room in the counter as counts
// kept there do on windows): the counts kept for the owner join the
// counter at the share's interval, and the share's units go on refilling
// at the share's rate (converted to the owner's rate instead, they
// refilled five times as fast: 5 admitted).
func TestBucketCountsKeptForTheOwnerLeaveTheShareRefillingAtItsRate(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	h.bucket.on = true
	k := h.keyOwnedBy("n0", "n1")
	load := h.spent(k, "n0", 3)
	n0, n1 := h.cores["n0"], h.cores["n1"]

	h.cut["n0"], h.cut["n1"] = true, true
	h.advance(time.Second)
	load.admitsInFallback(t, "n1")
	admitted := func() int {
		n := 0
		for range 20 {
			tk := load.spend("n0")
			load.resume()
			if !tk.d.Allowed {
				break
			}
			n++
		}
		return n
	}
	if n := admitted(); n != 6 {
		t.Fatalf("n0 admits %d in fallback; want its share, 6", n)
	}
	if !n1.reconcileTo(h.now, n1.view.Load(), n0.self) {
		t.Fatal("n1 sends no fallback count")
	}
	h.pump()
	h.now = h.now.Add(13 * time.Minute)
	h.advance(10 * time.Millisecond)
	if n := admitted(); n > 1 {
		t.Errorf("13 minutes on, n0 admits %d more in fallback; want no more than the one its share refilled", n)
	}
}
