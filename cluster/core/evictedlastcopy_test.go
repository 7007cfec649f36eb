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
					k, at := h.keyCountedOrMovingToN0(where == "moving")
					n0 := h.cores["n0"]
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

// keyCountedOrMovingToN0 gives, in a cluster of n0–n2, a key with 1 spent
// that n0 owns and counts, or (moving) one that moves to n0: its owner
// n1, which replicated none of it, dies, and n0's hand-off is under way.
// It returns the key and the key's counter at n.
func (h *handNet) keyCountedOrMovingToN0(moving bool) (limiter.Key, func(n uint32) limiter.State) {
	h.t.Helper()
	owner, second := "n0", "n1"
	if moving {
		owner, second = "n1", "n0"
	}
	k, _ := h.spentKey(owner, second, 1)
	base := h.cores[owner].engine.ExtractKeys(h.now, []limiter.Key{k})[0]
	if moving {
		h.down["n1"] = true
		h.setMembership("n0", []string{"n1"})
		h.setMembership("n2", []string{"n1"})
		if !h.cores["n0"].HandoffUnderway() {
			h.t.Fatal("no hand-off under way at n0")
		}
	}
	return k, func(n uint32) limiter.State { s := base; s.Cur = n; return s }
}
