package cluster

// A fault-injection test in the manner of Jepsen: an in-process cluster on
// loopback whose gossip and peer calls travel over a fault layer (delay,
// loss, frozen nodes, partitions), nodes killed and restarted, a stream of
// checks against a few keys with small limits, a history of every
// admission, and a checker that holds each key's admissions to the bound
// the package documentation states for the faults that happened.

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

var (
	faultSeed  = flag.Uint64("seed", 0, "TestFaults: run only the schedule with this seed (also TOLLGATE_FAULT_SEED)")
	faultCount = flag.Int("faults", 0, "TestFaults: how many schedules to run (default 12, 4 with -short; also TOLLGATE_FAULTS; CI runs 240 on their own)")
	faultKinds = flag.String("fault-kinds", "", "TestFaults: comma-separated fault kinds to draw from (default: every kind)")
)

// ---------------------------------------------------------------------------
// The fault layer.

// faultNet is a network of named nodes whose links can be delayed, made
// lossy or cut. A cut link delivers nothing either way and closes nothing:
// writes wait, bytes already sent wait in the reader, packets are dropped,
// until the link is restored or a deadline passes.
type faultNet struct {
	mu      sync.Mutex
	addrs   map[string]string // gossip address → node
	frozen  map[string]bool
	side    map[string]int              // partition: nodes on different sides are cut; absent = side 0
	delay   time.Duration               // added to every write and packet
	slow    map[[2]string]time.Duration // added to the peer streams' bytes from one node to another
	loss    float64                     // chance a packet is dropped or a peer connection reset
	changed chan struct{}               // closed and replaced on every change
	rng     *rand.Rand
	events  eventTail // the nodes' logs, shown when a schedule fails
}

// eventTail keeps the last lines the nodes of a fault cluster logged.
type eventTail struct {
	mu    sync.Mutex
	lines []string
}

const eventTailLines = 400

func (e *eventTail) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("gossip: ")) {
		return len(p), nil // memberlist's own chatter drowns the nodes' events
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lines = append(e.lines, strings.TrimRight(string(p), "\n"))
	if len(e.lines) > 2*eventTailLines {
		e.lines = append(e.lines[:0], e.lines[len(e.lines)-eventTailLines:]...)
	}
	return len(p), nil
}

func (e *eventTail) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.lines[max(0, len(e.lines)-eventTailLines):], "\n")
}

func newFaultNet(seed uint64) *faultNet {
	return &faultNet{
		addrs:   make(map[string]string),
		frozen:  make(map[string]bool),
		side:    make(map[string]int),
		slow:    make(map[[2]string]time.Duration),
		changed: make(chan struct{}),
		rng:     rand.New(rand.NewPCG(seed, 0x7011)),
	}
}

