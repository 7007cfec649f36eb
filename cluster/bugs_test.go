package cluster

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// fallbackSpend counts one request for key in n's fallback, as if its
// owner could not be reached.
func fallbackSpend(n *Node, now time.Time, key limiter.Key, lim limiter.Limit) bool {
	res := make([]limiter.Result, 1)
	ok, _ := n.fallbackTake(now, opTake, 0, []limiter.Request{{Key: key, Cost: 1, Limit: lim}}, res)
	return ok
}

// A reset through any node clears what every node counted for the key in
// fallback, not only the owner's count.
func TestResetClearsFallbackCountsEverywhere(t *testing.T) {
	nodes := startNodes(t, 3)
	key := keyOwnedBy(t, nodes[0].Ring(), nodes[2].Name(), 0)
	now := time.Now()
	lim := limitOf(5) // 2 in fallback at the default ratio
	for fallbackSpend(nodes[0], now, key, lim) {
	}
	if failed := nodes[1].Reset(key); len(failed) > 0 {
		t.Fatalf("reset could not reach %v", failed)
	}
	if !fallbackSpend(nodes[0], now, key, lim) {
		t.Error("node0 still denies in fallback after the key was reset through node1")
	}
}

// The fallback counters are swept like the owner's: expired ones go.
func TestFallbackCountersAreSwept(t *testing.T) {
	n := startNode(t, testConfig())
	now := time.Now()
	for i := range 50 {
		fallbackSpend(n, now, limiter.Key(i+1), limiter.Limit{Quota: 10, Window: time.Millisecond})
	}
	if k := n.fallback.Stats().Keys; k != 50 {
		t.Fatalf("%d fallback counters; want 50", k)
	}
	// A full sweep takes a minute; run the shards through as the node's
	// ticker would, faster.
	for range 256 {
		n.sweepFallback(now.Add(time.Second))
	}
	if k := n.fallback.Stats().Keys; k != 0 {
		t.Errorf("%d expired fallback counters left after a full sweep", k)
	}
}

// A denial remembered in the blocked cache was decided under the tier
// limits of the time: a change of a shared value (new tier limits,
// published on any node) voids it everywhere.
func TestSharedValueChangeClearsTheBlockedCache(t *testing.T) {
	nodes := startNodes(t, 3)
	key := keyOwnedBy(t, nodes[0].Ring(), nodes[2].Name(), 0)
	for range 3 {
		takeVia(nodes[0], key, limitOf(2))
	}
	eventually(t, 2*time.Second, "the denial cached", func() bool {
		_, src := takeVia(nodes[0], key, limitOf(2))
		return src == SourceBlockedCache
	})
	nodes[1].Publish("tiers", []byte(`{"pro": 100}`))
	eventually(t, 2*time.Second, "the owner asked again once the tiers changed", func() bool {
		ok, src := takeVia(nodes[0], key, limitOf(100))
		return ok && src == SourcePeer
	})
}

// Hand-off frames are bounded in bytes, not only in states: a chunk of
// lease-heavy states that would exceed the frame limit goes out in several
// frames and arrives whole.
func TestHandoffOfLeaseHeavyStatesFitsTheFrameLimit(t *testing.T) {
	nodes := startNodes(t, 2)
	from, to := nodes[0], nodes[1]
	now := time.Now()
	exp := now.Add(time.Hour).UnixNano()
	var states []limiter.State
	for i := uint64(1); len(states) < maxStates; i++ {
		k := limiter.ZoneKey(i*0x9E3779B97F4A7C15, 1)
		if m, _ := from.Ring().Owner(k.Route()); m.Name != to.Name() {
			continue
		}
		s := limiter.State{Key: k, Kind: limiter.KindLeases, Expires: exp}
		for i := range 40 {
			s.Leases = append(s.Leases, limiter.Lease{ID: uint64(i + 1), Expires: exp})
		}
		states = append(states, s)
	}
	if size := len(limiter.AppendStates(nil, states)); size <= maxFrame {
		t.Fatalf("the states take %d bytes, within one frame; the test needs more", size)
	}
	from.engine.Merge(now, states)
	from.handOff()
	for _, i := range []int{0, len(states) / 2, len(states) - 1} {
		if got := len(to.engine.Leases(now, states[i].Key)); got != 40 {
			t.Errorf("state %d: %d leases handed over; want 40", i, got)
		}
	}
	for _, part := range splitStates(states, handoffFrameBytes) {
		if size := len(limiter.AppendStates(nil, part)); size > handoffFrameBytes {
			t.Errorf("a part of %d bytes; the bound is %d", size, handoffFrameBytes)
		}
	}
}

// A lease is released where it lives, whatever decided the request it
// came with: claimed in fallback while the owner was away, renewed at the
// owner once it answered, it is freed in both places.
func TestLeaseReleasedWhereverItWasClaimed(t *testing.T) {
	nodes := startNodes(t, 2)
	room := keyOwnedBy(t, nodes[0].Ring(), nodes[1].Name(), 0)
	req := []limiter.Request{{Key: room, LeaseID: 7, Limit: limiter.Limit{Algorithm: limiter.Concurrency, Quota: 2, Window: time.Minute}}}
	now := time.Now()
	res := make([]limiter.Result, 1)
	if ok, _ := nodes[0].fallbackTake(now, opTake, 0, req, res); !ok {
		t.Fatal("the lease was not claimed in fallback")
	}
	if ok, src := nodes[0].Take(now, req, res); !ok || src != SourcePeer {
		t.Fatalf("renewal at the owner: %v by %v", ok, src)
	}
	if err := nodes[0].Release(now, room, 7); err != nil {
		t.Fatal(err)
	}
	if l := nodes[1].engine.Leases(now, room); len(l) != 0 {
		t.Errorf("the owner still holds %v after the release", l)
	}
	if l := nodes[0].fallback.Leases(now, room); len(l) != 0 {
		t.Errorf("the fallback still holds %v after the release", l)
	}
}
