package cluster

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/cluster/core"
	"github.com/tollgate/tollgate/limiter"
)

// nodeNamed returns the node of nodes with the given name.
func nodeNamed(t testing.TB, nodes []*Node, name string) *Node {
	t.Helper()
	for _, n := range nodes {
		if n.Name() == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return nil
}

// countAt is what the node's engine counts of key under lim now.
func countAt(n *Node, key limiter.Key, lim limiter.Limit) int64 {
	r := n.engine.Peek(time.Now(), limiter.Request{Key: key, Zone: 1, Limit: lim})
	return lim.Quota - r.Remaining
}

// A login zone counted at a peer: every request takes its unit there
// before it is served, and the successes give theirs back through the
// node that took them. Four failures among fifty successes leave the
// owner, and the successor's replica, counting four; with a limit of five
// no success is denied, as each refund is acknowledged before the next
// request is taken.
func TestRefundsReachAPeerOwner(t *testing.T) {
	nodes := startNodes(t, 3)
	via := nodes[0]
	key := keyOwnedBy(t, via.Ring(), nodes[1].Name(), 0)
	owner := nodeNamed(t, nodes, nodes[1].Name())
	succ, _ := via.Ring().Successor(key.Route())
	successor := nodeNamed(t, nodes, succ.Name)
	lim := limitOf(5)
	req := []limiter.Request{{Key: key, Zone: 1, Limit: lim}}
	res := make([]limiter.Result, 1)
	for i := range 54 {
		now := time.Now()
		ok, src := via.Take(now, req, res)
		if src != SourcePeer {
			t.Fatalf("request %d decided by %v, want the peer owner", i, src)
		}
		if !ok {
			t.Fatalf("request %d denied: %d taken so far should count at most 4 failures", i, countAt(owner, key, lim))
		}
		if failed := i%14 == 0; !failed { // 0, 14, 28, 42: four failures
			via.RefundAt(time.Now(), now, src, req)
		}
	}
	eventually(t, 2*time.Second, "the owner counting the four failures only", func() bool { return countAt(owner, key, lim) == 4 })
	eventually(t, 2*time.Second, "the successor's replica counting four", func() bool {
		st, ok := successor.core().ReplicaOf(key)
		return ok && st.Cur == 4
	})
	// A charge goes the same way: one more unit spent at the owner.
	charge := []limiter.Request{{Key: key, Zone: 1, Limit: lim, Cost: 1}}
	via.Charge(time.Now(), SourcePeer, charge)
	if got := countAt(owner, key, lim); got != 5 {
		t.Fatalf("the owner counts %d once the charge of 1 returned; want 5", got)
	}
}

// A settlement sent again (its acknowledgement lost) is applied once: the
// owner knows it by its sender and number.
func TestASettlementSentTwiceIsAppliedOnce(t *testing.T) {
	nodes := startNodes(t, 3)
	via := nodes[0]
	owner := nodes[1]
	key := keyOwnedBy(t, via.Ring(), owner.Name(), 0)
	lim := limitOf(10)
	req := []limiter.Request{{Key: key, Zone: 1, Limit: lim, Cost: 5}}
	res := make([]limiter.Result, 1)
	at := time.Now()
	if ok, _ := via.Take(at, req, res); !ok {
		t.Fatal("denied")
	}
	refund := []limiter.Request{{Key: key, Zone: 1, Limit: lim, Cost: 2}}
	e := &encoder{}
	encodeMessage(e, core.Transfer{Seq: 1 << 40, To: owner.self.Load().Inc, Mode: core.ModeRefund, At: at.UnixNano(), Reqs: refund})
	p := via.peers.get(owner.Name())
	for i := range 2 {
		repl, err := via.roundTrip(p, msgTransfer, e.b, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := decodeReply(msgTransfer, &decoder{b: repl})
		if err != nil || ack.(core.Ack).Refused {
			t.Fatalf("sending %d: %v %v", i+1, ack, err)
		}
	}
	if got := countAt(owner, key, lim); got != 3 {
		t.Fatalf("the owner counts %d after 5 taken and 2 given back twice by the same transfer; want 3", got)
	}
}

// A refund that arrives after the window that counted its units rolled
// over takes nothing from the new window, at a peer owner as at home.
func TestARefundAtAPeerOwnerNeverLendsTheNextWindow(t *testing.T) {
	nodes := startNodes(t, 3)
	via := nodes[0]
	owner := nodes[2]
	key := keyOwnedBy(t, via.Ring(), owner.Name(), 0)
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 3, Window: 300 * time.Millisecond}
	// Start just after a window begins, so both takes fall in it.
	time.Sleep(time.Until(time.Now().Truncate(lim.Window).Add(lim.Window + 10*time.Millisecond)))
	req := []limiter.Request{{Key: key, Zone: 1, Limit: lim}}
	res := make([]limiter.Result, 1)
	at := time.Now()
	if ok, _ := via.Take(at, req, res); !ok {
		t.Fatal("denied")
	}
	time.Sleep(time.Until(at.Truncate(lim.Window).Add(lim.Window + 10*time.Millisecond)))
	// The next window: three taken there, then the old request's refund.
	for range 3 {
		if ok, _ := via.Take(time.Now(), req, res); !ok {
			t.Fatal("denied within the new window's quota")
		}
	}
	via.RefundAt(time.Now(), at, SourcePeer, req)
	time.Sleep(100 * time.Millisecond)
	if ok, _ := via.Take(time.Now(), req, res); ok && time.Now().Truncate(lim.Window).Equal(at.Truncate(lim.Window).Add(lim.Window)) {
		t.Fatal("a fourth request admitted in a window of three: the refund of the window before was given to this one")
	}
}
