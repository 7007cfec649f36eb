package core

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// More ways the key's counter, with the record of units given back again
// in n0's place, goes before n0's counters come to it: each played on
// fixed windows and on token buckets, and each then spends the key up to
// its limit with no request under it refused and none past it admitted.

// forWindowsAndBuckets runs play on a fixed window, then on a token
// bucket.
func forWindowsAndBuckets(t *testing.T, play func(t *testing.T, bucket bool)) {
	for _, bucket := range []bool{false, true} {
		t.Run(map[bool]string{false: "window", true: "bucket"}[bucket], func(t *testing.T) { play(t, bucket) })
	}
}

// givesBackAgainInN0sPlace is n1GivesBackAgainInN0sPlace with choices:
// applied, n0 applies the give-back (else it is lost on its way, and n0
// never gives the unit back); chain, the give-back again replaces one to
// a run since gone that itself replaced the one to n0 (Earlier).
func (h *handNet) givesBackAgainInN0sPlace(applied, chain bool) (limiter.Key, *handLoad) {
	h.t.Helper()
	return h.givesBackAgainInN0sPlaceOn(h.keyOwnedBy("n0", "n1"), applied, chain)
}

// givesBackAgainInN0sPlaceOn is givesBackAgainInN0sPlace on k, a key of
// n0's with successor n1.
func (h *handNet) givesBackAgainInN0sPlaceOn(k limiter.Key, applied, chain bool) (limiter.Key, *handLoad) {
	h.t.Helper()
	load := newHandLoad(h, k, 30)
	for range 4 {
		load.spend("n0")
	}
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	tk := load.spend("n2")
	if !tk.done || !tk.d.Allowed || tk.d.Source != SourcePeer {
		h.t.Fatalf("n2's request: %+v; want admitted by its owner", tk.d)
	}
	h.advance(100 * time.Millisecond)
	h.drops = func(from string, o Outgoing) bool {
		t, ok := o.Msg.(Transfer)
		return ok && from == "n0" && o.To.Name == "n1" && t.Mode == ModeReplica
	}
	const refund = 77
	at := h.now.UnixNano()
	if applied {
		n0.handleTransfer(h.now, n2.self, Transfer{Seq: refund, To: n0.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at}, true)
		h.pump()
	}
	load.admitted--
	h.advance(100 * time.Millisecond)
	h.down["n0"] = true
	h.advance(100 * time.Millisecond)
	others := slices.DeleteFunc(slices.Clone(h.names), func(x string) bool { return x == "n0" })
	for _, x := range others {
		h.setMembership(x, []string{"n0"})
	}
	h.advance(2*time.Second, others...)
	if got := h.count("n1", k); got != 5 {
		h.t.Fatalf("n1 counts %d after taking the key over; want 5 (the stale replica)", got)
	}
	again := Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at, Was: refund, WasTo: n0.self}
	if chain {
		again.Was, again.WasTo = 500, Peer{Name: "n9", Inc: 7}
		again.Earlier = []Replaced{{From: n2.self, Seq: refund, To: n0.self}}
	}
	n1.handleTransfer(h.now, n2.self, again, true)
	h.pump()
	if got := h.count("n1", k); got != int64(load.admitted) {
		h.t.Fatalf("n1 counts %d after the give-back again; %d were admitted", got, load.admitted)
	}
	h.advance(200*time.Millisecond, others...)
	return k, load
}

// leavesWhileN0IsDead has leaver leave gracefully, n0 taken for dead and
// the nodes gone out already; leaver is then out too.
func (h *handNet) leavesWhileN0IsDead(leaver string, gone ...string) {
	h.t.Helper()
	out := append([]string{"n0", leaver}, gone...)
	var alive []string
	for _, x := range h.names {
		if !slices.Contains(out, x) {
			alive = append(alive, x)
		}
	}
	dead := []Peer{{Name: "n0", Inc: h.incs["n0"]}}
	for _, g := range gone {
		dead = append(dead, Peer{Name: g, Inc: h.incs[g]})
	}
	membersBut := func(x string) []Member {
		var ms []Member
		for _, y := range alive {
			if y != x {
				ms = append(ms, h.member(y))
			}
		}
		return ms
	}
	h.cores[leaver].Leave(h.now)
	for _, x := range alive {
		h.cores[x].SetMembership(h.now, Membership{Members: membersBut(x), Dead: dead, Leaving: []Member{h.member(leaver)}})
	}
	h.pump()
	for range 100 {
		h.advance(50*time.Millisecond, append([]string{leaver}, alive...)...)
		if h.cores[leaver].Drained() {
			break
		}
	}
	if !h.cores[leaver].Drained() {
		h.t.Fatalf("%s did not hand everything over", leaver)
	}
	h.down[leaver] = true
	dead = append(dead, Peer{Name: leaver, Inc: h.incs[leaver]})
	for _, x := range alive {
		h.cores[x].SetMembership(h.now, Membership{Members: membersBut(x), Dead: dead})
	}
	h.pump()
	h.advance(time.Second, alive...)
}

