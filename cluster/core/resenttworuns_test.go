package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// As TestUnitsGivenBackAgainInPlaceOfTwoRunsArePutBackForEachWhereTheKeysCounterWent,
// with counts sent again (n3's 2, added) in place of a transfer two runs
// applied: each run's counter holds them, and they must come out of each
// once, wherever the key's counter went.
func TestCountsSentAgainInPlaceOfTwoRunsAreTakenOutForEachWhereTheKeysCounterWent(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4", "n5")
	k := h.keyWhere(func(owner func(names ...string) Member) bool {
		return owner("n0", "n1", "n2", "n3", "n4", "n5").Name == "n0" && owner("n1", "n2", "n3", "n4", "n5").Name == "n1" && owner("n2", "n3", "n4", "n5").Name == "n2"
	})
	load := newHandLoad(h, k, 30)
	for range 4 {
		load.spend("n0")
	}
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	load.spend("n0")
	h.advance(100 * time.Millisecond) // replicated to n1
	from := h.cores["n3"].self

	// n0 applies the give-back; its replica to n1 is lost.
	h.drops = func(f string, o Outgoing) bool {
		t, ok := o.Msg.(Transfer)
		return ok && f == "n0" && t.Mode == ModeReplica
	}
	two := []limiter.State{counterOf(h.now, k, 2)}
	n0.handleTransfer(h.now, from, Transfer{Seq: 77, To: n0.self.Inc, Mode: ModeAdd, States: two}, false)
	h.pump()
	load.admitted += 2
	h.advance(100 * time.Millisecond)
	h.down["n0"] = true
	h.declareDead("n0")
	h.advance(time.Second, "n1", "n2", "n3", "n4", "n5")
	if got := h.count("n1", k); got != 5 {
		t.Fatalf("n1 counts %d after taking the key over; want 5 (the stale replica)", got)
	}

	// n1 applies it in n0's place; its replica to n2 is lost.
	h.drops = func(f string, o Outgoing) bool {
		t, ok := o.Msg.(Transfer)
		return ok && (f == "n0" || f == "n1") && t.Mode == ModeReplica
	}
	n1.handleTransfer(h.now, from, Transfer{Seq: 500, To: n1.self.Inc, Mode: ModeAdd, States: two, Was: 77, WasTo: n0.self}, false)
	h.pump()
	if got := h.count("n1", k); got != 7 {
		t.Fatalf("n1 counts %d after the give-back again; want 7", got)
	}
	h.advance(100 * time.Millisecond)
	h.down["n1"] = true
	h.declareDead("n0", "n1")
	h.advance(time.Second, "n2", "n3", "n4", "n5")
	if got := h.count("n2", k); got != 5 {
		t.Fatalf("n2 counts %d after taking the key over; want 5 (n1's stale replica)", got)
	}

	// n2 applies it in place of both.
	n2.handleTransfer(h.now, from, Transfer{Seq: 1000, To: n2.self.Inc, Mode: ModeAdd, States: two, Was: 500, WasTo: n1.self, Earlier: []Replaced{{From: from, Seq: 77, To: n0.self}}}, false)
	h.pump()
	if got := h.count("n2", k); got != int64(load.admitted) {
		t.Fatalf("n2 counts %d after the give-back again; %d were admitted", got, load.admitted)
	}
	h.advance(200*time.Millisecond, "n2", "n3", "n4", "n5")

	// n0 comes back (n1 still out): its counters come to n2; n0 then
	// stops for good.
	h.drops = func(f string, o Outgoing) bool { return f == "n1" }
	h.learnsItWasDeclaredDead("n0")
	h.advance(500 * time.Millisecond)
	// n0 hears that n1 is gone: its counters go to n2 in place of n1.
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
		t.Fatalf("after n0's counters came the cluster counts %d (%v); %d were admitted", total, h.counts(k), load.admitted)
	}

	// The key's owner leaves; then n1 comes back.
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
