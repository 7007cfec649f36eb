package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// n0 counts a key from a dead run's counter (n9's, at 10: the record
// says so) and replicates it to n1. Cut off alone, without a majority, it
// is handed another run's counter (15) that holds a newer copy of n9's,
// at 15, and nothing beyond: the 5 of n9's it holds beyond the counter
// here wait in fallback. The others take n0 for dead, and n1 counts the
// key from n0's replica (10); n9's counter, at 15, comes to n1 and adds
// the 5 beyond it. The cut heals, n0 learns it was taken for dead, and
// sends n1 its counter (10) and its fallback counts (5): the 5 are n9's,
// held at n1 already. Kept with the counter here alone, the record of
// n9's counter at 15 leaves the fallback counts naming none of n9's
// counts, and they are added beside the 5 n9's counter added (20 counted
// of 15; the owner refuses 5 under the limit).
//
// Open (pinned below as a known limit): a record says a counter holds a
// run's counts up to a point, and the counter here and the fallback
// counts split n9's at 10. Taken along with the fallback counts (as
// before TestTheRecordOfTheCounterHereStaysWithItWhenACounterComingWithoutAMajorityWaitsInFallback
// was closed), the record has them weighed as holding n9's first 10
// where they meet a replica of the counter here, and they are lost where
// n9's counter does not come (10 counted of 15:
// TestFallbackCountsHoldingARunsCountsBeyondTheCounterHereAreAddedWhereItsReplicaHoldsTheRecord);
// kept here, they are added again where n9's counter came.
func TestFallbackCountsHoldingARunsCountsBeyondTheCounterHereAreNotAddedAgainWhereThatRunsCounterCame(t *testing.T) {
	h, k, at := fallbackHoldsARunsCountsBeyondTheCounterHere(t)
	n1 := h.cores["n1"]
	n1.handleTransfer(h.now, h.cores["n2"].self, Transfer{Seq: 3, To: n1.self.Inc, Mode: ModeAdd, CountersOf: Peer{Name: "n9", Inc: 7}, States: []limiter.State{at(15)}}, true)
	h.pump()
	if got := h.count("n1", k); got != 15 {
		t.Fatalf("n1 counts %d with n9's counter; want 15", got)
	}
	h.cut["n0"] = false
	h.learnsItWasDeclaredDead("n0")
	h.advance(3 * time.Second)
	// A known limit (docs/cluster.md, "Known limits"): n9's 5 beyond
	// n0's counter are counted twice. The test pins it both ways: it
	// fails if the count comes out exact (the limit is closed: check both
	// sides with holdsAdmitted and spendsToTheLimit here, admitted 15,
	// and strike it from the docs) and if it comes out any other way.
	var total int64
	for _, name := range h.names {
		total += h.count(name, k) + windowCount(h.cores[name].fallback.engine.StatesOf(h.now, []limiter.Key{k}))
	}
	switch total {
	case 20:
		t.Logf("known limit: the cluster counts %d; 15 were admitted", total)
	case 15:
		t.Fatalf("the cluster counts %d, as admitted: the known limit is closed; check both sides with holdsAdmitted and spendsToTheLimit and strike it from docs/cluster.md", total)
	default:
		t.Errorf("the cluster counts %d (%v); 15 were admitted, at worst 5 counted twice (a known limit)", total, h.counts(k))
	}
}

// As above, but n9's counter never comes to n1: the fallback counts, and
// n0's counter as it learns it was taken for dead, are all n1 gets of
// n9's beyond its replica of n0's counter (10). Naming n9's counter at
// 15, as they did when they took the record along, the fallback counts
// were weighed against the record of n9's counter at 10 the replica
// holds as holding it, and added nothing (10 counted of 15). Naming none
// of it, they are added: 15, and the owner admits up to the limit and no
// further.
func TestFallbackCountsHoldingARunsCountsBeyondTheCounterHereAreAddedWhereItsReplicaHoldsTheRecord(t *testing.T) {
	h, k, _ := fallbackHoldsARunsCountsBeyondTheCounterHere(t)
	h.cut["n0"] = false
	h.learnsItWasDeclaredDead("n0")
	h.advance(3 * time.Second)
	load := newHandLoad(h, k, 30)
	load.admitted = 15
	load.holdsAdmitted()
	load.spendsToTheLimit(t, "n1", "n2", "n3")
}

// fallbackHoldsARunsCountsBeyondTheCounterHere plays the first steps of
// TestFallbackCountsHoldingARunsCountsBeyondTheCounterHereAreNotAddedAgainWhereThatRunsCounterCame,
// up to n1 counting the key from n0's replica, n0 down and cut off: it
// returns the key and its counter at n.
func fallbackHoldsARunsCountsBeyondTheCounterHere(t *testing.T) (*handNet, limiter.Key, func(n uint32) limiter.State) {
	t.Helper()
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k, _ := h.spentKey("n0", "n1", 1)
	n0, n1 := h.cores["n0"], h.cores["n1"]
	base := n0.engine.ExtractKeys(h.now, []limiter.Key{k})[0]
	at := func(n uint32) limiter.State { s := base; s.Cur = n; return s }
	dead, other := Peer{Name: "n9", Inc: 7}, Peer{Name: "n8", Inc: 3}
	send := func(seq uint64, tr Transfer) {
		tr.Seq, tr.To = seq, n0.self.Inc
		n0.handleTransfer(h.now, h.cores["n2"].self, tr, true)
		h.pump()
	}
	send(1, Transfer{Mode: ModeAdd, CountersOf: dead, States: []limiter.State{at(10)}})
	h.advance(time.Second)
	if got, rep := h.count("n0", k), n1.replicas.states[k]; got != 10 || rep.state.Cur != 10 {
		t.Fatalf("n0 counts %d, n1's replica %d; want 10 and 10", got, rep.state.Cur)
	}

	h.cut["n0"] = true
	h.advance(time.Second)
	if n0.majority(n0.view.Load()) {
		t.Fatal("n0 has a majority while cut off")
	}
	send(2, Transfer{Mode: ModeAdd, CountersOf: other, Holds: []Held{{Run: dead, State: at(15)}}, States: []limiter.State{at(15)}})
	if got, kept := h.count("n0", k), windowCount(n0.fallback.engine.StatesOf(h.now, []limiter.Key{k})); got != 10 || kept != 5 {
		t.Fatalf("cut off, n0 counts %d and keeps %d in fallback; want 10 and 5", got, kept)
	}

	h.down["n0"] = true
	h.declareDead("n0")
	if got := h.count("n1", k); got != 10 {
		t.Fatalf("n1 counts %d after taking the key over; want 10 (n0's replica)", got)
	}
	return h, k, at
}