// n0ComesBackWithout plays n0 coming back, as
// n0ComesBackAndCountsWhatWasAdmitted does, with the nodes gone out of
// every list.
func (h *handNet) n0ComesBackWithout(k limiter.Key, load *handLoad, gone ...string) {
	h.t.Helper()
	h.drops = nil
	h.learnsItWasDeclaredDead("n0")
	h.advance(2 * time.Second)
	var alive []string
	for _, name := range h.names {
		if !slices.Contains(gone, name) {
			alive = append(alive, name)
		}
	}
	for _, name := range alive {
		h.list(name, h.othersThan(name, gone...), nil)
	}
	h.advance(3 * time.Second)
	h.countsAndLimits(k, load, alive)
}

// countsAndLimits checks that alive hold, counted and in fallback, what
// was admitted of k, then spends k through them up to its limit, no
// request refused, and one past it, refused.
func (h *handNet) countsAndLimits(k limiter.Key, load *handLoad, alive []string) {
	h.t.Helper()
	var total int64
	for _, name := range alive {
		total += h.count(name, k) + windowCount(h.cores[name].fallback.engine.StatesOf(h.now, []limiter.Key{k}))
	}
	if total != int64(load.admitted) {
		h.t.Fatalf("the cluster counts %d (%v); %d were admitted", total, h.counts(k), load.admitted)
	}
	for i := 0; int64(load.admitted) < load.quota; i++ {
		at := alive[i%len(alive)]
		if tk := load.spend(at); !tk.done || !tk.d.Allowed {
			h.t.Fatalf("request at %s refused with %d of %d admitted: %+v", at, load.admitted, load.quota, tk.d)
		}
	}
	if tk := load.spend(alive[0]); tk.done && tk.d.Allowed {
		h.t.Fatalf("request past the limit admitted: %d of %d", load.admitted, load.quota)
	}
}

// n0 never applied the give-back (lost on its way): its counters, come
// back, hold the unit, and it is put back nowhere, wherever the key's
// counter went; nor for a chain.
func TestUnitsGivenBackAgainTheOwnerNeverAppliedArePutBackNowhere(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		for _, chain := range []bool{false, true} {
			h := newHandNet(t, "n0", "n1", "n2", "n3")
			h.bucket.on = bucket
			k, load := h.givesBackAgainInN0sPlace(false, chain)
			h.leavesWhileN0IsDead("n1")
			h.n0ComesBackWithout(k, load, "n1")
		}
	})
}

// A give-back again naming a chain (the one to n0 first), n0 having
// applied it: put back once where the key's counter went.
func TestUnitsGivenBackAgainNamingAChainArePutBackWhereTheKeysCounterWent(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3")
		h.bucket.on = bucket
		k, load := h.givesBackAgainInN0sPlace(true, true)
		h.leavesWhileN0IsDead("n1")
		h.n0ComesBackWithout(k, load, "n1")
	})
}

// The key's counter moves twice before n0 comes back: n1 leaves, then
// the node it went to leaves too.
func TestUnitsGivenBackAgainArePutBackOnceWhereTheKeysCounterWentTwice(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		for _, applied := range []bool{true, false} {
			h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
			h.bucket.on = bucket
			k, load := h.givesBackAgainInN0sPlace(applied, false)
			h.leavesWhileN0IsDead("n1")
			o, _ := h.cores["n3"].Ring().Owner(k.Route())
			next := o.Name
			if h.count(next, k) != int64(load.admitted) {
				t.Fatalf("applied %v: %s, the key's owner, counts %d (%v); %d were admitted", applied, next, h.count(next, k), h.counts(k), load.admitted)
			}
			h.leavesWhileN0IsDead(next, "n1")
			h.n0ComesBackWithout(k, load, "n1", next)
		}
	})
}

// n1 crashes, and n0 comes back before the others have taken n1's
// counter over from its replica (which carries the record).
func TestUnitsGivenBackAgainArePutBackWhenTheOwnerComesBackBeforeTheTakeover(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		for _, applied := range []bool{true, false} {
			h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
			h.bucket.on = bucket
			k, load := h.givesBackAgainInN0sPlace(applied, false)
			h.down["n1"] = true
			h.advance(100 * time.Millisecond)
			h.drops = nil
			h.learnsItWasDeclaredDead("n0")
			h.advance(500 * time.Millisecond)
			alive := []string{"n0", "n2", "n3", "n4"}
			for _, x := range alive {
				h.setMembership(x, []string{"n1"})
			}
			h.advance(3*time.Second, alive...)
			load.resume()
			h.advance(2*time.Second, alive...)
			h.countsAndLimits(k, load, alive)
		}
	})
}

