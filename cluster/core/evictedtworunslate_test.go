package core

import (
	"fmt"
	"testing"
	"time"
)

// As TestEvictedCountersOfTwoDeathsOfOneNodeForTwoRunsOfTheSuccessorCountOnce,
// but the successor's run that took the key over the second time counts
// two more after its snapshot (replicated to the next node) and crashes,
// and its next run starts later than the owners remember whose counts a
// snapshot holds (keptNamedWithin): the snapshot goes out naming no run
// (unnameRestored). The new run counts the key from the replica the next
// node kept (17, with its record of the owner's second counter: 15), not
// from the snapshot (15, older). The owner's evicted counter (16: the 15
// replicated and one more), meant for the crashed run, comes: the key was
// restored from a snapshot naming no run (restoredUnnamed), so it is taken
// as a copy, the newer of 17 and 16 stands, and the one the owner
// admitted beyond its replica is lost (17 held of 18 admitted). Weighed
// against the record the counter holds, it adds that one.
func TestAnEvictedCounterForAnEarlierRunWhoseKeyWasRestoredLateButCountedFromANewerReplicaIsWeighed(t *testing.T) {
	for _, newRun := range []bool{false, true} {
		t.Run(fmt.Sprintf("rejoins as a new process %v", newRun), func(t *testing.T) {
			h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
			k, load := h.n0DiesTwiceAndN1RestartsAfterEachTakeover(newRun, 15, func(load *handLoad, snapshot Kept, second bool) {
				// Two more, replicated to n2, after the snapshot.
				load.spend("n1")
				load.spend("n1")
				h.advance(20*time.Millisecond, "n1", "n2", "n3", "n4")
				h.down["n1"] = true
				if second { // the second restart comes too late to be named
					h.advance(keptNamedWithin+10*time.Second, "n2", "n3", "n4")
				}
				h.n1RestartsFrom(snapshot)
			})
			// Nothing lost, nothing counted twice: 18 held of 18 admitted.
			if load.admitted != 18 {
				t.Fatalf("%d admitted; want 18", load.admitted)
			}
			h.holdsAdmitted(k, load.admitted, "")
			// The owner admits up to the limit, refusing nothing under it,
			// through itself or forwarded, and nothing beyond.
			load.spendsToTheLimit(t, "n0", "n1", "n2")
		})
	}
}
