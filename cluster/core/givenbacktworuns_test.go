package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A give-back applied by two runs in turn, each taken for dead before it
// answered: n0 applies it (its replica to n1 lost), n1 takes the key over
// from the stale replica and applies it again in n0's place (its replica
// to n2 lost), and n2, taking the key over from n1's stale replica,
// applies it a third time, in place of both (Earlier: n0's, Was: n1's).
// n0 comes back first, and stops for good: its counters lack the unit
// and meet the record at n2, which puts it back once. n2 then leaves and
// hands the key's counter on, and n1 comes back: its counters lack the
// unit too, and it must be put back once more where the key's counter
// went. The record n2's counter carried named both runs, and went as n0's
// counters took it: n1's note of it stayed at n2, and its unit came off
// the key's counter (3 counted of 4 admitted).
func TestUnitsGivenBackAgainInPlaceOfTwoRunsArePutBackForEachWhereTheKeysCounterWent(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3", "n4", "n5")
		h.bucket.on = bucket
		k, load := h.givesBackAgainInPlaceOfN0ThenN1()
		h.n0ThenN1ComeBackAndTheKeysOwnerLeaves(k, load)
	})
}

// As TestUnitsGivenBackAgainInPlaceOfTwoRunsArePutBackForEachWhereTheKeysCounterWent,
// the other way round: n1 comes back first, and stops for good (its
// counters, lacking the unit, meet the record at n2, which puts it back
// once and goes on naming n0's give-back); n2 then leaves and hands the
// key's counter on, and n0 comes back, lacking the unit too: it is put
// back once more where the key's counter went, and the cluster counts
// what was admitted, and admits up to the limit and not past it.
func TestUnitsGivenBackAgainInPlaceOfTwoRunsArePutBackForEachTheLaterRunFirst(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3", "n4", "n5")
		h.bucket.on = bucket
		k, load := h.givesBackAgainInPlaceOfN0ThenN1()
		h.n1ThenN0ComeBackAndTheKeysOwnerLeaves(k, load)
	})
}

// n1StopsAndN2TakesTheKeyOverFromItsStaleReplica has n1, counting k
// after n0, stop answering, its last replicas lost; n0 and n1 are
// declared dead, and n2 takes the key over from n1's stale replica (5).
func (h *handNet) n1StopsAndN2TakesTheKeyOverFromItsStaleReplica(k limiter.Key) {
	h.t.Helper()
	h.advance(100 * time.Millisecond)
	h.down["n1"] = true
	h.declareDead("n0", "n1")
	h.advance(time.Second, "n2", "n3", "n4", "n5")
	if got := h.count("n2", k); got != 5 {
		h.t.Fatalf("n2 counts %d after taking the key over; want 5 (n1's stale replica)", got)
	}
}

// n0ThenN1ComeBackAndTheKeysOwnerLeaves plays, with n0 and n1 declared
// dead while alive and n2 counting k: n0 comes back (n1 still out), hears
// that n1 is gone, and its counters go to n2 in place of n1's; n0 then
// stops for good. The cluster must count what was admitted. Then the
// key's owner leaves and n1 comes back: the cluster must count what was
// admitted, and admit up to the limit and not past it.
func (h *handNet) n0ThenN1ComeBackAndTheKeysOwnerLeaves(k limiter.Key, load *handLoad) {
	h.t.Helper()
	n1 := h.cores["n1"]
	h.drops = func(f string, o Outgoing) bool { return f == "n1" }
	h.learnsItWasDeclaredDead("n0")
	h.advance(500 * time.Millisecond)
	h.list("n0", h.othersThan("n0", "n1"), []Peer{n1.self})
	h.advance(time.Second, "n0", "n2", "n3", "n4", "n5")
	h.down["n0"] = true
	alive := []string{"n2", "n3", "n4", "n5"}
	h.advance(time.Second, alive...)
	var total int64
	for _, x := range alive {
		total += h.count(x, k)
	}
	if total != int64(load.admitted) {
		h.t.Fatalf("after n0's counters came the cluster counts %d (%v); %d were admitted", total, h.counts(k), load.admitted)
	}

	o, _ := h.cores["n3"].Ring().Owner(k.Route())
	leaver := o.Name
	h.down["n1"] = true
	h.leavesWhileN0IsDead(leaver, "n1")
	h.drops = nil
	h.learnsItWasDeclaredDead("n1")
	h.advance(2 * time.Second)
	var rest []string
	for _, x := range h.names {
		if x != leaver && x != "n0" {
			rest = append(rest, x)
		}
	}
	for _, x := range rest {
		h.list(x, h.othersThan(x, leaver, "n0"), []Peer{{Name: "n0", Inc: h.incs["n0"]}})
	}
	h.advance(3*time.Second, rest...)
	h.countsAndLimits(k, load, rest)
}

