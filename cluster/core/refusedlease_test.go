package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node that holds no lease from a sender yet (it just started) refuses
// the sender's transfer and pings it at once; the sender, answering that
// ping, knows the lease is on its way, and sends the transfer again at
// once. Waiting a call timeout instead, a joiner whose keys waited for
// the counter it carried held a request past its patience, and the
// request was decided by fallback in a rolling restart (seed
// 1795880160797546414 of the simulator).
func TestATransferRefusedForWantOfALeaseGoesAgainOnceTheReceiverPinged(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	h.advance(time.Second)
	k := h.keyOwnedBy("n0", "n1")
	n0, n1 := h.cores["n0"], h.cores["n1"]
	n0.peers.get("n1").lease.Store(0) // as a run of n0 that just started

	n1.sendTransfer(h.now, n0.self, Transfer{Mode: ModeAdd, States: []limiter.State{counterOf(h.now, k, 2)}}, purposeReconcile)
	h.pump()
	if n := h.pendingTo("n1", n0.self); n != 1 || h.count("n0", k) != 0 {
		t.Fatalf("n1 has %d transfers to n0 pending, n0 counts %d; want the transfer refused for want of a lease", n, h.count("n0", k))
	}
	if got := n1.out.refusals.Load(); got != 1 {
		t.Fatalf("n1's outbox counts %d refused transfers; want 1 (pings walk the outbox only while one waits)", got)
	}
	h.advance(h.cfg.CallTimeout / 4)
	if got := h.count("n0", k); got != 2 {
		t.Errorf("n0 counts %d of the key a quarter of a call timeout after it pinged the sender; want the 2 sent again once it answered", got)
	}
	if got := n1.out.refusals.Load(); got != 0 {
		t.Errorf("n1's outbox counts %d refused transfers once the transfer was applied; want 0", got)
	}
}
