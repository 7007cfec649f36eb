package cluster

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// peekRemaining returns what the owner has left of key under lim.
func peekRemaining(t *testing.T, owner *Node, key limiter.Key, lim limiter.Limit) int64 {
	t.Helper()
	return owner.engine.Peek(time.Now(), limiter.Request{Key: key, Cost: 1, Limit: lim}).Remaining
}

// What nodes admitted in fallback reaches the owner once it answers again,
// and is added once: the window's total is what an exact limiter allows.
func TestFallbackAdmissionsAreReconciledWithTheOwnerOnce(t *testing.T) {
	nodes := startNodes(t, 3)
	owner := nodes[2]
	key := keyOwnedBy(t, nodes[0].Ring(), owner.Name(), 0)
	lim := limitOf(100)
	for range 10 {
		takeVia(nodes[0], key, lim)
	}
	now := time.Now()
	admitted := 0
	for _, n := range nodes[:2] {
		for range 7 {
			if fallbackSpend(n, now, key, lim) {
				admitted++
			}
		}
	}
	if admitted != 14 {
		t.Fatalf("%d admitted in fallback; want 14", admitted)
	}
	for _, n := range nodes[:2] {
		n.reconcile(time.Now())
	}
	if left := peekRemaining(t, owner, key, lim); left != 100-10-14 {
		t.Fatalf("the owner has %d left after hearing of the fallback; want %d", left, 100-10-14)
	}
	// A retry of a batch already applied (a lost acknowledgement) adds
	// nothing; a later batch does.
	applied := owner.recon.applied[nodes[0].Name()]
	fb := limiter.New(limiter.Config{})
	res := make([]limiter.Result, 1)
	fb.TakeFor(now, 0, []limiter.Request{{Key: key, Cost: 1, Limit: lim}}, res)
	one := fb.ExtractKeys(now, []limiter.Key{key})
	owner.applyReconcile(now, nodes[0].Name(), applied, one)
	if left := peekRemaining(t, owner, key, lim); left != 76 {
		t.Errorf("a retried batch was added again: %d left; want 76", left)
	}
	owner.applyReconcile(now, nodes[0].Name(), applied+1, one)
	if left := peekRemaining(t, owner, key, lim); left != 75 {
		t.Errorf("a new batch was not added: %d left; want 75", left)
	}
}

