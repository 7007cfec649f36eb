package core

// The simulator: N cores on a virtual clock and a virtual network, driven
// the way the node drives them in production (ticks, an outbox drained
// after every step, replies or failures reported once per message, take
// ops advanced until done), with membership modelled as memberlist behaves
// (gossip delays, failure detection, refutation), and faults drawn from a
// seed: delays and loss (of the whole network or of one node's links),
// duplication, reordering, partitions (overlapping ones each cutting along
// their own line), pauses, crashes with and without snapshots, restarts,
// joins and leaves. Everything that
// happens is a function of the seed: a failing seed replays exactly.

import (
	"context"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// simEpoch is where virtual time starts: on an hour boundary, plus a
// second, so a schedule's fixed windows of an hour never roll over.
var simEpoch = time.Date(2030, 1, 1, 0, 0, 1, 0, time.UTC)

// simTiming is the protocol's timing in the simulator: production's
// proportions, compressed.
var simTiming = struct {
	call, probe, lease, replicate, tick, handoff time.Duration
	gossipMin, gossipMax                         time.Duration // delay of a membership update
	detectMin, detectMax                         time.Duration // failure detection
	netMin, netMax                               time.Duration // one-way message delay
	joinWait, leaveTimeout, leaveLinger          time.Duration
	callPatience                                 time.Duration // how long a caller waits for an answer
}{
	call: 50 * time.Millisecond, probe: 200 * time.Millisecond, lease: 600 * time.Millisecond,
	replicate: 10 * time.Millisecond, tick: 10 * time.Millisecond, handoff: 5 * time.Second,
	gossipMin: 5 * time.Millisecond, gossipMax: 80 * time.Millisecond,
	detectMin: 900 * time.Millisecond, detectMax: 1600 * time.Millisecond,
	netMin: 500 * time.Microsecond, netMax: 3 * time.Millisecond,
	joinWait: 2 * time.Second, leaveTimeout: 2 * time.Second, leaveLinger: 250 * time.Millisecond,
	callPatience: 150 * time.Millisecond,
}

// ---------------------------------------------------------------------------
// Events.

type simEvent struct {
	at   time.Time
	ns   int64 // at, in Unix nanoseconds: what the heap compares
	seq  uint64
	node *simNode // the run it belongs to, or nil for the simulation's own
	fn   func()
}

// eventHeap orders events by (ns, seq), each unique: a binary heap of
// the keys beside their events, so comparing reads no event.
type eventHeap []heapEntry

type heapEntry struct {
	ns  int64
	seq uint64
	e   *simEvent
}

func (a heapEntry) before(b heapEntry) bool {
	return a.ns < b.ns || a.ns == b.ns && a.seq < b.seq
}

func (h *eventHeap) push(e *simEvent) {
	*h = append(*h, heapEntry{ns: e.ns, seq: e.seq, e: e})
	q := *h
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q[i].before(q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *eventHeap) pop() *simEvent {
	q := *h
	top := q[0].e
	last := len(q) - 1
	q[0] = q[last]
	q[last] = heapEntry{}
	q = q[:last]
	*h = q
	for i := 0; ; {
		l := 2*i + 1
		if l >= len(q) {
			break
		}
		m := l
		if r := l + 1; r < len(q) && q[r].before(q[l]) {
			m = r
		}
		if !q[m].before(q[i]) {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	return top
}

// dirtySet holds the indexes (in names) of the runs a core's hook marked:
// flush visits them in index order.
type dirtySet []uint64

func (d dirtySet) set(i int) { d[i/64] |= 1 << (i % 64) }

// next returns the lowest marked index at or after from, and clears it.
func (d dirtySet) next(from int) (int, bool) {
	for w := from / 64; w < len(d); w++ {
		word := d[w]
		if w == from/64 {
			word &^= 1<<(from%64) - 1
		}
		if word != 0 {
			i := w*64 + bits.TrailingZeros64(word)
			d[w] &^= 1 << (i % 64)
			return i, true
		}
	}
	return 0, false
}

// ---------------------------------------------------------------------------
// The simulation.

type sim struct {
	seed   uint64
	rng    *rand.Rand
	now    time.Time
	events eventHeap
	seq    uint64
	steps  int

	hasher  keyhash.Hasher
	names   []string            // every node name, in order
	current map[string]*simNode // the running (or frozen) run of each name
	runs    []*simNode          // current by the index of names, for flush
	dirty   dirtySet            // the runs a core's hook marked (and resumed ones)
	truth   map[string]*simTruth
	nextInc uint64

	net simNet
	// linkCutUntil holds, for a pair of nodes (the lesser name first),
	// when links that cut them off from each other last came back (see
	// linkCutLately).
	linkCutUntil map[[2]string]time.Time
	keys         []simKey
	hist         simHistory

	violations []string
	// quickDetect: failure detection may be quicker than a lease, so a
	// dead member's keys wait for its lease after the ring dropped it.
	quickDetect bool
	maxNodes    int
	open        int      // faults not played to their end
	log         []string // what happened, for a failing seed
	verbose     bool
	// record: every line of the log (the cores' debug lines and every
	// message on the wire included) goes to it, violating or not: what
	// a replay compares (see -sim-dump, TestSimulationReplaysExactly).
	record func(line string)
	trace  limiter.Key // a key whose movements are logged
	traced map[string]bool
}

// simTruth is what a node really is, which observers learn with delays.
type simTruth struct {
	inc    uint64
	status obsStatus
}

type simNet struct {
	// side holds, for each node, one bit per partition that put it on its
	// small side: nodes whose bits differ cannot talk. Partitions that
	// overlap in time each cut along their own line.
	side       map[string]uint64
	extraDelay time.Duration // added to every message
	loss       float64       // chance a message is lost
	// nodeDelay and nodeLoss are faults of one node's links: the delay is
	// added to every message it sends or receives, the chance of loss
	// applies to each of them.
	nodeDelay map[string]time.Duration
	nodeLoss  map[string]float64
	dup       float64       // chance a message is delivered twice
	reorder   time.Duration // extra random delay per message, up to this
}

type simKey struct {
	key   limiter.Key
	limit int64
	hot   bool // sent more requests than its limit
}

func newSim(seed uint64, nodes int) *sim {
	s := &sim{
		seed:    seed,
		rng:     rand.New(rand.NewPCG(seed, 0x5eed51a)),
		now:     simEpoch,
		hasher:  keyhash.New([]byte("simulation secret"), "ring"),
		current: map[string]*simNode{},
		truth:   map[string]*simTruth{},
		net:     simNet{side: map[string]uint64{}, nodeDelay: map[string]time.Duration{}, nodeLoss: map[string]float64{}},
	}
	for i := range nodes {
		s.names = append(s.names, fmt.Sprintf("n%02d", i))
	}
	s.runs = make([]*simNode, nodes)
	s.dirty = make(dirtySet, (nodes+63)/64)
	s.maxNodes = nodes
	return s
}

func (s *sim) logf(format string, args ...any) {
	keep := s.verbose || len(s.log) < 4000
	if !keep && s.record == nil {
		return
	}
	line := fmt.Sprintf("%9.3fs ", s.now.Sub(simEpoch).Seconds()) + fmt.Sprintf(format, args...)
	if s.record != nil {
		s.record(line)
	}
	if keep {
		s.log = append(s.log, line)
	}
}

// at schedules fn at t for node (nil: the simulation itself).
func (s *sim) at(t time.Time, node *simNode, fn func()) {
	if t.Before(s.now) {
		t = s.now
	}
	s.seq++
	s.events.push(&simEvent{at: t, ns: t.UnixNano(), seq: s.seq, node: node, fn: fn})
}

func (s *sim) after(d time.Duration, node *simNode, fn func()) { s.at(s.now.Add(d), node, fn) }

func (s *sim) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
}

// runUntil plays events up to t.
func (s *sim) runUntil(t time.Time) {
	for end := t.UnixNano(); len(s.events) > 0 && s.events[0].ns <= end; {
		e := s.events.pop()
		if e.at.After(s.now) {
			s.now = e.at
		}
		if n := e.node; n != nil {
			if n.gone {
				continue
			}
			if n.frozen {
				n.deferred = append(n.deferred, e)
				continue
			}
		}
		e.fn()
		s.steps++
		s.flush()
	}
	if t.After(s.now) {
		s.now = t
	}
}

// flush sends what cores queued and wakes what waits on settled keys, until
// nothing more comes.
func (s *sim) flush() {
	for range 1000 {
		busy := false
		for i, ok := s.dirty.next(0); ok; i, ok = s.dirty.next(i + 1) {
			n := s.runs[i]
			if n == nil || n.gone {
				continue
			}
			if n.frozen {
				continue // marked again when it resumes
			}
			if n.outboxDirty {
				n.outboxDirty = false
				busy = true
				followHandOff(n)
				for _, o := range n.core.Outbox() {
					s.send(n, o)
				}
			}
			if n.settledDirty {
				n.settledDirty = false
				busy = true
				s.wakeAll(n)
			}
			if n.memberDirty {
				n.memberDirty = false
				busy = true
				s.memberChanged(n)
			}
		}
		if !busy {
			return
		}
	}
	s.violate("liveness", "flush did not settle after 1000 rounds")
}

func (s *sim) violate(kind, format string, args ...any) {
	s.violations = append(s.violations, kind+": "+fmt.Sprintf(format, args...))
}

// ---------------------------------------------------------------------------
// Nodes.

type simNode struct {
	name   string
	index  int // in the simulation's names
	inc    uint64
	core   *Core
	engine *limiter.Engine
	frozen bool
	gone   bool      // crashed or left: its events are dropped
	leftAt time.Time // when it left; zero if it crashed

	deferred []*simEvent // events that came while frozen

	outboxDirty, settledDirty, memberDirty bool

	view        map[string]*obsEntry
	lastMembers string // the last Membership given, encoded
	joined      bool   // Joined was called
	lateView    bool   // its driver says a seed answered before it lists the members
	leaving     bool
	leaveBy     time.Time
	// handedOnLeave are the counters its leave handed over: where its
	// count of a key went (see handedAway).
	handedOnLeave []handedCount
	cutUntil      time.Time // when links that cut it off last came back (see cutOffLately)
	// alone: no seed answered within the join wait, and it has heard of no
	// member since: it counts alone, a side of a split (see doc.go's S).
	alone bool

	waiting []*simReq   // take ops waiting
	holding []*simServe // items held for keys on their way
}

func (n *simNode) peer() Peer { return Peer{Name: n.name, Inc: n.inc} }

// obsStatus is what an observer believes of a node.
type obsStatus uint8

const (
	obsJoining obsStatus = iota + 1
	obsMember
	obsLeaving
	obsDead
	obsLeft
	obsCrashed // truth only: the run is gone without a word
)

type obsEntry struct {
	inc    uint64
	status obsStatus
	lost   time.Time     // when it stopped being reachable (zero: reachable)
	detect time.Duration // how long until it is declared dead
}

// start starts a new run of name; seeds says whether it joins others.
func (s *sim) start(name string, seeds bool, snapshot Kept) *simNode {
	s.nextInc++
	n := &simNode{name: name, inc: s.nextInc, index: slices.Index(s.names, name), view: map[string]*obsEntry{}}
	n.engine = limiter.New(limiter.Config{MaxKeys: 4096})
	cfg := Config{
		Self:           Member{Name: name, Inc: n.inc, PeerAddr: name},
		Engine:         n.engine,
		Hasher:         s.hasher,
		Joining:        seeds,
		CallTimeout:    simTiming.call,
		HandoffWindow:  simTiming.handoff,
		ProbeInterval:  simTiming.probe,
		LeaseTime:      simTiming.lease,
		ReplicateEvery: simTiming.replicate,
		CacheSlots:     1024,
		Seed:           s.seed ^ n.inc,
		Logger:         slog.New(&simLogHandler{s: s}),
		Hooks: Hooks{
			Outbox:  func() { n.outboxDirty = true; s.dirty.set(n.index) },
			Settled: func() { n.settledDirty = true; s.dirty.set(n.index) },
			Member:  func(bool) { n.memberDirty = true; s.dirty.set(n.index) },
		},
	}
	n.core = New(cfg, s.now)
	s.current[name] = n
	s.runs[n.index] = n
	status := obsJoining
	if !seeds {
		status = obsMember
		n.joined = true
	}
	s.truth[name] = &simTruth{inc: n.inc, status: status}
	if len(snapshot.States) > 0 {
		n.core.RestoreCounters(s.now, snapshot)
	}
	s.scheduleTick(n)
	s.scheduleWatch(n)
	s.gossip(name)
	if seeds {
		s.after(s.between(5*time.Millisecond, 30*time.Millisecond), n, func() { s.tryJoin(n, s.now) })
	}
	s.logf("start %s inc %d seeds=%v restored=%d", name, n.inc, seeds, len(snapshot.States))
	return n
}

func (s *sim) scheduleTick(n *simNode) {
	s.after(simTiming.tick, n, func() {
		n.core.Tick(s.now)
		// A leaving node lingers until the others heard it leaves (it
		// answers what still comes with the new owner's name), and until
		// it handed everything over, or its leave timed out.
		if n.leaving && (n.core.Drained() && s.now.Sub(n.leaveBy.Add(-simTiming.leaveTimeout)) >= simTiming.leaveLinger || !s.now.Before(n.leaveBy)) {
			s.stop(n)
			return
		}
		s.scheduleTick(n)
	})
}

// tryJoin has a starting node contact a seed: the first other running
// node it can talk to gives it its view.
func (s *sim) tryJoin(n *simNode, began time.Time) {
	if n.joined {
		return
	}
	for _, name := range s.names {
		seed := s.current[name]
		if seed == nil || seed == n || seed.gone || !s.canTalk(n.name, name) {
			continue
		}
		if n.lateView {
			// As memberlist's join returns: the node's driver says a seed
			// answered, and gives its core the members a moment later.
			n.joined = true
			n.core.Joined(s.now)
			s.after(s.between(simTiming.gossipMin, simTiming.gossipMax), n, func() {
				if seed := s.current[name]; seed != nil && !seed.gone {
					s.adoptView(n, seed)
				}
			})
			s.logf("%s joined through %s, members listed later", n.name, name)
			return
		}
		s.adoptView(n, seed)
		n.joined = true
		n.core.Joined(s.now)
		s.logf("%s joined through %s", n.name, name)
		return
	}
	if s.now.Sub(began) >= simTiming.joinWait {
		n.joined = true
		n.alone = true
		n.core.Joined(s.now)
		s.logf("%s counts alone: no seed answered", n.name)
		return
	}
	s.after(200*time.Millisecond, n, func() { s.tryJoin(n, began) })
}

// adoptView gives a joining node its seed's view.
func (s *sim) adoptView(n, seed *simNode) {
	for x, e := range seed.view {
		if x != n.name {
			c := *e
			c.lost = time.Time{}
			n.view[x] = &c
		}
	}
	n.view[seed.name] = &obsEntry{inc: seed.inc, status: s.truth[seed.name].status}
	s.updateMembership(n)
}

// memberChanged gossips a node's entering or leaving its own ring.
func (s *sim) memberChanged(n *simNode) {
	t := s.truth[n.name]
	if t.inc != n.inc || n.leaving {
		return
	}
	if n.core.Member() {
		t.status = obsMember
	} else {
		t.status = obsJoining
	}
	s.logf("%s member=%v", n.name, n.core.Member())
	s.gossip(n.name)
}

// crashed reports whether the run ended by a crash, not a leave.
func (n *simNode) crashed() bool { return n.gone && n.leftAt.IsZero() }

// runState names how the run stands, for the log: alive, or left.
func (n *simNode) runState() string {
	if n.gone {
		return "left"
	}
	return "alive"
}

// leave has a node leave gracefully.
func (s *sim) leave(n *simNode) {
	if n.gone || n.leaving {
		return
	}
	n.leaving = true
	n.leaveBy = s.now.Add(simTiming.leaveTimeout)
	s.truth[n.name].status = obsLeaving
	s.gossip(n.name)
	n.core.Leave(s.now)
	n.handedOnLeave = leaveHandOff(n)
	s.logf("%s leaving", n.name)
}

// stop ends a leaving node's run.
func (s *sim) stop(n *simNode) {
	if !n.core.Drained() {
		s.logf("%s left before it drained", n.name)
		s.noteLeftUndrained(n)
	}
	n.gone = true
	n.leftAt = s.now
	s.truth[n.name].status = obsLeft
	s.gossip(n.name)
	s.logf("%s left", n.name)
}

// crash ends a run at once; it returns what a snapshot taken then holds.
func (s *sim) crash(n *simNode) Kept {
	var snap []limiter.State
	n.engine.Range(s.now, func(st limiter.State) bool {
		snap = append(snap, st)
		return true
	})
	kept := n.core.Keep(s.now, sortStates(snap))
	s.noteCrash(n)
	n.gone = true
	s.truth[n.name].status = obsCrashed
	s.logf("%s crashed", n.name)
	return kept
}

func (s *sim) freeze(n *simNode) {
	n.frozen = true
	s.logf("%s frozen", n.name)
}

func (s *sim) resume(n *simNode) {
	if n.gone || !n.frozen {
		return
	}
	n.frozen = false
	s.dirty.set(n.index) // what it queued while frozen goes out now
	s.logf("%s resumes with %d events", n.name, len(n.deferred))
	evs := n.deferred
	n.deferred = nil
	for _, e := range evs {
		if n.gone || n.frozen {
			n.deferred = append(n.deferred, e)
			continue
		}
		e.fn()
		s.flush()
	}
}

// ---------------------------------------------------------------------------
// Membership: gossip and failure detection, as memberlist does them.

// canTalk reports whether two nodes reach each other now.
func (s *sim) canTalk(a, b string) bool {
	na, nb := s.current[a], s.current[b]
	if na == nil || nb == nil || na.gone || nb.gone || na.frozen || nb.frozen {
		return false
	}
	return s.net.side[a] == s.net.side[b]
}

// gossip spreads the truth of name to every observer that can hear it.
func (s *sim) gossip(name string) {
	for _, o := range s.names {
		if o == name {
			continue
		}
		obs := s.current[o]
		if obs == nil || obs.gone {
			continue
		}
		s.after(s.between(simTiming.gossipMin, simTiming.gossipMax), obs, func() { s.learn(obs, name) })
	}
}

// learn has obs take name's truth, if it can hear it.
func (s *sim) learn(obs *simNode, name string) {
	t := s.truth[name]
	if t == nil || obs.gone {
		return
	}
	if t.status == obsLeft {
		if _, ok := obs.view[name]; ok && obs.view[name].inc == t.inc {
			delete(obs.view, name)
			s.updateMembership(obs)
		}
		return
	}
	if !s.canTalk(obs.name, name) {
		return // it learns later, when they can (watch)
	}
	e := obs.view[name]
	if e == nil || e.inc != t.inc || e.status != t.status {
		obs.view[name] = &obsEntry{inc: t.inc, status: t.status}
		s.updateMembership(obs)
	}
}

// scheduleWatch runs an observer's failure detector and anti-entropy every
// 50ms.
func (s *sim) scheduleWatch(n *simNode) {
	s.after(50*time.Millisecond, n, func() {
		s.watch(n)
		s.scheduleWatch(n)
	})
}

func (s *sim) watch(obs *simNode) {
	changed := false
	for _, name := range s.names {
		if name == obs.name {
			continue
		}
		t := s.truth[name]
		e := obs.view[name]
		if t == nil {
			continue
		}
		if s.canTalk(obs.name, name) {
			if e == nil || e.inc != t.inc || e.status != t.status && t.status != obsCrashed && t.status != obsLeft {
				if !obs.joined && e == nil {
					continue // a node that has not joined learns of others through its seed
				}
				obs.view[name] = &obsEntry{inc: t.inc, status: t.status}
				changed = true
			} else if !e.lost.IsZero() {
				e.lost = time.Time{}
			}
			continue
		}
		if e == nil || e.status == obsDead {
			continue
		}
		if t.status == obsLeft && e.inc == t.inc {
			// learn removes it. An observer that joined after the leave
			// was gossiped took the entry from its seed's view: memberlist
			// relays a leave to every live node, so it hears of it as late
			// as the others did.
			if left := s.current[name]; left != nil && left.inc == t.inc && s.now.Sub(left.leftAt) >= simTiming.gossipMax {
				delete(obs.view, name)
				changed = true
			}
			continue
		}
		if e.lost.IsZero() {
			e.lost = s.now
			lo := simTiming.detectMin
			if s.quickDetect {
				lo = simTiming.lease * 2 / 3
			}
			e.detect = s.between(lo, simTiming.detectMax)
			continue
		}
		if s.now.Sub(e.lost) >= e.detect {
			e.status = obsDead
			changed = true
			s.logf("%s declares %s dead", obs.name, name)
		}
	}
	if changed {
		s.updateMembership(obs)
	}
}

// updateMembership gives an observer's core what it believes.
func (s *sim) updateMembership(obs *simNode) {
	var m Membership
	var b strings.Builder
	for _, name := range s.names {
		e := obs.view[name]
		if e == nil || name == obs.name {
			continue
		}
		mem := Member{Name: name, Inc: e.inc, PeerAddr: name}
		switch e.status {
		case obsMember:
			m.Members = append(m.Members, mem)
		case obsLeaving:
			m.Leaving = append(m.Leaving, mem)
		case obsJoining:
			m.Joining = append(m.Joining, mem)
		case obsDead:
			m.Dead = append(m.Dead, mem.Peer())
		}
		fmt.Fprintf(&b, "%s/%d/%d ", name, e.inc, e.status)
	}
	if b.String() == obs.lastMembers {
		return
	}
	obs.lastMembers = b.String()
	if len(m.Members) > 0 {
		obs.alone = false
	}
	obs.core.SetMembership(s.now, m)
}

// ---------------------------------------------------------------------------
// The network.

func (s *sim) delay(from, to string) time.Duration {
	d := s.between(simTiming.netMin, simTiming.netMax) + s.net.extraDelay + s.net.nodeDelay[from] + s.net.nodeDelay[to]
	if s.net.reorder > 0 {
		d += s.between(0, s.net.reorder)
	}
	return d
}

// deliver carries fn from one node to the current run of another, unless
// the network loses it; a copy may arrive twice.
func (s *sim) deliver(from *simNode, to string, fn func(*simNode)) {
	copies := 1
	if s.net.dup > 0 && s.rng.Float64() < s.net.dup {
		copies = 2
	}
	for range copies {
		if s.net.side[from.name] != s.net.side[to] || s.lost(from.name, to) {
			continue
		}
		d := s.delay(from.name, to)
		dest := s.current[to]
		if dest == nil || dest.gone {
			continue
		}
		s.after(d, dest, func() {
			if s.net.side[from.name] != s.net.side[to] {
				return // cut while on its way
			}
			fn(dest)
		})
	}
}

// lost draws whether the network loses one message from one node to
// another.
func (s *sim) lost(from, to string) bool {
	if s.net.loss > 0 && s.rng.Float64() < s.net.loss {
		return true
	}
	for _, name := range []string{from, to} {
		if l := s.net.nodeLoss[name]; l > 0 && s.rng.Float64() < l {
			return true
		}
	}
	return false
}

// call sends msg from n to to and reports exactly one outcome: the first
// reply, or failure once the caller's patience ran out. answer is how the
// receiver answers; it may answer later (a held item).
func (s *sim) call(n *simNode, to Peer, msg Message, answer func(dest *simNode, m Message, respond func(Message)), onReply func(Message), onFail func()) {
	done := false
	s.after(simTiming.callPatience, n, func() {
		if !done {
			done = true
			onFail()
		}
	})
	msg = copyMessage(msg)
	s.deliver(n, to.Name, func(dest *simNode) {
		answer(dest, msg, func(reply Message) {
			if reply == nil {
				return
			}
			reply = copyMessage(reply)
			s.deliver(dest, n.name, func(back *simNode) {
				if back != n || done {
					return
				}
				done = true
				onReply(reply)
			})
		})
	})
}

// send carries one outgoing message of a core.
func (s *sim) send(n *simNode, o Outgoing) {
	if s.record != nil {
		s.logf("send %s -> %s %T %+v", n.name, o.To.Name, o.Msg, o.Msg)
	}
	switch msg := o.Msg.(type) {
	case Ack:
		s.traceMsg(n.name, o.To.Name, msg)
		s.deliver(n, o.To.Name, func(dest *simNode) { dest.core.Handle(s.now, n.peer(), msg) })
		return
	case TakeItem: // a penalty: no answer
		s.deliver(n, o.To.Name, func(dest *simNode) {
			res := make([]limiter.Result, len(msg.Reqs))
			dest.core.Serve(s.now, n.peer(), &msg, res, s.now)
		})
		return
	}
	s.traceMsg(n.name, o.To.Name, o.Msg)
	var replicas []uint64
	if t, ok := o.Msg.(Transfer); ok {
		replicas = s.noteReplicaSent(n, t)
	}
	s.call(n, o.To, o.Msg,
		func(dest *simNode, m Message, respond func(Message)) {
			for _, id := range replicas {
				delete(s.hist.replicasSent, id)
			}
			reply := dest.core.Handle(s.now, n.peer(), m)
			if s.record != nil {
				s.logf("reply %s -> %s %T %+v", dest.name, n.name, reply, reply)
			}
			if r, ok := reply.(SealReply); ok && r.Sealed {
				s.noteSeal(dest, n.name)
			}
			s.traceMsg(dest.name, n.name, reply)
			respond(reply)
		},
		func(reply Message) { n.core.Answered(s.now, o.ID, reply) },
		func() { n.core.Failed(s.now, o.ID) })
}

// copyMessage copies what a message shares with its sender: what crosses
// a network is never the sender's memory.
func copyMessage(m Message) Message {
	switch x := m.(type) {
	case Transfer:
		x.States, x.Reqs = copyStates(x.States), slices.Clone(x.Reqs)
		return x
	case TakeItem:
		x.Reqs = slices.Clone(x.Reqs)
		return x
	case ItemReply:
		x.Results = slices.Clone(x.Results)
		return x
	case PullReply:
		given := make([]Transfer, len(x.Given))
		for i, t := range x.Given {
			t.States, t.Reqs = copyStates(t.States), slices.Clone(t.Reqs)
			given[i] = t
		}
		x.Given, x.Moved = given, slices.Clone(x.Moved)
		return x
	case Pull:
		x.Keys = slices.Clone(x.Keys)
		return x
	}
	return m
}

func copyStates(in []limiter.State) []limiter.State {
	out := slices.Clone(in)
	for i := range out {
		out[i].Leases = slices.Clone(out[i].Leases)
	}
	return out
}

// ---------------------------------------------------------------------------
// Requests.

// simReq is one client request and its way through the cluster.
type simReq struct {
	id     int
	node   *simNode
	zones  []int // indexes into the keys
	op     TakeOp
	reqs   []limiter.Request
	res    []limiter.Result
	start  time.Time
	end    time.Time
	wake   uint64 // invalidates older wake-ups
	d      Decision
	done   bool
	zoneAt []time.Time // when each zone was decided, at the node that decided it
	zoneOK []bool
	zoneBy []Source
	// zoneAlone: the zone was decided by its node as the key's owner while
	// the node counted alone (simNode.alone).
	zoneAlone []bool
	// zoneDenied: the zone's own answer was a denial (the one that denied
	// the request, or one of them).
	zoneDenied []bool
	items      []uint64 // the take items it sent
}

// simServe is a take item an owner holds while its keys move to it.
type simServe struct {
	from  Peer
	item  TakeItem
	res   []limiter.Result
	hold  time.Time
	reply func(ItemReply)
	wake  uint64
	done  bool
}

// request sends a request for the given zones through node n.
func (s *sim) request(n *simNode, zones []int) {
	r := &simReq{id: len(s.hist.reqs), node: n, zones: zones, start: s.now}
	for _, z := range zones {
		k := s.keys[z]
		r.reqs = append(r.reqs, limiter.Request{Key: k.key, Zone: uint64(z + 1), Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: k.limit, Window: time.Hour}})
	}
	r.res = make([]limiter.Result, len(r.reqs))
	r.zoneAt = make([]time.Time, len(zones))
	r.zoneOK = make([]bool, len(zones))
	r.zoneBy = make([]Source, len(zones))
	r.zoneAlone = make([]bool, len(zones))
	s.hist.reqs = append(s.hist.reqs, r)
	d, done := n.core.Take(s.now, &r.op, OpTake, 0, r.reqs, r.res)
	if done {
		for i := range zones {
			r.zoneAt[i], r.zoneOK[i], r.zoneBy[i] = s.now, d.Allowed, SourceOwner
			r.zoneAlone[i] = n.alone
		}
		s.finish(r, d)
		return
	}
	s.advance(r)
}

// advance steps a request's op until it calls, waits or is done.
func (s *sim) advance(r *simReq) {
	n := r.node
	for !r.done {
		if n.gone {
			return
		}
		a := n.core.Step(s.now, &r.op)
		s.noteZones(r)
		switch a.Kind {
		case ActDone:
			s.finish(r, r.op.Decision())
			return
		case ActWait:
			r.wake++
			w := r.wake
			n.waiting = append(n.waiting, r)
			s.at(a.Until, n, func() {
				if r.wake == w && !r.done {
					s.unpark(n, r)
					s.advance(r)
				}
			})
			return
		case ActCall:
			r.wake++
			w := r.wake
			if item, ok := a.Msg.(TakeItem); ok {
				r.items = append(r.items, item.Seq)
			}
			s.call(n, a.To, a.Msg,
				func(dest *simNode, m Message, respond func(Message)) { s.answer(dest, n.peer(), m, respond) },
				func(reply Message) {
					if r.wake != w || r.done {
						return
					}
					n.core.Replied(s.now, &r.op, reply)
					s.advance(r)
				},
				func() {
					if r.wake != w || r.done {
						return
					}
					n.core.CallFailed(s.now, &r.op, false)
					s.advance(r)
				})
			return
		}
	}
}

// noteZones records when each zone of r was decided, and by whom.
func (s *sim) noteZones(r *simReq) {
	for gi := range r.op.groups {
		g := &r.op.groups[gi]
		if !g.decided {
			continue
		}
		idx := g.idx
		if idx == nil {
			idx = make([]int, len(r.zones))
			for i := range idx {
				idx[i] = i
			}
		}
		for _, at := range idx {
			if r.zoneAt[at].IsZero() {
				when := s.now
				if g.src == SourcePeer {
					if t, ok := s.hist.served[servedKey{g.by.Name, g.by.Inc, r.node.inc, r.node.name, g.seq}]; ok {
						when = t
					}
				}
				r.zoneAt[at], r.zoneOK[at], r.zoneBy[at] = when, g.allowed, g.src
				switch g.src {
				case SourceOwner:
					r.zoneAlone[at] = r.node.alone
				case SourcePeer:
					r.zoneAlone[at] = s.hist.servedAlone[servedKey{g.by.Name, g.by.Inc, r.node.inc, r.node.name, g.seq}]
				}
			}
		}
	}
}

// answer is what node dest answers to a call from from: a take item is
// served (and held while its keys move to dest), anything else handled.
func (s *sim) answer(dest *simNode, from Peer, m Message, respond func(Message)) {
	item, ok := m.(TakeItem)
	if !ok {
		respond(dest.core.Handle(s.now, from, m))
		return
	}
	srv := &simServe{from: from, item: item, res: make([]limiter.Result, len(item.Reqs)), hold: s.now.Add(simTiming.call)}
	srv.reply = func(r ItemReply) { respond(r) }
	s.serve(dest, srv)
}

// serve serves a held item; it reports whether it was answered.
func (s *sim) serve(dest *simNode, srv *simServe) bool {
	reply, wait := dest.core.Serve(s.now, srv.from, &srv.item, srv.res, srv.hold)
	if wait {
		srv.wake++
		w := srv.wake
		dest.holding = append(dest.holding, srv)
		s.at(srv.hold, dest, func() {
			if srv.wake == w && !srv.done {
				dest.holding = slices.DeleteFunc(dest.holding, func(x *simServe) bool { return x == srv })
				s.serve(dest, srv)
			}
		})
		return false
	}
	srv.done = true
	if reply.Outcome == Decided && srv.item.Op == OpTake {
		// A duplicate of the item is answered as the item was: the owner
		// decided it when it first served it.
		sk := servedKey{dest.name, dest.inc, srv.from.Inc, srv.from.Name, srv.item.Seq}
		_, again := s.hist.served[sk]
		if !again {
			s.hist.served[sk] = s.now
			if dest.alone {
				s.hist.servedAlone[sk] = true
			}
		}
		for _, rq := range srv.item.Reqs {
			if again && slices.ContainsFunc(s.hist.decisions, func(d simDecision) bool {
				return d.key == rq.Key && d.node == dest.name && d.nodeInc == dest.inc && d.caller == srv.from && d.seq == srv.item.Seq && d.allowed == reply.Allowed
			}) {
				// The item came again (a duplicate, or sent again after
				// its answer was lost), and the owner answered it as
				// before: one decision, not two.
				continue
			}
			if s.trace != 0 && rq.Key == s.trace {
				s.logf("TRACE %s decides take item %d of %s: allowed=%v", dest.name, srv.item.Seq, srv.from.Name, reply.Allowed)
			}
			s.hist.decisions = append(s.hist.decisions, simDecision{key: rq.Key, at: s.now, node: dest.name, nodeInc: dest.inc, allowed: reply.Allowed, seq: srv.item.Seq, caller: srv.from})
		}
	}
	srv.reply(reply)
	return true
}

func (s *sim) unpark(n *simNode, r *simReq) {
	n.waiting = slices.DeleteFunc(n.waiting, func(x *simReq) bool { return x == r })
}

// wakeAll looks again at what waits on a node: keys settled.
func (s *sim) wakeAll(n *simNode) {
	reqs := n.waiting
	n.waiting = nil
	for _, r := range reqs {
		r.wake++
		s.advance(r)
	}
	held := n.holding
	n.holding = nil
	for _, srv := range held {
		srv.wake++
		s.serve(n, srv)
	}
}

func (s *sim) finish(r *simReq, d Decision) {
	for i, z := range r.zones {
		if r.zoneBy[i] == SourceFallback || !d.Allowed || s.trace != 0 && s.keys[z].key == s.trace {
			if s.trace != 0 && s.keys[z].key == s.trace {
				s.logf("request %d key %d via %s: %s allowed=%v items=%v", r.id, z, r.node.name, r.zoneBy[i], d.Allowed, r.items)
				continue
			}
			s.logf("request %d key %d via %s: %s allowed=%v", r.id, z, r.node.name, r.zoneBy[i], d.Allowed)
		}
	}
	r.done = true
	r.d = d
	r.end = s.now
	r.zoneDenied = make([]bool, len(r.zones))
	for i := range r.zones {
		if r.zoneAt[i].IsZero() {
			r.zoneAt[i] = s.now
		}
		r.zoneDenied[i] = !d.Allowed && !r.res[i].Allowed
	}
}

// simLogHandler puts the cores' log lines in the simulation's log.
type simLogHandler struct {
	s     *sim
	attrs []slog.Attr
}

// Enabled keeps the cores' debug lines (every movement of counts) for a
// replay asked to log (-sim-log): a sweep has no use for them.
func (h *simLogHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || *simLogFlag || h.s.record != nil
}
func (h *simLogHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.s.logf("  | %s", b.String())
	return nil
}
func (h *simLogHandler) WithAttrs(as []slog.Attr) slog.Handler { return h }
func (h *simLogHandler) WithGroup(string) slog.Handler         { return h }

// traceMsg logs the messages that carry the traced key.
func (s *sim) traceMsg(from, to string, m Message) {
	if s.trace == 0 {
		return
	}
	has := func(states []limiter.State) int64 {
		var n int64 = -1
		for _, st := range states {
			if st.Key == s.trace {
				n = max(n, 0) + int64(st.Cur)
			}
		}
		return n
	}
	switch x := m.(type) {
	case Ack:
		if s.traced[from+">"+to+fmt.Sprint(x.Seq)] {
			s.logf("TRACE %s -> %s ack %d refused=%v", from, to, x.Seq, x.Refused)
		}
	case Transfer:
		if c := has(x.States); c >= 0 {
			s.logf("TRACE %s -> %s transfer %d %s count %d was=%d", from, to, x.Seq, x.Mode, c, x.Was)
			if s.traced == nil {
				s.traced = map[string]bool{}
			}
			s.traced[to+">"+from+fmt.Sprint(x.Seq)] = true
		}
		for _, r := range x.Reqs {
			if r.Key == s.trace {
				s.logf("TRACE %s -> %s transfer %d %s take %d", from, to, x.Seq, x.Mode, x.Take)
				if s.traced == nil {
					s.traced = map[string]bool{}
				}
				s.traced[to+">"+from+fmt.Sprint(x.Seq)] = true
			}
		}
	case TakeItem:
		for _, r := range x.Reqs {
			if r.Key == s.trace {
				s.logf("TRACE %s -> %s take item %d op %d", from, to, x.Seq, x.Op)
			}
		}
	case Pull:
		if slices.Contains(x.Keys, s.trace) {
			s.logf("TRACE %s -> %s pull", from, to)
		}
	case PullReply:
		for _, t := range x.Given {
			if c := has(t.States); c >= 0 {
				s.logf("TRACE %s -> %s pull reply gives %d %s count %d", from, to, t.Seq, t.Mode, c)
			}
		}
		for _, ko := range x.Moved {
			if ko.Key == s.trace {
				s.logf("TRACE %s -> %s pull reply: moved to %s", from, to, ko.Owner)
			}
		}
	}
}
