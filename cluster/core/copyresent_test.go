package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A copy naming its run (a run's last word sent on after a copy naming
// no run, see placeEvicted; or a snapshot read back) holds 2 counts sent
// again to that run in place of a transfer to another run, which applied
// it: that run's counter, here, holds them, and said so (Applied). The
// key's counter here, 12, holds the record of the copy's run's counter at
// 10; the other run's counter is 5. The copy, 13, holds 1 beyond its
// record and the 2 the other run's counter holds too: weighed against the
// counts sent again it holds, as a counter handed over is, it adds 1
// (18). Where the key is moving here it is (at settling); where the key
// is counted here, the copy was weighed against the record alone, and
// added the 2 again (20: the owner refused requests 2 under the limit).
func TestACopyNamingItsRunIsWeighedAgainstTheCountsSentAgainItHolds(t *testing.T) {
	for _, where := range []string{"counted", "moving"} {
		for _, last := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, last word %v", where, last), func(t *testing.T) {
				h := newHandNet(t, "n0", "n1", "n2")
				k, at := h.keyCountedOrMovingToN0(where == "moving")
				n0 := h.cores["n0"]
				dead, other, applier := Peer{Name: "n9", Inc: 7}, Peer{Name: "n8", Inc: 3}, Peer{Name: "n7", Inc: 5}
				caller := Peer{Name: "n6", Inc: 4}
				var seq uint64
				send := func(tr Transfer) {
					seq++
					tr.Seq, tr.To = seq, n0.self.Inc
					n0.handleTransfer(h.now, h.cores["n2"].self, tr, true)
				}
				send(Transfer{Mode: ModeAdd, CountersOf: other, Holds: []Held{{Run: dead, Gen: 1, State: at(10)}}, States: []limiter.State{at(12)}})
				send(Transfer{Mode: ModeAdd, CountersOf: applier, Applied: []Applied{{From: caller, Seq: 77}}, States: []limiter.State{at(5)}})
				send(Transfer{Mode: ModeCopy, CountersOf: dead, Last: last, Holds: []Held{{Run: dead, Gen: 1, State: at(13)}}, States: []limiter.State{at(13)},
					Resent: []Resent{{Marks: []Replaced{{From: caller, Seq: 77, To: applier}}, State: at(2)}}})
				h.pump()
				if where == "moving" {
					h.advance(time.Second, "n0", "n2")
					if n0.HandoffUnderway() {
						t.Fatal("n0 has not taken n1's keys over")
					}
				}
				if got := h.count("n0", k); got != 18 {
					t.Errorf("n0 counts %d; want 18", got)
				}
				// The owner admits up to the limit (30), and no further.
				load := newHandLoad(h, k, 30)
				for i := range 13 {
					tk := load.spend("n0")
					h.advance(20*time.Millisecond, "n0", "n2")
					load.resume()
					if want := i < 12; tk.d.Allowed != want {
						t.Fatalf("request %d of 13 beyond the 18 counted: allowed %v; want %v (n0 counts %d)", i+1, tk.d.Allowed, want, h.count("n0", k))
					}
				}
			})
		}
	}
}