// In fallback a node admits no more than its share of what the owner last
// said remained, nor more than fallback_ratio × the limit.
func TestFallbackStartsFromWhatTheOwnerLastSaid(t *testing.T) {
	nodes := startNodes(t, 3)
	key := keyOwnedBy(t, nodes[0].Ring(), nodes[2].Name(), 0)
	lim := limitOf(100)
	for range 90 {
		takeVia(nodes[0], key, lim)
	}
	admitted := 0
	for range 50 {
		if fallbackSpend(nodes[0], time.Now(), key, lim) {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("%d admitted in fallback after the owner said 10 remained (2 nodes share it); want 5", admitted)
	}
	// A node the owner told nothing falls back to the ratio.
	other := keyOwnedBy(t, nodes[0].Ring(), nodes[2].Name(), 1)
	admitted = 0
	for range 50 {
		if fallbackSpend(nodes[1], time.Now(), other, lim) {
			admitted++
		}
	}
	if admitted != 40 {
		t.Errorf("%d admitted in fallback with nothing told; want 40 (0.4 × 100)", admitted)
	}
}

// The client's last known reputation scales fallback limits as it scales
// the owner's: a client at factor 0.1 gets 0.04 × L, not 0.4 × L.
func TestFallbackScalesByReputation(t *testing.T) {
	n := startNode(t, testConfig())
	p := &limiter.ReputationPolicy{Buckets: []limiter.Bucket{{Min: 75, Factor: 1}, {Min: 0, Factor: 0.1}}}
	n.SetReputation(p)
	client := limiter.Key(42)
	n.scores.set(client, 10, time.Now())
	var buf [1]limiter.Request
	scaled, _ := n.fallbackLimits(client, []limiter.Request{{Key: 1, Cost: 1, Limit: limitOf(1000)}}, buf[:])
	if q := scaled[0].Limit.Quota; q != 40 {
		t.Errorf("fallback quota %d for a client at factor 0.1; want 40 (0.4 × 0.1 × 1000)", q)
	}
}

// A node whose breaker for an owner is open, with a backoff of an hour,
// uses the owner again as soon as it answers (a ping waits on the live
// connection), and not before the owner has heard what was admitted in
// fallback: whenever the breaker is seen closed, the owner's count has it.
func TestFallbackEndsWhenTheOwnerAnswersAndNotBeforeItHeard(t *testing.T) {
	nodes := startNodes(t, 3)
	owner := nodes[2]
	key := keyOwnedBy(t, nodes[0].Ring(), owner.Name(), 0)
	lim := limitOf(100)
	for range 10 {
		takeVia(nodes[0], key, lim)
	}
	p := nodes[0].peers.get(owner.Name())
	p.breaker.mu.Lock()
	p.breaker.failures, p.breaker.openTill = 6, time.Now().Add(time.Hour)
	p.breaker.mu.Unlock()
	admitted := 0
	for range 7 {
		if fallbackSpend(nodes[0], time.Now(), key, lim) {
			admitted++
		}
	}
	if admitted != 7 {
		t.Fatalf("%d admitted in fallback; want 7", admitted)
	}
	// An ordinary call that succeeds (a query) does not close it by
	// itself; the watcher it starts does, once the owner has the counts.
	nodes[0].answered(p, false)
	eventually(t, 10*time.Second, "the breaker closing well before its backoff", func() bool {
		closed := !p.breaker.open()
		if left := peekRemaining(t, owner, key, lim); closed && left != 100-10-7 {
			t.Fatalf("the breaker closed with the owner at %d left; want %d (fallback heard first)", left, 100-10-7)
		}
		return closed
	})
	if ok, src := takeVia(nodes[0], key, lim); !ok || src != SourcePeer {
		t.Errorf("after the owner answered: allowed %v by %v; want allowed by the peer", ok, src)
	}
	if left := peekRemaining(t, owner, key, lim); left != 100-10-7-1 {
		t.Errorf("the owner has %d left; want %d", left, 100-10-7-1)
	}
}

// The owner's late answer admitting a call its caller gave up on (and
// decided in fallback) is given back at the owner: the request counts once.
// Peeks and refunds answered late give nothing back.
func TestLateAdmissionsOfAbandonedCallsAreGivenBack(t *testing.T) {
	nodes := startNodes(t, 3)
	owner := nodes[2]
	key := keyOwnedBy(t, nodes[0].Ring(), owner.Name(), 0)
	lim := limitOf(100)
	for range 5 {
		takeVia(nodes[0], key, lim)
	}
	p := nodes[0].peers.get(owner.Name())
	reqs := []limiter.Request{{Key: key, Zone: 1, Limit: lim}}
	p.giveBack(newTakeCall(actPeek, 0, reqs, make([]limiter.Result, 1)))
	p.giveBack(newTakeCall(actRefund, 0, reqs, make([]limiter.Result, 1)))
	p.giveBack(newTakeCall(actTake, 0, reqs, make([]limiter.Result, 1)))
	eventually(t, 10*time.Second, "the late admission given back", func() bool {
		return peekRemaining(t, owner, key, lim) == 96
	})
	time.Sleep(50 * time.Millisecond) // anything else sent would land by now
	if left := peekRemaining(t, owner, key, lim); left != 96 {
		t.Errorf("the owner has %d left; want 96 (only the take given back)", left)
	}
}

// A node that never heard from a key's owner admits in fallback at most
// its share of the whole quota over any number of outages: the fallback
// counters start afresh each time they are sent to the owner, the share
// does not.
func TestFallbackShareHoldsAcrossOutagesOfAnOwnerThatSaidNothing(t *testing.T) {
	nodes := startNodes(t, 3)
	n := nodes[0]
	key := keyOwnedBy(t, n.Ring(), nodes[2].Name(), 0)
	lim := limitOf(100)
	admitted := 0
	for range 5 { // five outages, each ended by sending the counts on
		now := time.Now()
		for fallbackSpend(n, now, key, lim) {
			admitted++
		}
		n.toldSpent(now, n.fallback.ExtractKeys(now, []limiter.Key{key}))
	}
	if admitted > 50 {
		t.Errorf("%d admitted in fallback over five outages of an owner that said nothing; want at most 50 (100 shared by 2 nodes)", admitted)
	}
	t.Logf("%d admitted over five outages", admitted)
}
