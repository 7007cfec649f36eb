package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A run hands its own counter of a key to the key's owner while the owner
// has no majority: the counter waits with the owner's fallback counts, and
// joins its engine once the owner has a majority again. A replica of the
// same counter, sent on by the run's successor once the run died, comes
// after. The fallback counts keep the name of the run whose counter they
// hold, so the replica is a copy of counts held, not an addition (seed
// 1795794451879950886 of the simulator: a rolling kill beside a
// partition). The run's counts are counted once.
func TestAHandedCounterKeptInFallbackIsNotAddedAgainByItsReplica(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k, load := h.spentKey("n0", "n1", 2)
	n0, n3, n4 := h.cores["n0"], h.cores["n3"], h.cores["n4"]
	// The counter of a run of n4 that counted the key before (its owner
	// then): n0 holds nothing of the key until it comes.
	counter := n0.engine.ExtractKeys(h.now, []limiter.Key{k})
	if load.admitted != 2 || windowCount(counter) != 2 || h.count("n0", k) != 0 {
		t.Fatalf("admitted %d, counter %d, n0 %d; want 2, 2, 0", load.admitted, windowCount(counter), h.count("n0", k))
	}

	h.cut["n0"], h.cut["n4"] = true, true
	h.advance(time.Second)
	if n0.majority(n0.view.Load()) {
		t.Fatal("n0 has a majority while cut off")
	}
	hand := Transfer{Seq: 101, To: n0.self.Inc, Mode: ModeAdd, Own: true, States: counter}
	if a, _ := n0.Handle(h.now, n4.Self(), hand).(Ack); a.Refused {
		t.Fatal("n0 refused n4's own counter")
	}
	h.pump()

	h.cut["n0"], h.cut["n4"] = false, false
	h.advance(3 * time.Second)
	if !n0.majority(n0.view.Load()) {
		t.Fatal("n0 has no majority after the cut healed")
	}
	if got := h.count("n0", k); got != 2 {
		t.Fatalf("n0 counts %d of the key once its fallback counts joined; want 2", got)
	}
	// n4's replica of its counter, sent on by the node that kept it.
	replica := Transfer{Seq: 201, To: n0.self.Inc, Mode: ModeAdd, CountersOf: n4.Self(), States: counter}
	if a, _ := n0.Handle(h.now, n3.Self(), replica).(Ack); a.Refused {
		t.Fatal("n0 refused the replica with a majority")
	}
	h.advance(time.Second)
	var held int64
	for _, name := range h.names {
		held += h.count(name, k)
	}
	if held != int64(load.admitted) {
		t.Errorf("the cluster counts %d of the key (n0 %d); %d were admitted", held, h.count("n0", k), load.admitted)
	}
}
