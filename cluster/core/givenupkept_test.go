package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node sends a key's owner what it admitted in fallback; the owner
// applies it and its acknowledgement is lost. A split then cuts the owner
// and its successor off; the sender, next in line for the key on the
// larger side, gives the transfer up and keeps the counts for the key,
// which it counts now. Once the split heals, the owner's counter (which
// holds the counts) and the sender's (which holds them again, sent in
// place of the transfer) meet: the counts count once (seed
// 1795816501511161683 of the simulator: the sender's counter went on
// naming nothing of the transfer, and its counts were added twice).
//
// The counts sent again in place of the transfer keep its mark (Was,
// WasTo) while their key waits to settle; once they join the sender's
// counter, the counter names them (Transfer.Resent), and the owner that
// applied the transfer takes them out of it.
func TestCountsKeptInPlaceOfATransferTheCutOffOwnerAppliedCountOnce(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k := h.keyOrdered("n1", "n2", "n0")
	load := newHandLoad(h, k, 30)
	for range 5 {
		load.spend("n1")
	}
	h.advance(20 * time.Millisecond)
	n0, n1 := h.cores["n0"], h.cores["n1"]

	one := n1.engine.StatesOf(h.now, []limiter.Key{k})[0]
	one.Cur = 1
	h.unacked[[2]string{"n0", "n1"}] = true
	n0.sendTransfer(h.now, n1.self, Transfer{Mode: ModeAdd, States: []limiter.State{one}}, purposeReconcile)
	h.pump()
	load.admitted++
	delete(h.unacked, [2]string{"n0", "n1"})
	if got := h.count("n1", k); got != 6 {
		t.Fatalf("n1 counts %d of the key; want the 5 it had and the 1 it applied", got)
	}

	small, large := []string{"n1", "n2"}, []string{"n0", "n3", "n4"}
	for _, name := range small {
		h.cut[name] = true
	}
	for _, name := range large {
		h.setMembership(name, small)
	}
	for _, name := range small {
		h.setMembership(name, large)
	}
	h.advance(3 * time.Second)
	t.Logf("split: n0 %d+%d n1 %d+%d", h.count("n0", k), windowCount(n0.fallback.engine.StatesOf(h.now, []limiter.Key{k})), h.count("n1", k), windowCount(n1.fallback.engine.StatesOf(h.now, []limiter.Key{k})))

	for _, name := range small {
		h.cut[name] = false
	}
	for _, name := range h.names {
		h.setMembership(name, nil)
	}
	h.advance(3 * time.Second)
	h.holdsAdmitted(k, load.admitted, "")
}