// givesBackAgainInPlaceOfN0ThenN1 plays the first steps of
// TestUnitsGivenBackAgainInPlaceOfTwoRunsArePutBackForEachWhereTheKeysCounterWent:
// a give-back applied by n0, again by n1 in its place, and by n2 in place
// of both, n2 counting the key. It returns the key and its load.
func (h *handNet) givesBackAgainInPlaceOfN0ThenN1() (limiter.Key, *handLoad) {
	h.t.Helper()
	k := h.keyWhere(func(owner func(names ...string) Member) bool {
		return owner("n0", "n1", "n2", "n3", "n4", "n5").Name == "n0" && owner("n1", "n2", "n3", "n4", "n5").Name == "n1" && owner("n2", "n3", "n4", "n5").Name == "n2"
	})
	load := newHandLoad(h, k, 30)
	for range 4 {
		load.spend("n0")
	}
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	tk := load.spend("n3")
	if !tk.done || !tk.d.Allowed || tk.d.Source != SourcePeer {
		h.t.Fatalf("n3's request: %+v; want admitted by its owner", tk.d)
	}
	h.advance(100 * time.Millisecond) // replicated to n1
	from := h.cores["n3"].self
	at := h.now.UnixNano()

	// n0 applies the give-back; its replica to n1 is lost.
	h.drops = func(f string, o Outgoing) bool {
		t, ok := o.Msg.(Transfer)
		return ok && f == "n0" && t.Mode == ModeReplica
	}
	n0.handleTransfer(h.now, from, Transfer{Seq: 77, To: n0.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at}, true)
	h.pump()
	load.admitted--
	h.advance(100 * time.Millisecond)
	h.down["n0"] = true
	h.declareDead("n0")
	h.advance(time.Second, "n1", "n2", "n3", "n4", "n5")
	if got := h.count("n1", k); got != 5 {
		h.t.Fatalf("n1 counts %d after taking the key over; want 5 (the stale replica)", got)
	}

	// n1 applies it in n0's place; its replica to n2 is lost.
	h.drops = func(f string, o Outgoing) bool {
		t, ok := o.Msg.(Transfer)
		return ok && (f == "n0" || f == "n1") && t.Mode == ModeReplica
	}
	n1.handleTransfer(h.now, from, Transfer{Seq: 500, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at, Was: 77, WasTo: n0.self}, true)
	h.pump()
	if got := h.count("n1", k); got != 4 {
		h.t.Fatalf("n1 counts %d after the give-back again; want 4", got)
	}
	h.n1StopsAndN2TakesTheKeyOverFromItsStaleReplica(k)

	// n2 applies it in place of both.
	n2.handleTransfer(h.now, from, Transfer{Seq: 1000, To: n2.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at, Was: 500, WasTo: n1.self, Earlier: []Replaced{{From: from, Seq: 77, To: n0.self}}}, true)
	h.pump()
	if got := h.count("n2", k); got != int64(load.admitted) {
		h.t.Fatalf("n2 counts %d after the give-back again; %d were admitted", got, load.admitted)
	}
	h.advance(200*time.Millisecond, "n2", "n3", "n4", "n5")
	return k, load
}

// n1ThenN0ComeBackAndTheKeysOwnerLeaves is n0ThenN1ComeBackAndTheKeysOwnerLeaves
// the other way round: n1 comes back first (n0 still out), and its
// counters go to n2; n1 then stops for good, the key's owner leaves, and
// n0 comes back.
func (h *handNet) n1ThenN0ComeBackAndTheKeysOwnerLeaves(k limiter.Key, load *handLoad) {
	h.t.Helper()
	n0 := h.cores["n0"]
	h.drops = func(f string, o Outgoing) bool { return f == "n0" }
	h.learnsItWasDeclaredDead("n1")
	h.advance(500 * time.Millisecond)
	h.list("n1", h.othersThan("n1", "n0"), []Peer{n0.self})
	h.advance(time.Second, "n1", "n2", "n3", "n4", "n5")
	h.down["n1"] = true
	alive := []string{"n2", "n3", "n4", "n5"}
	h.advance(time.Second, alive...)
	var total int64
	for _, x := range alive {
		total += h.count(x, k)
	}
	if total != int64(load.admitted) {
		h.t.Fatalf("after n1's counters came the cluster counts %d (%v); %d were admitted", total, h.counts(k), load.admitted)
	}

	o, _ := h.cores["n3"].Ring().Owner(k.Route())
	leaver := o.Name
	h.down["n0"] = true
	h.leavesWhileN0IsDead(leaver, "n1")
	h.drops = nil
	h.learnsItWasDeclaredDead("n0")
	h.advance(2 * time.Second)
	var rest []string
	for _, x := range h.names {
		if x != leaver && x != "n1" {
			rest = append(rest, x)
		}
	}
	for _, x := range rest {
		h.list(x, h.othersThan(x, leaver, "n1"), []Peer{{Name: "n1", Inc: h.incs["n1"]}})
	}
	h.advance(3*time.Second, rest...)
	h.countsAndLimits(k, load, rest)
}
