package limiter

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestConcurrentTakeIsExact(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, FixedWindow, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			e := New(Config{})
			req := Request{Key: 99, Zone: 1, Limit: Limit{Algorithm: alg, Quota: 100, Window: time.Minute}}
			var allowed atomic.Int64
			var start, done sync.WaitGroup
			start.Add(1)
			for range 1000 {
				done.Add(1)
				go func() {
					defer done.Done()
					start.Wait()
					if e.TakeOne(t0, req).Allowed {
						allowed.Add(1)
					}
				}()
			}
			start.Done()
			done.Wait()
			if got := allowed.Load(); got != 100 {
				t.Fatalf("1000 concurrent requests against 100 allowed %d", got)
			}
		})
	}
}

func TestTakeIsAllOrNothing(t *testing.T) {
	e := New(Config{})
	api := Request{Key: 1, Zone: 1, Limit: Limit{Quota: 5, Window: time.Minute}}
	login := Request{Key: 2, Zone: 2, Limit: Limit{Quota: 1, Window: time.Minute}}
	reqs := []Request{api, login}
	res := make([]Result, 2)

	if !e.Take(t0, reqs, res) {
		t.Fatal("first request denied")
	}
	if e.Take(t0, reqs, res) {
		t.Fatal("second request allowed although login is exhausted")
	}
	if !res[0].Allowed || res[1].Allowed {
		t.Fatalf("results = %+v; want api allowed, login denied", res)
	}
	if res[0].Remaining != 4 {
		t.Errorf("api remaining after a denied batch = %d; want 4 (nothing spent)", res[0].Remaining)
	}
	// The denied batch spent nothing in api: 4 more fit on their own.
	for i := range 4 {
		if !e.TakeOne(t0, api).Allowed {
			t.Fatalf("api request %d denied: the denied batch spent api units", i)
		}
	}
	if e.TakeOne(t0, api).Allowed {
		t.Fatal("api allowed past its quota")
	}
}

func TestConcurrentBatchesAreExact(t *testing.T) {
	// Three zones, requests hitting overlapping pairs: a shared zone b of 50
	// and wide zones a and c. Exactly 50 pairs must pass and each zone's
	// count must match the pairs that passed.
	e := New(Config{})
	lim := func(q int64) Limit { return Limit{Quota: q, Window: time.Minute} }
	a := Request{Key: 10, Zone: 1, Limit: lim(1000)}
	b := Request{Key: 20, Zone: 2, Limit: lim(50)}
	c := Request{Key: 30, Zone: 3, Limit: lim(1000)}
	var ab, bc atomic.Int64
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Go(func() {
			res := make([]Result, 2)
			if i%2 == 0 {
				if e.Take(t0, []Request{a, b}, res) {
					ab.Add(1)
				}
			} else if e.Take(t0, []Request{b, c}, res) {
				bc.Add(1)
			}
		})
	}
	wg.Wait()
	if ab.Load()+bc.Load() != 50 {
		t.Fatalf("%d + %d pairs passed; want 50", ab.Load(), bc.Load())
	}
	if got := e.Peek(t0, a).Remaining; got != 1000-ab.Load() {
		t.Errorf("a remaining %d; want %d", got, 1000-ab.Load())
	}
	if got := e.Peek(t0, c).Remaining; got != 1000-bc.Load() {
		t.Errorf("c remaining %d; want %d", got, 1000-bc.Load())
	}
}

