package core

import (
	"testing"
	"time"
)

// A key's owner dies; the successor that keeps its replica starts to take
// its keys over, but is declared dead itself before that hand-off
// completes, and joins again. Its hand-off now is a joiner's, which takes
// no run over from replicas, yet by its ring it owns the dead owner's key,
// and the replica it still keeps is that key's counter. Counted from what
// arrived (nothing, or what others admitted in fallback), the key admitted
// its whole limit again, and the replica went on later to whichever node
// owned the key next (seed 1795792943506377039 of the simulator: 33
// admitted of a bound of 29).
func TestAReplicaOfADeadRunCountsWhereItsKeySettlesAfterARejoin(t *testing.T) {
	h, k, load := evictionNet(t)
	const quota = evictionQuota
	for range quota {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond) // replicated to n2

	// n0 crashes. n2 takes it for dead, and is declared dead itself before
	// its hand-off completes: it stops counting, keeping n0's replica.
	h.down["n0"] = true
	h.advance(100 * time.Millisecond)
	h.setMembership("n2", []string{"n0"})
	h.cores["n2"].evict(h.now, "n1")
	h.setMembership("n1", []string{"n0"})
	if h.cores["n2"].Member() {
		t.Fatalf("n2 still a member after its eviction")
	}

	// n2 joins again, and owns n0's key by its ring.
	for range 300 {
		h.advance(10 * time.Millisecond)
		if h.cores["n2"].Member() && h.cores["n2"].gate.joinEpoch() > 1 {
			break
		}
	}
	if !h.cores["n2"].Member() || h.cores["n2"].gate.joinEpoch() < 2 {
		t.Fatalf("n2 did not join again (member %v, epoch %d)", h.cores["n2"].Member(), h.cores["n2"].gate.joinEpoch())
	}
	h.setMembership("n2", []string{"n0"})
	if o, _ := h.cores["n2"].Ring().Owner(k.Route()); o.Name != "n2" {
		t.Fatalf("n2's ring names %s the key's owner; want n2", o.Name)
	}
	h.advance(2*time.Second, "n1", "n2")
	for range quota {
		load.spend("n1")
		load.spend("n2")
	}
	h.advance(time.Second, "n1", "n2")
	load.resume()
	if n := load.by[SourceOwner] + load.by[SourcePeer]; n > quota {
		t.Errorf("owners admitted %d of limit %d (%v): the key settled without the dead owner's replica its new owner kept", n, quota, load.by)
	}
	if got := h.count("n2", k); got != int64(load.admitted) {
		t.Errorf("n2 holds %d of the key; %d were admitted (%v)", got, load.admitted, load.by)
	}
}
