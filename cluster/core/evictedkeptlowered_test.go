package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// As in TestAnEvictedCounterKeptByANodeThatKnowsNoMemberIsWeighedAsItsCounter,
// but n0 gave a unit back after its successor n1 applied the replica of
// its counter (3), and the replica that said so (2) was lost. n0, declared
// dead and knowing no member, keeps its counter of 2: its last word on
// it, as it would be at a node it sent it to. n1's counter, started from
// the replica of 3, comes back as n0 joins again, holding that replica;
// the unit given back since is in it, and comes off.
func TestAnEvictedCounterKeptByANodeThatKnowsNoMemberIsItsLastWord(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h, k, load := n0KeepsItsCounterBelowItsReplica(t, bucket)
		h.joinsAgain("n0", 2*time.Second)
		h.heldBy(k, load.admitted, h.names...)
		load.spendsToTheLimit(t, "n0", "n1", "n2")
	})
}

// As above, but n0 keeps a snapshot of its counters while it holds the
// counter it kept, crashes, and a new run restores the snapshot as it
// joins. The snapshot holds the record of the counter it kept (it goes
// with the counter that holds it), its last word, and the copy of n0's
// counter, named as its run's, takes the unit given back off the counter
// n1 started from the replica where the two meet. Weighed as a copy, the
// record let the unit stand (3 held of 2 admitted).
func TestAnEvictedCounterKeptByANodeThatKnowsNoMemberIsItsLastWordInASnapshot(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h, k, load := n0KeepsItsCounterBelowItsReplica(t, bucket)
		n0 := h.cores["n0"]
		snapshot := n0.Keep(h.now, n0.engine.StatesOf(h.now, []limiter.Key{k}))
		h.down["n0"] = true
		h.advance(100 * time.Millisecond)
		h.declareDead("n0")
		n0 = h.start("n0", true)
		n0.RestoreCounters(h.now, snapshot)
		h.joinsInPlaceOfItsLeavingRun(n0)
		h.advance(2 * time.Second)
		if !n0.Member() || n0.HandoffUnderway() {
			t.Fatalf("the new run of n0: member %v, hand-off under way %v", n0.Member(), n0.HandoffUnderway())
		}
		h.heldBy(k, load.admitted, h.names...)
		load.spendsToTheLimit(t, "n0", "n1", "n2")
	})
}

// n0KeepsItsCounterBelowItsReplica has n0, the owner of a key whose
// successor is n1, admit 3 (n1 applies the replica, n0 never hears so),
// give one back (the replica that says so is lost), and, declared dead,
// keep its counter of 2, knowing no member.
func n0KeepsItsCounterBelowItsReplica(t *testing.T, bucket bool) (*handNet, limiter.Key, *handLoad) {
	t.Helper()
	h := newHandNet(t, "n0", "n1", "n2")
	h.bucket.on = bucket
	k := h.keyOwnedBy("n0", "n1")
	h.unacked[[2]string{"n0", "n1"}] = true
	load := newHandLoad(h, k, 30)
	load.spend("n0")
	load.spend("n0")
	tk := load.spend("n0")
	load.resume()
	h.advance(20 * time.Millisecond)

	// n0 gives a unit back; the replica that says so is lost.
	h.oneway = map[[2]string]bool{{"n0", "n1"}: true}
	h.cores["n0"].refund(h.now, slices.Clone(tk.reqs))
	load.admitted--
	h.advance(20 * time.Millisecond)
	if got := h.count("n0", k); got != 2 {
		t.Fatalf("n0 counts %d after a unit given back; want 2", got)
	}
	h.oneway = nil

	h.standsStillAndIsDeclaredDead("n0")
	if got := h.count("n1", k); got != 3 {
		t.Fatalf("n1 did not take the key over from its replica of 3: count %d", got)
	}
	h.setMembership("n0", []string{"n1", "n2"})
	h.learnsItWasDeclaredDead("n0")
	if n0 := h.cores["n0"]; n0.Member() || n0.view.Load().ring.Len() != 0 || h.count("n0", k) != 2 {
		t.Fatalf("n0: member %v, ring %d, counts %d; want no member, no ring, its counter of 2 kept", n0.Member(), n0.view.Load().ring.Len(), h.count("n0", k))
	}
	h.unacked[[2]string{"n0", "n1"}] = false
	return h, k, load
}

