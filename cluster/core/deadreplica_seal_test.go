package core

import (
	"testing"
	"time"
)

// A key's owner crashes and starts again before the others' hand-offs
// take it over: the node that keeps the dead run's replica of the key
// sends it to the new run as that run's counter once it has a majority.
// Asked for a seal before that (cut off from the others, without a
// majority), it sealed: the new run's hand-off completed, the key counted
// from nothing and admitted its limit again, and the replica came after,
// on top (seed 1795802163604425784 of the simulator: 6 admitted of a
// limit of 5, no fallback).
func TestANodeKeepingADeadRunsReplicaOfTheAskersKeyDoesNotSeal(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	const quota = 5
	k := h.keyOwnedBy("n0", "n1")
	load := newHandLoad(h, k, quota)
	for range quota {
		load.spend("n0")
	}
	h.advance(50 * time.Millisecond) // replicated to n1
	if _, owner, ok := h.cores["n1"].replicas.get(k); !ok || owner.Name != "n0" {
		t.Fatalf("n1 keeps no replica of n0's counter of the key")
	}

	// n0 crashes; the others take it for dead.
	h.down["n0"] = true
	h.advance(100 * time.Millisecond)
	for _, x := range []string{"n1", "n2", "n3", "n4"} {
		h.setMembership(x, []string{"n0"})
	}
	h.advance(100 * time.Millisecond)

	// n1 is cut off from n2, n3 and n4 (not from n0): no majority.
	h.oneway = map[[2]string]bool{}
	for _, x := range []string{"n2", "n3", "n4"} {
		h.oneway[[2]string{"n1", x}] = true
		h.oneway[[2]string{x, "n1"}] = true
	}
	h.advance(time.Second, "n1", "n2", "n3", "n4")
	if h.cores["n1"].majority(h.cores["n1"].view.Load()) {
		t.Fatalf("n1 still has a majority, cut off from n2, n3 and n4")
	}
	if _, owner, ok := h.cores["n1"].replicas.get(k); !ok || owner.Name != "n0" {
		t.Fatalf("n1 no longer keeps n0's replica of the key")
	}

	// n0 starts again and joins.
	n0 := h.start("n0", true)
	n0.Joined(h.now)
	for _, x := range h.names {
		h.setMembership(x, nil)
	}
	for range 200 {
		h.advance(10 * time.Millisecond)
		if n0.Member() && !n0.HandoffUnderway() {
			break
		}
	}
	for range quota {
		load.spend("n2")
	}
	h.advance(200 * time.Millisecond)

	// n1 hears from the others again.
	h.oneway = map[[2]string]bool{}
	h.advance(time.Second)
	for range quota {
		load.spend("n3")
	}
	h.advance(time.Second)
	load.resume()
	if n := load.by[SourceOwner] + load.by[SourcePeer]; n > quota {
		t.Errorf("owners admitted %d of limit %d (%v): the new run's key settled without the dead run's replica n1 kept", n, quota, load.by)
	}
	if got := h.count("n0", k); got != int64(load.admitted) {
		t.Errorf("n0 holds %d of the key; %d were admitted (%v)", got, load.admitted, load.by)
	}
}
