package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner n1 admitted 9, its successor kept the replica of 9, then
// n1 gave a unit back (another zone of the request denied it): its
// counter holds 8, and the replica that said so was lost in a split. The
// successor took n1 for dead and sent its replica on, naming n1's run, to
// the key's owner by its ring, n2; once the split healed n1 handed its own
// counter, 8, to n2 as well. Both are copies of one run's counter, but the
// later is the lower: the hand-over is the run's last word on it, and an
// earlier copy of it holds nothing more. Weighed as copies that only grow
// (the larger stands), the unit given back was counted again (seed
// 1795857329681027393 of the simulator, where both waited for the key to
// settle at n2, a joiner: 32 held, 31 admitted). In either order n2
// counts 8.
func TestARunsHandedOverCounterLoweredByAGiveBackOutweighsItsOlderCopy(t *testing.T) {
	for _, ownFirst := range []bool{false, true} {
		name := "copy first"
		if ownFirst {
			name = "own first"
		}
		t.Run(name, func(t *testing.T) {
			h := newHandNet(t, "n0", "n1", "n2")
			k := h.keyOwnedBy("n2", "n0")
			older, handed := loweredCounter(h.now, k, 9)
			n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
			copyOf := Transfer{Seq: 1000, To: n2.self.Inc, Epoch: 1, Mode: ModeAdd, CountersOf: n1.self, States: []limiter.State{older}}
			own := Transfer{Seq: 1000, To: n2.self.Inc, Epoch: 1, Mode: ModeAdd, Own: true, States: []limiter.State{handed}}
			if ownFirst {
				n2.handleTransfer(h.now, n1.self, own, false)
				n2.handleTransfer(h.now, n0.self, copyOf, false)
			} else {
				n2.handleTransfer(h.now, n0.self, copyOf, false)
				n2.handleTransfer(h.now, n1.self, own, false)
			}
			h.pump()
			if got := h.count("n2", k); got != 8 {
				t.Errorf("n2 counts %d of the key; n1's counter, handed over, holds 8", got)
			}
		})
	}
}

// loweredCounter returns a counter of k that admitted n requests, then
// the same counter once one unit of them was given back.
func loweredCounter(now time.Time, k limiter.Key, n int) (before, after limiter.State) {
	e := limiter.New(limiter.Config{MaxKeys: 16})
	req := limiter.Request{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 30, Window: time.Hour}}
	for range n {
		e.TakeOne(now, req)
	}
	before = e.StatesOf(now, []limiter.Key{k})[0]
	e.Refund(now, req)
	after = e.StatesOf(now, []limiter.Key{k})[0]
	return before, after
}

// As above, but the key's successor n2 took n1 over and counted the key
// on from its replica of 9, while n1, cut off, gave a unit back (its
// counter holds 8, and the replica that said so was lost). Once the split
// heals n1 is told it was declared dead and sends n2 its counters as it
// stops counting (ModeEvicted): its last word on them. What n2 counted
// from the replica beyond them was given back since, and comes off.
// Weighed as a copy that only grows, it stood (9 counted, 8 held).
func TestAnEvictedCounterLoweredByAGiveBackLowersTheCounterStartedFromItsReplica(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2")
		h.bucket.on = bucket
		k := h.keyOrdered("n1", "n2", "n0")
		load := newHandLoad(h, k, 30)
		var tk *handTake
		for range 9 {
			tk = load.spend("n1")
		}
		load.resume()
		h.advance(50 * time.Millisecond) // replicated to n2
		n1 := h.cores["n1"]
		n1.refund(h.now, slices.Clone(tk.reqs))
		h.cut["n1"] = true
		h.advance(50 * time.Millisecond)
		if got := h.count("n1", k); got != 8 {
			t.Fatalf("n1 counts %d of the key after a unit given back; want 8", got)
		}
		h.setMembership("n0", []string{"n1"})
		h.setMembership("n2", []string{"n1"})
		h.advance(2 * time.Second)
		if got := h.count("n2", k); got != 9 {
			t.Fatalf("n2 took the key over with %d; want its replica, 9", got)
		}
		h.cut["n1"] = false
		h.advance(3 * time.Second)
		if total := h.count("n0", k) + h.count("n1", k) + h.count("n2", k); total != 8 {
			t.Errorf("the cluster counts %d of the key (n2 %d); n1's counter, evicted, holds 8", total, h.count("n2", k))
		}
	})
}

// unitOf returns a request of one unit of k under the load's limit:
// a unit to give back.
func (l *handLoad) unitOf(k limiter.Key) []limiter.Request {
	return []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: l.quota, Window: time.Hour}}}
}
