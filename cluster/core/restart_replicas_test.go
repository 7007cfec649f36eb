package core

import (
	"testing"
	"time"
)

// An owner declares its frozen successor dead and replicates its key to
// the next node from then on; then it crashes, the successor wakes up
// with the replica it had when it froze, and the owner restarts. Both
// replica holders send the new run what they keep of the crashed run's
// counter, before it holds a lease from either: both transfers are
// refused, and the key waits for them. The pull the new run sends to its
// successor brings the stale replica back; were that the end of the wait,
// the new run would count the key from the stale replica and admit what
// the newer one already counted, before it arrives. Meanwhile the key is
// decided by fallback, within its fallback share.
func TestARestartedOwnerWaitsForEveryReplicaHolderItExpects(t *testing.T) {
	h := newHandNet(t, "n1", "n2", "n3")
	const quota = 10
	k := h.keyOwnedBy("n2", "n1")
	load := newHandLoad(h, k, quota)
	for range 3 {
		load.spend("n2")
	}
	h.advance(20 * time.Millisecond) // replicated to n1

	// n1 freezes; n2 declares it dead, and replicates to n3 from then on.
	h.down["n1"] = true
	h.setMembership("n2", []string{"n1"})
	h.advance(time.Second, "n2", "n3")
	for range 3 {
		load.spend("n2")
	}
	h.advance(20*time.Millisecond, "n2", "n3") // replicated to n3
	load.resume()
	if load.admitted != 6 {
		t.Fatalf("%d admitted before n2 crashed; want 6", load.admitted)
	}

	// n2 crashes; n1 wakes up with the replica of 3.
	h.down["n2"] = true
	h.down["n1"] = false
	h.advance(20*time.Millisecond, "n1", "n3")

	// n2 restarts; what it sends n3 is lost for a while: it holds no
	// lease from n3 when n3 lists its new run and sends it the replica
	// of the crashed run's counter.
	h.oneway = map[[2]string]bool{{"n2", "n3"}: true}
	n2 := h.start("n2", true)
	n2.Joined(h.now)
	h.pump()
	h.setMembership("n2", nil)
	h.advance(10*time.Millisecond, "n2")
	if !n2.Member() {
		t.Fatal("the new run of n2 did not enter its ring")
	}
	h.setMembership("n3", nil)
	// n1 lists the new run too, and sends it its stale replica.
	h.setMembership("n1", nil)
	for range quota {
		load.spend("n2")
	}
	h.advance(10*time.Millisecond, "n1", "n2")
	load.resume()
	h.oneway = nil
	h.advance(time.Second)
	load.resume()
	for range quota {
		load.spend("n1")
		load.spend("n2")
		load.spend("n3")
	}
	h.advance(time.Second)
	load.resume()
	if fb := load.by[SourceFallback]; load.admitted > quota+fb {
		t.Errorf("%d admitted of limit %d, %d of them by fallback: the new run of n2 counted its key from a stale replica", load.admitted, quota, fb)
	}
	if got := h.count("n2", k); got != int64(load.admitted) {
		t.Errorf("n2 holds %d; %d were admitted", got, load.admitted)
	}
}
