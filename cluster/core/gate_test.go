package core

import "testing"

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
