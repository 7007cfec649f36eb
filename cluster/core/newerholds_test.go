package core

import (
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

// As in TestAnEvictedCounterThatHoldsTheReceiversOwnCounterAddsOnlyWhatItDoesNot,
// n1's counter of a key holds n2's, which counted the key on from n1's
// replica while n1 stood still; but n1's counter reaches n2 as a copy that
// may be older than n2's own counts (ModeNewer: a transfer whose receiver
// died before acknowledging it, sent on), not as an evicted counter. n2
// weighs it by the same rule: it adds only what neither counter holds.
// Added beyond n1's earlier counts alone, what n2 counted would count twice.
func TestANewerCopyThatHoldsTheReceiversOwnCounterAddsOnlyWhatItDoesNot(t *testing.T) {
	h, k, load, rep := takenOverFromAStandstill(t)
	n0 := h.cores["n0"]

	// n0 sends n1 n2's counter; n1 holds it from then on.
	n1 := h.cores["n1"]
	n1.handleTransfer(h.now, n0.self, Transfer{Seq: 1000, To: n1.self.Inc, Epoch: 1, Mode: ModeAdd, CountersOf: rep.owner, States: []limiter.State{rep.state}, Holds: rep.holds}, true)
	if got := h.count("n1", k); got != 12 {
		t.Fatalf("n1 counts %d of the key with n2's counter in; want 12", got)
	}

	// n1's counter comes to n2 as a copy, naming n1's run and what it
	// holds.
	states := n1.engine.StatesOf(h.now, []limiter.Key{k})
	holds := sortHolds(append(n1.replicas.heldOf([]limiter.Key{k}), n1.replicas.ownHeld(n1.self, states)...))
	n2 := h.cores["n2"]
	n2.handleTransfer(h.now, n1.self, Transfer{Seq: 1001, To: n2.self.Inc, Epoch: 1, Mode: ModeNewer, CountersOf: n1.self, States: states, Holds: holds}, true)
	h.pump()
	if got := h.count("n2", k); got != int64(load.admitted) {
		t.Errorf("n2 counts %d of the key with n1's copy in; %d were admitted (%v)", got, load.admitted, load.by)
	}
}