// n0 is declared dead twice. The first time, knowing no member and no
// node that holds a replica of its counter, it keeps its counter (3), as
// in TestAnEvictedCounterKeptByANodeThatKnowsNoMemberIsWeighedAsItsCounter,
// and joins again; it admits 2 more, which n1 replicates, and is declared
// dead again: its counter (5, holding the record of the one it kept) goes
// to n1 this time, which took the key over from its replica of it. Each
// time the cluster counts what was admitted, and after the second join
// the key spends to its limit, and no further.
func TestANodeDeclaredDeadTwiceThatKeptItsCounterTheFirstTimeCountsItOnce(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2")
		h.bucket.on = bucket
		k := h.keyOwnedBy("n0", "n1")
		load := newHandLoad(h, k, 30)
		declaredDead := func(spend int, unacked bool, want int64) {
			t.Helper()
			h.unacked[[2]string{"n0", "n1"}] = unacked
			for range spend {
				load.spend("n0")
			}
			load.resume()
			h.advance(20 * time.Millisecond)
			epoch := h.cores["n0"].gate.joinEpoch()
			h.standsStillAndIsDeclaredDead("n0")
			if got := h.count("n1", k); got != want {
				t.Fatalf("n1 took the key over with %d; want its replica, %d", got, want)
			}
			h.setMembership("n0", []string{"n1", "n2"})
			h.down["n0"] = false
			for range 300 {
				h.advance(10 * time.Millisecond)
				if h.cores["n0"].gate.joinEpoch() > epoch {
					break
				}
			}
			kept := int64(0)
			if unacked {
				kept = want // it knows no node to send it to
			}
			if n0 := h.cores["n0"]; n0.Member() || h.count("n0", k) != kept {
				t.Fatalf("n0: member %v, counts %d; want no member, counting %d", n0.Member(), h.count("n0", k), kept)
			}
			h.unacked[[2]string{"n0", "n1"}] = false
			h.joinsAgain("n0", 2*time.Second)
			h.heldBy(k, load.admitted, h.names...)
		}
		declaredDead(3, true, 3)
		declaredDead(2, false, 5)
		load.spendsToTheLimit(t, "n0", "n1", "n2")
	})
}

// n0, the key's owner, is cut off with the others' acknowledgements of
// its replicas lost; each side takes the other for dead. n0, alone, has
// no majority and admits 2 more in fallback, beside its counter (3); n1
// takes the key over from its replica (3) and admits 2. Told it was
// declared dead, n0, knowing no member, keeps its counter; once it hears
// of the others, its fallback counts and its counter, with the record of
// the one it kept, go to n1, which weighs the counter against its
// replica, and the key's counter comes back as n0 joins again. The
// cluster counts the 7 admitted, and
// the key spends to its limit and no further, on windows and on token
// buckets.
func TestAnEvictedCounterKeptBesideFallbackCountsOfItsKeyIsCountedOnce(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2")
		h.bucket.on = bucket
		k := h.keyOwnedBy("n0", "n1")
		h.unacked[[2]string{"n0", "n1"}] = true
		load := newHandLoad(h, k, 30)
		for range 3 {
			load.spend("n0")
		}
		load.resume()
		h.advance(20 * time.Millisecond)
		h.cut["n0"] = true
		h.setMembership("n1", []string{"n0"})
		h.setMembership("n2", []string{"n0"})
		h.setMembership("n0", []string{"n1", "n2"})
		h.advance(2 * time.Second)
		for range 2 {
			load.spend("n0")
			load.spend("n1")
		}
		load.resume()
		if load.admitted != 7 || load.by[SourceFallback] != 2 {
			t.Fatalf("admitted %d by %v; want 7, 2 of them by fallback", load.admitted, load.by)
		}
		h.advance(100 * time.Millisecond)
		h.cut["n0"] = false
		h.learnsItWasDeclaredDead("n0")
		if n0 := h.cores["n0"]; n0.Member() || n0.view.Load().ring.Len() != 0 {
			t.Fatalf("n0: member %v, ring %d; want no member, no ring", n0.Member(), n0.view.Load().ring.Len())
		}
		h.unacked[[2]string{"n0", "n1"}] = false
		// n0 hears of the others before they hear of it again.
		h.setMembership("n0", nil)
		h.advance(500 * time.Millisecond)
		h.joinsAgain("n0", 2*time.Second)
		h.heldBy(k, load.admitted, h.names...)
		load.spendsToTheLimit(t, "n0", "n1", "n2")
	})
}

