package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner (n0) replicates 6 to its successor (n1), then stops
// listing n1 (its ring alone: the others list n1 still) and replicates
// the key to the node its ring says succeeds it (n2), 10 by then: outside
// the ring the others follow. The others declare n0 dead; n1, the key's
// successor by their ring, takes the key over from its older replica (6).
// Then n2's replica of the dead run (10) comes to n1, and n0, cut off,
// learns it was declared dead and sends its counter (10) as it stopped:
// both are copies of the counter n1 started from, the 4 beyond it are
// added once, and n1 admits what the quota leaves.
func TestAReplicaSentOutsideTheRingAndTheDeadRunsCounterAddOnceToAnOlderReplicaTakenOver(t *testing.T) {
	replicatedOutsideTheRing(t, false, 0)
}

// As TestAReplicaSentOutsideTheRingAndTheDeadRunsCounterAddOnceToAnOlderReplicaTakenOver,
// but n0's counter goes to n1 while n2's replica of it is still held up
// (n1's key waits in a hand-off for n2 meanwhile, counted nowhere: no
// unit admitted over the quota, none lost once it settles).
func TestTheDeadRunsCounterThenAReplicaSentOutsideTheRingAddOnceToAnOlderReplicaTakenOver(t *testing.T) {
	replicatedOutsideTheRing(t, true, 0)
}

// As TestAReplicaSentOutsideTheRingAndTheDeadRunsCounterAddOnceToAnOlderReplicaTakenOver,
// but n1 counts 5 more once it took the key over (11) and replicates its
// counter to its successor, n2: the replica displaces n2's replica of the
// dead run (10), which n2 sends on to n1 (see Core.sendDisplaced). The 4
// it holds beyond what n1 started from are added once, n0's counter adds
// nothing more: 15.
func TestADisplacedReplicaSentOutsideTheRingAddsOnceToACounterThatWentOn(t *testing.T) {
	replicatedOutsideTheRing(t, false, 5)
}

// replicatedOutsideTheRing plays the tests above: counterFirst, n0's
// counter goes before n2's copies of it are let through; n1 counts more
// once it took the key over.
func replicatedOutsideTheRing(t *testing.T, counterFirst bool, more int) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	k := h.keyOrdered("n0", "n1", "n2")
	load := newHandLoad(h, k, 30)
	for range 6 {
		load.spend("n0")
	}
	load.resume()
	h.advance(30 * time.Millisecond) // replicated to n1
	h.listOf("n0", "n0", "n2", "n3")
	for range 4 {
		load.spend("n0")
	}
	load.resume()
	h.advance(30 * time.Millisecond) // replicated to n2
	n1, n2 := h.cores["n1"], h.cores["n2"]
	if s, owner, ok := n1.replicas.get(k); !ok || owner.Name != "n0" || load.unitsOf([]limiter.State{s}) != 6 {
		t.Fatalf("n1 keeps no replica of n0's counter at 6 (%v %v %v)", s, owner, ok)
	}
	if s, owner, ok := n2.replicas.get(k); !ok || owner.Name != "n0" || load.unitsOf([]limiter.State{s}) != 10 {
		t.Fatalf("n2 keeps no replica of n0's counter at 10 (%v %v %v)", s, owner, ok)
	}

	h.cut["n0"] = true
	held := true // n2's copies of n0's counter wait
	h.drops = func(from string, o Outgoing) bool {
		tr, ok := o.Msg.(Transfer)
		return held && ok && from == "n2" && (tr.CountersOf.Name == "n0" || tr.ReplicaOf.Name == "n0")
	}
	for _, name := range []string{"n1", "n2", "n3"} {
		h.setMembership(name, []string{"n0"})
	}
	h.advance(6*time.Second, "n1", "n2", "n3") // past the hand-off window
	if n1.HandoffUnderway() || load.units("n1") != 6 {
		t.Fatalf("n1: hand-off under way %v, counts %d; want the older replica, 6", n1.HandoffUnderway(), load.units("n1"))
	}
	for range more {
		load.spend("n1")
	}
	load.resume()
	h.advance(30*time.Millisecond, "n1", "n2", "n3") // replicated to n2
	if s, owner, ok := n2.replicas.get(k); more > 0 && (!ok || owner.Name != "n1") {
		t.Fatalf("n2 keeps no replica of n1's counter (%v %v %v)", s, owner, ok)
	}
	replica := func() {
		held = false
		h.advance(time.Second, "n1", "n2", "n3")
		if !counterFirst {
			if got := load.units("n1"); got != 10+int64(more) {
				t.Fatalf("n1 counts %d with n2's replica of n0's counter in; want %d", got, 10+more)
			}
		}
	}
	if !counterFirst {
		replica()
	}
	h.cut["n0"] = false
	h.learnsItWasDeclaredDead("n0")
	h.advance(2 * time.Second)
	t.Logf("with n0's counter sent: counts %v", h.counts(k))
	if counterFirst {
		replica()
	}
	h.advance(2 * time.Second)
	t.Logf("admitted %d %v; counts %v", load.admitted, load.by, h.counts(k))
	h.holdsAdmitted(k, load.admitted, "")
	load.admitsTheRest("n1")
	h.holdsAdmitted(k, load.admitted, "")
}

// As TestADisplacedReplicaSentOutsideTheRingAddsOnceToACounterThatWentOn,
// but n0's counter goes to n1 before n2's displaced replica of it.
func TestTheDeadRunsCounterThenADisplacedReplicaAddOnceToACounterThatWentOn(t *testing.T) {
	replicatedOutsideTheRing(t, true, 5)
}
