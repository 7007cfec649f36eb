package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// The old owner of a key hands its counter to a joiner, whose successor
// for the key it is, and keeps it until the joiner replicates it. The
// counter holds a count sent again in place of a transfer another run
// (n1) applied: the record of it goes with the counter to the joiner,
// and is kept with the counter the giver keeps. The joiner is cut off
// before the key settles there and taken over; the kept counter comes
// back to the giver naming the count, so that when n1's counter of the
// key comes, naming the transfer, the count is not added again. Kept
// without the record, the count was held twice.
func TestCountsKeptInPlaceOfATransferComeBackWithACounterTheGiverKept(t *testing.T) {
	h := newHandNet(t, "n0", "n1")
	h.names = append(h.names, "n2")
	h.start("n2", true)
	k := h.keyMovingTo("n0", "n1", "n2")
	load := newHandLoad(h, k, 10)
	for range 5 {
		load.spend("n0")
	}
	n0, n1 := h.cores["n0"], h.cores["n1"]
	// n0 sent n1 (counting the key by a ring since left) one count; n1
	// applied it, the acknowledgement was lost, and n0 counted it in its
	// own counter in place of the transfer.
	one := n0.engine.StatesOf(h.now, []limiter.Key{k})[0]
	one.Cur = 1
	const seq = 9999
	rec := Resent{Marks: []Replaced{{From: n0.self, Seq: seq, To: n1.self}}, State: one}
	n0.engine.Merge(h.now, []limiter.State{one})
	n0.keepResent(h.now, []Resent{rec})
	if got := h.count("n0", k); got != 6 {
		t.Fatalf("n0 counts %d of the key; want 6", got)
	}

	h.oneway = map[[2]string]bool{{"n2", "n1"}: true} // n1 never hears n2's seal query
	h.cores["n2"].Joined(h.now)
	for _, name := range []string{"n2", "n0", "n1"} {
		h.setMembership(name, nil)
	}
	h.advance(50 * time.Millisecond)
	if got := h.count("n2", k); got != 0 {
		t.Fatalf("n2 counts %d of the key before it settled; want 0", got)
	}

	h.cut["n2"] = true
	h.setMembership("n0", []string{"n2"})
	h.setMembership("n1", []string{"n2"})
	h.advance(2*time.Second, "n0", "n1")
	if got := h.count("n0", k); got != 6 {
		t.Fatalf("n0 took the key over from n2 counting %d; want the 6 n2 held for it", got)
	}

	// n1's counter of the key comes, naming the transfer it applied.
	n0.handleTransfer(h.now, n1.self, Transfer{Seq: 1000, To: n0.self.Inc, Mode: ModeAdd, Own: true, States: []limiter.State{one}, Applied: []Applied{{From: n0.self, Seq: seq}}}, true)
	h.pump()
	if got := h.count("n0", k); got != 6 {
		t.Fatalf("n0 counts %d of the key after n1's counter came; want 6: the count n1 applied is held once", got)
	}
}
