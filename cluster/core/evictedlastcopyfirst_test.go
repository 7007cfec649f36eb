package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// As TestARunsLastWordSentAsACopyIsWeighedWhereItsCounterIsOnRecord, but
// the dead run's last word, sent as a copy (16), comes before the counter
// that carries the record of the dead run's counter (17, holding it at
// 15), after the key is counted here: where the key is counted, or once a
// key moving here has settled (the counter comes after). No record held
// yet, the copy is a copy, the newer stands (16); the counter that comes
// then was weighed against no record of the dead run's counter, and added
// whole (33 held of 18: the owner refused 15 under the limit). The copy
// counted here is a copy of the dead run's counter the key's counter
// holds from then on: the counter that comes adds what it holds beyond
// its record of it, 2 (18).
func TestARunsLastWordSentAsACopyBeforeTheCounterThatHoldsItsRecordIsWeighedAgainstIt(t *testing.T) {
	for _, where := range []string{"counted", "settled"} {
		t.Run(where, func(t *testing.T) {
			h := newHandNet(t, "n0", "n1", "n2")
			k, at := h.keyCountedOrMovingToN0(where == "settled")
			n0 := h.cores["n0"]
			dead, other := Peer{Name: "n9", Inc: 7}, Peer{Name: "n8", Inc: 3}
			n0.handleTransfer(h.now, h.cores["n2"].self, Transfer{Seq: 1, To: n0.self.Inc, Mode: ModeCopy, CountersOf: dead, Last: true, Holds: []Held{{Run: dead, Gen: 1, State: at(16)}}, States: []limiter.State{at(16)}}, true)
			h.pump()
			if where == "settled" {
				h.advance(time.Second, "n0", "n2")
				if n0.HandoffUnderway() {
					t.Fatal("n0 has not taken n1's keys over")
				}
			}
			n0.handleTransfer(h.now, h.cores["n2"].self, Transfer{Seq: 2, To: n0.self.Inc, Mode: ModeAdd, CountersOf: other, Holds: []Held{{Run: dead, Gen: 1, State: at(15)}}, States: []limiter.State{at(17)}}, true)
			h.pump()
			if got := h.count("n0", k); got != 18 {
				t.Errorf("n0 counts %d; want 18", got)
			}
			// The owner admits up to the limit (30), and no further.
			load := newHandLoad(h, k, 30)
			load.admitted = 18
			load.spendsToTheLimit(t, "n0")
		})
	}
}