// As in TestAnEvictedCounterKeptByANodeThatKnowsNoMemberIsItsLastWord, in
// a cluster of four, but n1 leaves before n0 hears of anyone: the key's
// counter, started from n0's replica of 3, moves on to the key's owner
// without n0 and n1 (n3). n0, hearing of n2 and n3, sends its counter
// on as its last word (2, with the record of the one it kept), and the
// unit given back comes off at n3; the counter comes back to n0 as it
// joins again. Weighed as a copy, the counter kept let the replica of 3
// stand (3 held of 2 admitted).
func TestAnEvictedCounterKeptByANodeThatKnowsNoMemberIsItsLastWordWhereTheKeyMovedOn(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3")
		h.bucket.on = bucket
		k := h.keyOwnedBy("n0", "n1")
		h.unacked[[2]string{"n0", "n1"}] = true
		load := newHandLoad(h, k, 30)
		load.spend("n0")
		load.spend("n0")
		tk := load.spend("n0")
		load.resume()
		h.advance(20 * time.Millisecond)
		h.oneway = map[[2]string]bool{{"n0", "n1"}: true}
		h.cores["n0"].refund(h.now, slices.Clone(tk.reqs))
		load.admitted--
		h.advance(20 * time.Millisecond)
		h.oneway = nil
		h.standsStillAndIsDeclaredDead("n0")
		if got := h.count("n1", k); got != 3 {
			t.Fatalf("n1 did not take the key over from its replica of 3: count %d", got)
		}
		h.setMembership("n0", []string{"n1", "n2", "n3"})
		h.learnsItWasDeclaredDead("n0")
		if n0 := h.cores["n0"]; n0.Member() || n0.view.Load().ring.Len() != 0 || h.count("n0", k) != 2 {
			t.Fatalf("n0: member %v, ring %d, counts %d; want no member, no ring, its counter of 2 kept", n0.Member(), n0.view.Load().ring.Len(), h.count("n0", k))
		}
		h.unacked[[2]string{"n0", "n1"}] = false

		// n1 leaves; the key's counter moves on to n3.
		dead := []Peer{h.member("n0").Peer()}
		h.cores["n1"].Leave(h.now)
		h.pump()
		for _, x := range []string{"n2", "n3"} {
			h.cores[x].SetMembership(h.now, Membership{Members: h.othersThan(x, "n0", "n1"), Leaving: []Member{h.member("n1")}, Dead: dead})
			h.pump()
		}
		h.advance(200*time.Millisecond, "n1", "n2", "n3")
		h.down["n1"] = true
		for _, x := range []string{"n2", "n3"} {
			h.list(x, h.othersThan(x, "n0", "n1"), dead)
		}
		h.advance(time.Second, "n2", "n3")
		if got := h.count("n3", k); got != 3 {
			t.Fatalf("n3 counts %d of the key; want n1's counter, 3", got)
		}

		// n0 hears of n2 and n3, then joins again.
		h.list("n0", h.othersThan("n0", "n1"), nil)
		h.advance(500 * time.Millisecond)
		for _, x := range []string{"n0", "n2", "n3"} {
			h.list(x, h.othersThan(x, "n1"), nil)
		}
		h.advance(2 * time.Second)
		if !h.cores["n0"].Member() {
			t.Fatal("n0 did not join again")
		}
		h.heldBy(k, load.admitted, h.names...)
		o, _ := h.cores["n2"].Ring().Owner(k.Route())
		var through []string
		for _, x := range []string{"n0", "n2", "n3"} {
			if x != o.Name {
				through = append(through, x)
			}
		}
		load.spendsToTheLimit(t, o.Name, through...)
	})
}