// TestFullEngineOfExhaustedKeysOverflowsPerNetwork fills every shard with
// exhausted counters, which may not be evicted: new keys then share one
// overflow counter per zone and network, so one network's newcomers never
// spend another's.
func TestFullEngineOfExhaustedKeysOverflowsPerNetwork(t *testing.T) {
	e := New(Config{MaxKeys: numShards}) // one key per shard
	lim := Limit{Quota: 3, Window: time.Minute}
	for k := Key(1); e.Stats().Keys < numShards; k++ {
		for range 4 {
			e.TakeOne(t0, Request{Key: k, Zone: 4, Limit: lim})
		}
	}
	overflowedBefore := e.Stats().Overflowed
	allowed := 0
	for k := Key(1 << 40); k < 1<<40+20; k++ {
		if e.TakeOne(t0, Request{Key: k, Zone: 5, Network: 77, Limit: lim}).Allowed {
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("20 new keys of one network in a full engine allowed %d; want 3 (one shared budget)", allowed)
	}
	st := e.Stats()
	if st.Keys > numShards || st.Overflowed-overflowedBefore != 20 || st.Evicted != 0 {
		t.Errorf("stats %+v; want at most %d keys, 20 overflowed, none evicted", st, numShards)
	}
	// Another network, and another zone, have overflow counters of their own.
	if !e.TakeOne(t0, Request{Key: 1 << 50, Zone: 5, Network: 78, Limit: lim}).Allowed {
		t.Error("network 78 denied by network 77's overflow")
	}
	if !e.TakeOne(t0, Request{Key: 1 << 51, Zone: 6, Network: 77, Limit: lim}).Allowed {
		t.Error("zone 6 denied by zone 5's overflow")
	}
	// Once the exhausted keys expire, new keys get counters of their own.
	later := t0.Add(3 * time.Minute)
	for k := Key(1 << 41); k < 1<<41+3*numShards; k++ {
		e.TakeOne(later, Request{Key: k, Zone: 5, Limit: lim})
	}
	if st := e.Stats(); st.Reclaimed == 0 || st.Keys > numShards {
		t.Errorf("stats after expiry %+v; want reclaimed counters and at most %d keys", st, numShards)
	}
}

// TestKeyFloodCannotShutTheTable floods a small table with fifty times as
// many distinct keys as it holds, all from one network: exhausted victims
// stay denied (in another network and in the flooding one), a newcomer from
// another network gets its full limit, and the table stays within its bound
// with the flooding network holding no more than its share.
func TestKeyFloodCannotShutTheTable(t *testing.T) {
	const maxKeys = 16 * numShards
	e := New(Config{MaxKeys: maxKeys})
	lim := Limit{Quota: 3, Window: time.Minute}
	const victimNet, floodNet, newNet = 7, 9, 11
	victims := []Request{
		{Key: 1, Zone: 5, Network: victimNet, Limit: lim},
		{Key: 2, Zone: 5, Network: floodNet, Limit: lim},
	}
	// A bystander that has spent part of its quota, and a victim that
	// spent it all without being denied yet, are also kept or bounded.
	for _, v := range victims {
		for range 4 {
			e.TakeOne(t0, v)
		}
	}
	spent := Request{Key: 3, Zone: 5, Network: victimNet, Limit: lim}
	for range 3 {
		e.TakeOne(t0, spent)
	}
	victims = append(victims, spent)

	at := t0
	for i := range 50 * maxKeys {
		at = t0.Add(time.Duration(i) * time.Microsecond)
		e.TakeOne(at, Request{Key: Key(1<<40 + i), Zone: 5, Network: floodNet, Limit: lim})
	}
	for i, v := range victims {
		if r := e.TakeOne(at, v); r.Allowed {
			t.Errorf("victim %d admitted after the flood: %+v", i, r)
		}
	}
	fresh := Request{Key: 1 << 50, Zone: 5, Network: newNet, Limit: lim}
	for i := range 3 {
		if r := e.TakeOne(at, fresh); !r.Allowed || r.Remaining != int64(2-i) {
			t.Fatalf("newcomer's request %d after the flood: %+v; want its own full quota", i+1, r)
		}
	}
	st := e.Stats()
	if st.Keys > maxKeys || st.Evicted == 0 {
		t.Errorf("stats %+v; want at most %d keys and evictions", st, maxKeys)
	}
	flood := 0
	for i := range e.shards {
		flood += int(e.shards[i].nets[floodNet])
	}
	if share := numShards * int(e.netCap.Load()); flood > share {
		t.Errorf("the flooding network holds %d keys; its share is %d", flood, share)
	}
	e.overflow.mu.Lock()
	overflow := len(e.overflow.entries)
	e.overflow.mu.Unlock()
	if overflow > maxOverflowCounters {
		t.Errorf("%d overflow counters; the bound is %d", overflow, maxOverflowCounters)
	}
}

// TestEvictionTakesTheLeastRecentlyUsed fills a two-key shard and checks
// that a new key evicts the live counter that was used least recently (for
// a token bucket, the one closest to full, so closest to expiring).
func TestEvictionTakesTheLeastRecentlyUsed(t *testing.T) {
	e := New(Config{MaxKeys: 2 * numShards, NetworkShare: 1})
	lim := Limit{Algorithm: TokenBucket, Quota: 3, Window: time.Hour}
	s := &e.shards[0]
	var keys []Key
	for k := Key(1); len(keys) < 3; k++ {
		if shardOf(k) == 0 {
			keys = append(keys, k)
		}
	}
	e.TakeOne(t0, Request{Key: keys[0], Zone: 1, Limit: lim})
	e.TakeOne(t0.Add(time.Minute), Request{Key: keys[1], Zone: 1, Limit: lim})
	e.TakeOne(t0.Add(2*time.Minute), Request{Key: keys[0], Zone: 1, Limit: lim}) // keys[0] used last
	e.TakeOne(t0.Add(3*time.Minute), Request{Key: keys[2], Zone: 1, Limit: lim})
	s.mu.Lock()
	_, has0 := s.entries[keys[0]]
	_, has1 := s.entries[keys[1]]
	s.mu.Unlock()
	if !has0 || has1 {
		t.Errorf("after eviction: recently used kept %v, least recently used kept %v", has0, has1)
	}
}

func TestSweepDropsExpiredCounters(t *testing.T) {
	e := New(Config{})
	short := Limit{Algorithm: FixedWindow, Quota: 10, Window: time.Second}
	long := Limit{Algorithm: FixedWindow, Quota: 10, Window: time.Hour}
	for k := range Key(1000) {
		l := short
		if k%2 == 0 {
			l = long
		}
		e.TakeOne(t0, Request{Key: k, Limit: l})
	}
	dropped := 0
	for range numShards {
		dropped += e.Sweep(t0.Add(time.Minute))
	}
	if dropped != 500 || e.Stats().Keys != 500 {
		t.Fatalf("sweep dropped %d, %d keys left; want 500 and 500", dropped, e.Stats().Keys)
	}
}

func TestResetAndRefund(t *testing.T) {
	e := New(Config{})
	req := Request{Key: 3, Limit: Limit{Quota: 2, Window: time.Minute}}
	e.TakeOne(t0, req)
	e.TakeOne(t0, req)
	if e.TakeOne(t0, req).Allowed {
		t.Fatal("allowed past the quota")
	}
	e.Refund(t0, req)
	if !e.TakeOne(t0, req).Allowed {
		t.Fatal("a refunded unit could not be spent")
	}
	if n := e.Reset(req.Key, 12345); n != 1 {
		t.Fatalf("Reset reported %d counters; want 1", n)
	}
	if r := e.TakeOne(t0, req); !r.Allowed || r.Remaining != 1 {
		t.Fatalf("after Reset got %+v; want a full quota", r)
	}
}

func TestMemoryPerKey(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a million keys")
	}
	const n = 1 << 20
	perKey := measureBytesPerKey(n)
	t.Logf("%.1f bytes per key with %d keys", perKey, n)
	if perKey > 128 {
		t.Fatalf("%.1f bytes per key; the bound is 128", perKey)
	}
}

