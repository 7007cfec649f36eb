package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node gives its counter of a key away, then counts the key again from
// nothing and gives that second counter away too: both reach the node the
// key moves to before the key settles there. They are two counters of one
// run, not two copies of one counter: the new owner adds both. Taken for
// copies, the newer of the two would stand, and the other's admissions
// would be lost.
func TestTwoCountersOfOneRunAreBothCounted(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n2", 6)
	n0, n2 := h.cores["n0"], h.cores["n2"]
	if got := h.count("n0", k); load.admitted != 6 || got != 6 {
		t.Fatalf("admitted %d, n0 counts %d; want 6 and 6", load.admitted, got)
	}

	// n2 takes n0 for dead: the key moves to n2, and waits there for the
	// seals and n0's lease.
	n2.SetMembership(h.now, Membership{Members: []Member{{Name: "n1", Inc: h.incs["n1"], PeerAddr: "n1"}}, Dead: []Peer{{Name: "n0", Inc: h.incs["n0"]}}})
	if !n2.HandoffUnderway() {
		t.Fatal("no hand-off under way at n2")
	}
	give := func() {
		t.Helper()
		reply := n0.handlePull(h.now, n2.self, Pull{To: n0.self.Inc, Keys: []limiter.Key{k}})
		if reply.Refused || len(reply.Given) == 0 {
			t.Fatalf("n0 gave nothing: %+v", reply)
		}
		for _, tr := range reply.Given {
			n0.Handle(h.now, n2.self, n2.handleTransfer(h.now, n0.self, tr, true))
		}
	}
	give() // n0's first counter: 6
	if got := h.count("n0", k); got != 0 {
		t.Fatalf("n0 still counts %d of the key it gave away", got)
	}
	// n0 counts the key again, from nothing, and gives that counter away.
	reqs := []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 30, Window: time.Hour}}}
	for range 4 {
		if ok := n0.engine.Take(h.now, reqs, make([]limiter.Result, 1)); !ok {
			t.Fatal("n0 denied a take under its limit")
		}
	}
	give() // its second: 4

	h.down["n0"] = true
	h.setMembership("n1", []string{"n0"})
	h.advance(2*time.Second, "n1", "n2")
	if n2.HandoffUnderway() {
		t.Fatal("the key has not settled at n2")
	}
	if got := h.count("n2", k); got != 10 {
		t.Errorf("n2 counts %d; n0 admitted 6 and then 4", got)
	}
}
