package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A run that left handed its counter over naming the take items it
// admitted (Transfer.Taken); the counter reaches a node whose view is
// changing and waits there for its key to settle. The caller of one of
// those items, which decided it by fallback, sends its cancel to the key's
// owner in the run's stead, where it waits for the run's counter (see
// TestACancelThatComesBeforeTheCounterOfTheRunThatLeftWaitsForIt). The
// node's view changes again and the counter goes on to that owner: the
// list of the run's items has to go on with it, or the owner never learns
// that the counter holds the item's admission, and the request is counted
// twice, its admission in the counter and the caller's fallback count
// (seed 1795792943506379028 of the simulator: the cluster held 16 of 15
// admitted).
func TestACounterWaitingForItsKeyGoesOnWithTheItemsItsRunAdmitted(t *testing.T) {
	h, k, left, counter := cancelWaitingAtTheOwner(t)
	n1, n2 := h.cores["n1"], h.cores["n2"]
	if got := h.count("n0", k); got != 6 {
		t.Fatalf("n0 counts %d after a cancel for an item it never counted; want 6", got)
	}

	// n2 takes n0 for dead: the key moves to n2 and waits there. The run's
	// counter, with the list of the items it admitted, reaches n2.
	n2.SetMembership(h.now, Membership{Members: []Member{h.member("n1")}, Dead: []Peer{h.member("n0").Peer()}})
	if !n2.HandoffUnderway() {
		t.Fatal("no hand-off under way at n2")
	}
	n2.handleTransfer(h.now, n1.self, Transfer{Seq: 2, To: n2.self.Inc, Mode: ModeAdd, CountersOf: left, States: counter, Taken: []Taken{{Caller: n1.self, Seqs: []uint64{5}}}}, true)
	if got := h.count("n2", k); got != 0 {
		t.Fatalf("n2 counts %d before the key settled", got)
	}

	// n0 answers again: the counter goes on to it, and holds the item.
	h.setMembership("n2", nil)
	h.pump()
	h.advance(time.Second)
	if got := h.count("n0", k) + h.count("n2", k); got != 6+3-1 {
		t.Errorf("the cluster holds %d of the key (n0 %d, n2 %d); want 8: 6 of n0's, 3 of the run's less the cancelled item", got, h.count("n0", k), h.count("n2", k))
	}
}

// cancelWaitingAtTheOwner sets up three nodes where n0 owns a key spent 6
// times, and a run that left (returned as left) counted 3 more of it, one
// of them n1's item 5; counter is that run's counter, not yet sent
// anywhere. n1 gave the item up: its cancel has reached n0, the key's
// owner, before the run's counter, and waits there for it.
func cancelWaitingAtTheOwner(t *testing.T) (h *handNet, k limiter.Key, left Peer, counter []limiter.State) {
	t.Helper()
	h = newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n2", 6)
	n0, n1 := h.cores["n0"], h.cores["n1"]
	if load.admitted != 6 || h.count("n0", k) != 6 {
		t.Fatalf("admitted %d, n0 counts %d; want 6 and 6", load.admitted, h.count("n0", k))
	}
	left = Peer{Name: "n9", Inc: 7}
	counter = n0.engine.StatesOf(h.now, []limiter.Key{k})
	counter[0].Cur = 3
	item := []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 30, Window: time.Hour}}}
	n0.handleTransfer(h.now, n1.self, Transfer{Seq: 1, To: n0.self.Inc, Mode: ModeCancel, Take: 5, Reqs: item, WasTo: left}, true)
	return h, k, left, counter
}
