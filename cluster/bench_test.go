package cluster

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// spreadKeys is how many keys forwarded_spread cycles through: enough that
// a key is seldom counted twice within a replication interval, so every
// check is replicated on its own (the most replication traffic per check).
const spreadKeys = 200_000

// BenchmarkTake measures checks through node 0 of a 3-node cluster on
// loopback, with 64 callers at once (as a busy Caddy would have): keys the
// node owns, and keys owned by the two others (forwarded over peer RPC),
// 1000 of each (so a key changes many times in a replication interval and
// is replicated once), and forwarded checks spread over spreadKeys keys.
//
// Wall time per check (ns/op) on a machine with few shared cores says
// little about cost, so it also reports what the checks cost the process,
// per check: CPU time (cpu-ns/op, user and system, from getrusage; the
// three nodes run in this process, so for a forwarded check it is the
// caller, the owner and the successor's replica together, plus the
// runtime's scheduler and garbage collector), of which in the kernel
// (sys-ns/op), the background the idle cluster costs over the same time
// (idle-cpu-ns/op, already inside cpu-ns/op), read and write system calls
// (reads/op, writes/op, from /proc/self/io: every socket read and write of
// all three nodes), bytes written to sockets (written-B/op), peer frames
// per forwarded check (frames/op, node 0's take frames), and replication
// traffic to successors (repl-B/op: bytes of replica batches, all nodes),
// besides the latency percentiles of single checks.
//
// The nodes are measured in steady state: after the hand-off window that
// follows the cluster's forming (during it, an owner checks for every key
// it is asked about whether it moved there, which a benchmark started at
// once would mostly measure).
func BenchmarkTake(b *testing.B) {
	cfg := testConfig()
	cfg.HandoffWindow = 100 * time.Millisecond
	// A check that falls back is not a forwarded check: on a machine shared
	// with other work, a stall longer than the tests' 200 ms deadline, or
	// than their fast failure detection, happens now and then, and opens
	// the breaker for everyone. So the deadline is longer, and failure
	// detection is memberlist's default.
	cfg.CallTimeout = 2 * time.Second
	cfg.Gossip = GossipTuning{}
	first := startNode(b, cfg)
	nodes := []*Node{first, startNode(b, cfg, first.GossipAddr()), startNode(b, cfg, first.GossipAddr())}
	waitConverged(b, nodes, 3)
	time.Sleep(2 * cfg.HandoffWindow)
	h := keyhash.New([]byte("bench"), "keys")
	var own, remote []limiter.Key
	for i := 0; len(own) < 1000 || len(remote) < spreadKeys; i++ {
		k := limiter.ZoneKey(h.String(fmt.Sprint(i)), 1)
		if nodes[0].Owner(k).Name == nodes[0].Name() {
			own = append(own, k)
		} else {
			remote = append(remote, k)
		}
	}
	idle := idleCPURate(200 * time.Millisecond)
	lim := limiter.Limit{Quota: 1 << 30, Window: time.Hour}
	for _, run := range []struct {
		name string
		keys []limiter.Key
	}{{"owned", own[:1000]}, {"forwarded", remote[:1000]}, {"forwarded_spread", remote}} {
		b.Run(run.name, func(b *testing.B) {
			framesBefore, itemsBefore := nodes[0].Status().PeerFrames, nodes[0].Status().PeerItems
			replBefore := replicaBytes(nodes)
			var mu sync.Mutex
			var lat []time.Duration
			var seq atomic.Int64
			b.SetParallelism(32) // 64 callers on 2 CPUs
			b.ReportAllocs()
			use := readUsage(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				labelGoroutine(nodes[0].Name(), "caller")
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
			time.Sleep(2 * ReplicateEvery) // the last replication batch
			use.report(b, idle)
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			}
			b.ReportMetric(float64(replicaBytes(nodes)-replBefore)/float64(b.N), "repl-B/op")
			st := nodes[0].Status()
			if items := st.PeerItems - itemsBefore; items > 0 {
				b.ReportMetric(float64(st.PeerFrames-framesBefore)/float64(items), "frames/op")
			}
		})
	}
}

