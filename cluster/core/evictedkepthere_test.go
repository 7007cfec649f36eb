package core

import (
	"testing"
	"time"
)

// A key's owner n0 is cut off, and takes the others for dead; they
// declare it dead, and n1 takes the key over from its replica of n0's
// counter. n0 comes back and learns it was declared dead: its counters go
// out, and, knowing no member, no ring names a node to send them to, so
// they stay in its engine. They are its counter of the key as it let it
// go (its last word), and it counts the key in a new counter from now on
// (see gaveAway): kept as plain counts of that new counter, with no record
// of the counter they were, n1's counter, which holds the replica of that
// counter (Transfer.Holds), met nothing to weigh it against when it came
// back to n0 as n0 joined again, and n0's counts were added a second time
// (seed 1795936907962281169 of the simulator: 39 held of 38 admitted).
// Kept, they are weighed as that counter, as a hand-off of its own
// counters that came back is (see cameBack), and the record goes with the
// key's counter.
func TestAnEvictedCounterKeptByANodeThatKnowsNoMemberIsWeighedAsItsCounter(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOwnedBy("n0", "n1")
	// n1 applies n0's replica, but n0 never hears so: it knows no node
	// that holds a replica of its counter.
	h.unacked[[2]string{"n0", "n1"}] = true
	load := h.spent(k, "n0", 3)
	h.advance(20 * time.Millisecond)

	h.standsStillAndIsDeclaredDead("n0")
	if got := h.count("n1", k); got != 3 {
		t.Fatalf("n1 did not take the key over from its replica: count %d", got)
	}
	// n0, cut off, took the others for dead too: it knows no member.
	h.setMembership("n0", []string{"n1", "n2"})
	h.learnsItWasDeclaredDead("n0")
	if n0 := h.cores["n0"]; n0.Member() || n0.view.Load().ring.Len() != 0 || h.count("n0", k) != 3 {
		t.Fatalf("n0: member %v, ring %d, counts %d; want no member, no ring, its counter of 3 kept", n0.Member(), n0.view.Load().ring.Len(), h.count("n0", k))
	}

	h.unacked[[2]string{"n0", "n1"}] = false
	h.joinsAgain("n0", 2*time.Second)
	h.heldBy(k, load.admitted, h.names...)
	load.spendsToTheLimit(t, "n0", "n1", "n2")
}
