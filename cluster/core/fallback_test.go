package core

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node's fallback share of a key is fixed for the window when it is
// made: a membership change in the middle of an outage (the unreachable
// owner declared dead, the ring two nodes smaller) does not grow it, or
// the nodes falling back together admit more than the key's limit.
func TestAFallbackShareHoldsThroughAMembershipChange(t *testing.T) {
	f := newFallback(16, FallbackLocal, 0.4)
	const k = limiter.Key(7)
	nothing := func() (int64, bool) { return 0, false }
	now := time.Unix(1000, 0).UnixNano()
	if got := f.available(k, 100, nothing, now, time.Minute, 2); got != 50 {
		t.Fatalf("a node of two that may fall back, told nothing: %d available of 100; want 50", got)
	}
	f.spend(k, 30, now)
	// The owner is declared dead: one other node left.
	if got := f.available(k, 100, nothing, now+1, time.Minute, 1); got != 20 {
		t.Fatalf("after the ring shrank: %d available; want 20 (the share of 50 made for the window, 30 spent)", got)
	}
	// The next window makes a new share, by the membership then.
	if got := f.available(k, 100, nothing, now+int64(time.Minute), time.Minute, 1); got != 100 {
		t.Fatalf("the next window: %d available; want 100", got)
	}
}

// A request decided by fallback names the limit it was counted against,
// the node's share (fallback_ratio × the limit, at most its part of what
// is left), so the client's headers can say it; one decided by its owner
// names none.
func TestAFallbackDecisionNamesTheLimitItCountedAgainst(t *testing.T) {
	cfg := handTiming
	cfg.FallbackRatio = 0.4
	h := newHandNetWith(t, cfg, "n0", "n1", "n2")
	k := h.keyOwnedBy("n0", "n1")
	if tk := h.take("n1", k, 100); !tk.done || tk.d.Source != SourcePeer || tk.res[0].Quota != 0 {
		t.Fatalf("through its owner: done %v by %v, quota %d; want decided by the peer, no quota named", tk.done, tk.d.Source, tk.res[0].Quota)
	}
	h.down["n0"] = true
	h.advance(100 * time.Millisecond)
	tk := h.take("n2", k, 100)
	h.finish(tk)
	if tk.d.Source != SourceFallback || !tk.d.Allowed {
		t.Fatalf("with its owner cut off: allowed %v by %v; want allowed by fallback", tk.d.Allowed, tk.d.Source)
	}
	if got := tk.res[0].Quota; got != 40 {
		t.Errorf("fallback result names quota %d; want 40 (0.4 × 100)", got)
	}
	if got := tk.res[0].Remaining; got != 39 {
		t.Errorf("fallback result: %d remaining; want 39 of 40", got)
	}
}

// A limit of one is a one-use ID (a challenge proof's): while its owner is
// away, each node that may fall back may admit it once, where a share of
// one split between two nodes would round to nothing and refuse a genuine
// proof as a replay everywhere. Larger limits still round down.
func TestAFallbackShareOfALimitOfOneIsOne(t *testing.T) {
	f := newFallback(16, FallbackLocal, 0.4)
	nothing := func() (int64, bool) { return 0, false }
	now := time.Unix(1000, 0).UnixNano()
	if got := f.available(limiter.Key(1), 1, nothing, now, time.Minute, 2); got != 1 {
		t.Fatalf("a one-use key shared by two nodes: %d available; want 1", got)
	}
	f.spend(limiter.Key(1), 1, now)
	if got := f.available(limiter.Key(1), 1, nothing, now+1, time.Minute, 2); got != 0 {
		t.Fatalf("after it was spent here: %d available; want 0", got)
	}
	if got := f.available(limiter.Key(2), 5, nothing, now, time.Minute, 2); got != 2 {
		t.Fatalf("5 shared by two nodes: %d available; want 2 (rounded down)", got)
	}

	// Through cores: the owner of a proof's ID is cut off; the proof is
	// accepted once through a survivor, and its replay there refused.
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOwnedBy("n0", "n1")
	h.down["n0"] = true
	h.advance(100 * time.Millisecond)
	spend := func(node string) Decision {
		reqs := []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Quota: 1, Burst: 1, Window: 6 * time.Minute}}}
		tk := &handTake{node: node, reqs: reqs, res: make([]limiter.Result, 1)}
		d, done := h.cores[node].Take(h.now, &tk.op, OpTake, 0, reqs, tk.res)
		if done {
			return d
		}
		h.finish(tk)
		return tk.d
	}
	if d := spend("n1"); !d.Allowed || d.Source != SourceFallback {
		t.Fatalf("a genuine proof through n1 while the owner is cut off: allowed %v by %v; want allowed by fallback", d.Allowed, d.Source)
	}
	if d := spend("n1"); d.Allowed {
		t.Fatalf("its replay through n1: allowed by %v; want refused", d.Source)
	}
}

