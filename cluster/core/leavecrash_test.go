package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner n1 has admitted 20 of it, replicated to its successor n2.
// It starts to leave and crashes at once: nothing it hands over arrives.
// The others hear of it as leaving, then as dead. Its counter is lost with
// it but for its replica, which holds all 20 (its last change was 50 ms
// before the crash): the key's new owner must count the key from that
// replica. The successor dropped the replica as soon as it heard of the
// leave (a replica of a run that left gracefully is stale: its counters
// were handed over), before the counters were, and the new owner counts
// the key from nothing: 20 more than the limit are admitted.
func TestAnOwnerThatCrashesWhileLeavingLeavesItsReplica(t *testing.T) {
	const quota = 30
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOrdered("n1", "n2", "n0")
	load := newHandLoad(h, k, quota)
	for range 20 {
		load.spend("n1")
	}
	load.resume()
	h.advance(50 * time.Millisecond)
	if st, _, ok := h.cores["n2"].replicas.get(k); !ok || windowCount([]limiter.State{st}) != 20 {
		t.Fatalf("n2's replica of the key: %v %v; want 20", st, ok)
	}

	// n1 starts to leave and crashes: what it sends is lost.
	h.down["n1"] = true
	h.cores["n1"].Leave(h.now)
	h.pump()
	for _, x := range []string{"n0", "n2"} {
		h.cores[x].SetMembership(h.now, Membership{Members: h.othersThan(x, "n1"), Leaving: []Member{h.member("n1")}})
		h.pump()
	}
	h.advance(100 * time.Millisecond)
	dead := []Peer{h.member("n1").Peer()}
	h.list("n0", h.othersThan("n0", "n1"), dead)
	h.list("n2", h.othersThan("n2", "n1"), dead)
	h.advance(h.cfg.HandoffWindow + time.Second)

	for range quota {
		load.spend("n2")
		load.spend("n0")
	}
	h.advance(50 * time.Millisecond)
	load.resume()
	if fb := load.by[SourceFallback]; load.admitted > quota+fb {
		t.Errorf("%d admitted of limit %d and %d by fallback (%v): the new owner counts %d", load.admitted, quota, fb, load.by, h.count("n2", k))
	}
}
