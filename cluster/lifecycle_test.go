package cluster

import (
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// freeAddr returns a loopback address nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// A node that is created but not started binds nothing and runs nothing;
// closing it is enough.
func TestNewStartsNothing(t *testing.T) {
	cfg := testConfig()
	cfg.Bind, cfg.PeerListen = freeAddr(t), freeAddr(t)
	before := runtime.NumGoroutine()
	n, err := New(cfg, limiter.New(limiter.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := runtime.NumGoroutine(); got > before {
		t.Errorf("New started %d goroutines", got-before)
	}
	for _, addr := range []string{cfg.Bind, cfg.PeerListen} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("New bound %s: %v", addr, err)
			continue
		}
		l.Close()
	}
	n.Close()
	n.Close() // twice is fine

	// The same settings start afterwards.
	m, err := New(cfg, limiter.New(limiter.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err == nil {
		t.Error("a second Start succeeded")
	}
	m.Leave(time.Second)
}

// A node whose port is taken fails to start and leaves nothing bound or
// running behind.
func TestFailedStartReleasesEverything(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := testConfig()
	cfg.Bind, cfg.PeerListen = freeAddr(t), taken.Addr().String()
	before := runtime.NumGoroutine()
	n, err := New(cfg, limiter.New(limiter.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err == nil {
		t.Fatal("started on a taken port")
	}
	n.Close()
	eventually(t, 2*time.Second, "no goroutine left", func() bool { return runtime.NumGoroutine() <= before })
}

// probingNode returns a node with one peer, "p", that is not connected and
// whose breaker is due for a probe.
func probingNode(t *testing.T) (*Node, *peer) {
	t.Helper()
	n, err := New(testConfig(), limiter.New(limiter.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{node: n, member: Member{Name: "p"}, stop: make(chan struct{})}
	n.peers.peers["p"] = p
	p.breaker.failure(time.Now().Add(-time.Minute)) // open, and past its backoff
	return n, p
}

// Every call the breaker lets through as a probe records its outcome, so
// a failed probe opens the breaker for a backoff and a later one is allowed:
// the breaker never sticks half-open.
func TestBreakerProbesAreAlwaysResolved(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(n *Node)
	}{
		{"query", func(n *Node) { n.askNodeWithin("p", msgLeases, nil, 10*time.Millisecond) }},
		{"pull", func(n *Node) { n.pull("p", []limiter.Key{1}, time.Now()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, p := probingNode(t)
			tc.call(n) // the probe, which fails: the peer is not connected
			p.breaker.mu.Lock()
			probing, till := p.breaker.probing, p.breaker.openTill
			p.breaker.mu.Unlock()
			if probing {
				t.Fatal("the failed probe left the breaker half-open")
			}
			if !p.breaker.allow(till.Add(time.Millisecond)) {
				t.Error("no probe allowed after the backoff that followed a failed probe")
			}
		})
	}
}

// Even a probe nobody resolves is given up on.
func TestBreakerGivesUpOnAnUnresolvedProbe(t *testing.T) {
	var b breaker
	now := time.Now()
	b.failure(now)
	if !b.allow(now.Add(time.Minute)) {
		t.Fatal("no probe after the backoff")
	}
	if b.allow(now.Add(time.Minute + time.Second)) {
		t.Fatal("a second probe while the first is out")
	}
	if !b.allow(now.Add(time.Minute + probeGiveUp + time.Second)) {
		t.Error("the breaker stuck half-open behind a probe never resolved")
	}
}

// A peer connection leaves nothing running once it closes: 300 clients
// connect, authenticate, ping and hang up, and the node's goroutines come
// back to what they were.
func TestClosedConnectionsLeaveNoGoroutine(t *testing.T) {
	n := startNode(t, testConfig())
	addr := n.PeerAddr()
	cycle := func() {
		raw, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := clientHandshake(raw, n.authKey, "visitor", time.Now().Add(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		e := &encoder{}
		e.u8(msgPing)
		e.u32(1)
		if err := conn.writeFrame(e.b, time.Now().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.readFrame(nil); err != nil {
			t.Fatal(err)
		}
		conn.Close()
	}
	cycle() // warm up whatever runs once
	time.Sleep(50 * time.Millisecond)
	before := runtime.NumGoroutine()
	for range 300 {
		cycle()
	}
	eventually(t, 5*time.Second, "the goroutines of 300 closed connections gone", func() bool {
		return runtime.NumGoroutine() <= before+2
	})
}

// An owner that finds it was paused long enough to be declared dead (its
// heartbeat is set back, as a SIGSTOP past failure detection leaves it)
// stops counting as owner before its next request, joins again and sends
// its counts to the successor as an older copy; the cluster converges
// again and the window still admits exactly the limit: nothing lost,
// nothing counted twice. (A real pause, with the others declaring the
// owner dead meanwhile, is TestProcessClusterOwnerFrozenPastDetection... in
// caddymodule: in one process the frozen node's own memberlist would
// declare the others dead too.)
func TestPausedOwnerJoinsAgainWithoutCountingTwice(t *testing.T) {
	nodes := startNodes(t, 3)
	owner := nodes[2]
	key := keyOwnedBy(t, owner.Ring(), owner.Name(), 0)
	lim := limitOf(20)
	admitted := 0
	for i := range 8 {
		if ok, _ := takeVia(nodes[i%3], key, lim); ok {
			admitted++
		}
	}
	time.Sleep(20 * ReplicateEvery) // the successor holds a replica of 8
	owner.gate.beat.Store(time.Now().Add(-time.Minute).UnixNano())
	if !owner.owning() {
		// noticed: it counts nothing as owner until it has joined again
	} else {
		t.Fatal("an owner back from a pause past failure detection still counts as owner")
	}
	eventually(t, 10*time.Second, "the paused owner back in every ring", func() bool {
		for _, n := range nodes {
			if n.Ring().Len() != 3 || n.Ring().Fingerprint() != nodes[0].Ring().Fingerprint() {
				return false
			}
		}
		return owner.gate.announced.Load()
	})
	waitConverged(t, nodes, 3)
	for i := range 40 {
		if ok, src := takeVia(nodes[i%3], key, lim); ok {
			admitted++
			if src == SourceFallback {
				t.Logf("admitted by fallback (take %d)", i)
			}
		}
	}
	if admitted != 20 {
		t.Errorf("%d admitted through the owner's pause and return, limit 20; want exactly 20", admitted)
	}
}
