package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A dead run's last word sent as a copy (13) holds 2 counts sent again to
// that run in place of a transfer to another run, which applied it. No
// record of the dead run's counter is held where the key is counted (or
// once a key moving here settled): the copy is taken for a copy, the
// newer stands, and the record of the counts sent again it holds was
// dropped. The other run's counter (5, saying it applied the transfer)
// that came after it was added whole, the 2 it shares with the copy too
// (18 held of 16: the owner refused 2 under the limit). The key's counter
// holds the copy from then on, and the counts sent again it holds: what
// the other run's counter holds of them comes out (16).
func TestARunsLastWordTakenForACopyKeepsTheRecordOfTheCountsSentAgainItHolds(t *testing.T) {
	for _, where := range []string{"counted", "settled"} {
		t.Run(where, func(t *testing.T) {
			h := newHandNet(t, "n0", "n1", "n2")
			k, at := h.keyCountedOrMovingToN0(where == "settled")
			n0 := h.cores["n0"]
			dead, applier, caller := Peer{Name: "n9", Inc: 7}, Peer{Name: "n7", Inc: 5}, Peer{Name: "n6", Inc: 4}
			var seq uint64
			send := func(tr Transfer) {
				seq++
				tr.Seq, tr.To = seq, n0.self.Inc
				n0.handleTransfer(h.now, h.cores["n2"].self, tr, true)
				h.pump()
			}
			send(Transfer{Mode: ModeCopy, CountersOf: dead, Last: true, Holds: []Held{{Run: dead, Gen: 1, State: at(13)}}, States: []limiter.State{at(13)},
				Resent: []Resent{{Marks: []Replaced{{From: caller, Seq: 77, To: applier}}, State: at(2)}}})
			if where == "settled" {
				h.advance(time.Second, "n0", "n2")
				if n0.HandoffUnderway() {
					t.Fatal("n0 has not taken n1's keys over")
				}
			}
			send(Transfer{Mode: ModeAdd, CountersOf: applier, Applied: []Applied{{From: caller, Seq: 77}}, States: []limiter.State{at(5)}})
			if got := h.count("n0", k); got != 16 {
				t.Errorf("n0 counts %d; want 16", got)
			}
			// The owner admits up to the limit (30), and no further.
			load := newHandLoad(h, k, 30)
			load.admitted = 16
			load.spendsToTheLimit(t, "n0")
		})
	}
}
