package core

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// settleSim is a cluster of three simulated nodes, formed, in which every
// message is delivered twice (a sender that did not hear the
// acknowledgement sends again), and a key that the second node owns.
func settleSim(t *testing.T, seed uint64) (*sim, []*simNode, limiter.Key) {
	t.Helper()
	s := newSim(seed, 3)
	s.hist.served = map[servedKey]time.Time{}
	s.hist.loss = map[limiter.Key]int64{}
	var nodes []*simNode
	for i := range 3 {
		nodes = append(nodes, s.start(s.names[i], i > 0, Kept{}))
	}
	s.runUntil(s.now.Add(2 * time.Second))
	if !s.waitQuiet(20 * time.Second) {
		t.Fatalf("the cluster did not form:\n%s", s.describe())
	}
	ring := nodes[0].core.view.Load().ring
	var key limiter.Key
	for i := range 10000 {
		k := limiter.ZoneKey(s.hasher.String(fmt.Sprint("client-", i)), 1)
		if m, _ := ring.Owner(k.Route()); m.Name == nodes[1].name {
			key = k
			break
		}
	}
	if key == 0 {
		t.Fatal("no key of the second node")
	}
	s.keys = []simKey{{key: key, limit: 10}}
	s.net.dup = 1
	return s, nodes, key
}

// takeAndWait sends one request for zone 0 through n and plays the
// simulation until it is decided.
func takeAndWait(t *testing.T, s *sim, n *simNode) *simReq {
	t.Helper()
	s.request(n, []int{0})
	r := s.hist.reqs[len(s.hist.reqs)-1]
	for range 100 {
		if r.done {
			return r
		}
		s.runUntil(s.now.Add(10 * time.Millisecond))
	}
	t.Fatalf("request %d not decided in a second:\n%s", r.id, strings.Join(s.log, "\n"))
	return nil
}

// settleUnits settles units of r's request at its decision's source.
func settleUnits(s *sim, n *simNode, r *simReq, units int64, charge bool) {
	req := r.reqs[0]
	req.Cost = units
	n.core.Settle(s.now, r.start, r.d.Source, charge, []limiter.Request{req})
}

// Settlements from a node that does not own the key reach its owner and
// are applied once, though every message arrives twice; the owner's
// successor's replica sees them.
func TestSettlementsReachTheOwnerOnce(t *testing.T) {
	s, nodes, key := settleSim(t, 11)
	via, owner := nodes[0], nodes[1]
	for i := range 54 {
		r := takeAndWait(t, s, via)
		if !r.d.Allowed || r.d.Source != SourcePeer {
			t.Fatalf("request %d: allowed %v by %v; want admitted by the peer owner (4 failures at most counted)", i, r.d.Allowed, r.d.Source)
		}
		if i%14 != 0 { // 0, 14, 28, 42: failures, which stay counted
			settleUnits(s, via, r, 1, false)
		}
	}
	s.runUntil(s.now.Add(time.Second))
	if got := s.engineCount(owner.engine, key); got != 4 {
		t.Fatalf("the owner counts %d after 4 failures and 50 refunded successes, each message delivered twice; want 4", got)
	}
	if dups := owner.core.stats.Duplicates.Load(); dups == 0 {
		t.Fatal("no transfer arrived twice: the test does not test resending")
	}
	succ, _ := via.core.view.Load().ring.Successor(key.Route())
	rep, ok := s.current[succ.Name].core.ReplicaOf(key)
	if !ok || rep.Cur != 4 {
		t.Fatalf("the successor's replica: %+v (%v); want 4 counted", rep, ok)
	}
	r := takeAndWait(t, s, via)
	settleUnits(s, via, r, 3, true) // a cost reported 3 more than taken
	s.runUntil(s.now.Add(time.Second))
	if got := s.engineCount(owner.engine, key); got != 8 {
		t.Fatalf("the owner counts %d after a fifth request charged 3 more; want 8", got)
	}
}

// A settlement sent as the key's owner leaves reaches the node that owns
// the key next: it follows the counter, however the hand-off and the
// settlement cross.
func TestASettlementFollowsTheKeyToItsNextOwner(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		s, nodes, key := settleSim(t, seed)
		via, owner := nodes[0], nodes[1]
		var taken []*simReq
		for range 6 {
			taken = append(taken, takeAndWait(t, s, via))
		}
		s.leave(owner)
		// Settle while the hand-off is under way, a little later each seed.
		s.runUntil(s.now.Add(time.Duration(seed) * 5 * time.Millisecond))
		settleUnits(s, via, taken[0], 1, false)
		settleUnits(s, via, taken[1], 2, true)
		s.runUntil(s.now.Add(simTiming.leaveTimeout))
		s.stop(owner)
		if !s.waitQuiet(20 * time.Second) {
			t.Fatalf("seed %d: the cluster did not settle:\n%s", seed, s.describe())
		}
		next, _ := via.core.view.Load().ring.Owner(key.Route())
		if got := s.engineCount(s.current[next.Name].engine, key); got != 7 {
			t.Fatalf("seed %d: the next owner %s counts %d; want 7 (6 taken, 1 given back, 2 charged)\n%s", seed, next.Name, got, strings.Join(s.log, "\n"))
		}
	}
}

// A refund at a node that falls back for an unreachable owner comes out
// of the fallback counter that admitted the request.
func TestAFallbackAdmissionIsSettledInTheFallbackCounter(t *testing.T) {
	s, nodes, key := settleSim(t, 5)
	via, owner := nodes[0], nodes[1]
	s.freeze(owner)
	r := takeAndWait(t, s, via)
	for r.d.Source != SourceFallback {
		r = takeAndWait(t, s, via)
	}
	before := s.engineCount(via.core.fallback.engine, key)
	settleUnits(s, via, r, 1, false)
	if got := s.engineCount(via.core.fallback.engine, key); got != before-1 {
		t.Fatalf("the fallback counter holds %d after a refund; want %d", got, before-1)
	}
}