// set changes the faults under the lock and wakes every waiter.
func (f *faultNet) set(change func()) {
	f.mu.Lock()
	change()
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

// heal removes every fault.
func (f *faultNet) heal() {
	f.set(func() {
		clear(f.frozen)
		clear(f.side)
		clear(f.slow)
		f.delay, f.loss = 0, 0
	})
}

func (f *faultNet) cutLocked(from, to string) bool {
	return f.frozen[from] || f.frozen[to] || f.side[from] != f.side[to]
}

// chance reports whether a loss happens now.
func (f *faultNet) chance() (lost bool, delay time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loss > 0 && f.rng.Float64() < f.loss, f.delay
}

// wait blocks while the link from → to is cut, until deadline (zero: none)
// or done is closed.
func (f *faultNet) wait(from, to string, deadline time.Time, done <-chan struct{}) error {
	for {
		f.mu.Lock()
		cut, changed := f.cutLocked(from, to), f.changed
		f.mu.Unlock()
		if !cut {
			return nil
		}
		var timeout <-chan time.Time
		if !deadline.IsZero() {
			d := time.Until(deadline)
			if d <= 0 {
				return os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-changed:
		case <-timeout:
			return os.ErrDeadlineExceeded
		case <-done:
			return net.ErrClosed
		}
	}
}

func (f *faultNet) nodeAt(addr string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addrs[addr]
}

func (f *faultNet) dialPeer(from, to, addr string, timeout time.Duration) (net.Conn, error) {
	raw, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return newFaultConn(f, raw, from, to, true), nil
}

func (f *faultNet) gossip(name string, cfg *memberlist.NetTransportConfig) (memberlist.Transport, error) {
	t, err := memberlist.NewNetTransport(cfg)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.addrs[net.JoinHostPort(cfg.BindAddrs[0], strconv.Itoa(t.GetAutoBindPort()))] = name
	f.mu.Unlock()
	return &faultTransport{inner: t, net: f, name: name}, nil
}

// faultConn is one end of a stream; gating both directions at the dialing
// end is enough to cut the link both ways.
type faultConn struct {
	net.Conn
	net       *faultNet
	from, to  string
	resetting bool // loss resets the connection (peer calls); gossip streams are only delayed and cut
	readDL    atomic.Pointer[time.Time]
	writeDL   atomic.Pointer[time.Time]
	done      chan struct{}
	closeOnce sync.Once
	pending   []byte // read, held while the link is cut
	pendErr   error
}

func newFaultConn(f *faultNet, c net.Conn, from, to string, resetting bool) *faultConn {
	return &faultConn{Conn: c, net: f, from: from, to: to, resetting: resetting, done: make(chan struct{})}
}

func deadlineOf(p *atomic.Pointer[time.Time]) time.Time {
	if t := p.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

func (c *faultConn) Write(b []byte) (int, error) {
	if err := c.net.wait(c.from, c.to, deadlineOf(&c.writeDL), c.done); err != nil {
		return 0, err
	}
	lost, delay := c.net.chance()
	if lost && c.resetting {
		c.Close()
		return 0, errors.New("connection reset by the fault layer")
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	c.net.slowDown(c.resetting, c.from, c.to)
	return c.Conn.Write(b)
}

// slowDown waits as long as bytes of a peer stream (not gossip) from →
// to are slowed.
func (f *faultNet) slowDown(peer bool, from, to string) {
	if !peer {
		return
	}
	f.mu.Lock()
	d := f.slow[[2]string{from, to}]
	f.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
	}
}

func (c *faultConn) Read(b []byte) (int, error) {
	if len(c.pending) == 0 {
		n, err := c.Conn.Read(b)
		if n == 0 {
			return 0, err
		}
		c.pending = append(c.pending[:0], b[:n]...)
		c.pendErr = err
		c.net.slowDown(c.resetting, c.to, c.from)
	}
	if err := c.net.wait(c.to, c.from, deadlineOf(&c.readDL), c.done); err != nil {
		return 0, err
	}
	n := copy(b, c.pending)
	c.pending = c.pending[n:]
	if len(c.pending) > 0 {
		return n, nil
	}
	err := c.pendErr
	c.pendErr = nil
	return n, err
}

func (c *faultConn) SetDeadline(t time.Time) error {
	c.readDL.Store(&t)
	c.writeDL.Store(&t)
	return c.Conn.SetDeadline(t)
}

func (c *faultConn) SetReadDeadline(t time.Time) error {
	c.readDL.Store(&t)
	return c.Conn.SetReadDeadline(t)
}

func (c *faultConn) SetWriteDeadline(t time.Time) error {
	c.writeDL.Store(&t)
	return c.Conn.SetWriteDeadline(t)
}

func (c *faultConn) Close() error {
	c.closeOnce.Do(func() { close(c.done) })
	return c.Conn.Close()
}

// faultTransport is memberlist's own transport with packets dropped or
// delayed and streams gated by the fault layer. It wraps rather than embeds
// NetTransport, so memberlist sees a plain Transport and sends everything
// through WriteTo and DialTimeout.
type faultTransport struct {
	inner *memberlist.NetTransport
	net   *faultNet
	name  string
}

func (t *faultTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.inner.FinalAdvertiseAddr(ip, port)
}

func (t *faultTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	to := t.net.nodeAt(addr)
	t.net.mu.Lock()
	cut := t.net.cutLocked(t.name, to)
	t.net.mu.Unlock()
	lost, delay := t.net.chance()
	if cut || lost {
		return time.Now(), nil
	}
	if delay > 0 {
		b = slices.Clone(b)
		time.AfterFunc(delay, func() { t.inner.WriteTo(b, addr) })
		return time.Now(), nil
	}
	return t.inner.WriteTo(b, addr)
}

func (t *faultTransport) PacketCh() <-chan *memberlist.Packet { return t.inner.PacketCh() }

func (t *faultTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := t.inner.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return newFaultConn(t.net, c, t.name, t.net.nodeAt(addr), false), nil
}

func (t *faultTransport) StreamCh() <-chan net.Conn { return t.inner.StreamCh() }

func (t *faultTransport) Shutdown() error { return t.inner.Shutdown() }

// ---------------------------------------------------------------------------
// The cluster under test.

// faultCluster is a set of node slots, each a name with fixed addresses,
// running a node or not (killed).
type faultCluster struct {
	t            *testing.T
	net          *faultNet
	mu           sync.Mutex
	slots        []*faultSlot
	current      *schedule    // for messages
	unreconciled atomic.Int32 // times fallback counters were left unsent
}

type faultSlot struct {
	name       string
	gossip     string
	peer       string
	node       *Node           // nil while dead
	last       *Node           // the run that ran last, once stopped
	ready      bool            // takes checks: it has joined, or early restarts are tested
	engine     *limiter.Engine // the counters of the node running, or last run
	generation int
}

func faultConfig(f *faultNet, name, gossip, peer string) Config {
	cfg := testConfig()
	cfg.Name = name
	cfg.Bind, cfg.PeerListen = gossip, peer
	cfg.CallTimeout = 100 * time.Millisecond
	cfg.network = f
	cfg.Logger = slog.New(slog.NewTextHandler(&f.events, nil))
	return cfg
}

func newFaultCluster(t *testing.T, size int, seed uint64) *faultCluster {
	c := &faultCluster{t: t, net: newFaultNet(seed)}
	for i := range size {
		s := &faultSlot{name: fmt.Sprintf("n%d", i), engine: limiter.New(limiter.Config{})}
		cfg := faultConfig(c.net, s.name, "127.0.0.1:0", "127.0.0.1:0")
		if i > 0 {
			cfg.Join = []string{c.slots[0].gossip}
		}
		n, err := Start(cfg, s.engine)
		if err != nil {
			c.fatalf("starting %s: %v", s.name, err)
		}
		s.node, s.gossip, s.peer, s.ready = n, n.GossipAddr(), n.PeerAddr(), true
		c.slots = append(c.slots, s)
	}
	t.Cleanup(func() {
		for _, s := range c.slots {
			if n := c.nodeOf(s); n != nil {
				n.Close()
			}
		}
	})
	c.waitConverged()
	return c
}

// fatalf fails the test and ends the goroutine running this cluster's
// schedules (clusters run side by side, off the test's goroutine).
func (c *faultCluster) fatalf(format string, args ...any) {
	c.t.Errorf(format, args...)
	runtime.Goexit()
}

func (c *faultCluster) nodeOf(s *faultSlot) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return s.node
}

// serving returns the running nodes that take checks.
func (c *faultCluster) serving() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Node
	for _, s := range c.slots {
		if s.node != nil && s.ready {
			out = append(out, s.node)
		}
	}
	return out
}

// setReady lets a node take checks.
func (c *faultCluster) setReady(name string) {
	c.mu.Lock()
	c.slot(name).ready = true
	c.mu.Unlock()
}

// rejoin makes every node join every other, as memberlist's periodic
// push-pull would, only sooner: after a split longer than failure
// detection, each side has declared the other dead and would otherwise
// meet again only at the next push-pull (30s).
func (c *faultCluster) rejoin() {
	var addrs []string
	for _, s := range c.slots {
		addrs = append(addrs, s.gossip)
	}
	for _, n := range c.live() {
		n.ml.Join(addrs)
	}
}

// live returns the running nodes.
func (c *faultCluster) live() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Node
	for _, s := range c.slots {
		if s.node != nil {
			out = append(out, s.node)
		}
	}
	return out
}

