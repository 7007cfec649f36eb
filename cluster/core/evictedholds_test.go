package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner (n1) stands still; the others declare it dead and the
// key's successor (n2) counts it on from n1's replica, and more,
// replicating to its own successor (n0). n1 comes back not knowing it was
// declared dead, and n0 sends it n2's counter, which a replica of n1's
// displaced there (see Core.sendDisplaced): n1 adds what n2 counted
// beyond n1's counts, and its counter holds n2's from then on. Then n1
// hears it was declared dead and its counters go out, to n2. n1's counter
// holds n2's own counter, and n2's holds n1's earlier counts: what n1's
// adds to n2's is only what neither holds. Added beyond n1's earlier
// counts alone, what n2 counted counts twice (seed 1795843010551342005 of
// the simulator: key 0 held 15, 12 admitted).
func TestAnEvictedCounterThatHoldsTheReceiversOwnCounterAddsOnlyWhatItDoesNot(t *testing.T) {
	h, k, load, rep := takenOverFromAStandstill(t)
	n0 := h.cores["n0"]

	// n1 comes back; n0 sends it n2's counter, displaced by n1's replica.
	h.down["n1"] = false
	n1 := h.cores["n1"]
	n1.handleTransfer(h.now, n0.self, Transfer{Seq: 1000, To: n1.self.Inc, Epoch: 1, Mode: ModeAdd, CountersOf: rep.owner, States: []limiter.State{rep.state}, Holds: rep.holds}, true)
	h.pump()
	if got := h.count("n1", k); got != 12 {
		t.Fatalf("n1 counts %d of the key with n2's counter in; want 12", got)
	}

	// n1 hears it was declared dead: its counters go out.
	h.advance(2 * time.Second)
	load.resume()
	t.Logf("admitted %d %v; counts n0 %d n1 %d n2 %d", load.admitted, load.by, h.count("n0", k), h.count("n1", k), h.count("n2", k))
	h.holdsAdmitted(k, load.admitted, "")
}

// takenOverFromAStandstill counts 9 of a key at its owner n1 (successor n2,
// then n0) and has n1 stand still: n0 and n2 declare it dead, n2 counts
// the key on from n1's replica, 3 more, and replicates its counter to n0.
// It returns what n0 keeps of n2's counter: its replica.
func takenOverFromAStandstill(t *testing.T) (*handNet, limiter.Key, *handLoad, replica) {
	t.Helper()
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOrdered("n1", "n2", "n0")
	load := newHandLoad(h, k, 30)
	for range 9 {
		load.spend("n1")
	}
	load.resume()
	h.advance(50 * time.Millisecond) // replicated to n2
	h.down["n1"] = true
	h.setMembership("n0", []string{"n1"})
	h.setMembership("n2", []string{"n1"})
	h.advance(2 * time.Second)
	for range 3 {
		load.spend("n2")
	}
	load.resume()
	h.advance(100 * time.Millisecond) // replicated to n0
	if got := h.count("n2", k); got != 12 {
		t.Fatalf("n2 counts %d of the key after the takeover; want 12", got)
	}
	n0 := h.cores["n0"]
	n0.replicas.mu.Lock()
	rep, ok := n0.replicas.states[k]
	n0.replicas.mu.Unlock()
	if !ok || rep.owner.Name != "n2" {
		t.Fatalf("n0 keeps no replica of n2's counter of the key")
	}
	return h, k, load, rep
}
