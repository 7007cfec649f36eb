package cluster

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// The peer port is reachable by anyone who can reach the node. A
// connection is served only after its handshake under the cluster secret;
// until then it is a stranger, and strangers are bounded: at most
// maxHandshakes handshakes are under way at once (a connection beyond
// them is closed at once), each within handshakeTimeout, and their
// failures are logged in summary, one line per kind at most every
// handshakeLogEvery, counting what happened since the last.
const (
	maxHandshakes     = 64
	handshakeTimeout  = 2 * time.Second
	handshakeLogEvery = 10 * time.Second
)

// handshakeGate admits peer connections to their handshake. It is safe for
// concurrent use.
type handshakeGate struct {
	slots   chan struct{}
	peak    atomic.Int32 // most handshakes under way at once
	under   atomic.Int32
	refused atomic.Uint64 // connections closed at once: too many handshakes under way

	mu   sync.Mutex
	logs map[string]*summary // by message
}

// summary is one kind of failure since its last log line.
type summary struct {
	last    time.Time
	pending int
	remote  string
}

func newHandshakeGate() *handshakeGate {
	return &handshakeGate{slots: make(chan struct{}, maxHandshakes), logs: map[string]*summary{}}
}

// enter reports whether a connection may start its handshake now; one that
// may calls leave when the handshake is over.
func (g *handshakeGate) enter() bool {
	select {
	case g.slots <- struct{}{}:
		n := g.under.Add(1)
		for {
			p := g.peak.Load()
			if n <= p || g.peak.CompareAndSwap(p, n) {
				break
			}
		}
		return true
	default:
		g.refused.Add(1)
		return false
	}
}

func (g *handshakeGate) leave() {
	g.under.Add(-1)
	<-g.slots
}

// note logs one failure of kind msg from remote, or counts it toward the
// next line if a line for msg was written less than handshakeLogEvery ago.
func (g *handshakeGate) note(log *slog.Logger, level slog.Level, msg, remote string, now time.Time, attrs ...any) {
	g.mu.Lock()
	s := g.logs[msg]
	if s == nil {
		s = &summary{}
		g.logs[msg] = s
	}
	s.pending++
	s.remote = remote
	if !s.last.IsZero() && now.Sub(s.last) < handshakeLogEvery {
		g.mu.Unlock()
		return
	}
	count := s.pending
	s.pending, s.last = 0, now
	g.mu.Unlock()
	log.Log(context.Background(), level, msg, append([]any{"remote", remote, "connections", count, "per", handshakeLogEvery.String()}, attrs...)...)
}
