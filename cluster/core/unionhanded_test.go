package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// As in TestACounterThatHoldsAllTheCountersTheReceiversIsMadeOfAddsNothing,
// up to the join at n2 (16); then n1 comes back, hears it was declared
// dead, and the key goes back to it with n2's counter, and n1 stops again:
// n2 counts the key on in a counter of a later generation, from n1's
// replica. The record of the join stays at n2 with the generation it was
// made in and weighs nothing of the later counter.
func TestARecordOfAJoinWeighsNothingOfALaterGenerationsCounter(t *testing.T) {
	h, k, load, early, rep := overlappingTakeover(t)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]

	h.down["n1"] = false
	n1.handleTransfer(h.now, n0.self, Transfer{Seq: 1000, To: n1.self.Inc, Epoch: 1, Mode: ModeAdd, CountersOf: rep.owner, States: []limiter.State{rep.state}, Holds: rep.holds}, true)
	n2.handleTransfer(h.now, n0.self, Transfer{Seq: 1001, To: n2.self.Inc, Epoch: 1, Mode: ModeAdd, CountersOf: n1.self, States: early}, true)
	if got := h.count("n2", k); got != 16 {
		t.Fatalf("n2 counts %d of the key with n1's earlier counter in; want 16", got)
	}
	gen0 := n2.replicas.genOf(k)

	// n1 is back; the key goes back to it.
	h.advance(2 * time.Second)
	load.resume()
	for _, name := range h.names {
		h.setMembership(name, nil)
	}
	h.advance(2 * time.Second)
	for range 3 {
		load.spend("n1")
	}
	load.resume()
	h.advance(200 * time.Millisecond)
	t.Logf("back at n1: admitted %d; counts n0 %d n1 %d n2 %d; n2's generation %d (was %d)", load.admitted, h.count("n0", k), h.count("n1", k), h.count("n2", k), n2.replicas.genOf(k), gen0)
	h.holdsAdmitted(k, load.admitted, "")

	// n1 stops again; n2 counts on.
	h.down["n1"] = true
	h.setMembership("n0", []string{"n1"})
	h.setMembership("n2", []string{"n1"})
	h.advance(2 * time.Second)
	for range 2 {
		load.spend("n2")
	}
	load.resume()
	h.advance(200 * time.Millisecond)
	h.down["n1"] = false
	h.advance(2 * time.Second)
	load.resume()
	t.Logf("admitted %d %v; counts n0 %d n1 %d n2 %d; n2's generation %d", load.admitted, load.by, h.count("n0", k), h.count("n1", k), h.count("n2", k), n2.replicas.genOf(k))
	h.holdsAdmitted(k, load.admitted, "")
	load.spendsToTheLimit(t, "n2", "n0")
}