// TestMemoryPerKeyWithNetworks is the worst case of the key table: every
// key carries its client's network, so every counter has a note.
func TestMemoryPerKeyWithNetworks(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a million keys")
	}
	const n = 1 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e := New(Config{MaxKeys: n})
	h := NewHasher([]byte("memory"))
	lim := Limit{Quota: 100, Window: time.Hour}
	var buf [20]byte
	for i := range n {
		key := fmt.Appendf(buf[:0], "client-%d", i)
		e.TakeOne(t0, Request{Key: ZoneKey(h.Sum64(string(key)), 1), Network: uint32(i/64 + 1), Limit: lim})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(e)
	perKey := float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
	t.Logf("%.1f bytes per key with %d keys, each with a network", perKey, n)
	if perKey > 128 {
		t.Fatalf("%.1f bytes per key; the bound is 128", perKey)
	}
}

func measureBytesPerKey(n int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e := New(Config{MaxKeys: n})
	h := NewHasher([]byte("memory"))
	lim := Limit{Quota: 100, Window: time.Hour}
	var buf [20]byte
	for i := range n {
		key := fmt.Appendf(buf[:0], "client-%d", i)
		e.TakeOne(t0, Request{Key: ZoneKey(h.Sum64(string(key)), 1), Limit: lim})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(e)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

func BenchmarkTakeExistingKey(b *testing.B) {
	for _, alg := range []Algorithm{SlidingWindow, FixedWindow, TokenBucket} {
		b.Run(alg.String(), func(b *testing.B) {
			e := New(Config{})
			req := Request{Key: 77, Limit: Limit{Algorithm: alg, Quota: 1 << 30, Window: time.Hour}}
			now := t0
			b.ReportAllocs()
			for b.Loop() {
				e.TakeOne(now, req)
			}
		})
	}
}

func BenchmarkTakeExistingKeyParallel(b *testing.B) {
	e := New(Config{})
	h := NewHasher([]byte("bench"))
	lim := Limit{Quota: 1 << 30, Window: time.Hour}
	keys := make([]Key, 4096)
	for i := range keys {
		keys[i] = ZoneKey(h.Sum64(fmt.Sprint(i)), 1)
		e.TakeOne(t0, Request{Key: keys[i], Limit: lim})
	}
	b.ReportAllocs()
	var goroutine atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(goroutine.Add(1)) * 1237 // apart, as different clients are
		for pb.Next() {
			e.TakeOne(t0, Request{Key: keys[i&4095], Limit: lim})
			i++
		}
	})
}

