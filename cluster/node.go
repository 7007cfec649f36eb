package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tollgate/tollgate/cluster/core"
	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// Source says who decided a request (see core.Source).
type Source = core.Source

// Who decided a request.
const (
	SourceOwner        = core.SourceOwner
	SourcePeer         = core.SourcePeer
	SourceBlockedCache = core.SourceBlockedCache
	SourceFallback     = core.SourceFallback
)

// Decision is what a take decided for a request's zones (see
// core.Decision).
type Decision = core.Decision

// Node counts every key at its owner: itself, or the peer the ring names.
// See the package documentation for the consistency model.
//
// A Node is the wiring of four layers, each with its own state and lock:
//
//   - the core (package core), a state machine that decides who owns a key
//     and moves counts between nodes by protocol; it reads no clock and
//     opens no socket;
//   - the membership adapter (membership.go), which turns what memberlist
//     believes of the other nodes into the core's membership and announces
//     this node's standing in its gossip metadata;
//   - the transport: secure connections (conn.go), a client per peer that
//     batches take items (client.go), and a server that answers each kind
//     of message through its handler (server.go), over the wire codec
//     (codec.go, wire.go);
//   - the driver (driver.go): the loop that ticks the core, the pump that
//     sends what it queued, and the take driver that walks a request's
//     calls on the request's own goroutine.
//
// A standalone node is a core that owns every key and never networks. A
// Node is safe for concurrent use.
type Node struct {
	cfg        Config
	standalone bool // never networked: see Standalone

	engine   *limiter.Engine
	hasher   keyhash.Hasher
	authKey  []byte
	ringHash [8]byte // identifies the ring settings in node metadata
	log      *slog.Logger

	c atomic.Pointer[core.Core] // the core; replaced once, by Start
	// coreMu keeps SetMembership apart from the core's other entry points
	// (taken for reading around them): the core reads the membership it
	// was given without a lock of its own in places, and applies a change
	// in steps (the new view, then the replicas it promotes) that a take
	// must not fall between.
	coreMu sync.RWMutex
	self   atomic.Pointer[core.Member] // this run: its name and peer address are known from Start

	// Settings made before Start, carried into the core it builds.
	reputation atomic.Pointer[limiter.ReputationPolicy]
	restoreMu  sync.Mutex
	restored   []core.Kept

	dialer   *dialer
	peers    *peerSet
	members  *memberTable
	shared   *sharedStore
	held     heldItems
	settled  settleSignal
	memberMu sync.Mutex // serializes membership updates
	// lastMembers identifies the membership last given to the core.
	lastMembers  string
	replicaBytes atomic.Uint64 // bytes of replica transfers sent

	ml         *memberlist.Memberlist
	gossipAddr string // the address it gossips on, from the start
	listener   net.Listener
	handshakes *handshakeGate // strangers on the peer port, bounded
	announceMu sync.Mutex     // memberlist's UpdateNode is not safe concurrently
	leaving    atomic.Bool
	started    atomic.Bool // Start was called
	running    atomic.Bool // Start succeeded
	changedAt  atomic.Int64

	gatherHandler atomic.Pointer[func(string, []byte) []byte]

	outboxCh   chan struct{} // the core queued messages
	memberCh   chan struct{} // gossip changed
	settledCh  chan struct{} // keys settled: held items look again
	announceCh chan struct{} // the core entered or left its ring
	toldMember atomic.Bool   // the metadata gossiped last says the core is in its ring
	joinWake   chan struct{} // a member appeared: try joining now
	stop       chan struct{}
	wg         sync.WaitGroup
	closeOnce  sync.Once

	rejoining   atomic.Bool  // a join of the seeds after a split is under way
	peakMembers atomic.Int64 // the most members gossip has known
}

// Networked reports whether the node is part of a cluster: false for a
// Standalone node.
func (n *Node) Networked() bool { return !n.standalone }

// Standalone returns a node that owns every key, Tollgate without a
// cluster: a ring of one member that never starts a network. It has no
// secret.
func Standalone(engine *limiter.Engine) *Node {
	cfg := Config{Name: "local", BlockedKeys: 1, Logger: slog.New(slog.DiscardHandler)}
	cfg.setDefaults()
	n := newNode(cfg, engine, keyhash.FromKey(0, 0))
	n.standalone = true
	n.c.Store(core.NewStandalone(engine, time.Now()))
	return n
}

// Start creates a node and starts it: New followed by Node.Start.
func Start(cfg Config, engine *limiter.Engine) (*Node, error) {
	n, err := New(cfg, engine)
	if err != nil {
		return nil, err
	}
	if err := n.Start(); err != nil {
		return nil, err
	}
	return n, nil
}

