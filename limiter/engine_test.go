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

func TestFullEngineSharesAnOverflowCounter(t *testing.T) {
	e := New(Config{MaxKeys: numShards}) // one key per shard
	lim := Limit{Quota: 3, Window: time.Minute}
	// Fill every shard with a live key of another zone.
	for k := Key(1); e.Stats().Keys < numShards; k++ {
		e.TakeOne(t0, Request{Key: k, Zone: 4, Limit: lim})
	}
	// New keys now share zone 5's overflow counter: 3 in total, not 3 each.
	overflowedBefore := e.Stats().Overflowed
	allowed := 0
	for k := Key(1 << 40); k < 1<<40+20; k++ {
		if e.TakeOne(t0, Request{Key: k, Zone: 5, Limit: lim}).Allowed {
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("20 new keys in a full engine allowed %d; want 3 (one shared budget)", allowed)
	}
	st := e.Stats()
	if st.Keys > numShards || st.Overflowed-overflowedBefore != 20 {
		t.Errorf("stats %+v; want at most %d keys and 20 overflowed", st, numShards)
	}
	// Another zone has its own overflow counter.
	if !e.TakeOne(t0, Request{Key: 1 << 50, Zone: 6, Limit: lim}).Allowed {
		t.Error("zone 6 denied by zone 5's overflow")
	}
	// Once the old keys expire, new keys get counters of their own again.
	later := t0.Add(3 * time.Minute)
	for k := Key(1 << 41); k < 1<<41+3*numShards; k++ {
		e.TakeOne(later, Request{Key: k, Zone: 5, Limit: lim})
	}
	if st := e.Stats(); st.Reclaimed == 0 || st.Keys > numShards {
		t.Errorf("stats after expiry %+v; want reclaimed counters and at most %d keys", st, numShards)
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
