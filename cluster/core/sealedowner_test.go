package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A member dies; its successor takes its keys over and waits for the dead
// member's lease. A survivor seals to it, and then sees another member
// come back under a new run: its ring changes, but the key stays with the
// node it sealed to, which has not heard of the new run yet and still
// waits. A request for the key through the survivor, answered NotYetMine,
// must wait and ask again rather than be decided by fallback at once: what
// the survivor admitted in fallback after its seal would reach the new
// owner only after it started counting the key.
func TestASealHoldsWhileTheKeyStaysWithTheNodeSealedTo(t *testing.T) {
	h := newHandNet(t, "n1", "n2", "n3", "n4")
	const quota = 10
	k := h.keyOwnedBy("n1", "n2")
	load := newHandLoad(h, k, quota)
	for range 3 {
		load.spend("n1")
	}
	h.advance(20 * time.Millisecond) // replicated to n2

	h.down["n1"] = true
	h.othersTakeN1OverAndN3SealsToN2(t)
	fp := h.cores["n2"].Ring().Fingerprint()

	// n4 comes back under a new run; n3 hears of it, n2 not yet.
	h.start("n4", true).Joined(h.now)
	h.setMembership("n4", []string{"n1"})
	h.setMembership("n3", []string{"n1"})
	if o, _ := h.cores["n3"].Ring().Owner(k.Route()); o.Name != "n2" {
		t.Fatalf("n3's ring gives the key to %s; want n2", o.Name)
	}
	if h.cores["n3"].Ring().Fingerprint() == fp {
		t.Fatal("n3's ring did not change")
	}

	tk := load.spend("n3")
	if tk.done {
		t.Fatalf("a request through n3 after its seal, while n2 waits: decided at once by %v; want it to wait and ask n2 again", tk.d.Source)
	}
	h.setMembership("n2", []string{"n1"}) // n2 hears of n4's new run
	for i := 0; h.cores["n2"].HandoffUnderway(); i++ {
		if i == 200 {
			t.Fatal("n2 did not take n1's keys over")
		}
		h.advance(10 * time.Millisecond)
	}
	load.resume()
	if tk.d.Source != SourcePeer {
		t.Errorf("the request through n3 was decided by %v; want n2, which counts the key now", tk.d.Source)
	}
	h.advance(time.Second)
	if got := h.count("n2", k); got != int64(load.admitted) {
		t.Errorf("n2 holds %d; %d were admitted", got, load.admitted)
	}
}

// A seal holds across ring changes only while each ring the sealer's view
// went through since gave the key to the node sealed to: a ring between
// without that node (it was taken for dead, then came back) may have sent
// the sealer's counts for the key elsewhere, and the node has counted the
// key by hand-offs of its own since.
func TestASealLapsesOnceARingBetweenGaveTheKeyElsewhere(t *testing.T) {
	h := newHandNet(t, "n1", "n2", "n3", "n4")
	k := h.keyOwnedBy("n2", "n3")
	all := NewRing(h.hash, []Member{h.member("n1"), h.member("n2"), h.member("n3"), h.member("n4")})
	without := NewRing(h.hash, []Member{h.member("n1"), h.member("n3"), h.member("n4")})
	back := NewRing(h.hash, []Member{h.member("n1"), h.member("n2"), h.member("n3")})
	if o, _ := back.Owner(k.Route()); o.Name != "n2" {
		t.Fatalf("the ring without n4 gives the key to %s; want n2", o.Name)
	}
	owner := h.member("n2")

	var s sealsGiven
	s.note("n2", all)
	s.passed(back)
	if !s.gaveFor(owner, k) {
		t.Fatal("a seal to n2 does not hold across a ring change that left the key with n2")
	}

	s.note("n2", all)
	s.passed(without)
	s.passed(back)
	if s.gaveFor(owner, k) {
		t.Error("a seal to n2 holds across a ring without n2 between")
	}
	s.note("n2", back)
	if !s.gaveFor(owner, k) {
		t.Error("a new seal to n2 does not hold")
	}
}