// New creates a node from cfg without starting it: it binds no port,
// joins nobody and runs no goroutine until Start, so a configuration can be
// checked on a machine where the node it describes is running. engine holds
// the counters the node owns. Until Start, the node decides as a node that
// has not joined: a node without seeds counts every key itself; one with
// seeds, which knows no owner yet, decides by its fallback mode.
func New(cfg Config, engine *limiter.Engine) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return newNode(cfg, engine, keyhash.New(cfg.Secret, "tollgate ring v1")), nil
}

// newNode builds a node from cfg, with its defaults set.
func newNode(cfg Config, engine *limiter.Engine, hasher keyhash.Hasher) *Node {
	n := &Node{
		cfg:        cfg,
		engine:     engine,
		hasher:     hasher,
		authKey:    authKey(cfg.Secret),
		log:        cfg.Logger,
		peers:      newPeerSet(),
		handshakes: newHandshakeGate(),
		members:    newMemberTable(),
		outboxCh:   make(chan struct{}, 1),
		memberCh:   make(chan struct{}, 1),
		settledCh:  make(chan struct{}, 1),
		announceCh: make(chan struct{}, 1),
		joinWake:   make(chan struct{}, 1),
		stop:       make(chan struct{}),
	}
	n.shared = newSharedStore(sharedKeyOf(cfg.Secret), cfg.Logger, func() { n.core().ForgetAllDenials() })
	copy(n.ringHash[:], macOf(cfg.Secret, []byte("tollgate ring settings v1")))
	n.self.Store(&core.Member{Name: cfg.Name})
	n.c.Store(core.New(n.coreConfig(core.Member{Name: cfg.Name}, core.Hooks{}), time.Now()))
	return n
}

// coreConfig is the core's configuration for the run self.
func (n *Node) coreConfig(self core.Member, hooks core.Hooks) core.Config {
	return core.Config{
		Self:          self,
		Engine:        n.engine,
		Hasher:        n.hasher,
		Joining:       len(n.cfg.Join) > 0,
		Fallback:      n.cfg.Fallback,
		FallbackRatio: n.cfg.FallbackRatio,
		CallTimeout:   n.cfg.CallTimeout,
		HandoffWindow: n.cfg.HandoffWindow,
		ProbeInterval: n.cfg.Gossip.ProbeInterval,
		CacheSlots:    n.cfg.BlockedKeys,
		Seed:          self.Inc,
		Hooks:         hooks,
		Logger:        n.log,
	}
}

// core returns the node's core.
func (n *Node) core() *core.Core { return n.c.Load() }

// startCore builds the core of this run, once its name and peer address
// are known, carrying over what was set on the node before.
func (n *Node) startCore(now time.Time) {
	prev := n.core()
	c := core.New(n.coreConfig(*n.self.Load(), core.Hooks{
		Outbox: func() { signal(n.outboxCh) },
		Settled: func() {
			n.settled.wake()
			signal(n.settledCh)
		},
		Member: func(bool) { signal(n.announceCh) },
	}), now)
	if p := n.reputation.Load(); p != nil {
		c.SetReputation(p)
	}
	c.SetFallback(prev.Fallback())
	n.restoreMu.Lock()
	held := n.restored
	n.restored = nil
	n.c.Store(c)
	n.restoreMu.Unlock()
	for _, k := range held {
		c.RestoreCounters(now, k)
	}
}

// Start binds the node's listeners, starts gossip and begins joining the
// cluster in the background. A node starts once; one that failed to start
// has released what it bound and can only be closed. A standalone node has
// nothing to start.
func (n *Node) Start() error {
	if n.standalone {
		return nil
	}
	if !n.started.CompareAndSwap(false, true) {
		return errors.New("cluster node started twice")
	}
	var err error
	n.listener, err = net.Listen("tcp", n.cfg.PeerListen)
	if err != nil {
		n.listener = nil
		return fmt.Errorf("peer_listen %s: %w", n.cfg.PeerListen, err)
	}
	// The run's incarnation grows across restarts: its start time.
	inc := uint64(time.Now().UnixNano())
	n.dialer = &dialer{
		self: core.Peer{Inc: inc}, authKey: n.authKey, timeout: max(n.cfg.CallTimeout*10, time.Second), silence: n.cfg.CallTimeout,
		network: n.cfg.network, log: n.log, observer: n.cfg.Observer,
	}
	if err := n.startMemberlist(inc); err != nil {
		n.listener.Close()
		n.listener = nil
		return err
	}
	n.dialer.self = n.self.Load().Peer()
	n.changedAt.Store(time.Now().UnixNano())

	n.wg.Add(6)
	go n.loop()
	go n.pump()
	go n.announcer()
	go n.serve()
	go n.join()
	go func() {
		defer n.wg.Done()
		n.shared.deliver(n.stop)
	}()
	processStalls.hold() // released by Close
	n.running.Store(true)
	n.updateMembership(time.Now())
	n.log.Info("cluster node started", "node", n.Name(), "gossip", n.gossipAddr, "peer", n.PeerAddr())
	return nil
}

