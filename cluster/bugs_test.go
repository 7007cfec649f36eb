package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// fallbackSpend counts one request for key in n's fallback, as if its
// owner could not be reached.
func fallbackSpend(n *Node, now time.Time, key limiter.Key, lim limiter.Limit) bool {
	res := make([]limiter.Result, 1)
	ok, _ := n.fallbackTake(now, actTake, 0, []limiter.Request{{Key: key, Cost: 1, Limit: lim}}, res)
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
	if ok, _ := nodes[0].fallbackTake(now, actTake, 0, req, res); !ok {
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

// After a membership change, a node pulls only keys whose owner changed:
// fresh keys it owned before the change too cost no call, however many.
func TestPullsOnlyKeysThatMoved(t *testing.T) {
	nodes := startNodes(t, 3)
	newcomer := startNode(t, testConfig(), nodes[0].GossipAddr())
	all := append(slices.Clone(nodes), newcomer)
	waitConverged(t, all, 4)
	// Let node0's own join fall out of the window: it is an old member now.
	node0 := nodes[0]
	node0.joined.Store(time.Now().Add(-time.Hour).UnixNano())
	st := node0.state.Load()
	if st.prev == nil {
		t.Fatal("no membership change seen")
	}
	stayed := 0
	before := node0.stats.pullCalls.Load()
	for i := 0; stayed < 50; i++ {
		k := limiter.ZoneKey(uint64(i)*0x9E3779B97F4A7C15+1, 3)
		now, _ := st.ring.Owner(k.Route())
		was, _ := st.prev.Owner(k.Route())
		if now.Name != node0.Name() || was.Name != node0.Name() {
			continue
		}
		stayed++
		for _, n := range all {
			takeVia(n, k, limitOf(10))
		}
	}
	if calls := node0.stats.pullCalls.Load() - before; calls != 0 {
		t.Errorf("node0 made %d pull calls for 50 keys it owned before and after the change", calls)
	}
}

// A frame of many items whose keys moved to the answering node costs one
// pull call per node that may hold them, not one per key, and the counts
// arrive.
func TestPullsAreBatchedPerFrame(t *testing.T) {
	nodes := startNodes(t, 2)
	var keys []limiter.Key
	for i := range 200 {
		keys = append(keys, limiter.ZoneKey(uint64(i)*0x9E3779B97F4A7C15+7, 5))
	}
	for _, k := range keys {
		for range 3 {
			takeVia(nodes[0], k, limitOf(100))
		}
	}
	newcomer := startNode(t, testConfig(), nodes[0].GossipAddr())
	all := append(slices.Clone(nodes), newcomer)
	waitConverged(t, all, 3)
	// Keys that moved to the newcomer, still held by their old owner (the
	// push has not been allowed to run: they are put back where they were).
	var moved []limiter.Key
	for _, k := range keys {
		if newcomer.Owner(k).Name == newcomer.Name() {
			moved = append(moved, k)
		}
	}
	if len(moved) < 20 {
		t.Fatalf("only %d keys moved", len(moved))
	}
	now := time.Now()
	for _, k := range moved {
		newcomer.engine.Reset(k) // as if the push had not arrived yet
	}
	before := newcomer.stats.pullCalls.Load()
	// One frame carrying every moved key, as a busy peer would batch them.
	e := &encoder{}
	e.u16(len(moved))
	for _, k := range moved {
		e.u8(opPeek)
		e.u64(0)
		e.u8(1)
		encodeZoneReq(e, &limiter.Request{Key: k, Cost: 1, Limit: limitOf(100)})
	}
	newcomer.pullFrame(newcomer.state.Load(), now, decoder{b: e.b})
	if calls := newcomer.stats.pullCalls.Load() - before; calls > 2 {
		t.Errorf("%d pull calls for one frame of %d moved keys; want at most one per other node", calls, len(moved))
	}
}
