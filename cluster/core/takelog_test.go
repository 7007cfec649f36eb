package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

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

// A cancel meant for a run that left comes to the node its counters go
// to before them, and waits: the list of the run's items (Transfer.Taken)
// that comes with the counter of the item's key gives the units back, a
// list that came with other keys' counters does not. The run's own copy
// of the cancel (it applied it itself, leaving) and the list coming again
// give nothing more back: one item, given back once, whichever comes
// first.
func TestTakeLogACancelBeforeItsRunsCounterGivesBackOnce(t *testing.T) {
	l := newTakeLog()
	run, caller := Peer{Name: "n1", Inc: 1}, Peer{Name: "n0", Inc: 1}
	k, other := limiter.Key(1), limiter.Key(2)
	reqs := []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 10, Window: time.Hour}}}
	taken := []Taken{{Caller: caller, Seqs: []uint64{7}}}

	if l.cancelAdopted(1, run, caller, Cancel{Take: 7, Reqs: reqs}, false) {
		t.Fatal("a cancel before any list of its run's items gives units back")
	}
	if got := l.adopt(2, run, taken, []limiter.Key{other}); len(got) != 0 {
		t.Fatalf("a list that came with another key's counter gives back %v", got)
	}
	if got := l.adopt(3, run, taken, []limiter.Key{k}); len(got) != 1 || got[0].Reqs[0].Key != k {
		t.Fatalf("the list that came with the key's counter gives back %v; want the item's units", got)
	}
	if l.cancelAdopted(4, run, caller, Cancel{Take: 7, Reqs: reqs}, true) {
		t.Error("the run's own copy of the cancel gives the units back a second time")
	}
	if got := l.adopt(5, run, taken, []limiter.Key{k}); len(got) != 0 {
		t.Errorf("the list, come again, gives back %v", got)
	}
	if l.cancelAdopted(6, run, caller, Cancel{Take: 7, Reqs: reqs}, false) {
		t.Error("the caller's cancel, come again, gives the units back a second time")
	}
}