// Name returns the node's name in the cluster.
func (n *Node) Name() string { return n.self.Load().Name }

// PeerAddr returns the address the node's peer RPC listens on.
func (n *Node) PeerAddr() string { return n.self.Load().PeerAddr }

// GossipAddr returns the address the node gossips on.
func (n *Node) GossipAddr() string {
	if n.ml == nil {
		return ""
	}
	return n.gossipAddr // memberlist changes its local node in place
}

// Ring returns the ring the node routes by now.
func (n *Node) Ring() *Ring { return n.core().Ring() }

// Owner returns the member that owns key.
func (n *Node) Owner(k limiter.Key) Member {
	m, _ := n.core().Owner(k)
	return m
}

// Successor returns the member that keeps k's replica and would count k if
// its owner were gone; the zero Member while the ring has fewer than two.
func (n *Node) Successor(k limiter.Key) Member {
	m, _ := n.core().Successor(k)
	return m
}

// Take spends the requests' units at their owner if every one of them can
// be granted, and none of them otherwise, filling res. It reports whether
// they were granted and who decided. Requests owned by different nodes are
// taken one owner after the other, and given back to the earlier owners if
// a later one denies. now is used only where this node decides: owners
// decide by their own clock.
func (n *Node) Take(now time.Time, reqs []limiter.Request, res []limiter.Result) (bool, Source) {
	d := n.decide(now, core.OpTake, 0, reqs, res)
	return d.Allowed, d.Source
}

// TakeFor is Take on behalf of a client whose reputation is kept under the
// key client (0 for none), at the client's owner: it scales and is lowered
// by the requests that owner decides, which are all of them when the zones
// are keyed by the client ID. The decision carries the client's reputation
// score as the owner knows it. A denial that fallback decided never lowers
// it.
func (n *Node) TakeFor(now time.Time, client limiter.Key, reqs []limiter.Request, res []limiter.Result) Decision {
	return n.decide(now, core.OpTake, client, reqs, res)
}

// Peek returns what Take would answer, spending nothing.
func (n *Node) Peek(now time.Time, reqs []limiter.Request, res []limiter.Result) Source {
	return n.decide(now, core.OpPeek, 0, reqs, res).Source
}

// SetFallback changes what the node does for owners it cannot reach; a
// config reload uses it, since the node itself outlives reloads. A ratio
// outside (0, 1] means DefaultFallbackRatio.
func (n *Node) SetFallback(mode FallbackMode, ratio float64) { n.core().SetFallback(mode, ratio) }

// SetReputation sets the reputation policy the node applies to zones whose
// owner is not the client's, and to the counters it keeps in fallback.
func (n *Node) SetReputation(p *limiter.ReputationPolicy) {
	n.reputation.Store(p)
	n.core().SetReputation(p)
}

// Forget drops keys from this node's caches of what owners said: denied
// keys, scores, remaining counts.
func (n *Node) Forget(keys ...limiter.Key) { n.core().Forget(keys...) }

// Kept is what a run of a node kept of its counters (and reputations,
// grants, leases) for a later run to read back when it starts: a snapshot
// (see core.Kept).
type Kept = core.Kept

// Held says that a counter holds counts of another run (see core.Held).
type Held = core.Held

// KeptApplied is a transfer a run applied to the counters it kept (see
// core.KeptApplied).
type KeptApplied = core.KeptApplied

// Resent is what a counter holds of counts sent again, or lacks of units
// given back again, in place of a transfer to a run taken for dead (see
// core.Resent).
type Resent = core.Resent

// GivenAgain is units given back again that a counter lacks (see
// core.GivenAgain).
type GivenAgain = core.GivenAgain

// Replaced names a transfer that counts sent again replace (see
// core.Replaced).
type Replaced = core.Replaced

// Peer is a run of a node: its name and incarnation (see core.Peer).
type Peer = core.Peer

// Keep returns what this run keeps of states, read from its engine for a
// snapshot just before: naming the run that counted them, the other runs'
// counts the counters hold, and the transfers of what others admitted
// applied to them whose senders may not have had them acknowledged, so
// that the run that reads them back has them weighed by run at their
// owners, and those transfers counted once (see RestoreCounters). A
// standalone node, or one not started, names no run.
func (n *Node) Keep(states []limiter.State) Kept {
	if n.standalone || !n.running.Load() {
		return Kept{States: states}
	}
	n.coreMu.RLock()
	defer n.coreMu.RUnlock()
	return n.core().Keep(time.Now(), states)
}

