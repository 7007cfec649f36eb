package core

import "testing"

// An owner serves a caller's items past the size of its log: each new
// number is taken once, however many items the slot it falls in held
// before, and a cancel of a new number gives nothing back.
func TestTakeLogPastItsSize(t *testing.T) {
	l := newTakeLog()
	caller := Peer{Name: "n1", Inc: 1}
	takes := 0
	take := func() bool { takes++; return true }
	for seq := uint64(1); seq <= 3*takeLogSize; seq++ {
		if how, _ := l.decide(caller, seq, take); how != servedNow {
			t.Fatalf("item %d: served as %d, want served now", seq, how)
		}
	}
	if takes != 3*takeLogSize {
		t.Fatalf("%d takes for %d items", takes, 3*takeLogSize)
	}
	if how, ok := l.decide(caller, 3*takeLogSize, take); how != servedBefore || !ok {
		t.Errorf("the last item again: %d %v, want served before, admitted", how, ok)
	}
	next := uint64(3*takeLogSize + 1)
	if l.cancel(caller, next) {
		t.Errorf("a cancel of item %d, never served, gives units back", next)
	}
	if how, _ := l.decide(caller, next, take); how != servedCancelled {
		t.Errorf("item %d after its cancel: %d, want cancelled", next, how)
	}
}
