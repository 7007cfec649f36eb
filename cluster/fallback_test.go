package cluster

// Fallback on real nodes: an owner's links are cut (the fault layer of
// fault_test.go) for less than failure detection, so its callers give up
// on it and decide its keys by fallback while it stays a member; then it
// answers again and hears what they admitted.

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testutil"
	"github.com/tollgate/tollgate/limiter"
)

// fallbackCluster starts three nodes n0, n1, n2 on a fault layer, with
// memberlist's default failure detection (seconds): a node cut for a
// moment is given up on by callers but not declared dead.
func fallbackCluster(t *testing.T, seed uint64) (*faultNet, []*Node) {
	t.Helper()
	f := newFaultNet(seed)
	var nodes []*Node
	for i := range 3 {
		cfg := faultConfig(f, fmt.Sprintf("n%d", i), "127.0.0.1:0", "127.0.0.1:0")
		cfg.Gossip = GossipTuning{}
		if i > 0 {
			cfg.Join = []string{nodes[0].GossipAddr()}
		}
		n, err := Start(cfg, limiter.New(limiter.Config{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		nodes = append(nodes, n)
	}
	waitConverged(t, nodes, 3)
	return f, nodes
}

// cut cuts name's links until the returned function restores them.
func cut(f *faultNet, name string) (restore func()) {
	f.set(func() { f.frozen[name] = true })
	return func() { f.set(func() { f.frozen[name] = false }) }
}

// remaining is what owner has left of key under lim.
func remaining(owner *Node, key limiter.Key, lim limiter.Limit) int64 {
	return owner.engine.Peek(time.Now(), limiter.Request{Key: key, Cost: 1, Limit: lim}).Remaining
}

// answersAgain waits until every caller calls owner again and has sent it
// everything it admitted in fallback, and the owner counts all of it: what
// arrives during a hand-off is kept with the hand-off's other counts until
// it settles, and an owner that lost its majority keeps what it heard in
// its fallback counters until its next reconcile.
func answersAgain(t *testing.T, owner *Node, callers ...*Node) {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, owner.Name()+" answering its callers again", func() bool {
		if owner.core().FallbackKeys() > 0 || owner.core().HandoffUnderway() {
			return false
		}
		for _, n := range callers {
			if !n.core().Reachable(owner.Name()) || n.core().FallbackKeys() > 0 {
				return false
			}
		}
		return true
	})
}

// stillMembers fails the test if a node was declared dead meanwhile: the
// test is about an owner that stays one.
func stillMembers(t *testing.T, nodes []*Node) {
	t.Helper()
	for _, n := range nodes {
		if n.Ring().Len() != len(nodes) {
			t.Fatalf("%s's ring has %d members: a cut node was declared dead, not what this test is about", n.Name(), n.Ring().Len())
		}
	}
}

// What two nodes admit in fallback while an owner is cut reaches the owner
// once it answers, once: nothing lost, nothing doubled, and no request
// under the limit denied meanwhile. A caller calls the owner again only
// once the owner has heard what it admitted.
func TestFallbackAdmissionsReachTheOwnerOnce(t *testing.T) {
	f, nodes := fallbackCluster(t, 1)
	owner := nodes[2]
	key := keyOwnedBy(t, nodes[0].Ring(), owner.Name(), 0)
	lim := limitOf(100)
	for i := range 10 {
		if ok, src := takeVia(nodes[i%2], key, lim); !ok || src != SourcePeer {
			t.Fatalf("spending beforehand: allowed %v by %v", ok, src)
		}
	}
	restore := cut(f, owner.Name())
	admitted := make(chan string, 14)
	for _, n := range nodes[:2] {
		go func() {
			for range 7 {
				ok, src := takeVia(n, key, lim)
				admitted <- fmt.Sprintf("%v by %v", ok, src)
			}
		}()
	}
	for range 14 {
		if got := <-admitted; got != fmt.Sprintf("%v by %v", true, SourceFallback) {
			t.Errorf("a request under the limit while its owner was cut: %s; want allowed by fallback", got)
		}
	}
	restore()
	// Whenever a caller calls the owner again, the owner has its share.
	testutil.Eventually(t, 15*time.Second, "the callers calling the owner again", func() bool {
		back := 0
		for _, n := range nodes[:2] {
			if n.core().Reachable(owner.Name()) {
				back++
				if left := remaining(owner, key, lim); left > 100-10-7 {
					t.Fatalf("%s calls the owner again while the owner has %d left; want at most %d", n.Name(), left, 100-10-7)
				}
			}
		}
		return back == 2
	})
	answersAgain(t, owner, nodes[:2]...)
	stillMembers(t, nodes)
	if left := remaining(owner, key, lim); left != 100-10-14 {
		t.Fatalf("the owner has %d left after hearing of the fallback; want %d (nothing lost, nothing doubled)", left, 100-10-14)
	}
	if ok, src := takeVia(nodes[0], key, lim); !ok || src != SourcePeer || remaining(owner, key, lim) != 100-10-14-1 {
		t.Fatalf("after: allowed %v by %v, %d left; want allowed by the owner, %d left", ok, src, remaining(owner, key, lim), 100-10-14-1)
	}
}

// In fallback a node admits no more than its share of what the owner last
// told it remained (one of the two others), nor more than the fallback
// ratio of the limit when the owner told it nothing.
func TestFallbackStartsFromWhatTheOwnerLastSaid(t *testing.T) {
	f, nodes := fallbackCluster(t, 2)
	owner := nodes[2]
	told := keyOwnedBy(t, nodes[0].Ring(), owner.Name(), 0)
	untold := keyOwnedBy(t, nodes[0].Ring(), owner.Name(), 1)
	lim := limitOf(100)
	for range 90 {
		if ok, _ := takeVia(nodes[0], told, lim); !ok {
			t.Fatal("spending beforehand: denied")
		}
	}
	restore := cut(f, owner.Name())
	count := func(key limiter.Key, tries int) (allowed int) {
		for range tries {
			ok, src := takeVia(nodes[0], key, lim)
			if src != SourceFallback {
				t.Fatalf("a request while the owner was cut decided by %v", src)
			}
			if ok {
				allowed++
			}
		}
		return allowed
	}
	toldGot, untoldGot := count(told, 50), count(untold, 50)
	restore()
	answersAgain(t, owner, nodes[:2]...)
	stillMembers(t, nodes)
	if toldGot != 5 {
		t.Errorf("%d admitted in fallback after the owner said 10 remained (two nodes share it); want 5", toldGot)
	}
	if want := int(DefaultFallbackRatio * 100); untoldGot != want {
		t.Errorf("%d admitted in fallback of a key the owner said nothing of; want %d (the fallback ratio)", untoldGot, want)
	}
	if left := remaining(owner, told, lim); left != 5 {
		t.Errorf("the owner has %d left of the key it had said 10 of; want 5", left)
	}
	if left := remaining(owner, untold, lim); left != 100-int64(untoldGot) {
		t.Errorf("the owner has %d left of the other key; want %d", left, 100-untoldGot)
	}
}

// A node the owner told nothing admits in fallback at most its share of
// the whole limit (half: one of the two others) over all the outages of a
// window together: what it sent on is taken off its share, not forgotten.
func TestFallbackShareHoldsAcrossOutages(t *testing.T) {
	f, nodes := fallbackCluster(t, 3)
	owner := nodes[2]
	key := keyOwnedBy(t, nodes[0].Ring(), owner.Name(), 0)
	lim := limitOf(100)
	total := 0
	for outage := range 3 {
		restore := cut(f, owner.Name())
		for range 60 {
			if ok, src := takeVia(nodes[0], key, lim); ok {
				if src != SourceFallback {
					t.Fatalf("outage %d: a request decided by %v", outage, src)
				}
				total++
			}
		}
		restore()
		answersAgain(t, owner, nodes[:2]...)
	}
	stillMembers(t, nodes)
	if total != 50 {
		t.Errorf("%d admitted in fallback over three outages; want 50 (the node's share of the limit, the owner having said nothing)", total)
	}
	if left := remaining(owner, key, lim); left != int64(100-total) {
		t.Errorf("the owner has %d left; want %d", left, 100-total)
	}
}