// The fallback engine is known empty without reading its shards only until
// something is counted in it: a counter written while another goroutine
// asks is never taken for nothing, and once every counter is sent on the
// engine is empty again.
func TestFallbackEmptySeesEveryWrite(t *testing.T) {
	f := newFallback(1024, FallbackLocal, 0.4)
	if !f.empty() {
		t.Fatal("a new fallback engine is not empty")
	}
	now := time.Unix(1000, 0)
	var asking sync.WaitGroup
	var done atomic.Bool
	asking.Go(func() {
		for !done.Load() {
			f.empty()
		}
	})
	limit := limiter.Limit{Algorithm: limiter.SlidingWindow, Quota: 10, Window: time.Minute}
	for i := range 300 {
		var res [1]limiter.Result
		f.engine.Take(now, []limiter.Request{{Key: limiter.Key(i + 1), Limit: limit}}, res[:])
		f.wrote()
		if f.empty() {
			done.Store(true)
			asking.Wait()
			t.Fatalf("after %d counters written, the fallback engine is said to be empty", i+1)
		}
	}
	done.Store(true)
	asking.Wait()
	f.engine.Extract(now, func(limiter.Key) bool { return true }, 0)
	if !f.empty() {
		t.Fatalf("every counter sent on, %d left: want empty", f.engine.Stats().Keys)
	}
}

// An owner without a majority keeps what is added to its keys meanwhile
// (a leaving node's hand-off) with its fallback counts. When a peer
// answers again, its majority comes back at once, and what it kept joins
// its engine at its next tick: a request it counts before then counts
// those counts too (seed 1795774402844467607 of the simulator: a hand-off
// of 6 kept so, the owner admitted 2 more of a limit of 6 before it
// ticked).
func TestAnOwnerThatRegainsItsMajorityCountsWhatItKeptInFallback(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n1", "n0", 6)
	n1 := h.cores["n1"]
	counter := n1.engine.ExtractKeys(h.now, []limiter.Key{k}) // handed over, say, and coming back
	h.down["n0"], h.down["n2"] = true, true
	h.advance(time.Second, "n1")
	if n1.majority(n1.view.Load()) {
		t.Fatal("n1 has a majority with both others down")
	}
	n1.handleTransfer(h.now, h.cores["n2"].self, Transfer{Seq: 1, To: n1.self.Inc, Mode: ModeAdd, States: counter}, true)
	if !n1.fallback.engine.Has(h.now, k) {
		t.Fatal("n1 without a majority counts what was added as an owner")
	}
	// n0 answers a ping of n1's, between two of n1's ticks.
	h.down["n0"] = false
	for _, p := range n1.view.Load().peers {
		if p != nil && p.peer.Name == "n0" {
			n1.pingNow(p, n1.mono(h.now))
		}
	}
	h.pump()
	if !n1.majority(n1.view.Load()) {
		t.Fatal("n1 has no majority with n0 answering")
	}
	for range 30 {
		load.spend("n1")
	}
	if load.admitted > 30 {
		t.Errorf("%d admitted of a limit of 30", load.admitted)
	}
}

// An owner that falls back for its own key (cut off: its successor's
// lease ran out, its majority is gone) knows what its own counter says
// remains: that is what the key's owner last said, so its share is of
// that, not of the whole limit. Before, an owner whose counter had spent
// the limit admitted a share of the whole limit again in fallback (seed
// 1795821478616772870: n01, 22 of 22 counted, admitted 5 more).
func TestAnOwnerFallingBackForItsOwnKeySharesWhatItsCounterLeft(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOwnedBy("n0", "n1")
	load := newHandLoad(h, k, 6)
	for range 6 {
		load.spend("n0")
	}
	if load.admitted != 6 || load.by[SourceOwner] != 6 {
		t.Fatalf("n0 admitted %d, %d as owner; want 6 and 6", load.admitted, load.by[SourceOwner])
	}
	h.cut["n0"] = true
	h.advance(time.Second, "n0")
	for range 4 {
		load.spend("n0")
		load.resume()
	}
	if load.by[SourceFallback] != 0 || load.admitted != 6 {
		t.Errorf("n0, its counter at the limit, admitted %d in fallback (%d in all); want none", load.by[SourceFallback], load.admitted)
	}
}