// BenchmarkSingleNode compares the engine alone with a standalone node and
// with a started node alone in its cluster (a one-member ring), taking the
// same keys: what clustering costs a single node.
func BenchmarkSingleNode(b *testing.B) {
	h := keyhash.New([]byte("bench"), "keys")
	keys := make([]limiter.Key, 1000)
	for i := range keys {
		keys[i] = limiter.ZoneKey(h.String(fmt.Sprint(i)), 1)
	}
	lim := limiter.Limit{Quota: 1 << 30, Window: time.Hour}
	engine := limiter.New(limiter.Config{})
	standalone := Standalone(engine)
	alone := startNode(b, testConfig())
	for _, run := range []struct {
		name string
		take func(time.Time, []limiter.Request, []limiter.Result) bool
	}{
		{"engine", func(now time.Time, reqs []limiter.Request, res []limiter.Result) bool {
			ok, _ := engine.TakeFor(now, 0, reqs, res)
			return ok
		}},
		{"standalone", func(now time.Time, reqs []limiter.Request, res []limiter.Result) bool {
			ok, _ := standalone.Take(now, reqs, res)
			return ok
		}},
		{"one_member_ring", func(now time.Time, reqs []limiter.Request, res []limiter.Result) bool {
			ok, _ := alone.Take(now, reqs, res)
			return ok
		}},
	} {
		b.Run(run.name, func(b *testing.B) {
			b.ReportAllocs()
			req := make([]limiter.Request, 1)
			res := make([]limiter.Result, 1)
			now := time.Now()
			for i := 0; b.Loop(); i++ {
				req[0] = limiter.Request{Key: keys[i%len(keys)], Zone: 1, Limit: lim}
				if !run.take(now, req, res) {
					b.Fatal("denied")
				}
			}
		})
	}
}

// replicaBytes sums the replica traffic the nodes sent.
func replicaBytes(nodes []*Node) uint64 {
	var total uint64
	for _, n := range nodes {
		total += n.replicaBytes.Load()
	}
	return total
}

// usage is what the process has spent so far, and when it was read.
type usage struct {
	at             time.Time
	user, sys      time.Duration
	reads, writes  uint64
	written        uint64
	nvcsw, nivcsw  int64
	procIOReadable bool
}

func readUsage(tb testing.TB) usage {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	u := usage{
		at:     time.Now(),
		user:   time.Duration(ru.Utime.Nano()),
		sys:    time.Duration(ru.Stime.Nano()),
		nvcsw:  ru.Nvcsw,
		nivcsw: ru.Nivcsw,
	}
	u.reads, u.writes, u.written, u.procIOReadable = procIO()
	return u
}

// procIO reads this process's counts of read and write system calls and
// of bytes written from /proc/self/io (Linux).
func procIO() (syscr, syscw, wchar uint64, ok bool) {
	raw, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, 0, 0, false
	}
	s := bufio.NewScanner(bytes.NewReader(raw))
	for s.Scan() {
		name, value, found := bytes.Cut(s.Bytes(), []byte(": "))
		if !found {
			continue
		}
		v, _ := strconv.ParseUint(string(value), 10, 64)
		switch string(name) {
		case "syscr":
			syscr = v
		case "syscw":
			syscw = v
		case "wchar":
			wchar = v
		}
	}
	return syscr, syscw, wchar, true
}

// idleCPURate measures the CPU the process spends per second of wall time
// while nothing is asked of it (gossip, probes, replication ticks).
func idleCPURate(d time.Duration) float64 {
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	time.Sleep(d)
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
	return float64(cpu) / float64(time.Since(start))
}

// report reports what the process spent since u, per operation.
func (u usage) report(b *testing.B, idleRate float64) {
	now := readUsage(b)
	n := float64(b.N)
	b.ReportMetric(float64(now.user+now.sys-u.user-u.sys)/n, "cpu-ns/op")
	b.ReportMetric(float64(now.sys-u.sys)/n, "sys-ns/op")
	b.ReportMetric(idleRate*float64(now.at.Sub(u.at))/n, "idle-cpu-ns/op")
	b.ReportMetric(float64(now.nvcsw+now.nivcsw-u.nvcsw-u.nivcsw)/n, "ctxsw/op")
	if u.procIOReadable && now.procIOReadable {
		b.ReportMetric(float64(now.reads-u.reads)/n, "reads/op")
		b.ReportMetric(float64(now.writes-u.writes)/n, "writes/op")
		b.ReportMetric(float64(now.written-u.written)/n, "written-B/op")
	}
}

// A node alone pays nothing for clustering: a standalone node and a node
// whose ring has one member count without allocating, and a started node
// alone sends no replica.
func TestSingleNodePaysNothingForClustering(t *testing.T) {
	lim := limiter.Limit{Quota: 1 << 30, Window: time.Hour}
	unstarted, err := New(testConfig(), limiter.New(limiter.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	started := startNode(t, testConfig())
	for _, tc := range []struct {
		name string
		node *Node
	}{{"standalone", Standalone(limiter.New(limiter.Config{}))}, {"one-member ring", unstarted}, {"started alone", started}} {
		req := make([]limiter.Request, 1)
		res := make([]limiter.Result, 1)
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			i++
			req[0] = limiter.Request{Key: limiter.Key(i), Zone: 1, Limit: lim}
			if ok, src := tc.node.Take(time.Now(), req, res); !ok || src != SourceOwner {
				t.Fatalf("%s: a check was %v by %v", tc.name, ok, src)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per check, want 0", tc.name, allocs)
		}
	}
	time.Sleep(3 * ReplicateEvery)
	if b := started.replicaBytes.Load(); b != 0 {
		t.Errorf("a node alone sent %d bytes of replicas", b)
	}
}
