package core

import (
	"testing"
	"time"
)

// As in TestACounterThatHoldsAllTheCountersTheReceiversIsMadeOfAddsNothing,
// up to the join at n2 (16); then n1 comes back, hears it was declared
// dead, and the key goes back to it with n2's counter, and n1 stops again:
// n2 counts the key on in a counter of a later generation, from n1's
// replica. The record of the join stays at n2 with the generation it was
// made in and weighs nothing of the later counter.
func TestARecordOfAJoinWeighsNothingOfALaterGenerationsCounter(t *testing.T) {
	h, k, load, early, rep := overlappingTakeover(t)
	n2 := h.cores["n2"]
	h.down["n1"] = false
	h.n1AppliesN2sCounter(load, rep, 16)
	h.n2AppliesN1sEarlierCounter(load, early)
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
	h.n2CountsOn(load, 2)
	h.advance(100 * time.Millisecond)
	h.down["n1"] = false
	h.advance(2 * time.Second)
	load.resume()
	t.Logf("admitted %d %v; counts n0 %d n1 %d n2 %d; n2's generation %d", load.admitted, load.by, h.count("n0", k), h.count("n1", k), h.count("n2", k), n2.replicas.genOf(k))
	h.holdsAdmitted(k, load.admitted, "")
	load.spendsToTheLimit(t, "n2", "n0")
}
