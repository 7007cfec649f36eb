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
	h.n1StopsAndN2TakesTheKeyOverFromItsStaleReplica(k)

	// n2 applies it in place of both.
	n2.handleTransfer(h.now, from, Transfer{Seq: 1000, To: n2.self.Inc, Mode: ModeAdd, States: two, Was: 500, WasTo: n1.self, Earlier: []Replaced{{From: from, Seq: 77, To: n0.self}}}, false)
	h.pump()
	if got := h.count("n2", k); got != int64(load.admitted) {
		t.Fatalf("n2 counts %d after the give-back again; %d were admitted", got, load.admitted)
	}
	h.advance(200*time.Millisecond, "n2", "n3", "n4", "n5")

	h.n0ThenN1ComeBackAndTheKeysOwnerLeaves(k, load)
}
