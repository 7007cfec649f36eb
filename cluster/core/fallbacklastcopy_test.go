package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// As in TestARunsLastWordSentAsACopyIsWeighedWhereItsCounterIsOnRecord
// (counted, record held), but the key's owner, n0, is cut off without a
// majority while the two come: another run's counter (17) holding the
// record of the dead run's counter at 15, and the dead run's last word
// sent as a copy (16). The counter waits in fallback, whichever comes
// first: come first, it takes the record of the dead run's counter along
// (the counter here held none), and the last word, finding none, is taken
// for a copy and raises the counter here (16), which keeps its record; come
// second, it is weighed against that record and what it adds beyond (2)
// waits. Either way, once the cut heals and the fallback counts join the
// counter here, the dead run's counts are held once: 18, and the owner
// admits up to the limit and no further.
func TestARunsLastWordTakenForACopyWhileACounterWaitsInFallbackIsWeighedWhenTheFallbackCountsJoin(t *testing.T) {
	for _, copyFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("copy first %v", copyFirst), func(t *testing.T) {
			h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
			k, at := h.keyCountedOrMovingToN0(false)
			n0 := h.cores["n0"]
			dead, other := Peer{Name: "n9", Inc: 7}, Peer{Name: "n8", Inc: 3}
			h.cut["n0"], h.cut["n3"] = true, true
			h.advance(time.Second)
			if n0.majority(n0.view.Load()) {
				t.Fatal("n0 has a majority while cut off")
			}
			counter := func() {
				n0.handleTransfer(h.now, h.cores["n3"].self, Transfer{Seq: 1, To: n0.self.Inc, Mode: ModeAdd, CountersOf: other, Holds: []Held{{Run: dead, Gen: 1, State: at(15)}}, States: []limiter.State{at(17)}}, true)
				h.pump()
			}
			lastCopy := func() {
				n0.handleTransfer(h.now, h.cores["n3"].self, Transfer{Seq: 2, To: n0.self.Inc, Mode: ModeCopy, CountersOf: dead, Last: true, Holds: []Held{{Run: dead, Gen: 1, State: at(16)}}, States: []limiter.State{at(16)}}, true)
				h.pump()
			}
			if copyFirst {
				lastCopy()
				counter()
			} else {
				counter()
				lastCopy()
			}
			got, kept := h.count("n0", k), windowCount(n0.fallback.engine.StatesOf(h.now, []limiter.Key{k}))
			if wantKept := map[bool]int64{false: 17, true: 2}[copyFirst]; got != 16 || kept != wantKept {
				t.Fatalf("cut off, n0 counts %d and keeps %d in fallback; want 16 and %d", got, kept, wantKept)
			}
			h.cut["n0"], h.cut["n3"] = false, false
			h.advance(3 * time.Second)
			if !n0.majority(n0.view.Load()) {
				t.Fatal("n0 has no majority after the cut healed")
			}
			if got, kept := h.count("n0", k), windowCount(n0.fallback.engine.StatesOf(h.now, []limiter.Key{k})); got != 18 || kept != 0 {
				t.Fatalf("healed, n0 counts %d and keeps %d in fallback; want 18 and 0", got, kept)
			}
			load := newHandLoad(h, k, 30)
			load.admitted = 18
			load.spendsToTheLimit(t, "n0", "n1", "n2")
		})
	}
}