// A seal decided by a view that changed before the seal was noted (the
// ring change passed between the view's load and the note) does not know
// the rings between: it must hold only under the ring it was given by,
// not for a key every ring it knows of leaves with the owner.
func TestASealNotedAfterItsViewChangedHoldsOnlyUnderItsRing(t *testing.T) {
	h := newHandNet(t, "n1", "n2", "n3")
	all := []Member{h.member("n1"), h.member("n2"), h.member("n3")}
	sealedUnder := NewRing(h.hash, all)
	k := h.keyOwnedBy("n2", "n3")
	owner, _ := sealedUnder.Owner(k.Route())

	var fresh sealsGiven
	fresh.passed(sealedUnder)
	fresh.note("n2", sealedUnder)
	fresh.passed(sealedUnder)
	if !fresh.gaveFor(owner, k) {
		t.Fatal("a seal noted under the current ring does not hold across a change that keeps the key with its owner")
	}

	var stale sealsGiven
	stale.passed(NewRing(h.hash, []Member{h.member("n2"), h.member("n3")}))
	stale.note("n2", sealedUnder)
	stale.passed(sealedUnder)
	if stale.gaveFor(owner, k) {
		t.Error("a seal noted after its view changed holds across rings it never saw")
	}
	if !stale.gave("n2", sealedUnder.Fingerprint()) {
		t.Error("a seal noted after its view changed does not hold under the very ring it was given by")
	}
}

// A ring that no longer lists a node ends the seals given to it: they are
// forgotten, not kept for as long as the node runs under new names.
func TestASealToANodeTheRingNoLongerListsIsForgotten(t *testing.T) {
	h := newHandNet(t, "n1", "n2", "n3")
	all := NewRing(h.hash, []Member{h.member("n1"), h.member("n2"), h.member("n3")})
	var s sealsGiven
	s.passed(all)
	s.note("n2", all)
	s.passed(NewRing(h.hash, []Member{h.member("n1"), h.member("n3")}))
	if len(s.rings) != 0 {
		t.Errorf("%d seals kept for nodes the ring no longer lists", len(s.rings))
	}
	s.passed(all)
	if s.gave("n2", all.Fingerprint()) {
		t.Error("a seal to a node a ring between left out holds again once the node is back")
	}
}

// A member dies; its successor takes its keys over and waits for the dead
// member's lease, and a survivor seals to it. A request for one of the
// keys through the survivor calls the successor; before the answer comes,
// the dead member comes back under a new run and the survivor's ring gives
// the key to that run, which cannot count it yet. The successor, which has
// not heard of the new run, answers NotYetMine by its older view: it may
// still start counting the key by the ring the survivor sealed to it by,
// and what the survivor admitted in fallback now would reach it only
// after. The survivor must ask again a call timeout later, as it does
// while its ring leaves the key with the node it sealed to, and once
// those waits are spent, count the fallback decision as one made after a
// seal.
func TestASealHoldsForTheNodeSealedToWhileItMayStillCountByItsRing(t *testing.T) {
	h := newHandNet(t, "n1", "n2", "n3", "n4")
	const quota = 10
	k := h.keyOwnedBy("n1", "n2")
	load := newHandLoad(h, k, quota)
	for range 3 {
		load.spend("n1")
	}
	h.advance(20 * time.Millisecond) // replicated to n2

	h.down["n1"] = true
	h.othersTakeN1OverAndN3SealsToN2(t)
	c3 := h.cores["n3"]

	tk := &handTake{node: "n3", res: make([]limiter.Result, 1)}
	tk.reqs = []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: quota, Window: time.Hour}}}
	if _, done := c3.Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res); done {
		t.Fatal("n3 decided the key at once")
	}
	if a := c3.Step(h.now, &tk.op); a.Kind != ActCall || a.To.Name != "n2" {
		t.Fatalf("n3's first step: %+v; want a call to n2", a)
	}

	// n1 comes back under a new run; n3 hears of it, n2 not yet.
	h.start("n1", true).Joined(h.now)
	h.setMembership("n1", nil)
	h.setMembership("n3", nil)
	if o, _ := c3.Ring().Owner(k.Route()); o.Name != "n1" || o.Inc != h.incs["n1"] {
		t.Fatalf("n3's ring gives the key to %s/%d; want n1's new run", o.Name, o.Inc)
	}
	if !h.cores["n2"].HandoffUnderway() {
		t.Fatal("n2 no longer waits")
	}

	c3.Replied(h.now, &tk.op, ItemReply{Outcome: NotYetMine}) // n2, by the ring n3 sealed to it by
	a := c3.Step(h.now, &tk.op)
	if a.Kind != ActWait {
		t.Fatalf("n3's step after n2's NotYetMine: %+v (decided by %v); want a wait: n2 may still count the key by the ring n3 sealed to it by", a, tk.op.Decision().Source)
	}

	sealed := c3.stats.SealedFallbacks.Load()
	for i := 0; !tk.op.done; i++ {
		if i == 10 {
			t.Fatal("the request is not decided")
		}
		h.now = maxTime(h.now, a.Until)
		a = c3.Step(h.now, &tk.op)
		if a.Kind == ActCall {
			c3.Replied(h.now, &tk.op, ItemReply{Outcome: NotYetMine})
			a = c3.Step(h.now, &tk.op)
		}
	}
	if got := tk.op.Decision().Source; got != SourceFallback {
		t.Fatalf("the request was decided by %v; want fallback once the waits are spent", got)
	}
	if c3.stats.SealedFallbacks.Load() == sealed {
		t.Error("n3's fallback decision after a seal to a node that may still count the key is not counted as one")
	}
}

