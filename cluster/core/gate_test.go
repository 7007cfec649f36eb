package core

import (
	"testing"
	"time"
)

// A node took over x's keys before it heard x's epoch. x, told by another
// node that it was declared dead, joins again under its next epoch and
// pings: not counting, so the run taken over is the one before. It is not
// told it is dead again (it would stay unreachable to itself and never
// deliver what it held), and what it sends under its new epoch is taken;
// what the run taken over sent is not.
func TestSaysDeadToTheRunTakenOverOnly(t *testing.T) {
	x := Peer{Name: "x", Inc: 3}
	g := newGate(true)
	g.tookOver(x, 0)
	if g.saysDead(x, 2, false) {
		t.Error("a node joining again under epoch 2 was told it is dead")
	}
	if g.tookOverAt(x, 2) {
		t.Error("what x sends under epoch 2 is refused")
	}
	if !g.tookOverAt(x, 1) {
		t.Error("what the run taken over (epoch 1) sent is taken")
	}

	// The run taken over itself pings (it has not learnt): it is told.
	g = newGate(true)
	g.tookOver(x, 0)
	if !g.saysDead(x, 1, true) {
		t.Error("the run taken over, still counting, was not told it is dead")
	}
	if !g.saysDead(x, 1, true) || !g.tookOverAt(x, 1) {
		t.Error("the run taken over is forgotten before it joins again")
	}
	if g.saysDead(x, 2, true) {
		t.Error("x, a member again under epoch 2, was told it is dead")
	}
	// A later run of x is another node.
	g = newGate(true)
	g.tookOver(x, 1)
	if g.saysDead(Peer{Name: "x", Inc: 4}, 1, true) {
		t.Error("a later run was told it is dead")
	}
}

// A node starts again with seeds, a seed answers, and the node stands
// still (a stopped process) before its driver lists the members the seed
// gave: the list waits behind the pause. Longer than a probe interval
// later it runs again, and its first tick must not take the silence for
// "nobody else": entering its ring alone, it would own every key and
// count each from its own counters (seed 1795783418819288948 of the
// simulator: a restarted node frozen right after joining admitted a key
// its owner had spent, 6 of 5). The wait counts only time it ran.
func TestAJoiningNodeThatStoodStillWaitsForItsMembersAgain(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n1", 30) // the whole quota
	h.advance(50 * time.Millisecond)

	h.down["n2"] = true
	n2 := h.start("n2", true)
	n2.Joined(h.now)
	h.advance(h.cfg.ProbeInterval+time.Second, "n0", "n1") // n2 stands still
	n2.Tick(h.now)
	if n2.Member() {
		t.Fatalf("n2 entered its ring on its first tick after a pause, knowing no member")
	}

	// The member list comes after the pause: n2 joins with the others and
	// the key stays spent.
	h.setMembership("n2", nil)
	h.advance(time.Second)
	if !n2.Member() {
		t.Fatalf("n2 is no member a second after it learnt the others")
	}
	tk := load.spend("n2")
	load.resume()
	if !tk.done || tk.d.Allowed {
		t.Errorf("the key, spent at its owner, through n2: done %v, %+v; want denied", tk.done, tk.d)
	}
	// And a key under its limit is admitted through it.
	fresh := newHandLoad(h, h.keyOwnedBy("n0", "n1", k), 30)
	tk = fresh.spend("n2")
	fresh.resume()
	if !tk.done || !tk.d.Allowed {
		t.Errorf("a key nobody spent, through n2: done %v, %+v; want admitted", tk.done, tk.d)
	}
}