func BenchmarkTakeTwoZones(b *testing.B) {
	e := New(Config{})
	lim := Limit{Quota: 1 << 30, Window: time.Hour}
	reqs := []Request{{Key: 1, Zone: 1, Limit: lim}, {Key: 2, Zone: 2, Limit: lim}}
	res := make([]Result, 2)
	b.ReportAllocs()
	for b.Loop() {
		e.Take(t0, reqs, res)
	}
}

// BenchmarkMemoryPerKey reports the heap held per key with a million keys.
func BenchmarkMemoryPerKey(b *testing.B) {
	for b.Loop() {
		b.ReportMetric(measureBytesPerKey(1<<20), "B/key")
	}
}

// BenchmarkNetworkBudget is the engine's part of a cookie-less request,
// with and without its network's budget: 10,000 clients on 2,500 networks,
// the client's counter alone, then with its network's counter decided
// atomically with it; without reputation, and with it (the default, where
// every request is already a batch with the client's reputation). The
// difference is what the network budget adds.
func BenchmarkNetworkBudget(b *testing.B) {
	lim := Limit{Quota: 1 << 30, Window: time.Hour}
	const clients, networks = 10000, 2500
	h := NewHasher([]byte("bench"))
	for _, reputation := range []bool{false, true} {
		for _, withNetwork := range []bool{false, true} {
			name := "client"
			if withNetwork {
				name = "client_and_network"
			}
			if reputation {
				name += "/reputation"
			}
			b.Run(name, func(b *testing.B) {
				e := New(Config{})
				if reputation {
					e.SetReputation(&ReputationPolicy{Penalty: 1, RecoveryPerHour: 10, Buckets: DefaultReputationBuckets()})
				}
				batches := make([][]Request, clients)
				for i := range batches {
					net := h.Sum64(fmt.Sprintf("net-%d", i%networks))
					batches[i] = []Request{{Key: ZoneKey(h.Sum64(fmt.Sprintf("client-%d", i)), 1), Zone: 1, Network: uint32(net), Limit: lim}}
					if withNetwork {
						batches[i] = append(batches[i], Request{Key: ZoneKey(net, 2), Zone: 2, Network: uint32(net), Limit: lim.Scale(4)})
					}
				}
				res := make([]Result, 2)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					reqs := batches[i%clients]
					client := Key(0)
					if reputation {
						client = ZoneKey(uint64(reqs[0].Key), 3)
					}
					e.TakeFor(t0, client, reqs, res[:len(reqs)])
					i++
				}
			})
		}
	}
}
