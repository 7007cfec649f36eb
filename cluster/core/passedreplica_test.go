package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A rolling restart: n0 leaves, and its key goes to n1, which counts 6 of
// it, replicated to n2 (n1's successor for it); n0's next run joins, n1
// hands it the counter, and n0 counts 5 more, replicated to n1, its
// successor now. n2 still keeps n1's replica of the key, stale: n1 let
// that counter go, and n0's counter holds it (its last word on it). n0
// crashes; n1, leaving, passes n0's replica on to n2, which succeeds n0
// without it. n2 heard of the leave first (then it kept n1's replica, a
// leaving run's, until n1 is gone), or heard of it after the replica came
// (then n1 was a member still). Either way it refused n0's replica, as
// one of another run than the replica it kept; n1's went as n1 left, and
// n2, taking n0 over, counted the key from nothing (seed
// 1795873206313040431 of the simulator: 22 admitted of 11). A replica
// passed on whose counter holds the last word of the run whose replica is
// kept here replaces that replica: it is the newer copy of those counts.
func TestAReplicaPassedOnReplacesAStaleReplicaOfTheRunItsCounterHolds(t *testing.T) {
	for _, heardFirst := range []bool{true, false} {
		name := "replica after the leave is heard of"
		if !heardFirst {
			name = "replica before the leave is heard of"
		}
		t.Run(name, func(t *testing.T) {
			const quota = 30
			h := newHandNet(t, "n0", "n1", "n2", "n3")
			k := h.keyOrdered("n0", "n1", "n2")
			load := newHandLoad(h, k, quota)

			// n0 leaves; n1 counts the key, replicated to n2.
			h.cores["n0"].Leave(h.now)
			h.pump()
			h.othersSeeLeaveAndGo("n0")
			for range 6 {
				load.spend("n1")
			}
			h.advance(50 * time.Millisecond)
			load.resume()
			if st, owner, ok := h.cores["n2"].replicas.get(k); !ok || owner.Name != "n1" || windowCount([]limiter.State{st}) != 6 {
				t.Fatalf("n2's replica of the key: %v of %v (%v); want 6 of n1", st, owner, ok)
			}

			// n0's next run joins and counts the key on, replicated to n1.
			n0 := h.start("n0", true)
			n0.Joined(h.now)
			h.pump()
			for _, name := range h.names {
				h.setMembership(name, nil)
			}
			h.advance(time.Second)
			if !n0.Member() {
				t.Fatal("n0's new run did not join")
			}
			for range 5 {
				load.spend("n0")
			}
			h.advance(50 * time.Millisecond)
			load.resume()
			if got := h.count("n0", k); got != 11 || load.admitted != 11 {
				t.Fatalf("n0 counts %d of the key, %d admitted; want 11", got, load.admitted)
			}
			if st, owner, ok := h.cores["n1"].replicas.get(k); !ok || owner != n0.self || windowCount([]limiter.State{st}) != 11 {
				t.Fatalf("n1's replica of the key: %v of %v (%v); want 11 of n0", st, owner, ok)
			}
			if _, owner, ok := h.cores["n2"].replicas.get(k); !ok || owner.Name != "n1" {
				t.Fatalf("n2 no longer keeps n1's replica of the key (%v %v)", owner, ok)
			}

			// n0 crashes; n1 leaves and passes n0's replica on to n2.
			h.down["n0"] = true
			if heardFirst {
				h.othersSeeLeaving("n1")
			}
			h.cores["n1"].Leave(h.now)
			h.pump()
			if !heardFirst {
				h.othersSeeLeaving("n1")
			}
			h.pump()
			if st, owner, ok := h.cores["n2"].replicas.get(k); !ok || owner != n0.self || windowCount([]limiter.State{st}) != 11 {
				t.Errorf("n2's replica of the key: %v of %v (%v); want n0's 11, passed on", st, owner, ok)
			}

			// n1 is gone, n0 declared dead: n2 takes the key over.
			h.advance(200 * time.Millisecond)
			h.down["n1"] = true
			dead := []Peer{n0.self}
			h.list("n2", h.othersThan("n2", "n0", "n1"), dead)
			h.list("n3", h.othersThan("n3", "n0", "n1"), dead)
			h.advance(h.cfg.HandoffWindow + time.Second)
			h.heldBy(k, load.admitted, "n2", "n3")
			load.spendsToTheLimit(t, "n2", "n3")
		})
	}
}