func (c *faultCluster) slot(name string) *faultSlot {
	for _, s := range c.slots {
		if s.name == name {
			return s
		}
	}
	return nil
}

// kill closes a node without a hand-off: a crash.
func (c *faultCluster) kill(name string) {
	s := c.slot(name)
	c.mu.Lock()
	n := s.node
	s.node, s.ready, s.last = nil, false, n
	c.mu.Unlock()
	n.Close()
}

// leave makes a node leave gracefully.
func (c *faultCluster) leave(name string) {
	s := c.slot(name)
	c.mu.Lock()
	n := s.node
	s.node, s.ready, s.last = nil, false, n
	c.mu.Unlock()
	n.Leave(2 * time.Second)
}

// restart starts a stopped slot again under its name and addresses, with
// the counters it had (as a snapshot taken at the instant it stopped would
// give back) or none; it takes checks at once if early, else once ready.
func (c *faultCluster) restart(name string, keep, early bool) error {
	s := c.slot(name)
	var seed string
	for _, n := range c.live() {
		seed = n.GossipAddr()
		break
	}
	// A snapshot taken at the instant it stopped: what the node held
	// then, restored as Caddy restores its snapshot.
	var snapshot Kept
	if keep {
		var states []limiter.State
		s.engine.Range(time.Now(), func(st limiter.State) bool {
			states = append(states, st)
			return true
		})
		snapshot = Kept{States: states}
		if s.last != nil {
			snapshot = s.last.Keep(states)
		}
	}
	s.engine = limiter.New(limiter.Config{})
	cfg := faultConfig(c.net, s.name, s.gossip, s.peer)
	cfg.Join = []string{seed}
	var n *Node
	var err error
	for range 50 { // the ports may take a moment to be free again
		if n, err = Start(cfg, s.engine); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	n.RestoreCounters(snapshot)
	c.mu.Lock()
	s.node, s.ready = n, early
	s.generation++
	c.mu.Unlock()
	return nil
}

// converged reports whether every live node routes by the same ring of
// all live nodes and is connected, breaker closed, to every member; and,
// if reconciled, whether no fallback counter is left to send to an owner.
func (c *faultCluster) converged(reconciled bool) bool {
	nodes := c.live()
	fp := nodes[0].Ring().Fingerprint()
	for _, n := range nodes {
		ring := n.Ring()
		if ring.Len() != len(nodes) || ring.Fingerprint() != fp {
			return false
		}
		for _, m := range ring.Members() {
			if m.Name == n.Name() {
				continue
			}
			p := n.peers.get(m.Name)
			if p == nil || !p.connected.Load() || !n.core().Reachable(m.Name) {
				return false
			}
		}
		if !n.core().Member() || n.core().HandoffUnderway() {
			return false
		}
		if reconciled && n.core().FallbackKeys() > 0 {
			return false
		}
	}
	return true
}

// waitConverged waits until the cluster converged, then up to
// reconcileWait for the fallback counters to reach their owners: a
// counter that does not is counted in unreconciled and left (the bound
// allows every fallback admission anyway).
func (c *faultCluster) waitConverged() {
	deadline := time.Now().Add(20 * time.Second)
	for !c.converged(false) {
		if time.Now().After(deadline) {
			c.fatalf("%v: the cluster did not converge within 20s:\n%s", c.current, c.describe())
		}
		time.Sleep(10 * time.Millisecond)
	}
	deadline = time.Now().Add(reconcileWait)
	for !c.converged(true) {
		if time.Now().After(deadline) {
			c.unreconciled.Add(1)
			c.t.Logf("%v: fallback counters not reconciled within %s:\n%s", c.current, reconcileWait, c.describe())
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const reconcileWait = 3 * time.Second

func (c *faultCluster) describe() string {
	var state []string
	for _, n := range c.live() {
		var peers []string
		for _, p := range n.peers.all() {
			peers = append(peers, fmt.Sprintf("%s connected=%v reachable=%v", p.name, p.connected.Load(), n.core().Reachable(p.name)))
		}
		state = append(state, fmt.Sprintf("%s: member %v, ring %v, peers %v, fallback keys %d, hand-off under way %v",
			n.Name(), n.core().Member(), n.Ring().Members(), peers, n.core().FallbackKeys(), n.core().HandoffUnderway()))
	}
	return strings.Join(state, "\n") + "\nlast events:\n" + c.net.events.String()
}

// ---------------------------------------------------------------------------
// Schedules.

type faultKind string

const (
	kindNone      faultKind = "none"
	kindDelay     faultKind = "delay"     // every link slowed, some calls past their deadline
	kindLoss      faultKind = "loss"      // packets dropped, peer connections reset
	kindFreeze    faultKind = "freeze"    // a node neither sends nor receives, its sockets open
	kindPartition faultKind = "partition" // two sides that cannot reach each other
	kindKill      faultKind = "kill"      // crash, restart without counters
	kindKillKeep  faultKind = "killkeep"  // crash, restart with the counters it had
	kindRestart   faultKind = "restart"   // graceful leave, restart without counters

	// The same, the restarted node taking checks as soon as it starts,
	// before it has joined.
	kindKillEarly     faultKind = "kill-early"
	kindKillKeepEarly faultKind = "killkeep-early"
	kindRestartEarly  faultKind = "restart-early"
)

// faultKindsThatHold are drawn by default: every kind. (restart-early, a
// node restarted gracefully that takes checks before it has joined, broke
// the bound in about one schedule in fifty on the node before the core; on
// the core it holds: 320 of 320 in `TOLLGATE_FAULTS=160 go test -race -run
// '^TestFaults$' ./cluster -fault-kinds restart-early`, twice.)
var faultKindsThatHold = []faultKind{
	kindNone, kindDelay, kindLoss, kindFreeze, kindPartition,
	kindKill, kindKillKeep, kindRestart, kindKillEarly, kindKillKeepEarly, kindRestartEarly,
}

// schedule is one run: fresh keys, one fault of one kind at one time.
type schedule struct {
	seed     uint64
	kind     faultKind
	limit    int64
	keys     []limiter.Key
	target   string   // node frozen, killed or restarted
	sides    []string // partition: the nodes of side 1
	before   time.Duration
	duration time.Duration
	delay    time.Duration
	loss     float64
}

func (s schedule) String() string {
	return fmt.Sprintf("seed %d: %s target=%s side1=%v before=%s for=%s delay=%s loss=%.2f limit=%d keys=%d",
		s.seed, s.kind, s.target, s.sides, s.before, s.duration, s.delay, s.loss, s.limit, len(s.keys))
}

var faultKeys = keyhash.New([]byte("fault keys"), "test")

func newSchedule(seed uint64, kinds []faultKind, c *faultCluster) schedule {
	rng := rand.New(rand.NewPCG(seed, 0xfa17))
	// The kind is drawn apart, so a seed replays the same schedule with
	// -fault-kinds set to its kind alone.
	kindRng := rand.New(rand.NewPCG(seed, 0x1c1d))
	s := schedule{
		seed:     seed,
		kind:     kinds[kindRng.IntN(len(kinds))],
		limit:    int64(5 + rng.IntN(16)),
		before:   time.Duration(10+rng.IntN(50)) * time.Millisecond,
		duration: time.Duration(50+rng.IntN(400)) * time.Millisecond,
	}
	for i := range 3 {
		s.keys = append(s.keys, limiter.ZoneKey(faultKeys.String(fmt.Sprint("schedule-", seed, "-", i)), 1))
	}
	names := make([]string, len(c.slots))
	for i, sl := range c.slots {
		names[i] = sl.name
	}
	// Aim at the owner of a key most of the time, so the fault bites.
	ring := c.live()[0].Ring()
	s.target = names[rng.IntN(len(names))]
	if rng.IntN(4) > 0 {
		m, _ := ring.Owner(s.keys[rng.IntN(len(s.keys))].Route())
		s.target = m.Name
	}
	switch s.kind {
	case kindDelay:
		s.delay = time.Duration(20+rng.IntN(130)) * time.Millisecond
	case kindLoss:
		s.loss = 0.05 + 0.3*rng.Float64()
	case kindPartition:
		s.sides = []string{s.target}
		for _, n := range names {
			if n != s.target && len(s.sides) < len(names)/2 && rng.IntN(2) == 0 {
				s.sides = append(s.sides, n)
			}
		}
	}
	return s
}

// ---------------------------------------------------------------------------
// History.

// admission is one answer to a check.
type admission struct {
	key     int // index in the schedule's keys
	window  int64
	node    string
	owner   string // the owner the node's ring named
	src     Source
	allowed bool
	at      time.Time
}

// event is a fault starting or ending.
type event struct {
	what   string // "fault", "heal", "split", "kill", "leave", "join", "restart", "converged"
	node   string
	at     time.Time
	owners []string // converged: each key's owner by then
	lag    []int64  // counts: each key's changes at its owner not yet in its successor's replica
}

type history struct {
	mu     sync.Mutex
	checks []admission
	events []event
}

func (h *history) note(what, node string) {
	h.mu.Lock()
	h.events = append(h.events, event{what: what, node: node, at: time.Now()})
	h.mu.Unlock()
}

// noteReplicas records, for the failure messages, each key's count at its
// owner and at its successor's replica.
func (c *faultCluster) noteReplicas(h *history, s *schedule) {
	now := time.Now()
	byName := map[string]*Node{}
	for _, n := range c.live() {
		byName[n.Name()] = n
	}
	ring := c.live()[0].Ring()
	var parts []string
	lag := make([]int64, len(s.keys))
	for i, k := range s.keys {
		owner, _ := ring.Owner(k.Route())
		succ, _ := ring.Successor(k.Route())
		var cur, rep uint32
		if n := byName[owner.Name]; n != nil {
			if st := n.engine.StatesOf(now, []limiter.Key{k}); len(st) > 0 {
				cur = st[0].Cur
			}
		}
		if n := byName[succ.Name]; n != nil {
			if st, ok := n.core().ReplicaOf(k); ok {
				rep = st.Cur
			}
		}
		parts = append(parts, fmt.Sprintf("key %d: %d at owner %s, %d at successor %s", i, cur, owner.Name, rep, succ.Name))
		lag[i] = max(0, int64(cur)-int64(rep))
	}
	h.mu.Lock()
	h.events = append(h.events, event{what: "counts", node: strings.Join(parts, "; "), at: now, lag: lag})
	h.mu.Unlock()
}

// noteConverged records that the cluster converged, and each key's owner.
func (c *faultCluster) noteConverged(h *history, s *schedule) {
	ring := c.live()[0].Ring()
	e := event{what: "converged", at: time.Now()}
	for _, k := range s.keys {
		m, _ := ring.Owner(k.Route())
		e.owners = append(e.owners, m.Name)
	}
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

// check takes one unit of a key through n and records the answer.
func (h *history) check(n *Node, s *schedule, key int) {
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: s.limit, Window: time.Hour}
	k := s.keys[key]
	owner := n.Owner(k)
	res := make([]limiter.Result, 1)
	now := time.Now()
	ok, src := n.Take(now, []limiter.Request{{Key: k, Zone: 1, Limit: lim}}, res)
	a := admission{key: key, window: now.UnixNano() / int64(time.Hour), node: n.Name(), owner: owner.Name, src: src, allowed: ok, at: time.Now()}
	h.mu.Lock()
	h.checks = append(h.checks, a)
	h.mu.Unlock()
}

// ---------------------------------------------------------------------------
// The bound.

// bound is what the package documentation allows for one key and window,
// given the history, with the terms that make it up.
type bound struct {
	sides     map[string]int64 // owner-path admissions per interim owner during splits
	limit     int64
	fallback  int64 // admissions decided by fallback
	crashLoss int64 // admissions counted by a crashed owner in its last replication intervals
	split     int64 // admissions counted during a split or membership change by an owner other than the key's owner after it
	// unannounced: of split, those counted while rings disagreed with no
	// fault or change under way (a starved process)
	unannounced int64
	total       int64
}

func (b bound) String() string {
	return fmt.Sprintf("%d = limit %d + fallback %d + crash loss %d + split %d (%d with rings disagreeing without a fault)",
		b.total, b.limit, b.fallback, b.crashLoss, b.split, b.unannounced)
}

// crashLossSpan is how far before a crash the owner's changes may be lost:
// the last replication interval and a batch in flight.
const crashLossSpan = 2 * ReplicateEvery

// boundFor computes the bound of key k in window w from the history, and
// returns with it every violation of the per-node fallback cap.
func boundFor(s *schedule, h *history, k int, w int64) bound {
	b := bound{limit: s.limit}
	var mine []admission
	for _, a := range h.checks {
		if a.key == k && a.window == w {
			mine = append(mine, a)
		}
	}
	sort.SliceStable(mine, func(i, j int) bool { return mine[i].at.Before(mine[j].at) })
	// Fallback: every admission by fallback is allowed over the limit: the
	// owner may admit that much before it hears of them. (Each node's
	// fallback is capped by ratio × limit and its share of the remaining
	// count, but the cap starts again whenever its counters are sent to the
	// owner, which the history does not show; so the checker does not hold
	// a node to it.)
	for _, a := range mine {
		if a.allowed && a.src == SourceFallback {
			b.fallback++
		}
	}
	// Crash: what the owner counted in its last replication intervals
	// before it crashed (from when it started to close until it was
	// closed) may be lost; or, if its replicator was held up (a starved
	// process), what its successor's replica lacked just before the crash
	// and what it counted after that, whichever is more.
	var killing, sampled time.Time
	var lag int64
	for _, e := range h.events {
		switch e.what {
		case "counts":
			sampled, lag = e.at, 0
			if k < len(e.lag) {
				lag = e.lag[k]
			}
		case "killing":
			killing = e.at
		case "kill":
			var recent, since int64
			for _, a := range mine {
				if !a.allowed || a.src == SourceFallback || a.owner != e.node || a.at.After(e.at) {
					continue
				}
				if !a.at.Before(killing.Add(-crashLossSpan)) {
					recent++
				}
				if a.at.After(sampled) {
					since++
				}
			}
			b.crashLoss += max(recent, lag+since)
		}
	}
	// Splits (a partition or a frozen node, from the fault until the
	// cluster converged after it) and membership changes (a node leaving
	// or joining, until converged): each side, or each node that had not
	// heard of the change, may count on its own; what was counted by an
	// owner other than the key's owner once converged is allowed over.
	//
	// A ring that disagrees without a fault (a process so starved that
	// memberlist declared its peers dead) is a split too, one the schedule
	// did not make: outside the spans above, an admission counted by an
	// owner other than the key's owner on the ring all nodes last agreed on
	// is counted the same way. Only a node whose ring differed names
	// another owner.
	var from time.Time
	agreed := "" // the key's owner when the nodes last agreed
	split := func(a admission, unannounced bool) {
		b.split++
		if b.sides == nil {
			b.sides = map[string]int64{}
		}
		b.sides[a.owner]++
		if unannounced {
			b.unannounced++
		}
	}
	next := 0 // mine[next:] are not judged yet
	for _, e := range h.events {
		if e.what != "converged" {
			if (e.what == "split" || e.what == "join" || e.what == "leave" || e.what == "kill") && from.IsZero() {
				from = e.at
			}
			continue
		}
		for ; next < len(mine) && !mine[next].at.After(e.at); next++ {
			a := mine[next]
			if !a.allowed || a.src == SourceFallback {
				continue
			}
			inSpan := !from.IsZero() && !a.at.Before(from)
			switch {
			case inSpan && a.owner != e.owners[k]:
				split(a, false)
			case !inSpan && agreed != "" && a.owner != agreed:
				split(a, true)
			}
		}
		agreed, from = e.owners[k], time.Time{}
	}
	for _, a := range mine[next:] {
		if a.allowed && a.src != SourceFallback && agreed != "" && a.owner != agreed {
			split(a, true)
		}
	}
	b.total = b.limit + b.fallback + b.crashLoss + b.split
	return b
}

// excerpt prints the history of one key, with the events, for a failure.
func excerpt(s *schedule, h *history, k int) string {
	var lines []string
	t0 := time.Time{}
	for _, a := range h.checks {
		if t0.IsZero() || a.at.Before(t0) {
			t0 = a.at
		}
	}
	type line struct {
		at   time.Time
		text string
	}
	var all []line
	for _, a := range h.checks {
		if a.key == k {
			verdict := "denied"
			if a.allowed {
				verdict = "ADMITTED"
			}
			all = append(all, line{a.at, fmt.Sprintf("%s via %s (owner %s) by %s", verdict, a.node, a.owner, a.src)})
		}
	}
	for _, e := range h.events {
		all = append(all, line{e.at, fmt.Sprintf("--- %s %s", e.what, e.node)})
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	for _, l := range all {
		lines = append(lines, fmt.Sprintf("  %8.1fms %s", float64(l.at.Sub(t0).Microseconds())/1000, l.text))
	}
	return strings.Join(lines, "\n")
}

// ---------------------------------------------------------------------------
// Running a schedule.

// run plays one schedule on the cluster and returns its history. The
// cluster is converged and fault-free before and after.
func (c *faultCluster) run(s *schedule) *history {
	h := &history{}
	c.current = s
	fmt.Fprintf(&c.net.events, "time=%s === schedule %d: %s of %s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), s.seed, s.kind, s.target)
	rng := rand.New(rand.NewPCG(s.seed, 0x5eed))
	var rngMu sync.Mutex
	pick := func() (*Node, int) {
		rngMu.Lock()
		defer rngMu.Unlock()
		nodes := c.serving()
		c.net.mu.Lock()
		nodes = slices.DeleteFunc(nodes, func(n *Node) bool { return c.net.frozen[n.Name()] })
		c.net.mu.Unlock()
		return nodes[rng.IntN(len(nodes))], rng.IntN(len(s.keys))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				n, k := pick()
				h.check(n, s, k)
				time.Sleep(time.Millisecond)
			}
		}()
	}

	c.noteConverged(h, s) // it is, before the schedule: the ring all agree on
	time.Sleep(s.before)
	switch s.kind {
	case kindNone:
		time.Sleep(s.duration)
	case kindDelay, kindLoss:
		// Slow or lossy enough, memberlist declares nodes dead and the
		// ring splits: the fault counts as a split.
		h.note("split", "")
		c.net.set(func() { c.net.delay, c.net.loss = s.delay, s.loss })
		time.Sleep(s.duration)
		c.net.heal()
		h.note("heal", "")
	case kindFreeze:
		h.note("split", s.target)
		c.net.set(func() { c.net.frozen[s.target] = true })
		time.Sleep(s.duration)
		c.net.heal()
		h.note("heal", s.target)
	case kindPartition:
		h.note("split", strings.Join(s.sides, "+"))
		c.net.set(func() {
			for _, n := range s.sides {
				c.net.side[n] = 1
			}
		})
		time.Sleep(s.duration)
		c.net.heal()
		h.note("heal", "")
	case kindKill, kindKillKeep, kindKillEarly, kindKillKeepEarly:
		c.noteReplicas(h, s)
		h.note("killing", s.target) // the crash: replication stops here
		fmt.Fprintf(&c.net.events, "time=%s === killing %s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), s.target)
		c.kill(s.target)
		h.note("kill", s.target) // closed
		time.Sleep(s.duration)
		c.waitConverged() // the survivors declared it dead
		c.noteConverged(h, s)
		h.note("join", s.target)
		keep := s.kind == kindKillKeep || s.kind == kindKillKeepEarly
		if err := c.restart(s.target, keep, s.kind == kindKillEarly || s.kind == kindKillKeepEarly); err != nil {
			c.fatalf("%v: restarting %s: %v", s, s.target, err)
		}
		h.note("restart", s.target)
	case kindRestart, kindRestartEarly:
		h.note("leave", s.target)
		c.leave(s.target)
		c.waitConverged()
		c.noteConverged(h, s)
		h.note("join", s.target)
		if err := c.restart(s.target, false, s.kind == kindRestartEarly); err != nil {
			c.fatalf("%v: restarting %s: %v", s, s.target, err)
		}
		h.note("restart", s.target)
	}
	if s.kind != kindKill && s.kind != kindKillKeep && s.kind != kindKillEarly && s.kind != kindKillKeepEarly && s.kind != kindRestart && s.kind != kindRestartEarly {
		c.rejoin()
	}
	c.waitConverged()
	c.setReady(s.target)
	c.noteConverged(h, s)
	c.noteReplicas(h, s) // for the failure messages: where each count is now
	time.Sleep(s.before) // checks on the healed cluster
	close(stop)
	wg.Wait()
	// Spend every key to its limit through all nodes: an owner that lost
	// counts admits again here.
	nodes := c.live()
	for k := range s.keys {
		for i := range 2*s.limit + 2 {
			h.check(nodes[int(i)%len(nodes)], s, k)
		}
	}
	return h
}

// verify checks every key and window of a schedule's history against the
// bound, and returns what does not hold.
func verify(s *schedule, h *history) []string {
	var out []string
	type kw struct {
		k int
		w int64
	}
	admitted := map[kw]int64{}
	for _, a := range h.checks {
		if a.allowed {
			admitted[kw{a.key, a.window}]++
		} else {
			admitted[kw{a.key, a.window}] += 0
		}
	}
	for x, got := range admitted {
		b := boundFor(s, h, x.k, x.w)
		if got > b.total {
			out = append(out, fmt.Sprintf("key %d window %d: %d admitted > bound %s\n%s", x.k, x.w, got, b, excerpt(s, h, x.k)))
		}
		for owner, n := range b.sides {
			if n > s.limit {
				out = append(out, fmt.Sprintf("key %d window %d: %d admitted by %s, one side of a split, > limit %d\n%s", x.k, x.w, n, owner, s.limit, excerpt(s, h, x.k)))
			}
		}
	}
	return out
}

func envOr(flagValue, env string) string {
	if flagValue != "" && flagValue != "0" {
		return flagValue
	}
	return os.Getenv(env)
}

// TestFaults plays random fault schedules on a cluster of three or four
// nodes and checks every key's admissions against the documented bound.
// A failure names the schedule's seed and kind; replay it with
// `go test -race -run TestFaults ./cluster -seed N -fault-kinds KIND`.
func TestFaults(t *testing.T) {
	// A dozen schedules by default, so the package's tests stay quick
	// beside the others (timings stretch on a loaded machine); .ci/run
	// plays 240 more on their own.
	count := 12
	if testing.Short() {
		count = 4
	}
	if v := envOr(strconv.Itoa(*faultCount), "TOLLGATE_FAULTS"); v != "" {
		count, _ = strconv.Atoi(v)
	}
	kinds := faultKindsThatHold
	if v := envOr(*faultKinds, "TOLLGATE_FAULT_KINDS"); v != "" {
		kinds = nil
		for _, k := range strings.Split(v, ",") {
			kinds = append(kinds, faultKind(k))
		}
	}
	var seeds []uint64
	if v := envOr(strconv.FormatUint(*faultSeed, 10), "TOLLGATE_FAULT_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("seed %q: %v", v, err)
		}
		seeds = []uint64{seed}
	} else {
		base := uint64(time.Now().UnixNano())
		for i := range count {
			seeds = append(seeds, base+uint64(i))
		}
	}
	// Clusters run side by side (they mostly wait for failure detection
	// and breakers): three nodes for even seeds, four for odd ones, so a
	// seed replays on a cluster of its size.
	clusters := 4
	if len(seeds) < clusters {
		clusters = len(seeds)
	}
	queues := [2]chan uint64{make(chan uint64, len(seeds)), make(chan uint64, len(seeds))}
	for _, seed := range seeds {
		queues[seed%2] <- seed
	}
	close(queues[0])
	close(queues[1])
	start := time.Now()
	var mu sync.Mutex
	perKind := map[faultKind]int{}
	timeOf := map[faultKind]time.Duration{}
	var failed, unreconciled atomic.Int32
	var wg sync.WaitGroup
	for i := range clusters {
		parity := i % 2
		if len(seeds) == 1 {
			parity = int(seeds[0] % 2)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			size := 3 + parity
			c := newFaultCluster(t, size, uint64(i))
			defer func() { unreconciled.Add(c.unreconciled.Load()) }()
			for seed := range queues[parity] {
				if failed.Load() >= 3 {
					return
				}
				s := newSchedule(seed, kinds, c)
				began := time.Now()
				h := c.run(&s)
				mu.Lock()
				perKind[s.kind]++
				timeOf[s.kind] += time.Since(began)
				mu.Unlock()
				if problems := verify(&s, h); len(problems) > 0 {
					failed.Add(1)
					t.Errorf("schedule %v (%d nodes) broke the bound; replay with -run TestFaults -seed %d -fault-kinds %s\n%s\nlast events:\n%s",
						s, size, s.seed, s.kind, strings.Join(problems, "\n"), c.net.events.String())
				}
			}
		}()
	}
	wg.Wait()
	var kindsRun []string
	for k, n := range perKind {
		kindsRun = append(kindsRun, fmt.Sprintf("%s %d in %s", k, n, timeOf[k].Round(time.Millisecond)))
	}
	sort.Strings(kindsRun)
	t.Logf("%d schedules from seed %d on %d clusters in %s: %s; fallback counters left unreconciled after %d",
		len(seeds), seeds[0], clusters, time.Since(start).Round(time.Millisecond), strings.Join(kindsRun, ", "), unreconciled.Load())
}
