package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A dead run's counter sent as it stopped counting, sent on as a copy
// naming its run and as its last word (a copy naming no run, read back
// from an aged snapshot, went ahead of it: see placeEvicted), meets the
// key's counter, 17, started from a counter of another run that holds the
// record of the dead run's counter at 15. Where the key is counted, and
// where it is moving here, whichever of the two comes first: the copy is
// weighed against the record, and adds the one it holds beyond (18).
// Where no record of the dead run's counter is held, it is a copy: the
// newer of 17 and 16 stands, the copy naming no run that went ahead may
// hold its counts (17; added whole, 33).
func TestARunsLastWordSentAsACopyIsWeighedWhereItsCounterIsOnRecord(t *testing.T) {
	for _, where := range []string{"counted", "moving"} {
		for _, record := range []bool{true, false} {
			for _, copyFirst := range []bool{false, true} {
				if where == "counted" && copyFirst {
					continue // a copy that comes first, no record held yet, is the copy it was
				}
				t.Run(fmt.Sprintf("%s, record %v, copy first %v", where, record, copyFirst), func(t *testing.T) {
					h := newHandNet(t, "n0", "n1", "n2")
					owner, second := "n0", "n1"
					if where == "moving" {
						owner, second = "n1", "n0"
					}
					k, _ := h.spentKey(owner, second, 1)
					base := h.cores[owner].engine.ExtractKeys(h.now, []limiter.Key{k})[0]
					n0 := h.cores["n0"]
					if where == "moving" {
						// n1, which owned the key and replicated none of
						// it, dies: the key moves to n0.
						h.down["n1"] = true
						h.setMembership("n0", []string{"n1"})
						h.setMembership("n2", []string{"n1"})
						if !n0.HandoffUnderway() {
							t.Fatal("no hand-off under way at n0")
						}
					}
					at := func(n uint32) limiter.State { s := base; s.Cur = n; return s }
					dead, other := Peer{Name: "n9", Inc: 7}, Peer{Name: "n8", Inc: 3}
					var holds []Held
					if record {
						holds = []Held{{Run: dead, Gen: 1, State: at(15)}}
					}
					counter := func() {
						n0.handleTransfer(h.now, h.cores["n2"].self, Transfer{Seq: 1, To: n0.self.Inc, Mode: ModeAdd, CountersOf: other, Holds: holds, States: []limiter.State{at(17)}}, true)
					}
					lastCopy := func() {
						n0.handleTransfer(h.now, h.cores["n2"].self, Transfer{Seq: 2, To: n0.self.Inc, Mode: ModeCopy, CountersOf: dead, Last: true, Holds: []Held{{Run: dead, Gen: 1, State: at(16)}}, States: []limiter.State{at(16)}}, true)
					}
					if copyFirst {
						lastCopy()
						counter()
					} else {
						counter()
						lastCopy()
					}
					h.pump()
					if where == "moving" {
						h.advance(time.Second, "n0", "n2")
						if n0.HandoffUnderway() {
							t.Fatal("n0 has not taken n1's keys over")
						}
					}
					want := int64(18)
					if !record {
						want = 17
					}
					if got := h.count("n0", k); got != want {
						t.Errorf("n0 counts %d; want %d", got, want)
					}
				})
			}
		}
	}
}