// A request through a survivor calls a member that has just died, which
// the survivor's ring still lists. The others declare it dead; its
// successor takes its keys over and waits for its lease, and the survivor
// seals to it. The dead member then comes back under a new run, which the
// survivor's ring gives the key; the successor has not heard of it yet.
// The call to the dead run, given up on, must go on to the new run, an
// owner the call never reached, and not to fallback at once: the
// successor may still start counting the key by the ring the survivor
// sealed by, and what the survivor admitted in fallback now would reach
// it only after.
func TestACallToADeadRunGivenUpAfterASealGoesToItsNewRun(t *testing.T) {
	h := newHandNet(t, "n1", "n2", "n3", "n4")
	const quota = 10
	k := h.keyOwnedBy("n1", "n2")
	load := newHandLoad(h, k, quota)
	for range 3 {
		load.spend("n1")
	}
	h.advance(20 * time.Millisecond) // replicated to n2

	h.down["n1"] = true
	c3 := h.cores["n3"]
	tk := &handTake{node: "n3", res: make([]limiter.Result, 1)}
	tk.reqs = []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: quota, Window: time.Hour}}}
	if _, done := c3.Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res); done {
		t.Fatal("n3 decided the key at once")
	}
	if a := c3.Step(h.now, &tk.op); a.Kind != ActCall || a.To.Name != "n1" {
		t.Fatalf("n3's first step: %+v; want a call to n1", a)
	}

	h.othersTakeN1OverAndN3SealsToN2(t)

	// n1 comes back under a new run; n3 hears of it, n2 not yet.
	h.start("n1", true).Joined(h.now)
	h.setMembership("n1", nil)
	h.setMembership("n3", nil)
	if o, _ := c3.Ring().Owner(k.Route()); o.Name != "n1" || o.Inc != h.incs["n1"] {
		t.Fatalf("n3's ring gives the key to %s/%d; want n1's new run", o.Name, o.Inc)
	}
	if !h.cores["n2"].HandoffUnderway() {
		t.Fatal("n2 no longer waits")
	}

	c3.CallFailed(h.now, &tk.op, false) // the call to n1's run that died
	h.pump()
	h.drive(tk)
	if tk.done && tk.d.Source == SourceFallback {
		t.Fatal("the call to n1's dead run, given up on after n3 sealed to n2, was decided by fallback at once; want it asked of n1's new run")
	}

	h.setMembership("n2", nil) // n2 and n4 hear of n1's new run
	h.setMembership("n4", nil)
	for i := 0; h.cores["n2"].HandoffUnderway() || h.cores["n1"].HandoffUnderway(); i++ {
		if i == 200 {
			t.Fatal("the hand-offs did not end")
		}
		h.advance(10 * time.Millisecond)
	}
	h.finish(tk)
	load.count(tk)
	if tk.d.Source == SourceFallback {
		t.Errorf("the request through n3 was decided by fallback; want by an owner")
	}
	h.advance(time.Second)
	if got := h.count("n1", k); got != int64(load.admitted) {
		t.Errorf("n1 holds %d; %d were admitted", got, load.admitted)
	}
}

// othersTakeN1OverAndN3SealsToN2 has n2, n3 and n4 declare n1 dead once
// it was down 100 ms: n2, n1's successor, takes its keys over and waits
// for n1's lease, and n3 seals to it. It fails t if either did not.
func (h *handNet) othersTakeN1OverAndN3SealsToN2(t *testing.T) {
	t.Helper()
	h.advance(100 * time.Millisecond)
	for _, name := range []string{"n2", "n3", "n4"} {
		h.setMembership(name, []string{"n1"})
	}
	h.advance(20 * time.Millisecond)
	if !h.cores["n2"].HandoffUnderway() {
		t.Fatal("n2 does not wait for n1's lease before it counts n1's keys")
	}
	if !h.cores["n3"].sealsGiven.gave("n2", h.cores["n2"].Ring().Fingerprint()) {
		t.Fatal("n3 did not seal to n2")
	}
}
