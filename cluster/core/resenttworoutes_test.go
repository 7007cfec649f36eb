package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// resentByTwoRoutes starts four nodes with 5 spent of a key n1 owns (n3
// its successor) and returns the count one that n0 sends again, in place
// of a transfer to n3 that n3 never applied (seq 77), to n1 in a
// transfer of its own (seq 1000), and the record a counter of n2's
// holds of the same count, sent again once more in place of that
// transfer to n1 when n0 gave it up too: it names both.
func resentByTwoRoutes(t *testing.T) (*handNet, limiter.Key, *handLoad, limiter.State, Transfer, Resent) {
	t.Helper()
	h, k, load := n1CountsFiveOfFour(t)
	n0, n1, n3 := h.cores["n0"], h.cores["n1"], h.cores["n3"]
	one := n1.engine.StatesOf(h.now, []limiter.Key{k})[0]
	one.Cur = 1
	load.admitted++
	bare := Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeAdd, States: []limiter.State{one}, Was: 77, WasTo: n3.self}
	rec := Resent{Marks: []Replaced{{From: n0.self, Seq: 77, To: n3.self}, {From: n0.self, Seq: 1000, To: n1.self}}, State: one}
	return h, k, load, one, bare, rec
}

// The same count sent again by two routes: n1 adds it when it comes on
// its own, in place of a transfer to another node (its acknowledgement
// lost), and n0, giving that up too, sends it again in place of both to
// n2, whose counter holds it and comes to n1: n1 holds the count
// already, and the counter comes in less it.
func TestACountSentAgainThatCameOnItsOwnIsNotAddedAgainWithACounterHoldingIt(t *testing.T) {
	h, k, load, one, bare, rec := resentByTwoRoutes(t)
	n0, n1 := h.cores["n0"], h.cores["n1"]
	n1.Handle(h.now, n0.Self(), bare) // applied, the acknowledgement lost
	h.pump()
	if got := h.count("n1", k); got != 6 {
		t.Fatalf("n1 counts %d once the count came on its own; want 6", got)
	}
	h.n2HandsOverItsCounterHolding(k, one, rec)
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "")
	load.spendsToTheLimit(t, "n1", "n0", "n2")
}

// As TestACountSentAgainThatCameOnItsOwnIsNotAddedAgainWithACounterHoldingIt,
// but the counter comes first: n1 adds the count with it, and the count
// that comes on its own, late, is not added again.
func TestACountSentAgainThatComesOnItsOwnAfterACounterHoldingItIsNotAddedAgain(t *testing.T) {
	h, k, load, one, bare, rec := resentByTwoRoutes(t)
	n0, n1 := h.cores["n0"], h.cores["n1"]
	h.n2HandsOverItsCounterHolding(k, one, rec)
	if got := h.count("n1", k); got != 6 {
		t.Fatalf("n1 counts %d once the counter came; want 6", got)
	}
	n1.Handle(h.now, n0.Self(), bare)
	h.pump()
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "")
	load.spendsToTheLimit(t, "n1", "n0", "n2")
}

// As TestACountSentAgainThatCameOnItsOwnIsNotAddedAgainWithACounterHoldingIt,
// but the count comes on its own while n1 has no majority: kept in
// fallback, it joins n1's counter once the majority answers again, and
// the counter holding it, come later, comes in less it.
func TestACountSentAgainKeptInFallbackIsNotAddedAgainWithACounterHoldingIt(t *testing.T) {
	h, k, load, one, bare, rec := resentByTwoRoutes(t)
	n0, n1 := h.cores["n0"], h.cores["n1"]
	h.cut["n0"], h.cut["n1"] = true, true
	h.advance(time.Second)
	if n1.majority(n1.view.Load()) {
		t.Fatal("n1 has a majority while cut off")
	}
	if a, _ := n1.Handle(h.now, n0.Self(), bare).(Ack); a.Refused {
		t.Fatal("n1 refused the count sent again")
	}
	if got := windowCount(n1.fallback.engine.StatesOf(h.now, []limiter.Key{k})); got != 1 {
		t.Fatalf("n1 keeps %d in fallback; want 1", got)
	}
	h.cut["n0"], h.cut["n1"] = false, false
	h.advance(3 * time.Second)
	if !n1.majority(n1.view.Load()) || h.count("n1", k) != 6 {
		t.Fatalf("n1: majority %v, counts %d; want 6", n1.majority(n1.view.Load()), h.count("n1", k))
	}
	h.n2HandsOverItsCounterHolding(k, one, rec)
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "")
	load.spendsToTheLimit(t, "n1", "n0", "n2")
}