// n0 restarts (a new run) instead of coming back as the run the record
// names: from nothing, or from a snapshot written after it applied the
// give-back (if it did); with the key's counter where it was, or moved
// on (n1 left).
func TestUnitsGivenBackAgainAreCountedOnceWhenTheOwnerRestarts(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		for _, leave := range []bool{false, true} {
			for _, snap := range []bool{false, true} {
				for _, applied := range []bool{true, false} {
					t.Run(fmt.Sprintf("leave=%v,snapshot=%v,applied=%v", leave, snap, applied), func(t *testing.T) {
						h := newHandNet(t, "n0", "n1", "n2", "n3")
						h.bucket.on = bucket
						k, load := h.givesBackAgainInN0sPlace(applied, false)
						old := h.cores["n0"]
						snapshot := old.Keep(h.now, old.engine.StatesOf(h.now, []limiter.Key{k}))
						alive, gone := []string{"n0", "n1", "n2", "n3"}, []string(nil)
						if leave {
							h.leavesWhileN0IsDead("n1")
							alive, gone = []string{"n0", "n2", "n3"}, []string{"n1"}
						}
						h.drops = nil
						n0 := h.start("n0", true)
						if snap {
							n0.RestoreCounters(h.now, snapshot)
						}
						n0.Joined(h.now)
						for _, x := range alive {
							h.list(x, h.othersThan(x, gone...), nil)
						}
						h.advance(3 * time.Second)
						h.countsAndLimits(k, load, alive)
					})
				}
			}
		}
	})
}

// n1 leaves; its hand-off of the key's counter (with the record) to n3 is
// held up until n0, back, has sent its counters on their way to n3
// (through n1): they wait there for the key, and meet the record as it
// comes.
func TestUnitsGivenBackAgainArePutBackWhenTheOwnersCountersComeBeforeTheKeysCounter(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3")
		h.bucket.on = bucket
		k, load := h.givesBackAgainInN0sPlace(true, false)
		n0, n1 := h.cores["n0"], h.cores["n1"]
		h.drops = func(from string, o Outgoing) bool {
			t, ok := o.Msg.(Transfer)
			return ok && from == "n1" && o.To.Name == "n3" && t.Mode == ModeAdd && t.Own
		}
		n1.Leave(h.now)
		leaving := []Member{h.member("n1")}
		h.cores["n2"].SetMembership(h.now, Membership{Members: []Member{h.member("n3")}, Dead: []Peer{n0.self}, Leaving: leaving})
		h.cores["n3"].SetMembership(h.now, Membership{Members: []Member{h.member("n2")}, Dead: []Peer{n0.self}, Leaving: leaving})
		h.pump()
		h.advance(200*time.Millisecond, "n1", "n2", "n3")
		h.learnsItWasDeclaredDead("n0")
		h.advance(time.Second)
		h.drops = nil
		for range 100 {
			h.advance(50*time.Millisecond, "n0", "n1", "n2", "n3")
			if n1.Drained() {
				break
			}
		}
		if !n1.Drained() {
			t.Fatal("n1 did not hand everything over")
		}
		h.down["n1"] = true
		for _, name := range []string{"n0", "n2", "n3"} {
			h.list(name, h.othersThan(name, "n1"), nil)
		}
		h.advance(3 * time.Second)
		h.countsAndLimits(k, load, []string{"n0", "n2", "n3"})
	})
}

// The node that keeps n1's replica of the key's counter (with the record)
// leaves and passes it on; n1 then crashes, and the key is taken over
// from the replica passed on.
func TestUnitsGivenBackAgainInAReplicaPassedOnArePutBackWhereItIsTakenOver(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3", "n4", "n5")
		h.bucket.on = bucket
		k, load := h.givesBackAgainInN0sPlace(true, false)
		rest := h.names[2:]
		var ms []Member
		for _, x := range rest {
			ms = append(ms, h.member(x))
		}
		o, _ := NewRing(h.hash, ms).Owner(k.Route())
		holder := o.Name
		h.leavesWhileN0IsDead(holder)
		h.down["n1"] = true
		h.advance(100 * time.Millisecond)
		var alive []string
		for _, x := range rest {
			if x != holder {
				alive = append(alive, x)
			}
		}
		for _, x := range alive {
			h.list(x, h.othersThan(x, "n0", "n1", holder), []Peer{{Name: "n0", Inc: h.incs["n0"]}, {Name: "n1", Inc: h.incs["n1"]}})
		}
		h.advance(2*time.Second, alive...)
		load.spend(alive[0])
		h.advance(time.Second, alive...)
		load.resume()
		h.n0ComesBackWithout(k, load, "n1", holder)
	})
}
