package core

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// TestSimulationFiguresAt100Nodes measures, on a simulated cluster of 100
// nodes, the figures docs/cluster.md states: the share of counters that
// move when one node joins and when one leaves (about 1/N, none lost or
// doubled), the simulated time until every node agrees and the hand-offs
// are done, and what a partition lets through, against the formula the
// docs give: a key's owner on the majority side counts exactly, and each
// of the k nodes cut off with the minority admits in fallback at most its
// share of the fallback ratio r of the limit L, so the key admits at most
// L + k·⌈r·L/(k−1)⌉ in the window.
func TestSimulationFiguresAt100Nodes(t *testing.T) {
	if testing.Short() || raceDetector {
		t.Skip("100 simulated nodes: run without -short and without the race detector")
	}
	const nodes = 100
	s := newSim(100, nodes+1)
	s.hist.served = map[servedKey]time.Time{}
	s.hist.servedAlone = map[servedKey]bool{}
	s.hist.loss = map[limiter.Key]int64{}
	for i := range 3000 {
		h := s.hasher.String(fmt.Sprint("figure-key-", i))
		s.keys = append(s.keys, simKey{key: limiter.ZoneKey(h, 1), limit: 1000})
	}
	for i := range nodes {
		s.start(s.names[i], i > 0, Kept{})
	}
	s.runUntil(s.now.Add(2 * time.Second))
	if !s.waitQuiet(30 * time.Second) {
		t.Fatalf("the cluster did not form:\n%s", s.describe())
	}
	// One unit of every key, through every node in turn.
	for z := range s.keys {
		s.request(s.current[s.names[z%nodes]], []int{z})
		if z%100 == 99 {
			s.runUntil(s.now.Add(10 * time.Millisecond))
		}
	}
	s.runUntil(s.now.Add(time.Second))
	if !s.waitQuiet(30 * time.Second) {
		t.Fatalf("the cluster did not settle after the first requests:\n%s", s.describe())
	}
	holders := s.figureHolders(t)

	// One node joins.
	began := s.now
	joiner := s.start(s.names[nodes], true, Kept{})
	s.runUntil(s.now.Add(50 * time.Millisecond))
	if !s.waitQuiet(30 * time.Second) {
		t.Fatalf("the cluster did not settle after a join:\n%s", s.describe())
	}
	joinAgree := s.now.Sub(began)
	after := s.figureHolders(t)
	joinMoved := 0
	for k, h := range after {
		if h != holders[k] {
			joinMoved++
			if h != joiner.name {
				t.Errorf("key %v moved from %s to %s on a join of %s: keys move only to the node that joins", k, holders[k], h, joiner.name)
			}
		}
	}

	// The same node leaves.
	began = s.now
	s.leave(joiner)
	for s.now.Sub(began) < 30*time.Second && !joiner.gone {
		s.runUntil(s.now.Add(50 * time.Millisecond))
	}
	if !s.waitQuiet(30 * time.Second) {
		t.Fatalf("the cluster did not settle after a leave:\n%s", s.describe())
	}
	leaveAgree := s.now.Sub(began)
	final := s.figureHolders(t)
	leaveMoved := 0
	for k, h := range final {
		if h != after[k] {
			leaveMoved++
			if after[k] != joiner.name {
				t.Errorf("key %v moved from %s to %s on a leave of %s: only the leaving node's keys move", k, after[k], h, joiner.name)
			}
		}
	}
	share := func(moved int) float64 { return float64(moved) / float64(len(s.keys)) }
	for _, c := range []struct {
		what  string
		moved int
	}{{"join", joinMoved}, {"leave", leaveMoved}} {
		// 1/101 of 3000 keys is about 30; a binomial spread of ±3σ.
		if got := share(c.moved); got < 0.4/float64(nodes+1) || got > 2.0/float64(nodes+1) {
			t.Errorf("a %s moved %d of %d keys (%.4f): want about 1/%d", c.what, c.moved, len(s.keys), got, nodes+1)
		}
	}

	// A partition: k nodes cut off from the rest; a key whose owner stays
	// with the majority is sent requests through every node, far beyond
	// its limit.
	const cut = 30
	owner, _ := s.current[s.names[0]].core.Owner(s.keys[0].key)
	var minority []string
	for _, name := range s.names[:nodes] {
		if name != owner.Name && len(minority) < cut {
			minority = append(minority, name)
		}
	}
	for _, name := range minority {
		s.net.side[name] = 1
	}
	const z = 0
	limit := s.keys[z].limit
	for round := range 30 {
		for i, name := range s.names[:nodes] {
			s.request(s.current[name], []int{z})
			if i%10 == 9 {
				s.runUntil(s.now.Add(time.Millisecond))
			}
		}
		s.runUntil(s.now.Add(time.Duration(100+round) * time.Millisecond))
	}
	s.heal()
	if !s.waitQuiet(60 * time.Second) {
		t.Fatalf("the cluster did not settle after the partition:\n%s", s.describe())
	}
	admitted, fallback, _ := s.admitted(z)
	ratio := DefaultFallbackRatio
	bound := limit + cut*int64(math.Ceil(ratio*float64(limit)/float64(cut-1)))
	if admitted > bound {
		t.Errorf("partition of %d of %d nodes: key with limit %d admitted %d (%d by fallback), over the bound L + k·⌈r·L/(k−1)⌉ = %d", cut, nodes, limit, admitted, fallback, bound)
	}
	if admitted < limit {
		t.Errorf("partition of %d of %d nodes: key with limit %d admitted only %d: the majority side must admit up to the limit", cut, nodes, limit, admitted)
	}
	if held := s.clusterCount(s.keys[z].key); held != admitted {
		t.Errorf("after the partition healed the cluster holds %d of key %d, %d were admitted", held, z, admitted)
	}

	line := fmt.Sprintf("figures at %d nodes: join moved %.2f%% of keys (1/N = %.2f%%), agreed and settled in %s; leave moved %.2f%%, settled in %s; partition of %d: %d admitted of limit %d (%d by fallback), bound %d",
		nodes, 100*share(joinMoved), 100/float64(nodes+1), joinAgree.Round(10*time.Millisecond), 100*share(leaveMoved), leaveAgree.Round(10*time.Millisecond),
		cut, admitted, limit, fallback, bound)
	t.Log(line)
	announce(line)
}

// figureHolders returns, for every key of s, the node whose engine holds
// its count; every key must be held once, with its count whole.
func (s *sim) figureHolders(t *testing.T) map[limiter.Key]string {
	t.Helper()
	out := map[limiter.Key]string{}
	for z, k := range s.keys {
		got, _, _ := s.admitted(z)
		var total int64
		for _, name := range s.names {
			n := s.current[name]
			if n == nil || n.gone {
				continue
			}
			if c := s.engineCount(n.engine, k.key) + s.heldBy(n, k.key); c > 0 {
				total += c
				out[k.key] = name
			}
		}
		if total != got {
			t.Errorf("key %d: the cluster holds %d, %d were admitted", z, total, got)
		}
	}
	return out
}
