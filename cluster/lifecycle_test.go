package cluster

import (
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/tollgate/tollgate/cluster/core"
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
		conn, err := clientHandshake(raw, n.authKey, core.Peer{Name: "visitor", Inc: 1}, time.Now().Add(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		e := &encoder{}
		e.u8(msgPing)
		e.u32(1)
		e.u64(1)
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