// RestoreCounters takes what an earlier run of this node kept (a
// snapshot): copies, possibly older, of counts the cluster may hold now. A
// standalone node merges them. A node in a cluster sends those of keys it
// owns or keeps replicas of to their owners once it has joined. Where they
// name the run that counted them (see Keep), the owners count them once
// against what they hold of that run, and add them to other counts (what
// others admitted in fallback meanwhile); where they do not (a snapshot
// of an earlier format), they keep the newer of theirs and these, never
// the sum.
func (n *Node) RestoreCounters(k Kept) {
	if len(k.States) == 0 {
		return
	}
	if n.standalone {
		n.engine.Merge(time.Now(), k.States)
		return
	}
	n.restoreMu.Lock()
	if !n.running.Load() {
		n.restored = append(n.restored, k)
		n.restoreMu.Unlock()
		return
	}
	n.restoreMu.Unlock()
	n.coreMu.RLock()
	defer n.coreMu.RUnlock()
	n.core().RestoreCounters(time.Now(), k)
}

// Reset drops the counters of keys at their owners, what any node counted
// for them in fallback, and what every node heard of them, so the clients
// they belong to start afresh everywhere at once. It reports the peers it
// could not reach.
func (n *Node) Reset(keys ...limiter.Key) []string {
	n.core().ResetLocal(keys...)
	e := &encoder{}
	encodeKeys(e, keys)
	var failed []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range n.peers.all() {
		if st, ok := n.members.state(p.name); !ok || !st.dead.IsZero() {
			continue
		}
		wg.Go(func() {
			if _, err := n.roundTrip(p, msgReset, e.b, max(n.cfg.CallTimeout, time.Second)); err != nil {
				mu.Lock()
				failed = append(failed, p.name)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(failed)
	return failed
}

// roundTrip sends one message of kind to p and waits, at most within, for
// its reply body.
func (n *Node) roundTrip(p *peerClient, kind byte, body []byte, within time.Duration) ([]byte, error) {
	c := newCall(kind, nil)
	c.body = body
	p.send(c, time.Now().Add(within))
	if err := c.wait(); err != nil {
		return nil, err
	}
	return c.repl, nil
}

// Leave leaves the cluster gracefully: it steps out of its ring and
// announces it (the others stop routing to it), hands every counter to its
// new owner and waits, up to timeout, until each hand-off is acknowledged,
// answering the requests still on their way to it with the new owner's
// name; then it leaves the gossip and stops. Counts are exact through it;
// see the package documentation.
func (n *Node) Leave(timeout time.Duration) error {
	if !n.running.Load() {
		n.Close()
		return nil
	}
	var err error
	n.closeOnce.Do(func() {
		if timeout <= 0 {
			timeout = DefaultLeaveTimeout
		}
		start := time.Now()
		n.leaving.Store(true)
		n.coreMu.RLock()
		n.core().Leave(start)
		n.coreMu.RUnlock()
		n.announce(timeout / 4)
		// Peers need a moment to hear of it: requests already on their way
		// here are answered with the new owner's name.
		linger := min(timeout/4, 4*n.cfg.Gossip.GossipInterval+100*time.Millisecond)
		deadline := start.Add(timeout / 2)
		for {
			now := time.Now()
			if n.core().Drained() && now.Sub(start) >= linger {
				break
			}
			if now.After(deadline) {
				if c := n.core(); c.HandedOver() {
					n.log.Warn("leaving with requests it forwarded still awaiting their owners' answers", "node", n.Name(), "calls", c.Calling(), "timeout", timeout.String())
				} else {
					n.log.Warn("leaving before every hand-off was acknowledged", "node", n.Name(), "timeout", timeout.String())
				}
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if e := n.ml.Leave(timeout / 4); e != nil {
			err = fmt.Errorf("leaving the gossip: %w", e)
		}
		n.shutdown()
		n.log.Info("left the cluster", "node", n.Name())
	})
	return err
}

// Close stops the node at once, without handing off its counters: what
// a crash would do, for tests and for failed starts.
func (n *Node) Close() {
	n.closeOnce.Do(n.shutdown)
}

func (n *Node) shutdown() {
	close(n.stop)
	if !n.running.Load() {
		return // never started, or failed to: nothing bound, nothing running
	}
	n.ml.Shutdown()
	n.listener.Close()
	for _, p := range n.peers.takeAll() {
		p.close()
	}
	n.wg.Wait()
	processStalls.release()
}
