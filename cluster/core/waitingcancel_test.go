package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A cancel for a run that left waits where it came, the key's owner, for
// the list of the items the run admitted (see
// TestACancelThatComesBeforeTheCounterOfTheRunThatLeftWaitsForIt). That
// owner then leaves in its turn and hands the key over, while the run's
// counter, with the list, reaches the new owner by another way: the cancel
// has to go with the key's counts, or it waits for ever where the key is
// no longer counted, and the request is counted twice, its admission in
// the run's counter and the caller's fallback count (seed
// 1795811078602644265 of the simulator: the cluster held 8 of 7
// admitted, and denied the last unit of the limit).
func TestACancelWaitingForARunsCounterGoesWithTheKey(t *testing.T) {
	t.Run("the hand-off first", func(t *testing.T) { cancelWaitingGoesWithTheKey(t, false) })
	t.Run("the run's counter first", func(t *testing.T) { cancelWaitingGoesWithTheKey(t, true) })
}

// cancelWaitingGoesWithTheKey plays TestACancelWaitingForARunsCounterGoesWithTheKey;
// counterFirst: the run's counter reaches the new owner before the
// leaver's hand-off does.
func cancelWaitingGoesWithTheKey(t *testing.T, counterFirst bool) {
	h, k, left, counter := cancelWaitingAtTheOwner(t)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]

	// n0 leaves: its counter of the key goes to n2. The run's counter,
	// with the list of the items it admitted, reaches n2 too, before the
	// hand-off or once n2 counts the key.
	runsCounter := func() {
		n2.handleTransfer(h.now, n1.self, Transfer{Seq: 2, To: n2.self.Inc, Mode: ModeAdd, CountersOf: left, States: counter, Taken: []Taken{{Caller: n1.self, Seqs: []uint64{5}}}}, true)
		h.pump()
	}
	h.oneway = map[[2]string]bool{{"n0", "n2"}: counterFirst}
	n0.Leave(h.now)
	leaving := []Member{h.member("n0")}
	n1.SetMembership(h.now, Membership{Members: []Member{h.member("n2")}, Leaving: leaving})
	n2.SetMembership(h.now, Membership{Members: []Member{h.member("n1")}, Leaving: leaving})
	h.pump()
	if counterFirst {
		if !n2.HandoffUnderway() {
			t.Fatal("no hand-off under way at n2")
		}
		runsCounter()
		h.oneway[[2]string{"n0", "n2"}] = false
	}
	h.advance(time.Second)
	if got := h.count("n0", k); got != 0 {
		t.Fatalf("the leaver still counts %d of the key", got)
	}
	if !counterFirst {
		runsCounter()
	}
	h.advance(time.Second)
	if got := h.count("n0", k) + h.count("n1", k) + h.count("n2", k); got != 6+3-1 {
		t.Errorf("the cluster holds %d of the key (n0 %d, n1 %d, n2 %d); want 8: 6 of n0's, 3 of the run's less the cancelled item", got, h.count("n0", k), h.count("n1", k), h.count("n2", k))
	}
}

// A cancel for a run that left, its item sent near the end of a window,
// waits at the key's owner for the run's counter; the counter, with the
// list naming the item, comes in the next window, after the owner counted
// some of it: the item's units come out of the window it was sent in, not
// out of the one the list came in (11 admitted of 10 in a window).
func TestACancelWaitingForARunsCounterComesOutOfItsItemsWindow(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	const quota = 10
	const win = 5 * time.Second
	k := h.keyOwnedBy("n0", "n2")
	n0, n1 := h.cores["n0"], h.cores["n1"]
	one := []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: quota, Window: win}}}
	take := func() bool { return h.takeZones("n0", one...) }
	h.advance(h.now.Truncate(win).Add(win).Sub(h.now) + 10*time.Millisecond)
	second := h.now.Truncate(win).Add(win)
	h.advance(second.Add(-100 * time.Millisecond).Sub(h.now))
	if !take() {
		t.Fatal("the first request refused")
	}
	// The run that left admitted item 5 of n1's in the first window; its
	// counter (one unit) is on its way. n1's cancel of the item comes
	// first, and waits.
	left := Peer{Name: "n9", Inc: 7}
	counter := n0.engine.StatesOf(h.now, []limiter.Key{k})
	counter[0].Cur = 1
	sent := h.now.UnixNano()
	n0.handleTransfer(h.now, n1.self, Transfer{Seq: 1, To: n0.self.Inc, Mode: ModeCancel, At: sent, Take: 5, Reqs: one, WasTo: left}, true)

	h.advance(second.Add(20 * time.Millisecond).Sub(h.now))
	admitted := 0
	for range 6 {
		if take() {
			admitted++
		}
	}
	n0.handleTransfer(h.now, n1.self, Transfer{Seq: 2, To: n0.self.Inc, Mode: ModeAdd, CountersOf: left, States: counter, Taken: []Taken{{Caller: n1.self, Seqs: []uint64{5}}}}, true)
	h.pump()
	if got := h.count("n0", k); got != int64(admitted) {
		t.Errorf("in the second window %d were admitted, and the key's owner holds %d of it: the cancelled item of the first came out of the second", admitted, got)
	}
	for range quota {
		if take() {
			admitted++
		}
	}
	if admitted != quota {
		t.Errorf("the second window admitted %d of %d", admitted, quota)
	}
}
