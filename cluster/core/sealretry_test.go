package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Three nodes form a cluster one by one, as real nodes do: n1 joins n0,
// then n2 joins and hears of n1 before n0 and n1 hear of it (gossip takes
// a round). n2's seal queries reach both a moment before they list it,
// and are refused: neither has its ring yet. A moment later every node
// lists all three, a healthy cluster, and a request for a key moving to
// n2 arrives through n0: n2 holds it for a call timeout while its
// hand-off waits. Its pull of the key goes round (n0 names n1, the key's
// owner by its ring without n2; n1, whose own join waits for n0's seal,
// names n0), so the seals decide. Before, a refused seal was asked again
// a call timeout later, the length of the hold: the request was answered
// NotYetMine just before, and n0 decided it by fallback in a graceful
// join (TestFallbackStartsFromWhatTheOwnerLastSaid on real nodes, 1 to 2
// runs in 100).
func TestASealRefusedForARingTheSourceHadNotHeardOfIsAskedAgainWithinAHold(t *testing.T) {
	h := newHandNet(t, "n0")
	h.names = append(h.names, "n1", "n2")
	h.start("n1", true)
	h.start("n2", true)
	k := h.keyWhere(func(r func(...string) Member) bool {
		return r("n0", "n1").Name == "n1" && r("n0", "n1", "n2").Name == "n2"
	})
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	// n1 joins n0, which has not heard of it.
	n1.Joined(h.now)
	h.list("n1", []Member{h.member("n0")}, nil)
	h.advance(10*time.Millisecond, "n0", "n1")
	// n2 joins through n0, then hears of n1; its seals are refused.
	n2.Joined(h.now)
	h.list("n2", []Member{h.member("n0")}, nil)
	h.advance(10*time.Millisecond, "n0", "n1", "n2")
	h.list("n0", []Member{h.member("n1")}, nil)
	h.list("n2", []Member{h.member("n0"), h.member("n1")}, nil)
	h.tick("n2")
	if !n1.Member() || !n2.Member() || !n2.HandoffUnderway() {
		t.Fatal("n1 and n2 did not join, or n2's hand-off is not under way")
	}
	// n0 lists all three, and a request through n0 reaches n2; n1 lists
	// all three 5 ms later.
	h.list("n0", h.othersThan("n0"), nil)
	d := h.takeHeld("n0", "n2", k, 10, func() {
		h.list("n1", h.othersThan("n1"), nil)
		for _, c := range []*Core{n0, n1, n2} {
			if c.Ring().Fingerprint() != n2.Ring().Fingerprint() {
				t.Fatalf("%s's ring is not the ring of all three", c.self.Name)
			}
		}
	})
	if !d.Allowed || d.Source != SourcePeer {
		t.Fatalf("the request through n0: %+v; want admitted by n2, the key's owner", d)
	}
	if got := h.count("n2", k); got != 1 {
		t.Errorf("n2 counts the key at %d; want 1", got)
	}
}

// takeHeld takes one unit of k (limit quota an hour) through node, whose
// call goes to owner, and has owner hold the item as a driver does: for a
// call timeout, served again every millisecond (a driver serves it again
// whenever keys settle), each time before the cores tick (an answer to
// what a tick sends arrives after that instant), and answered as soon as
// it is decided or the hold has passed. held runs 5 ms after the owner
// first held it. It returns the decision.
func (h *handNet) takeHeld(node, owner string, k limiter.Key, quota int64, held func()) Decision {
	h.t.Helper()
	c, o := h.cores[node], h.cores[owner]
	tk := &handTake{node: node, res: make([]limiter.Result, 1)}
	tk.reqs = []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: quota, Window: time.Hour}}}
	if d, done := c.Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res); done {
		return d
	}
	a := c.Step(h.now, &tk.op)
	item, ok := a.Msg.(TakeItem)
	if a.Kind != ActCall || a.To.Name != owner || !ok {
		h.t.Fatalf("%s's first step: %+v; want a take item for %s", node, a, owner)
	}
	start, hold := h.now, h.now.Add(h.cfg.CallTimeout)
	for {
		reply, wait := o.Serve(h.now, c.Self(), &item, make([]limiter.Result, len(item.Reqs)), hold)
		h.pump()
		if !wait {
			c.Replied(h.now, &tk.op, reply)
			break
		}
		h.now = h.now.Add(time.Millisecond)
		if held != nil && h.now.Sub(start) >= 5*time.Millisecond {
			held()
			held = nil
		}
		if h.now.Before(hold) {
			h.tick()
		}
	}
	h.drive(tk)
	h.finish(tk)
	return tk.d
}
