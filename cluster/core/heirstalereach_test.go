package core

import (
	"testing"
	"time"
)

// As TestAKeyAnHeirCountedAndReplicatedIsInReachAfterTheHeirDies, but the
// heir admits more after its last replica reached its successor, and
// crashes: the successor, promoting the replica as its hand-off
// completes, ends the gap the third node passed on and counts the key on
// from the replica. The key admits beyond its limit what the crash lost
// (the heir's count the replica lacked), and no more.
func TestAKeyAnHeirCountedPastItsLastReplicaStaysWithinTheBoundAfterTheHeirDies(t *testing.T) {
	h, k, load := heirCountsAndReplicates(t)
	const quota = 10

	// n2 admits 2 more; their replica to n3 is lost.
	h.drops = func(from string, o Outgoing) bool {
		x, ok := o.Msg.(Transfer)
		return ok && from == "n2" && o.To.Name == "n3" && x.Mode == ModeReplica
	}
	for range 2 {
		load.spend("n2")
	}
	load.resume()
	h.advance(50*time.Millisecond, "n0", "n2", "n3", "n4")
	h.drops = nil
	const lag = 2 // what the crash loses: n2's count beyond n3's replica

	heirDiesAndItsSuccessorTakesOver(t, h, k)
	for range 3 {
		load.spend("n3")
		load.spend("n0")
	}
	load.resume()
	t.Logf("admitted %d (%v); n3 counts %d", load.admitted, load.by, h.count("n3", k))
	// Counted on from the replica, the key admits what the crash lost
	// beyond its limit, and no more.
	if load.admitted > quota+lag || h.count("n3", k) != int64(load.admitted-lag) {
		t.Errorf("admitted %d of limit %d + %d lost in the crash (%v), n3 counts %d", load.admitted, quota, lag, load.by, h.count("n3", k))
	}
}
