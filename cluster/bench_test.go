package cluster

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// BenchmarkTake measures checks through node 0 of a 3-node cluster on
// loopback, with 64 callers at once (as a busy Caddy would have): keys the
// node owns, and keys owned by the two others (forwarded over peer RPC).
// It reports the latency percentiles of single checks and how many peer
// frames were sent per forwarded check (batching) and the replication
// traffic to successors per check (bytes of replica batches, all nodes).
func BenchmarkTake(b *testing.B) {
	nodes := startNodes(b, 3)
	h := keyhash.New([]byte("bench"), "keys")
	var own, remote []limiter.Key
	for i := 0; len(own) < 1000 || len(remote) < 1000; i++ {
		k := limiter.ZoneKey(h.String(fmt.Sprint(i)), 1)
		if nodes[0].Owner(k).Name == nodes[0].Name() {
			own = append(own, k)
		} else {
			remote = append(remote, k)
		}
	}
	lim := limiter.Limit{Quota: 1 << 30, Window: time.Hour}
	for _, run := range []struct {
		name string
		keys []limiter.Key
	}{{"owned", own[:1000]}, {"forwarded", remote[:1000]}} {
		b.Run(run.name, func(b *testing.B) {
			framesBefore, itemsBefore := nodes[0].Status().PeerFrames, nodes[0].Status().PeerItems
			replBefore := replicaBytes(nodes)
			var mu sync.Mutex
			var lat []time.Duration
			var seq atomic.Int64
			b.SetParallelism(32) // 64 callers on 2 CPUs
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				req := make([]limiter.Request, 1)
				res := make([]limiter.Result, 1)
				for pb.Next() {
					i := seq.Add(1)
					req[0] = limiter.Request{Key: run.keys[i%int64(len(run.keys))], Zone: 1, Limit: lim}
					start := time.Now()
					if ok, src := nodes[0].Take(start, req, res); !ok || src == SourceFallback {
						b.Errorf("check %d: %v %v", i, ok, src)
						return
					}
					if i%16 == 0 {
						mine = append(mine, time.Since(start))
					}
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			b.StopTimer()
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			}
			time.Sleep(2 * ReplicateEvery) // the last batch
			b.ReportMetric(float64(replicaBytes(nodes)-replBefore)/float64(b.N), "repl-B/check")
			st := nodes[0].Status()
			if items := st.PeerItems - itemsBefore; items > 0 {
				b.ReportMetric(float64(st.PeerFrames-framesBefore)/float64(items), "frames/check")
			}
		})
	}
}

// replicaBytes sums the replica traffic the nodes sent.
func replicaBytes(nodes []*Node) uint64 {
	var total uint64
	for _, n := range nodes {
		total += n.stats.replicaBytes.Load()
	}
	return total
}
