package cluster

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef-cluster")

// fastGossip detects failures quickly, for tests.
var fastGossip = GossipTuning{
	ProbeInterval:  100 * time.Millisecond,
	ProbeTimeout:   50 * time.Millisecond,
	GossipInterval: 20 * time.Millisecond,
	SuspicionMult:  2,
}

func testConfig() Config {
	return Config{
		Bind:        "127.0.0.1:0",
		PeerListen:  "127.0.0.1:0",
		Secret:      testSecret,
		Gossip:      fastGossip,
		CallTimeout: 200 * time.Millisecond,
		Logger:      testLogger(),
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("TOLLGATE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// startNode starts one node that joins through join (if any).
func startNode(t testing.TB, cfg Config, join ...string) *Node {
	t.Helper()
	cfg.Join = join
	n, err := Start(cfg, limiter.New(limiter.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// startNodes starts a cluster of count nodes on loopback.
func startNodes(t testing.TB, count int) []*Node {
	t.Helper()
	first := startNode(t, testConfig())
	nodes := []*Node{first}
	for range count - 1 {
		nodes = append(nodes, startNode(t, testConfig(), first.GossipAddr()))
	}
	waitConverged(t, nodes, count)
	return nodes
}

// eventually retries cond until it holds or the time is up.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: did not happen within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitConverged waits until every node routes by a ring of size members,
// the same ring, and is connected to every other member, which it reaches.
func waitConverged(t testing.TB, nodes []*Node, size int) {
	t.Helper()
	eventually(t, 15*time.Second, fmt.Sprintf("%d nodes agreeing on a ring of %d", len(nodes), size), func() bool {
		fp := nodes[0].Ring().Fingerprint()
		for _, n := range nodes {
			if n.Ring().Len() != size || n.Ring().Fingerprint() != fp {
				return false
			}
			for _, m := range n.Ring().Members() {
				if m.Name == n.Name() {
					continue
				}
				if p := n.peers.get(m.Name); p == nil || !p.connected.Load() || !n.core().Reachable(m.Name) {
					return false
				}
			}
		}
		return true
	})
}

// keyOwnedBy finds a key of zone 1 that the ring gives to owner.
func keyOwnedBy(t testing.TB, r *Ring, owner string, skip int) limiter.Key {
	t.Helper()
	h := keyhash.New([]byte("keys"), "test")
	for i := range 100000 {
		k := limiter.ZoneKey(h.String(fmt.Sprint("client-", i)), 1)
		if m, _ := r.Owner(k.Route()); m.Name == owner {
			if skip == 0 {
				return k
			}
			skip--
		}
	}
	t.Fatalf("no key for %s", owner)
	return 0
}

func limitOf(q int64) limiter.Limit { return limiter.Limit{Quota: q, Window: time.Hour} }

// takeVia takes one unit of key through node n.
func takeVia(n *Node, key limiter.Key, lim limiter.Limit) (bool, Source) {
	res := make([]limiter.Result, 1)
	return n.Take(time.Now(), []limiter.Request{{Key: key, Zone: 1, Limit: lim}}, res)
}

func TestClusterCountsExactlyAcrossNodes(t *testing.T) {
	nodes := startNodes(t, 3)
	ring := nodes[0].Ring()
	for _, owner := range nodes {
		key := keyOwnedBy(t, ring, owner.Name(), 0)
		var allowed atomic.Int64
		var wrongSource atomic.Int64
		var wg sync.WaitGroup
		var start sync.WaitGroup
		start.Add(1)
		for i := range 1000 {
			via := nodes[i%3]
			wg.Go(func() {
				start.Wait()
				ok, src := takeVia(via, key, limitOf(100))
				if ok {
					allowed.Add(1)
				}
				want := SourcePeer
				if via == owner {
					want = SourceOwner
				}
				if src != want && src != SourceBlockedCache {
					wrongSource.Add(1)
				}
			})
		}
		start.Done()
		wg.Wait()
		if got := allowed.Load(); got != 100 {
			t.Errorf("key owned by %s: 1000 concurrent requests over 3 nodes against 100 allowed %d", owner.Name(), got)
		}
		if n := wrongSource.Load(); n > 0 {
			t.Errorf("key owned by %s: %d requests decided by fallback", owner.Name(), n)
		}
	}
	// Batching: fewer frames than items went over the wire.
	var frames, items uint64
	for _, n := range nodes {
		st := n.Status()
		frames += st.PeerFrames
		items += st.PeerItems
	}
	t.Logf("%d take items in %d frames", items, frames)
	if frames == 0 || frames >= items {
		t.Errorf("%d items in %d frames: no batching", items, frames)
	}
}

func TestBlockedKeysAreAnsweredWithoutACall(t *testing.T) {
	nodes := startNodes(t, 2)
	key := keyOwnedBy(t, nodes[0].Ring(), nodes[1].Name(), 0)
	for range 3 {
		takeVia(nodes[0], key, limitOf(3))
	}
	if ok, src := takeVia(nodes[0], key, limitOf(3)); ok || src != SourcePeer {
		t.Fatalf("4th of 3: %v %v; want denied by the owner", ok, src)
	}
	// The denial is remembered (the cache applies writes asynchronously).
	eventually(t, 2*time.Second, "the denial answered from the blocked cache", func() bool {
		ok, src := takeVia(nodes[0], key, limitOf(3))
		return !ok && src == SourceBlockedCache
	})
	before := nodes[0].Status().PeerItems
	for range 10 {
		takeVia(nodes[0], key, limitOf(3))
	}
	if after := nodes[0].Status().PeerItems; after != before {
		t.Errorf("%d calls made for a blocked key", after-before)
	}
	nodes[0].Forget(key)
	if _, src := takeVia(nodes[0], key, limitOf(3)); src != SourcePeer {
		t.Errorf("after Forget: %v; want the owner asked", src)
	}
}

func TestGracefulLeaveHandsCountsOver(t *testing.T) {
	nodes := startNodes(t, 3)
	leaving := nodes[2]
	keys := []limiter.Key{
		keyOwnedBy(t, nodes[0].Ring(), leaving.Name(), 0),
		keyOwnedBy(t, nodes[0].Ring(), leaving.Name(), 1),
		keyOwnedBy(t, nodes[0].Ring(), nodes[0].Name(), 0),
	}
	for _, k := range keys {
		for range 40 {
			takeVia(nodes[0], k, limitOf(100))
		}
	}
	if err := leaving.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, nodes[:2], 2)
	for _, k := range keys {
		allowed := 0
		for i := range 100 {
			if ok, _ := takeVia(nodes[i%2], k, limitOf(100)); ok {
				allowed++
			}
		}
		if allowed != 60 {
			t.Errorf("key %x: %d allowed after 40 of 100 were spent and its owner left; want 60", k, allowed)
		}
	}
}

func TestJoinMovesCountsToTheNewcomer(t *testing.T) {
	nodes := startNodes(t, 2)
	// Spend 30 of 100 on many keys, so some will move to the newcomer.
	var keys []limiter.Key
	for i := range 30 {
		keys = append(keys, keyOwnedBy(t, nodes[0].Ring(), nodes[i%2].Name(), i))
	}
	for _, k := range keys {
		for range 30 {
			takeVia(nodes[0], k, limitOf(100))
		}
	}
	newcomer := startNode(t, testConfig(), nodes[0].GossipAddr())
	nodes = append(nodes, newcomer)
	waitConverged(t, nodes, 3)
	moved := 0
	for _, k := range keys {
		if nodes[0].Owner(k).Name == newcomer.Name() {
			moved++
		}
		allowed := 0
		for i := range 100 {
			if ok, _ := takeVia(nodes[i%3], k, limitOf(100)); ok {
				allowed++
			}
		}
		if allowed != 70 {
			t.Errorf("key %x (owner now %s): %d allowed after 30 of 100; want 70", k, nodes[0].Owner(k).Name, allowed)
		}
	}
	if moved == 0 {
		t.Fatal("no key moved to the newcomer: the test proves nothing")
	}
	t.Logf("%d of %d keys moved to the newcomer", moved, len(keys))
}

func TestUnreachableOwnerFallsBackToTighterLocalCaps(t *testing.T) {
	nodes := startNodes(t, 3)
	crashed := nodes[2]
	key := keyOwnedBy(t, nodes[0].Ring(), crashed.Name(), 0)
	crashed.Close() // no hand-off: as a crash
	// Until memberlist declares it dead, each survivor counts the key
	// itself at 40% of the limit.
	allowed, fallback, before := 0, 0, 0
	for range 100 {
		if nodes[0].Owner(key).Name != crashed.Name() {
			break // declared dead already
		}
		before++
		ok, src := takeVia(nodes[0], key, limitOf(100))
		if ok {
			allowed++
		}
		if src == SourceFallback {
			fallback++
		}
	}
	if before < 50 {
		t.Skip("the crash was detected before the test could look at fallback")
	}
	if fallback != before || allowed != min(before, 40) {
		t.Fatalf("through a survivor: %d allowed, %d by fallback of %d; want %d and %d", allowed, fallback, before, min(before, 40), before)
	}
	// Once it is declared dead, the key has a live owner again and counts
	// exactly: the crashed owner's count is lost, but what the survivor
	// admitted in fallback reaches the new owner.
	waitConverged(t, nodes[:2], 2)
	eventually(t, 2*time.Second, "the fallback counts reconciled", func() bool {
		return nodes[0].core().FallbackKeys() == 0
	})
	more := 0
	for i := range 200 {
		if ok, src := takeVia(nodes[i%2], key, limitOf(100)); ok && src != SourceFallback {
			more++
		}
	}
	if allowed+more != 100 {
		t.Fatalf("after the owner was declared dead: %d allowed exactly; want %d (100 less the %d admitted in fallback)", more, 100-allowed, allowed)
	}
}

func TestFallbackModes(t *testing.T) {
	for _, tc := range []struct {
		mode    FallbackMode
		allowed int
	}{
		{FallbackOpen, 10},
		{FallbackClosed, 0},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			cfg := testConfig()
			cfg.Fallback = tc.mode
			a := startNode(t, cfg)
			b := startNode(t, testConfig(), a.GossipAddr())
			waitConverged(t, []*Node{a, b}, 2)
			key := keyOwnedBy(t, a.Ring(), b.Name(), 0)
			b.Close()
			allowed := 0
			for range 10 {
				if ok, _ := takeVia(a, key, limitOf(5)); ok {
					allowed++
				}
			}
			if allowed != tc.allowed {
				t.Fatalf("fallback %s: %d of 10 allowed against a limit of 5; want %d", tc.mode, allowed, tc.allowed)
			}
		})
	}
}

func TestResetUnblocksEverywhere(t *testing.T) {
	nodes := startNodes(t, 3)
	key := keyOwnedBy(t, nodes[0].Ring(), nodes[2].Name(), 0)
	for _, n := range nodes {
		for range 3 {
			takeVia(n, key, limitOf(2))
		}
	}
	// Every node has now been denied, and the two that asked the owner
	// remember the key as blocked.
	eventually(t, 2*time.Second, "denials cached", func() bool {
		_, src := takeVia(nodes[0], key, limitOf(2))
		return src == SourceBlockedCache
	})
	if failed := nodes[1].Reset(key); len(failed) > 0 {
		t.Fatalf("reset could not reach %v", failed)
	}
	// The count starts afresh: two pass, through any node, then a denial.
	for i, n := range nodes {
		ok, src := takeVia(n, key, limitOf(2))
		if ok != (i < 2) || src == SourceBlockedCache {
			t.Errorf("request %d after the reset, via %s: allowed %v by %v; want allowed %v by the owner", i, n.Name(), ok, src, i < 2)
		}
	}
}

func TestSharedValuesReachEveryNode(t *testing.T) {
	nodes := startNodes(t, 3)
	var mu sync.Mutex
	got := map[string]string{}
	for _, n := range nodes[1:] {
		n.OnShared(func(name string, v SharedValue) {
			mu.Lock()
			got[n.Name()] = string(v.Value)
			mu.Unlock()
		})
	}
	nodes[0].Publish("tiers", []byte(`{"pro": 10}`))
	eventually(t, 5*time.Second, "the value on the other nodes", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got[nodes[1].Name()] == `{"pro": 10}` && got[nodes[2].Name()] == `{"pro": 10}`
	})
	// A newer value wins everywhere, an older one nowhere.
	nodes[2].Publish("tiers", []byte(`{"pro": 20}`))
	eventually(t, 5*time.Second, "the newer value on nodes 0 and 1", func() bool {
		v0, _ := nodes[0].Shared("tiers")
		v1, _ := nodes[1].Shared("tiers")
		return string(v0.Value) == `{"pro": 20}` && string(v1.Value) == `{"pro": 20}`
	})
	old, _ := nodes[0].Shared("tiers")
	old.Version -= 1000
	old.Value = []byte("stale")
	nodes[1].Restore("tiers", old)
	if v, _ := nodes[1].Shared("tiers"); string(v.Value) != `{"pro": 20}` {
		t.Fatalf("an older value replaced a newer one: %q", v.Value)
	}
	// A node that joins later catches up in the state sync of its join.
	late := startNode(t, testConfig(), nodes[0].GossipAddr())
	eventually(t, 5*time.Second, "the value on a node that joined later", func() bool {
		v, _ := late.Shared("tiers")
		return string(v.Value) == `{"pro": 20}`
	})
}

func TestGrantsLeasesAndReputationLiveAtTheOwner(t *testing.T) {
	nodes := startNodes(t, 3)
	for _, n := range nodes {
		n.SetReputation(&limiter.ReputationPolicy{Penalty: 10, RecoveryPerHour: 1, Buckets: limiter.DefaultReputationBuckets()})
	}
	key := keyOwnedBy(t, nodes[0].Ring(), nodes[2].Name(), 0)
	grant := limiter.Grant{Version: [16]byte{1}, Created: time.Now().UnixNano(), Amount: 3, Expires: time.Now().Add(time.Hour).UnixNano()}
	if ok, err := nodes[0].PutGrant(key, grant); !ok || err != nil {
		t.Fatalf("PutGrant: %v %v", ok, err)
	}
	allowed := 0
	for i := range 10 {
		if ok, _ := takeVia(nodes[i%3], key, limitOf(2)); ok {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("%d allowed with a limit of 2 and a grant of 3; want 5", allowed)
	}
	if g, ok, err := nodes[1].GetGrant(key); !ok || err != nil || g.Used != 3 {
		t.Fatalf("grant seen from node1: %+v %v %v", g, ok, err)
	}

	room := keyOwnedBy(t, nodes[0].Ring(), nodes[1].Name(), 3)
	claim := func(n *Node, id uint64) bool {
		res := make([]limiter.Result, 1)
		ok, _ := n.Take(time.Now(), []limiter.Request{{Key: room, LeaseID: id, Limit: limiter.Limit{Algorithm: limiter.Concurrency, Quota: 2, Window: time.Minute}}}, res)
		return ok
	}
	if !claim(nodes[0], 1) || !claim(nodes[2], 2) || claim(nodes[1], 3) {
		t.Fatal("two slots were not exactly two across the nodes")
	}
	denied := claim(nodes[0], 4)
	if denied || !claim(nodes[0], 1) {
		t.Fatal("a holder was not let in again at the cap through a node that had just been denied a new lease")
	}
	if !claim(nodes[2], 1) {
		t.Fatal("renewing a held lease through another node was denied")
	}
	if err := nodes[2].Release(time.Now(), room, 1); err != nil {
		t.Fatal(err)
	}
	if leases, _ := nodes[0].Leases(room); len(leases) != 1 || !claim(nodes[1], 3) {
		t.Fatalf("after a release: %v", leases)
	}

	client := keyOwnedBy(t, nodes[0].Ring(), nodes[1].Name(), 5)
	zone := limiter.ZoneKey(uint64(client), 77) // same route as the client
	res := make([]limiter.Result, 1)
	for i := range 4 {
		d := nodes[0].TakeFor(time.Now(), client, []limiter.Request{{Key: zone, Zone: 77, Limit: limitOf(1)}}, res)
		src, score := d.Source, d.Score
		if i == 1 && (src != SourcePeer || score < 89.9 || score > 90.1) {
			t.Fatalf("first denial: %v, score %g; want the owner's 90", src, score)
		}
	}
	// Later denials may come from the blocked cache; the owner hears of
	// them all the same.
	eventually(t, 2*time.Second, "three violations at the owner", func() bool {
		s, err := nodes[2].Reputation(client)
		return err == nil && s > 69.9 && s < 70.1
	})
	buckets, missing := nodes[0].ReputationBuckets()
	if len(missing) > 0 || len(buckets) != 4 || buckets[1] != 1 {
		t.Fatalf("buckets %v, missing %v; want one client in the second bucket", buckets, missing)
	}
}

func TestReputationScalesZonesKeptByOtherNodes(t *testing.T) {
	nodes := startNodes(t, 3)
	policy := &limiter.ReputationPolicy{Penalty: 30, RecoveryPerHour: 1, Buckets: limiter.DefaultReputationBuckets()}
	for _, n := range nodes {
		n.engine.SetReputation(policy)
		n.SetReputation(policy)
	}
	ring := nodes[0].Ring()
	client := keyOwnedBy(t, ring, nodes[1].Name(), 0)
	// Zones keyed by something else than the client (a user header, say),
	// kept by node2.
	zoneKeys := []limiter.Key{
		keyOwnedBy(t, ring, nodes[2].Name(), 0),
		keyOwnedBy(t, ring, nodes[2].Name(), 1),
		keyOwnedBy(t, ring, nodes[2].Name(), 2),
	}
	allowedOf := func(via *Node, key limiter.Key, quota int64, tries int) (allowed int, score float64) {
		res := make([]limiter.Result, 1)
		for range tries {
			d := via.TakeFor(time.Now(), client, []limiter.Request{{Key: key, Zone: 1, Limit: limitOf(quota)}}, res)
			ok, s := d.Allowed, d.Score
			if ok {
				allowed++
			}
			score = s
		}
		return allowed, score
	}
	ownerScore := func(want float64) {
		t.Helper()
		eventually(t, 2*time.Second, fmt.Sprintf("the client's owner scoring it %g", want), func() bool {
			s, err := nodes[1].Reputation(client)
			return err == nil && s > want-0.1 && s < want+0.1
		})
	}

	// One allowed, two denied by node2: 100 - 2×30 = 40, kept by node1.
	if got, score := allowedOf(nodes[0], zoneKeys[0], 1, 3); got != 1 || score < 39.9 || score > 40.1 {
		t.Fatalf("%d allowed, score %g; want 1 and 40", got, score)
	}
	ownerScore(40)
	// 40 is in the 30% bucket: a fresh zone of 10 gives 3, and the denial
	// of the fourth costs another 30.
	if got, _ := allowedOf(nodes[0], zoneKeys[1], 10, 4); got != 3 {
		t.Fatalf("through node0: %d of 4 allowed with a score of 40; want 3 (30%% of 10)", got)
	}
	ownerScore(10)
	// The zone's own node, which has no score cached, asks the client's
	// owner: 10 is in the 10% bucket.
	if got, _ := allowedOf(nodes[2], zoneKeys[2], 10, 2); got != 1 {
		t.Fatalf("through node2: %d of 2 allowed with a score of 10; want 1 (10%% of 10)", got)
	}
	ownerScore(0)

	// An admin reset of the client forgets the cached scores too.
	nodes[0].Reset(client, zoneKeys[1])
	ownerScore(100)
	if got, _ := allowedOf(nodes[0], zoneKeys[1], 10, 12); got != 10 {
		t.Fatalf("after a reset: %d of 12 allowed of a zone of 10; want 10", got)
	}
}
