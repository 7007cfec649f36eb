package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// An owner without a majority is sent a run's counter of a key twice: as
// a copy its run read back from a snapshot (named), and as the counter
// itself, passed on from a replica of it. Each holds the owner's own
// counts and one the run admitted. Kept in fallback as a bare addition,
// the first would lose which run's counts it is, and the second be added
// too (seed 1795775987659025237 of the simulator: a rolling restart,
// then a split). The run's counts are counted once.
func TestARunsCounterSentTwiceToAnOwnerWithoutAMajorityIsCountedOnce(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k, load := h.spentKey("n0", "n1", 3)
	n0, n4 := h.cores["n0"], h.cores["n4"]
	own := n0.engine.StatesOf(h.now, []limiter.Key{k})
	// One more, admitted by a run gone since, whose counter started from
	// a replica of n0's.
	load.spend("n0")
	counter := n0.engine.ExtractKeys(h.now, []limiter.Key{k})
	n0.engine.MergeNewer(h.now, own)
	if load.admitted != 4 || windowCount(counter) != 4 || h.count("n0", k) != 3 {
		t.Fatalf("admitted %d, counter %d, n0 %d; want 4, 4, 3", load.admitted, windowCount(counter), h.count("n0", k))
	}
	gone := Peer{Name: "n9", Inc: 7}
	holds := []Held{{Run: n0.self, State: own[0]}}

	h.cut["n0"], h.cut["n4"] = true, true
	h.advance(time.Second)
	if n0.majority(n0.view.Load()) {
		t.Fatal("n0 has a majority while cut off")
	}
	sends := []Transfer{
		{Mode: ModeCopy, CountersOf: gone, Holds: holds, States: counter},
		{Mode: ModeAdd, CountersOf: gone, Holds: holds, States: counter},
	}
	seq := uint64(100)
	var again []Transfer
	for _, tr := range sends {
		seq++
		tr.Seq, tr.To = seq, n0.self.Inc
		if a, _ := n0.Handle(h.now, n4.Self(), tr).(Ack); a.Refused {
			again = append(again, tr)
		}
	}
	h.pump()

	h.cut["n0"], h.cut["n4"] = false, false
	h.advance(3 * time.Second)
	if !n0.majority(n0.view.Load()) {
		t.Fatal("n0 has no majority after the cut healed")
	}
	for _, tr := range again {
		seq++
		tr.Seq = seq
		if a, _ := n0.Handle(h.now, n4.Self(), tr).(Ack); a.Refused {
			t.Fatalf("n0 refused %v with a majority", tr.Mode)
		}
	}
	h.advance(time.Second)
	var held int64
	for _, name := range h.names {
		held += h.count(name, k)
	}
	if held != int64(load.admitted) {
		t.Errorf("the cluster counts %d of the key (n0 %d); %d were admitted", held, h.count("n0", k), load.admitted)
	}
}
