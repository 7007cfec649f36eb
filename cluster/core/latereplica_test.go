package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner n0 replicates it to its successor n1 (3 admitted); the
// replica of its last change (a 4th) is held up on the way. n0 leaves
// gracefully and joins again as a new run, which pulls the key back and
// counts on (4 more), replicating to n1. Then the held-up replica of the
// earlier run reaches n1: a copy of counts the new run's counter holds,
// from a run that left. It must not stand in for the new run's replica:
// when the new run then crashes, n1 takes the key over from the new run's
// replica, and the key's counter holds exactly what was admitted (nothing
// replicated is lost), no request under the limit refused. (The
// superseded mark of a replica, which tells whether a takeover of members
// that died together may count a key from it, is read by no graceful
// change: a replica of an owner's older ring, or of a run that left, costs
// no fallback there.)
func TestALateReplicaOfARunThatLeftDoesNotDisplaceItsSuccessorsReplica(t *testing.T) {
	lateReplicaOfAnEarlierRun(t, false)
}

// As above, but n0 crashed (its 4th unit, not replicated, lost with it,
// as a crash loses the changes of its last replication interval), n1 took
// the key over from the replica, and n0's new run pulled it back.
func TestALateReplicaOfARunThatCrashedDoesNotDisplaceItsSuccessorsReplica(t *testing.T) {
	lateReplicaOfAnEarlierRun(t, true)
}

func lateReplicaOfAnEarlierRun(t *testing.T, crashed bool) {
	h := newHandNet(t, "n0", "n1", "n2")
	const quota = 30
	k := h.keyOwnedBy("n0", "n1")
	load := newHandLoad(h, k, quota)
	for range 3 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond)
	if st, _, ok := h.cores["n1"].replicas.get(k); !ok || windowCount([]limiter.State{st}) != 3 {
		t.Fatalf("n1's replica of the key: %v %v; want 3", windowCount([]limiter.State{st}), ok)
	}
	var late *Transfer
	h.drops = func(from string, o Outgoing) bool {
		if t, ok := o.Msg.(Transfer); ok && from == "n0" && o.To.Name == "n1" && t.Mode == ModeReplica && late == nil && heldIn(t.States, k) {
			late = &t
			return true // held up
		}
		return false
	}
	load.spend("n0")
	h.advance(10*time.Millisecond, "n0")
	if late == nil {
		t.Fatal("n0 replicated nothing of its 4th unit to n1")
	}
	h.drops = nil
	first := h.member("n0").Peer()
	lost := 0

	// n0 leaves gracefully (or crashes) and joins again as a new run.
	n0 := h.cores["n0"]
	if crashed {
		lost = 1
		h.down["n0"] = true
		h.advance(100 * time.Millisecond)
		h.setMembership("n1", []string{"n0"})
		h.setMembership("n2", []string{"n0"})
		h.advance(time.Second, "n1", "n2")
	} else {
		n0.Leave(h.now)
		n0.SetMembership(h.now, Membership{Members: h.othersThan("n0")})
		h.pump()
		h.othersSeeLeaveAndGo("n0")
	}
	n0 = h.start("n0", true)
	n0.Joined(h.now)
	for _, name := range h.names {
		h.setMembership(name, nil)
	}
	h.advance(300 * time.Millisecond)
	for range 4 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond)
	load.resume()
	held := int64(load.admitted - lost)
	if load.admitted != 8 || h.count("n0", k) != held {
		t.Fatalf("%d admitted, the new run of n0 counts %d; want 8 and %d", load.admitted, h.count("n0", k), held)
	}

	// The earlier run's replica, late.
	h.cores["n1"].handleTransfer(h.now, first, *late, false)
	h.pump()
	h.advance(50 * time.Millisecond)
	if got := h.clusterCount(k); got != held {
		t.Errorf("the cluster counts %d of the key (%v) once the late replica came; %d were admitted, %d held", got, h.counts(k), load.admitted, held)
	}
	if st, ow, ok := h.cores["n1"].replicas.get(k); !ok || ow != n0.Self() || windowCount([]limiter.State{st}) != held {
		t.Errorf("n1's replica of the key: %d of %v (%v); want the new run's, %d", windowCount([]limiter.State{st}), ow, ok, held)
	}

	// The new run crashes; n1 takes the key over from its replica.
	h.down["n0"] = true
	h.advance(100 * time.Millisecond)
	h.setMembership("n1", []string{"n0"})
	h.setMembership("n2", []string{"n0"})
	h.advance(2 * time.Second)
	before := load.admitted
	for range quota {
		load.spend("n1")
		load.spend("n2")
	}
	h.advance(time.Second)
	load.resume()
	if got, left := load.admitted-before, quota-int(held); got != left {
		t.Errorf("%d admitted after the takeover (%v); the key had %d left of %d", got, load.by, left, quota)
	}
	if got := h.count("n1", k); got != int64(load.admitted-lost) {
		t.Errorf("n1 counts %d of the key; %d were admitted, %d lost in the crash (%v)", got, load.admitted, lost, load.by)
	}
}
