package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// The owner of a key counts a run's counter of it (n4's, come whole: the
// counter here is that counter, a record says so). Cut off with n3, without
// a majority, it is handed n3's counter that holds a copy of
// n4's and counts more beyond it: what n3's counter adds beyond the copy
// waits in fallback as additions, with the record of n3's counter. The
// record of n4's counter is the counter's here, which stays in the engine:
// it stays with it. Were it taken along with the fallback counts, they
// would come back, the cut healed, naming n4's counter as if they held it,
// and be weighed against the counter here (which is n4's, whole) as
// holding it: that much of them would not be added (simulator seed
// 1795931862291627132: a joiner beside a partition, the counts its
// predecessor handed it, and the counter the far side's owner handed it
// once healed). The owner counts every admitted unit once, then admits up
// to the limit and refuses past it.
func TestTheRecordOfTheCounterHereStaysWithItWhenACounterComingWithoutAMajorityWaitsInFallback(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k, load := h.spentKey("n0", "n1", 5)
	n0, n3, n4 := h.cores["n0"], h.cores["n3"], h.cores["n4"]
	// n3's counter, of the 5 admitted; n4's, of the first 2 of them, is
	// what n3's was started from: n3's holds a copy of it.
	counter3 := n0.engine.ExtractKeys(h.now, []limiter.Key{k})
	if load.admitted != 5 || windowCount(counter3) != 5 || h.count("n0", k) != 0 {
		t.Fatalf("admitted %d, counter %d, n0 %d; want 5, 5, 0", load.admitted, windowCount(counter3), h.count("n0", k))
	}
	counter4 := []limiter.State{counter3[0]}
	counter4[0].Cur = 2

	// n4's counter comes to n0, which counts it as n4's.
	if a, _ := n0.Handle(h.now, n4.Self(), Transfer{Seq: 101, To: n0.self.Inc, Mode: ModeAdd, CountersOf: n4.Self(), Last: true, States: counter4}).(Ack); a.Refused {
		t.Fatal("n0 refused n4's counter")
	}
	h.pump()
	if got := h.count("n0", k); got != 2 {
		t.Fatalf("n0 counts %d of the key with n4's counter; want 2", got)
	}

	h.cut["n0"], h.cut["n3"] = true, true
	h.advance(time.Second)
	if n0.majority(n0.view.Load()) {
		t.Fatal("n0 has a majority while cut off")
	}
	hand := Transfer{Seq: 201, To: n0.self.Inc, Mode: ModeAdd, CountersOf: n3.Self(), Last: true, States: counter3,
		Holds: []Held{{Run: n4.Self(), State: counter4[0], Last: true}}}
	if a, _ := n0.Handle(h.now, n3.Self(), hand).(Ack); a.Refused {
		t.Fatal("n0 refused n3's counter")
	}
	h.pump()
	if got, kept := h.count("n0", k), windowCount(n0.fallback.engine.StatesOf(h.now, []limiter.Key{k})); got != 2 || kept != 3 {
		t.Fatalf("cut off, n0 counts %d and keeps %d in fallback; want 2 and the 3 n3's counter holds beyond n4's", got, kept)
	}

	h.cut["n0"], h.cut["n3"] = false, false
	h.advance(3 * time.Second)
	if !n0.majority(n0.view.Load()) {
		t.Fatal("n0 has no majority after the cut healed")
	}
	load.holdsAdmitted()
	if got := h.count("n0", k); got != 5 {
		t.Errorf("n0 counts %d of the key once its fallback counts joined; want 5", got)
	}
	load.spendsToTheLimit(t, "n0", "n1", "n2")
}
