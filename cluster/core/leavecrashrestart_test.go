package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// As in TestAnOwnerThatCrashesWhileLeavingLeavesItsReplica, a key's owner
// n1 has admitted 20 of it, replicated to its successor n2, starts to
// leave and crashes at once: nothing it hands over arrives. But it is not
// declared dead: it restarts at once, and the others hear of the leaving
// run, then of a new run of n1 joining in its place. The leaving run did
// not leave gracefully (it handed nothing over): its replica is the key's
// only count. Taken for a run that left (it was once listed as leaving,
// see runDied), its replica is dropped as stale, and the key is counted
// from nothing: more than the limit admitted.
func TestAnOwnerThatCrashesWhileLeavingAndRestartsLeavesItsReplica(t *testing.T) {
	const quota = 30
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.twentySpentThroughN1()

	// n1 starts to leave and crashes: what it sends is lost. The others
	// hear of it as leaving.
	h.leavesAndCrashes("n1")
	h.advance(100 * time.Millisecond)

	// A new run of n1 starts (no snapshot) and joins; the others hear of
	// it joining in place of the leaving run (a later run of a node tells
	// that the earlier one died: see Membership.Joining), never of that
	// run's death, then as a member.
	n1 := h.start("n1", true)
	h.joinsInPlaceOfItsLeavingRun(n1)
	h.advance(h.cfg.HandoffWindow + time.Second)
	t.Logf("the nodes count %v", h.counts(k))
	load.staysWithinTheLimit(t, quota, "n1", "n2", "n0")
	if got := h.clusterCount(k); got != int64(load.admitted-load.by[SourceFallback]) && got != int64(load.admitted) {
		t.Errorf("the cluster counts %d of the key; %d were admitted (%v)", got, load.admitted, load.by)
	}
}

// A node remembers a leaving run that sealed to it (its leave complete
// here) long enough for a later run of its node to show up, and no
// longer: one record per run ever sealed would grow with every restart.
func TestARunThatSealedIsRememberedForAWhileThenForgotten(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOrdered("n1", "n2", "n0")
	load := newHandLoad(h, k, 30)
	load.spend("n1")
	load.resume()
	left := h.member("n1").Peer()
	h.cores["n1"].Leave(h.now)
	h.pump()
	for _, name := range []string{"n0", "n2"} {
		h.cores[name].SetMembership(h.now, Membership{Members: h.othersThan(name, "n1"), Leaving: []Member{h.member("n1")}})
		h.pump()
	}
	h.advance(200 * time.Millisecond)
	n2 := h.cores["n2"]
	if !n2.leaveSealed(left) {
		t.Fatalf("n2 does not know %v's leave complete", left)
	}
	h.down["n1"] = true
	h.advance(time.Minute, "n0", "n2")
	if !n2.leaveSealed(left) {
		t.Fatalf("n2 forgot %v's seal a minute after it", left)
	}
	h.advance(appliedKeep, "n0", "n2")
	if n2.leaveSealed(left) {
		t.Errorf("n2 still remembers %v's seal %v after it", left, appliedKeep+time.Minute)
	}
}

// As in TestAnOwnerThatCrashesWhileLeavingAndRestartsLeavesItsReplica,
// the leaving run crashes and a new run of its node starts at once; the
// successor, not told of the new run yet, asks the leaving run, at its
// address, whether it handed everything over. The new run answers: it
// holds nothing and knows the successor's ring. Its answer is not the
// leaving run's: taken for it, the leave was complete, the replica
// dropped, and the key counted from nothing.
func TestASealAnsweredByALaterRunOfTheLeaverIsNotTheLeaversSeal(t *testing.T) {
	const quota = 30
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.twentySpentThroughN1()
	left := h.member("n1")

	h.down["n1"] = true
	h.cores["n1"].Leave(h.now)
	h.pump()
	for _, name := range []string{"n0", "n2"} {
		h.cores[name].SetMembership(h.now, Membership{Members: h.othersThan(name, "n1"), Leaving: []Member{left}})
		h.pump()
	}
	h.advance(20 * time.Millisecond)

	// The new run starts and hears of the others; they have not heard of
	// it yet. The successor asks again.
	n1 := h.start("n1", true)
	n1.SetMembership(h.now, Membership{Members: []Member{h.member("n0"), h.member("n2")}})
	h.pump()
	h.advance(200*time.Millisecond, "n0", "n2")
	if h.cores["n2"].leaveSealed(left.Peer()) {
		t.Errorf("n2 takes the answer of %s's new run for the leaving run's seal", left.Name)
	}

	// Then everyone hears of the new run, joining.
	h.joinsInPlaceOfItsLeavingRun(n1)
	h.advance(h.cfg.HandoffWindow + time.Second)
	t.Logf("the nodes count %v", h.counts(k))
	load.staysWithinTheLimit(t, quota, "n1", "n2", "n0")
}

// twentySpentThroughN1 returns a key n1 owns, with n2 and then n0 after
// it, and the load that spent 20 of it (of 30) through n1, replicated to
// n2 by now.
func (h *handNet) twentySpentThroughN1() (limiter.Key, *handLoad) {
	h.t.Helper()
	k := h.keyOrdered("n1", "n2", "n0")
	load := newHandLoad(h, k, 30)
	for range 20 {
		load.spend("n1")
	}
	load.resume()
	h.advance(50 * time.Millisecond)
	if st, _, ok := h.cores["n2"].replicas.get(k); !ok || windowCount([]limiter.State{st}) != 20 {
		h.t.Fatalf("n2's replica of the key: %v %v; want 20", st, ok)
	}
	return k, load
}

// leavesAndCrashes has name start to leave and crash at once (what it
// sends is lost); the others hear of it as leaving, one after the other.
func (h *handNet) leavesAndCrashes(name string) {
	h.down[name] = true
	h.cores[name].Leave(h.now)
	h.pump()
	for _, o := range h.names {
		if o == name {
			continue
		}
		h.cores[o].SetMembership(h.now, Membership{Members: h.othersThan(o, name), Leaving: []Member{h.member(name)}})
		h.pump()
	}
}

// joinsInPlaceOfItsLeavingRun has the others hear of run, a new run of a
// node they knew as leaving, as joining in its place (a later run of a
// node tells that the earlier one died: see Membership.Joining), then
// run join, then everyone hear of it as a member.
func (h *handNet) joinsInPlaceOfItsLeavingRun(run *Core) {
	name := run.self.Name
	for _, o := range h.names {
		if o != name {
			h.cores[o].SetMembership(h.now, Membership{Members: h.othersThan(o, name), Joining: []Member{h.member(name)}})
			h.pump()
		}
	}
	run.Joined(h.now)
	h.list(name, h.othersThan(name), nil)
	h.advance(100 * time.Millisecond)
	for _, o := range h.names {
		if o != name {
			h.setMembership(o, nil)
		}
	}
}
