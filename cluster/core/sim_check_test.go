package core

// Schedules, the history they leave, and the two-sided checker:
//
//	(a) bound: per key and window, admitted ≤ L + F + C + S, where F is
//	    what fallback admitted, C what a crash (or a takeover of a paused
//	    or cut-off owner, one that left while cut off included: its leave
//	    handed its counter where the taker could not reach it) lost: the
//	    owner's count its successor's replica lacked, and what the
//	    crashed node held in flight; and S what a node that counted
//	    alone (no seed answered within the join wait)
//	    admitted as owner before it heard of a member (cluster/doc.go:
//	    a side of a split; the only S counted here: the small side of
//	    any other split lacks a majority and counts nothing as owner);
//	(b) conservation: once faults heal and transfers finish, the count
//	    the cluster holds for each key lies between admitted − C and
//	    admitted: nothing doubled, nothing lost beyond C (a leaving node
//	    whose leave times out while it is cut off, by a partition or a
//	    network slower than a caller's patience, takes what it still
//	    holds with it, as a crash does: C counts that too);
//	(c) no false denials: an owner denies a key only once the admissions
//	    decided before (with grants still to be given back, and the
//	    units granted, by an owner or by the caller's fallback, to
//	    requests whose caller went before answering them) reach its
//	    limit; a known denial repeats an owner's; and in a schedule of
//	    graceful changes only (joins, leaves, rolling restarts, no fault)
//	    nothing is decided by fallback at all;
//	(d) reputation moves only by a client's own denials (see the
//	    reputation schedules);
//	(e) a takeover waits for the survivors' fallback counts: as a node
//	    takes over a dead member's keys, no survivor that sealed to it
//	    holds a fallback count of them admitted since, unless the new
//	    owner did not answer it or kept saying not yet (checkTakeover).
//	    The bound (a) allows what such a count lets the new owner admit
//	    beyond the limit (it is within F), so it is checked on its own.

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

type servedKey struct {
	owner     string
	ownerInc  uint64
	callerInc uint64
	caller    string
	seq       uint64
}

// simDecision is an owner deciding a take item for another node.
type simDecision struct {
	key     limiter.Key
	at      time.Time
	node    string
	nodeInc uint64
	allowed bool
	seq     uint64
	caller  Peer
}

type simHistory struct {
	// replicasSent are the replicas on the wire, not delivered yet (or
	// lost on the way), by the copy sent: a successor may apply one after
	// its sender crashed, though the sender forgot it (its receiver taken
	// for unreachable), and start the key from it.
	replicasSent map[uint64]sentReplica
	replicaIDs   uint64
	reqs         []*simReq
	served       map[servedKey]time.Time
	decisions    []simDecision
	loss         map[limiter.Key]int64 // C: what crashes and takeovers lost, at most
	// lostRuns are the runs that crashed or whose keys were taken over
	// while they ran: a cancel cannot reach their replicas, so an item
	// they admitted and their caller decided by fallback may count twice.
	lostRuns map[Peer]bool
	// charged are the runs and keys whose loss to a takeover loss counts.
	charged map[chargedRun]bool
	// cancelsLost are the items whose callers crashed with their cancels
	// unacknowledged: the owner may never hear that the caller decided
	// them elsewhere, so an item it admitted may count twice too.
	cancelsLost map[servedKey]bool
	// refundsLost counts, per key, the units crashed callers were giving
	// back by refunds not yet acknowledged, or kept waiting themselves
	// (holdRefund, refundAfterCounter): the owner may never apply them.
	refundsLost map[limiter.Key]int64
	// givenBackLost counts, per key, the units crashed owners gave back
	// (refunds, cancels, a request's other zone denied) after their last
	// replication: the successor's replica still holds them.
	givenBackLost map[limiter.Key]int64
	faulty        bool // a fault happened (not only graceful changes)
	seals         map[[2]string]sealNote
	// servedAlone are the items an owner decided while it counted alone
	// (simNode.alone).
	servedAlone map[servedKey]bool
}

// sealNote is a node's last seal to another, and what it had decided by
// fallback for unreachable or not-yet-counting owners by then.
type sealNote struct {
	inc         uint64 // the sealing run
	reachable   bool   // it could call the node it sealed to
	activations uint64
	sealed      uint64 // Stats.SealedFallbacks
}

// noteSeal records that node s sealed to the node called to.
func (s *sim) noteSeal(n *simNode, to string) {
	if s.hist.seals == nil {
		s.hist.seals = map[[2]string]sealNote{}
	}
	s.hist.seals[[2]string{n.name, to}] = sealNote{inc: n.inc, reachable: n.core.Reachable(to),
		activations: n.core.stats.Activations.Load(), sealed: n.core.stats.SealedFallbacks.Load()}
}

// ---------------------------------------------------------------------------
// Schedules.

type faultKind string

const (
	faultDelay        faultKind = "delay"
	faultLoss         faultKind = "loss"
	faultDup          faultKind = "dup"
	faultReorder      faultKind = "reorder"
	faultFreeze       faultKind = "freeze"
	faultPartition    faultKind = "partition"
	faultCrash        faultKind = "crash"
	faultCrashKeep    faultKind = "crash-keep"
	faultLeaveRestart faultKind = "leave-restart"
	faultJoin         faultKind = "join"
	faultLeave        faultKind = "leave"
	faultRolling      faultKind = "rolling"
	faultRollingKill  faultKind = "rolling-kill"
)

// graceful are the kinds that are no fault at all: membership changes a
// site owner makes on purpose.
var graceful = map[faultKind]bool{faultJoin: true, faultLeave: true, faultLeaveRestart: true, faultRolling: true}

var allFaults = []faultKind{
	faultDelay, faultLoss, faultDup, faultReorder, faultFreeze, faultPartition,
	faultCrash, faultCrashKeep, faultLeaveRestart, faultJoin, faultLeave, faultRolling, faultRollingKill,
}

type simFault struct {
	kind   faultKind
	at     time.Duration // from the start of traffic
	dur    time.Duration
	target int // node index
	sides  []int
	level  float64
}

func (f simFault) String() string {
	return fmt.Sprintf("%s@%s/%s target=n%02d sides=%v level=%.2f", f.kind, f.at, f.dur, f.target, f.sides, f.level)
}

type simSchedule struct {
	seed     uint64
	nodes    int // running at the start
	spare    int // names for nodes that join later
	keys     int
	traffic  time.Duration
	requests int
	multi    float64 // share of requests with two zones
	faults   []simFault
}

func (sc simSchedule) String() string {
	var fs []string
	for _, f := range sc.faults {
		fs = append(fs, f.String())
	}
	return fmt.Sprintf("seed %d: %d nodes (+%d), %d keys, %d requests over %s, multi %.2f, faults [%s]",
		sc.seed, sc.nodes, sc.spare, sc.keys, sc.requests, sc.traffic, sc.multi, strings.Join(fs, "; "))
}

// newSimSchedule draws a schedule from seed; size forces a cluster size
// (0: drawn).
func newSimSchedule(seed uint64, size int, kinds []faultKind) simSchedule {
	r := newSim(seed, 0).rng
	sc := simSchedule{seed: seed, nodes: 3 + r.IntN(5), keys: 4 + r.IntN(5)}
	switch x := r.IntN(100); {
	case x < 6:
		sc.nodes = 10 + r.IntN(21)
	case x < 8:
		sc.nodes = 40 + r.IntN(21)
	case x < 9 && seed%10 == 0:
		sc.nodes = 100
	case x < 9:
		// Nine in ten of the draws for 100 nodes play 40 to 60: a schedule
		// of 100 nodes costs as much as a hundred small ones. Drawn from the
		// seed, not the generator: the other schedules stay as they were.
		sc.nodes = 40 + int(seed%21)
	}
	if size > 0 {
		sc.nodes = size
	}
	sc.spare = 2
	sc.traffic = time.Duration(1500+r.IntN(2500)) * time.Millisecond
	sc.requests = 150 + r.IntN(250)
	if sc.nodes >= 40 {
		sc.traffic, sc.keys, sc.requests = 1500*time.Millisecond, 4, 150
	}
	if r.IntN(3) == 0 {
		sc.multi = 0.15
	}
	nf := 1 + r.IntN(2)
	for range nf {
		f := simFault{kind: kinds[r.IntN(len(kinds))], target: r.IntN(sc.nodes)}
		f.at = time.Duration(r.Int64N(int64(sc.traffic) * 2 / 3))
		f.dur = time.Duration(50+r.IntN(2500)) * time.Millisecond
		switch f.kind {
		case faultDelay:
			f.level = float64(20 + r.IntN(130))
		case faultLoss:
			f.level = 0.02 + 0.2*r.Float64()
		case faultDup:
			f.level = 0.1 + 0.4*r.Float64()
		case faultReorder:
			f.level = float64(1 + r.IntN(20))
		case faultPartition:
			for i := range sc.nodes {
				if i == f.target || r.IntN(3) == 0 && len(f.sides) < sc.nodes/2 {
					f.sides = append(f.sides, i)
				}
			}
		case faultRolling, faultRollingKill:
			f.at = 0
			if sc.nodes > 8 {
				f.kind = faultLeaveRestart // a rolling restart of many nodes outlasts the schedule
			}
		}
		sc.faults = append(sc.faults, f)
	}
	return sc
}

// ---------------------------------------------------------------------------
// Running a schedule.

// runSchedule plays sc and returns the simulation, checked.
func runSchedule(sc simSchedule) *sim { return runScheduleTraced(sc, -1) }

// runScheduleTraced is runSchedule, logging the movements of key trace.
func runScheduleTraced(sc simSchedule, trace int) *sim { return runScheduleRecorded(sc, trace, nil) }

// runScheduleRecorded is runScheduleTraced, giving record every line of
// the schedule's log (nil: none).
func runScheduleRecorded(sc simSchedule, trace int, record func(string)) *sim {
	s := newSim(sc.seed, sc.nodes+sc.spare)
	s.record = record
	// Where nodes only crash, failure detection is sometimes quicker than
	// a lease: the new owner of a dead member's keys then waits while the
	// survivors have sealed to it (see checkTakeover).
	s.quickDetect = !slices.ContainsFunc(sc.faults, func(f simFault) bool {
		return f.kind != faultCrash && f.kind != faultCrashKeep && f.kind != faultRollingKill
	})
	s.hist.served = map[servedKey]time.Time{}
	s.hist.servedAlone = map[servedKey]bool{}
	s.hist.loss = map[limiter.Key]int64{}
	rng := s.rng
	keys := newSimKeys(sc, s)
	s.keys = keys
	if trace >= 0 {
		s.trace = keys[trace].key
		s.logf("TRACE key %d is %d", trace, uint64(s.trace))
		var snap func()
		snap = func() {
			var parts []string
			for _, name := range s.names {
				if n := s.current[name]; n != nil && !n.gone {
					parts = append(parts, fmt.Sprintf("%s:%d+%d", name, s.engineCount(n.engine, s.trace), s.heldBy(n, s.trace)))
				}
			}
			got, _, _ := s.admitted(trace)
			s.logf("TRACE counts %s admitted %d", strings.Join(parts, " "), got)
			s.after(250*time.Millisecond, nil, snap)
		}
		s.after(0, nil, snap)
	}
	for i := range sc.nodes {
		n := s.start(s.names[i], i > 0, Kept{})
		n.core.completing = s.takeoverHook(n)
		n.core.promoting = s.promotionHook(n)
	}
	// Let the cluster form.
	s.runUntil(s.now.Add(2 * time.Second))
	if !s.waitQuiet(20 * time.Second) {
		s.violate("liveness", "the cluster did not form:\n%s", s.describe())
		return s
	}
	t0 := s.now
	// Traffic.
	for i := range sc.requests {
		at := t0.Add(time.Duration(int64(sc.traffic) * int64(i) / int64(sc.requests)))
		zones := []int{s.pickZone(rng, keys)}
		if sc.multi > 0 && rng.Float64() < sc.multi {
			if z := s.pickZone(rng, keys); z != zones[0] {
				zones = append(zones, z)
			}
		}
		pick := rng.Uint64()
		s.at(at, nil, func() {
			n := s.pickNode(pick)
			if n != nil {
				s.request(n, zones)
			}
		})
	}
	// Faults.
	for i, f := range sc.faults {
		s.scheduleFault(t0, i, f, sc)
	}
	end := t0.Add(sc.traffic + 6*time.Second)
	s.runUntil(end)
	for limit := s.now.Add(time.Minute); s.open > 0 && s.now.Before(limit); {
		s.runUntil(s.now.Add(100 * time.Millisecond))
	}
	s.heal()
	if !s.waitQuiet(30 * time.Second) {
		s.violate("liveness", "the cluster did not settle after the faults healed:\n%s", s.describe())
		return s
	}
	s.checkConservation()
	s.topUp()
	s.checkBound()
	s.checkDenials()
	return s
}

func newSimKeys(sc simSchedule, s *sim) []simKey {
	var keys []simKey
	for i := range sc.keys {
		hot := i%2 == 0
		limit := int64(5 + s.rng.IntN(36))
		h := s.hasher.String(fmt.Sprint("key-", sc.seed, "-", i))
		keys = append(keys, simKey{key: limiter.ZoneKey(h, uint64(i+1)), limit: limit, hot: hot})
	}
	return keys
}

// pickZone draws a key, hot keys drawn more often: over a schedule they
// get more requests than their limit, cold ones far fewer.
func (s *sim) pickZone(rng interface{ IntN(int) int }, keys []simKey) int {
	for {
		z := rng.IntN(len(keys))
		if keys[z].hot || rng.IntN(6) == 0 {
			return z
		}
	}
}

// pickNode picks a running node that is not frozen.
func (s *sim) pickNode(pick uint64) *simNode {
	var live []*simNode
	for _, name := range s.names {
		if n := s.current[name]; n != nil && !n.gone && !n.frozen && !n.leaving {
			live = append(live, n)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[pick%uint64(len(live))]
}

func (s *sim) scheduleFault(t0 time.Time, i int, f simFault, sc simSchedule) {
	name := s.names[f.target]
	if !graceful[f.kind] {
		s.hist.faulty = true
	}
	at := t0.Add(f.at)
	// open counts the faults not over yet: the schedule heals and checks
	// only once every one of them played to its end.
	s.open++
	done := func() { s.open-- }
	window := func(set, unset func()) {
		s.at(at, nil, set)
		s.at(at.Add(f.dur), nil, func() { s.noteCutOff(); unset(); done() })
	}
	// One delay or loss in two (by the drawn duration, so the schedule
	// draws nothing more) is a fault of the target's links alone: a node
	// whose network is slow or lossy while the others' is not.
	ofTarget := f.dur/time.Millisecond%2 == 1
	switch {
	case f.kind == faultDelay && ofTarget:
		window(func() {
			s.net.nodeDelay[name] = time.Duration(f.level) * time.Millisecond
			s.logf("links of %s slow by %s", name, s.net.nodeDelay[name])
		}, func() { delete(s.net.nodeDelay, name); s.logf("links of %s fast again", name) })
	case f.kind == faultLoss && ofTarget:
		window(func() {
			s.net.nodeLoss[name] = f.level
			s.logf("links of %s lose %.2f", name, f.level)
		}, func() { delete(s.net.nodeLoss, name); s.logf("links of %s lose nothing again", name) })
	}
	switch f.kind {
	case faultDelay:
		if !ofTarget {
			window(func() { s.net.extraDelay = time.Duration(f.level) * time.Millisecond }, func() { s.net.extraDelay = 0 })
		}
	case faultLoss:
		if !ofTarget {
			window(func() { s.net.loss = f.level }, func() { s.net.loss = 0 })
		}
	case faultDup:
		window(func() { s.net.dup = f.level }, func() { s.net.dup = 0 })
	case faultReorder:
		window(func() { s.net.reorder = time.Duration(f.level) * time.Millisecond }, func() { s.net.reorder = 0 })
	case faultFreeze:
		s.at(at, nil, func() {
			n := s.current[name]
			if n == nil || n.gone || n.frozen {
				done()
				return
			}
			s.freeze(n)
			s.at(s.now.Add(f.dur), nil, func() { s.resume(n); done() })
		})
	case faultPartition:
		window(func() {
			// One bit per fault: a schedule draws at most two.
			for _, x := range f.sides {
				s.net.side[s.names[x]] |= 1 << i
			}
			s.logf("partition %v", f.sides)
		}, func() {
			for _, x := range f.sides {
				s.net.side[s.names[x]] &^= 1 << i
			}
			s.logf("partition %v healed", f.sides)
		})
	case faultCrash, faultCrashKeep:
		s.at(at, nil, func() {
			n := s.current[name]
			if n == nil || n.gone {
				done()
				return
			}
			snap := s.crash(n)
			if f.kind == faultCrash {
				snap = Kept{}
			}
			// One restart in two (by the drawn duration, so the schedule
			// draws nothing more) has its driver list the members only
			// after it said a seed answered, as memberlist's join does.
			late := f.dur/time.Millisecond%2 == 1
			s.at(s.now.Add(f.dur), nil, func() { s.restartWith(name, snap, late); done() })
		})
	case faultLeaveRestart:
		s.at(at, nil, func() { s.leaveThenRestart(name, f.dur, done) })
	case faultJoin:
		s.at(at, nil, func() {
			defer done()
			for _, x := range s.names[sc.nodes:] {
				if s.current[x] == nil {
					n := s.start(x, true, Kept{})
					n.core.completing = s.takeoverHook(n)
					n.core.promoting = s.promotionHook(n)
					return
				}
			}
		})
	case faultLeave:
		s.at(at, nil, func() {
			defer done()
			if n := s.current[name]; n != nil && !n.gone && s.running() > 2 {
				s.after(0, n, func() { s.leave(n) }) // the node itself leaves: not while it is frozen
			}
		})
	case faultRolling, faultRollingKill:
		s.open += sc.nodes - 1
		step := time.Duration(0)
		for i := range sc.nodes {
			x := s.names[i]
			s.at(at.Add(step), nil, func() {
				if f.kind == faultRolling {
					s.leaveThenRestart(x, 100*time.Millisecond, done)
					return
				}
				n := s.current[x]
				if n == nil || n.gone {
					done()
					return
				}
				snap := s.crash(n)
				s.at(s.now.Add(300*time.Millisecond), nil, func() { s.restart(x, snap); done() })
			})
			step += 3 * time.Second
		}
	}
}

func (s *sim) running() int {
	n := 0
	for _, name := range s.names {
		if x := s.current[name]; x != nil && !x.gone && !x.leaving {
			n++
		}
	}
	return n
}

// restart starts a crashed node's name again.
func (s *sim) restart(name string, snap Kept) { s.restartWith(name, snap, false) }

// restartWith is restart; lateView: its driver lists the members only
// after it said a seed answered.
func (s *sim) restartWith(name string, snap Kept, lateView bool) {
	if n := s.current[name]; n != nil && !n.gone {
		return
	}
	n := s.start(name, true, snap)
	n.lateView = lateView
	n.core.completing = s.takeoverHook(n)
	n.core.promoting = s.promotionHook(n)
}

// leaveThenRestart has a node leave gracefully and start again once gone;
// done is called once it did.
func (s *sim) leaveThenRestart(name string, pause time.Duration, done func()) {
	n := s.current[name]
	if n == nil || n.gone || n.leaving {
		done()
		return
	}
	if n.frozen {
		s.after(0, n, func() { s.leaveThenRestart(name, pause, done) }) // once it runs
		return
	}
	s.leave(n)
	var wait func()
	wait = func() {
		if !n.gone {
			s.after(20*time.Millisecond, nil, wait)
			return
		}
		s.after(pause, nil, func() { s.restart(name, Kept{}); done() })
	}
	s.after(20*time.Millisecond, nil, wait)
}

// heal ends every fault: frozen nodes resume, links mend.
func (s *sim) heal() {
	clear(s.net.side)
	clear(s.net.nodeDelay)
	clear(s.net.nodeLoss)
	s.net.extraDelay, s.net.loss, s.net.dup, s.net.reorder = 0, 0, 0, 0
	for _, name := range s.names {
		if n := s.current[name]; n != nil && n.frozen {
			s.resume(n)
		}
	}
}

// waitQuiet runs until the cluster is quiet (see quiet), or within passes.
func (s *sim) waitQuiet(within time.Duration) bool {
	deadline := s.now.Add(within)
	for s.now.Before(deadline) {
		if s.quiet() {
			return true
		}
		s.runUntil(s.now.Add(50 * time.Millisecond))
	}
	return s.quiet()
}

// quiet reports whether every running node routes by the ring of all
// running nodes, has no hand-off under way, nothing unsent or
// unacknowledged but replicas, nothing in fallback, every peer reachable,
// and nothing waiting.
func (s *sim) quiet() bool {
	var live []*simNode
	for _, name := range s.names {
		if n := s.current[name]; n != nil && !n.gone {
			if n.frozen || n.leaving || !n.core.Member() {
				return false
			}
			live = append(live, n)
		}
	}
	if len(live) == 0 {
		return true
	}
	fp := live[0].core.Ring().Fingerprint()
	for _, n := range live {
		r := n.core.Ring()
		if r.Fingerprint() != fp || r.Len() != len(live) {
			return false
		}
		for _, m := range r.members {
			if x := s.current[m.Name]; x == nil || x.inc != m.Inc {
				return false
			}
			if m.Name != n.name && !n.core.Reachable(m.Name) {
				return false
			}
		}
		if n.core.HandoffUnderway() || n.core.FallbackKeys() > 0 || len(n.waiting) > 0 || len(n.holding) > 0 {
			return false
		}
		if n.core.out.moving("") > 0 {
			return false
		}
	}
	return true
}

func (s *sim) describe() string {
	var lines []string
	for _, name := range s.names {
		n := s.current[name]
		if n == nil {
			continue
		}
		lines = append(lines, fmt.Sprintf("  %s inc=%d gone=%v frozen=%v member=%v ring=%s/%d handoff=%v fallback=%d pending=%d waiting=%d holding=%d",
			name, n.inc, n.gone, n.frozen, n.core.Member(), n.core.Ring().Fingerprint(), n.core.Ring().Len(), n.core.HandoffUnderway(),
			n.core.FallbackKeys(), n.core.out.pendingFor(""), len(n.waiting), len(n.holding)))
		lines = append(lines, "    view: "+n.lastMembers)
		n.core.out.mu.Lock()
		for seq, pt := range n.core.out.transfers {
			lines = append(lines, fmt.Sprintf("    transfer %d to %s/%d %s purpose %d inFlight=%v refused=%v limbo=%d retryAt=%d", seq, pt.to.Name, pt.to.Inc, pt.t.Mode, pt.purpose, pt.inFlight, pt.refused, pt.limbo, pt.retryAt))
		}
		n.core.out.mu.Unlock()
	}
	return strings.Join(lines, "\n")
}

// ---------------------------------------------------------------------------
// Where counts are: a god's view of the cores.

// windowCount is the current window's count of k in a state list.
func windowCount(states []limiter.State) int64 {
	var n int64
	for _, st := range states {
		if st.Kind < limiter.KindGrant {
			n += int64(st.Cur)
		}
	}
	return n
}

func (s *sim) engineCount(e *limiter.Engine, k limiter.Key) int64 {
	return windowCount(e.StatesOf(s.now, []limiter.Key{k}))
}

// heldBy is what node n holds of k outside its engine: fallback counters,
// counts waiting for k to settle, transfers not acknowledged.
func (s *sim) heldBy(n *simNode, k limiter.Key) int64 {
	c := n.core
	total := s.engineCount(c.fallback.engine, k) + unsettledAt(n, k)
	c.out.mu.Lock()
	for _, pt := range c.out.transfers {
		if pt.t.Mode == ModeAdd || pt.t.Mode == ModeNewer || pt.t.Mode == ModeCopy {
			for _, st := range pt.t.States {
				if st.Key == k {
					total += windowCount([]limiter.State{st})
				}
			}
		}
	}
	c.out.mu.Unlock()
	return total
}

// keptOfUnsettled is what of the counts node n holds for k while the key
// moves to it, not settled, the counter its giver handed it covers: the
// giver keeps it until n replicates it (see Core.keepGiven), and a
// takeover of n counts it.
func (s *sim) keptOfUnsettled(n *simNode, k limiter.Key) int64 {
	return min(unsettledAt(n, k), s.givenTo(k, n.peer()))
}

// givenTo returns the largest counter of k that a running node handed to
// run and keeps until run replicates it.
func (s *sim) givenTo(k limiter.Key, run Peer) int64 {
	var best int64
	for _, name := range s.names {
		x := s.current[name]
		if x == nil || x.gone {
			continue
		}
		if st, ok := x.core.replicas.givenTo(k, run); ok {
			best = max(best, windowCount([]limiter.State{st}))
		}
	}
	return best
}

// unsettledAt is what node n holds of k while the key moves to it, not
// settled: the counts that arrived for it, in no engine yet.
func unsettledAt(n *simNode, k limiter.Key) int64 {
	c := n.core
	c.handoff.mu.Lock()
	defer c.handoff.mu.Unlock()
	mk := c.handoff.keys[k]
	if mk == nil || mk.settled {
		return 0
	}
	var total int64
	if mk.hasBase {
		total += windowCount([]limiter.State{mk.base})
	}
	if mk.hasAdds {
		total += windowCount([]limiter.State{mk.adds})
	}
	if mk.hasOwn {
		total += windowCount([]limiter.State{mk.own})
	}
	for _, a := range mk.counters {
		total += windowCount([]limiter.State{a.state})
	}
	if mk.hasCopy && !mk.hasBase && !mk.hasAdds && !mk.hasOwn && len(mk.counters) == 0 {
		total += windowCount([]limiter.State{mk.copy})
	}
	return total
}

// replicaOf returns the largest replica of k that any running node keeps
// for owner.
func (s *sim) replicaOf(k limiter.Key, owner string) int64 {
	var best int64
	for _, name := range s.names {
		n := s.current[name]
		if n == nil || n.gone {
			continue
		}
		if st, o, ok := n.core.replicas.get(k); ok && o.Name == owner {
			best = max(best, windowCount([]limiter.State{st}))
		}
	}
	return best
}

// replicaOnItsWay returns the largest count of k in the replicas node n
// sent and has not had acknowledged: a successor may apply one after n
// crashed.
func replicaOnItsWay(n *simNode, k limiter.Key) int64 {
	var best int64
	n.core.out.mu.Lock()
	defer n.core.out.mu.Unlock()
	for _, pt := range n.core.out.transfers {
		if pt.t.Mode != ModeReplica {
			continue
		}
		for _, st := range pt.t.States {
			if st.Key == k {
				best = max(best, windowCount([]limiter.State{st}))
			}
		}
	}
	return best
}

// sentReplica is a replica of one key on the wire: its sender's run and
// the count it carries.
type sentReplica struct {
	from  Peer
	key   limiter.Key
	count int64
}

// noteReplicaSent records the replicas t, a transfer n sends, carries; it
// returns the ids to forget them by once delivered.
func (s *sim) noteReplicaSent(n *simNode, t Transfer) []uint64 {
	if t.Mode != ModeReplica {
		return nil
	}
	if s.hist.replicasSent == nil {
		s.hist.replicasSent = map[uint64]sentReplica{}
	}
	var ids []uint64
	for _, st := range t.States {
		if st.Kind >= limiter.KindGrant {
			continue
		}
		s.hist.replicaIDs++
		s.hist.replicasSent[s.hist.replicaIDs] = sentReplica{from: n.peer(), key: st.Key, count: windowCount([]limiter.State{st})}
		ids = append(ids, s.hist.replicaIDs)
	}
	return ids
}

// lowestReplicaOnTheWire returns the smallest count of k in the replicas
// of n's run on the wire, if any.
func (s *sim) lowestReplicaOnTheWire(n *simNode, k limiter.Key) (low int64, ok bool) {
	run := n.peer()
	for _, r := range s.hist.replicasSent {
		if r.from == run && r.key == k && (!ok || r.count < low) {
			low, ok = r.count, true
		}
	}
	return low, ok
}

// lowestReplicaOnItsWay returns the smallest count of k in the replicas
// node n sent and has not had acknowledged, if any.
func lowestReplicaOnItsWay(n *simNode, k limiter.Key) (low int64, ok bool) {
	n.core.out.mu.Lock()
	defer n.core.out.mu.Unlock()
	for _, pt := range n.core.out.transfers {
		if pt.t.Mode != ModeReplica {
			continue
		}
		for _, st := range pt.t.States {
			if c := windowCount([]limiter.State{st}); st.Key == k && (!ok || c < low) {
				low, ok = c, true
			}
		}
	}
	return low, ok
}

// noteCrash adds to C what a crashing node takes with it: its count less
// the replica, and all it held in flight.
func (s *sim) noteCrash(n *simNode) {
	s.noteLostRun(n.peer())
	s.noteCancelsLost(n)
	for _, key := range s.keys {
		k := key.key
		// The replica its successor starts the key from: the one it
		// holds, or one on its way, applied after the crash, which holds
		// less where units were given back in between
		// (TestSimCrashAllowsTheLossAfterALowerReplicaOnItsWay).
		base := s.replicaOf(k, n.name)
		if low, ok := lowestReplicaOnItsWay(n, k); ok && low < base {
			base = low
		}
		if low, ok := s.lowestReplicaOnTheWire(n, k); ok && low < base {
			base = low
		}
		lost := max(0, s.engineCount(n.engine, k)-base) + s.heldBy(n, k) - s.keptOfUnsettled(n, k)
		if o, ok := n.core.view.Load().ring.Owner(k.Route()); ok && o.Name == n.name {
			// The replica its successor starts the key from: the one it
			// holds, or the one on its way, applied after the crash.
			rep := max(s.replicaOf(k, n.name), replicaOnItsWay(n, k))
			if back := rep - s.engineCount(n.engine, k); back > 0 {
				if s.hist.givenBackLost == nil {
					s.hist.givenBackLost = map[limiter.Key]int64{}
				}
				s.hist.givenBackLost[k] += back
				s.logf("crash of %s may count %d of key %d twice: given back since its last replication", n.name, back, slices.IndexFunc(s.keys, func(x simKey) bool { return x.key == k }))
			}
		}
		// A replica it kept of an owner that died before it: the only
		// copy of that owner's count.
		if st, owner, ok := n.core.replicas.get(k); ok {
			if x := s.current[owner.Name]; x == nil || x.gone || x.inc != owner.Inc {
				lost += windowCount([]limiter.State{st})
			}
		}
		// Transfers to it that it may have applied before it died: their
		// senders send them on as copies, which can lose them.
		for _, name := range s.names {
			o := s.current[name]
			if o == nil || o.gone || o == n {
				continue
			}
			o.core.out.mu.Lock()
			for _, pt := range o.core.out.transfers {
				if pt.to.Name == n.name && (pt.t.Mode == ModeAdd || pt.t.Mode == ModeNewer || pt.t.Mode == ModeCopy) {
					for _, st := range pt.t.States {
						if st.Key == k {
							lost += windowCount([]limiter.State{st})
						}
					}
				}
			}
			o.core.out.mu.Unlock()
		}
		if lost > 0 {
			s.hist.loss[k] += lost
			s.logf("crash of %s may lose %d of key %d", n.name, lost, slices.IndexFunc(s.keys, func(x simKey) bool { return x.key == k }))
		}
	}
}

// cutOff reports whether n's calls cannot be answered now: a partition
// separates it from every other running node, or messages take so long
// that most answers come after a caller's patience (a round trip at the
// network's middle delay outlasts it). A call then is answered only when
// both its messages happen to travel close to the fastest delay, and a
// node needs answered calls for anything it hands over: a receiver takes
// counts only from a sender it holds a lease from, and a lease is an
// answered ping. Added each way, 74 ms leave one call in twelve answered
// within the 150 ms patience, 73 ms two in three.
func (s *sim) cutOff(n *simNode) bool {
	for _, name := range s.names {
		if x := s.current[name]; x != nil && x != n && !x.gone && s.canTalk(n.name, name) && !s.tooSlow(n.name, name) {
			return false
		}
	}
	return true
}

// tooSlow reports whether calls between a and b mostly outlast a caller's
// patience: a round trip at the network's middle delay outlasts it.
func (s *sim) tooSlow(a, b string) bool {
	oneWay := s.net.extraDelay + s.net.nodeDelay[a] + s.net.nodeDelay[b]
	return simTiming.netMin+simTiming.netMax+2*oneWay >= simTiming.callPatience
}

// noteCutOff records, as links that may have cut nodes off come back,
// which nodes were cut off until now.
func (s *sim) noteCutOff() {
	for _, name := range s.names {
		if n := s.current[name]; n != nil && !n.gone && s.cutOff(n) {
			n.cutUntil = s.now
		}
	}
	for i, a := range s.names {
		for _, b := range s.names[i+1:] {
			if s.underWay(a) && s.underWay(b) && s.linkCut(a, b) {
				if s.linkCutUntil == nil {
					s.linkCutUntil = map[[2]string]time.Time{}
				}
				s.linkCutUntil[linkOf(a, b)] = s.now
			}
		}
	}
}

// underWay reports whether a run of name is under way (frozen or not).
func (s *sim) underWay(name string) bool {
	x := s.current[name]
	return x != nil && !x.gone
}

// linkOf names the link between a and b, the lesser name first.
func linkOf(a, b string) [2]string {
	if b < a {
		a, b = b, a
	}
	return [2]string{a, b}
}

// linkCut reports whether calls between a and b cannot be answered now:
// a partition separates them, one is frozen, or their links are so slow
// that most calls outlast a caller's patience.
func (s *sim) linkCut(a, b string) bool {
	return !s.canTalk(a, b) || s.tooSlow(a, b)
}

// linkCutLately reports whether calls between a and b cannot be answered,
// or could not until too short a while ago for anything to be handed over
// between them since (see cutOffLately).
func (s *sim) linkCutLately(a, b string) bool {
	if s.linkCut(a, b) {
		return true
	}
	until, ok := s.linkCutUntil[linkOf(a, b)]
	return ok && s.now.Sub(until) < simTiming.callPatience+simTiming.probe
}

// cutOffLately reports whether n is cut off, or was until too short a
// while ago to hand anything over since: a ping it sent while cut off
// fails only after the caller's patience, the peer is probed again
// within a probe interval, and only a ping answered sends its transfers
// again.
func (s *sim) cutOffLately(n *simNode) bool {
	return s.cutOff(n) || !n.cutUntil.IsZero() && s.now.Sub(n.cutUntil) < simTiming.callPatience+simTiming.probe
}

// noteLeftUndrained adds to C what a leaving node takes with it when its
// leave times out before it drained.
func (s *sim) noteLeftUndrained(n *simNode) {
	if s.cutOffLately(n) {
		s.noteLeftCutOff(n)
		return
	}
	s.noteLeftCutOffFrom(n)
}

// noteLeftCutOffFrom adds to C what a leaving node that can reach some
// nodes takes with it when its leave times out: what it holds for running
// nodes it is cut off from, or was until lately. Its fallback counts go to
// their key's owner only once the owner answers a ping, and a receiver
// takes counts only from a sender it holds a lease from; so what it
// admitted in fallback for an owner it is cut off from, and the transfers
// it sends such a node, stay with it, as with a node cut off from all.
func (s *sim) noteLeftCutOffFrom(n *simNode) {
	cut := func(to string) bool {
		return to != n.name && s.underWay(to) && s.linkCutLately(n.name, to)
	}
	c := n.core
	for z, key := range s.keys {
		var lost int64
		if o, ok := c.Owner(key.key); ok && cut(o.Name) {
			lost += s.engineCount(c.fallback.engine, key.key)
		}
		c.out.mu.Lock()
		for _, pt := range c.out.transfers {
			if (pt.t.Mode == ModeAdd || pt.t.Mode == ModeNewer || pt.t.Mode == ModeCopy) && cut(pt.to.Name) {
				for _, st := range pt.t.States {
					if st.Key == key.key {
						lost += windowCount([]limiter.State{st})
					}
				}
			}
		}
		c.out.mu.Unlock()
		if lost > 0 {
			s.hist.loss[key.key] += lost
			s.logf("%s left cut off from where its counts go: may lose %d of key %d", n.name, lost, z)
		}
	}
}

// noteLeftCutOff adds to C what a leaving node takes with it when its
// leave times out while it is cut off (it could hand nothing over, as a
// node that crashes): all it holds.
func (s *sim) noteLeftCutOff(n *simNode) {
	for z, key := range s.keys {
		if lost := s.engineCount(n.engine, key.key) + s.heldBy(n, key.key) + s.evictedBy(n, key.key); lost > 0 {
			s.hist.loss[key.key] += lost
			s.logf("%s left cut off: may lose %d of key %d", n.name, lost, z)
		}
	}
}

// evictedBy is what node n, declared dead, holds of k in the counters it
// sends to the nodes that kept their replicas (ModeEvicted), not yet
// acknowledged. They are no part of heldBy (their receivers weigh them
// against the replicas they started the keys from, so the cluster's count
// is not their sum), but a run that leaves cut off takes them with it as
// it would take its engine's counters, had it not been told it was dead
// just before.
func (s *sim) evictedBy(n *simNode, k limiter.Key) int64 {
	c := n.core
	var total int64
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	for _, pt := range c.out.transfers {
		if pt.t.Mode != ModeEvicted {
			continue
		}
		for _, st := range pt.t.States {
			if st.Key == k {
				total += windowCount([]limiter.State{st})
			}
		}
	}
	return total
}

// noteLostRun records a run whose counts now live on in replicas only.
func (s *sim) noteLostRun(p Peer) {
	if s.hist.lostRuns == nil {
		s.hist.lostRuns = map[Peer]bool{}
	}
	s.hist.lostRuns[p] = true
}

// noteCancelsLost records the cancels and refunds a crashing caller had
// not had acknowledged, and the give-backs it kept waiting itself (unsure
// where its keys are counted, or for a counter of its on its way): the
// owner, be it this node or another, never applies them.
func (s *sim) noteCancelsLost(n *simNode) {
	lostRefund := func(r limiter.Request) {
		if s.hist.refundsLost == nil {
			s.hist.refundsLost = map[limiter.Key]int64{}
		}
		s.hist.refundsLost[r.Key] += max(r.Cost, 1)
	}
	n.core.unrefunded.mu.Lock()
	for _, g := range n.core.unrefunded.list {
		lostRefund(g.req)
	}
	n.core.unrefunded.mu.Unlock()
	n.core.settling.mu.Lock()
	for _, h := range n.core.settling.list {
		if h.refund {
			lostRefund(h.req)
		}
	}
	n.core.settling.mu.Unlock()
	n.core.out.mu.Lock()
	defer n.core.out.mu.Unlock()
	for _, pt := range n.core.out.transfers {
		if pt.t.Mode == ModeRefund {
			for _, r := range pt.t.Reqs {
				lostRefund(r)
			}
			continue
		}
		if pt.t.Mode != ModeCancel {
			continue
		}
		if s.hist.cancelsLost == nil {
			s.hist.cancelsLost = map[servedKey]bool{}
		}
		s.hist.cancelsLost[servedKey{pt.to.Name, pt.to.Inc, n.inc, n.name, pt.t.Take}] = true
	}
}

// mayCountTwice counts, per key, the units owners granted to items their
// callers gave up on (and decided elsewhere) that no cancel may ever give
// back: the owner run crashed (or was taken over), and the cancel cannot
// reach its replica; or the caller crashed before its cancel was
// acknowledged, and the request was not admitted by the caller's fallback
// (a fallback count reaches the owner only with the cancels of its key:
// it died with the caller, and the owner's admission is the request's one
// count). And the units a crashed owner gave back after its last
// replication: its successor's replica holds them. And the units a
// crashed caller was giving back by a refund not yet acknowledged.
func (s *sim) mayCountTwice() map[limiter.Key]int64 {
	out := map[limiter.Key]int64{}
	for k, n := range s.hist.givenBackLost {
		out[k] += n
	}
	for k, n := range s.hist.refundsLost {
		out[k] += n
	}
	for _, g := range s.fallbackGrantsOfLostCallers() {
		out[g.key]++
	}
	if len(s.hist.lostRuns) == 0 && len(s.hist.cancelsLost) == 0 {
		return out
	}
	type callerItem struct {
		caller Peer
		seq    uint64
	}
	byFallback := map[callerItem][]limiter.Key{} // the keys a request its caller admitted by fallback
	if len(s.hist.cancelsLost) > 0 {
		for _, r := range s.hist.reqs {
			if !r.done || !r.d.Allowed {
				continue
			}
			var keys []limiter.Key
			for i, z := range r.zones {
				if r.zoneBy[i] == SourceFallback {
					keys = append(keys, s.keys[z].key)
				}
			}
			for _, seq := range r.items {
				byFallback[callerItem{r.node.peer(), seq}] = keys
			}
		}
	}
	used := s.usedDecisions(false)
	for _, d := range s.hist.decisions {
		item := servedKey{d.node, d.nodeInc, d.caller.Inc, d.caller.Name, d.seq}
		if !d.allowed || used[item] {
			continue
		}
		lostRun := s.hist.lostRuns[Peer{Name: d.node, Inc: d.nodeInc}]
		lostCancel := s.hist.cancelsLost[item] && !slices.Contains(byFallback[callerItem{d.caller, d.seq}], d.key)
		if lostRun || lostCancel {
			out[d.key]++
		}
	}
	return out
}

// usedDecisions returns the owner decisions a caller used: the others it
// gave up on (and cancelled, or died). With finished, only those of the
// requests it finished: a caller that died with a request unfinished used
// none of its decisions.
func (s *sim) usedDecisions(finished bool) map[servedKey]bool {
	used := map[servedKey]bool{}
	for _, r := range s.hist.reqs {
		if finished && !r.done {
			continue
		}
		for gi := range r.op.groups {
			g := &r.op.groups[gi]
			if g.src == SourcePeer {
				used[servedKey{g.by.Name, g.by.Inc, r.node.inc, r.node.name, g.seq}] = true
			}
		}
	}
	return used
}

// takeoverHook returns the hook that measures, as node n takes over the
// keys of members it believes dead but that still run (paused, or cut
// off), what their counts hold beyond n's replicas: lost to the takeover.
func (s *sim) takeoverHook(n *simNode) func(*handoffPlan) {
	return func(plan *handoffPlan) {
		v := n.core.view.Load()
		s.checkTakeover(n, v, plan)
		for _, dead := range slices.Sorted(maps.Keys(plan.dead)) { // logged in this order
			x := s.current[dead]
			if x == nil || x.crashed() || x.inc != plan.deadInc[dead] {
				continue // crashed: counted at the crash
			}
			s.noteLostRun(x.peer())
			for _, key := range s.keys {
				k := key.key
				if o, ok := v.ring.Owner(k.Route()); !ok || o.Name != n.name {
					continue
				}
				if so, ok := v.stable.Owner(k.Route()); !ok || so.Name != dead {
					continue
				}
				if !s.noteCharged(k, x.peer()) {
					continue // counted as the key started from a replica of it
				}
				rep := int64(0)
				if st, o, ok := n.core.replicas.get(k); ok && o.Name == dead {
					rep = windowCount([]limiter.State{st})
				}
				// Its count: its engine's, and what it holds of a key
				// moving to it, not settled (no replica holds that yet),
				// as at a crash (heldBy); and, if it is leaving, the
				// counter its leave handed to a node the taker cannot
				// reach either (its side of the split): what the owner
				// counted is there, beyond the replica all the same.
				// What it holds for a key not settled is lost only beyond
				// the counter n handed it and keeps until it replicates
				// it, which the takeover counts.
				if lost := s.replicaLoss(n, x, k, rep); lost > 0 {
					s.hist.loss[k] += lost
					s.logf("%s takes over key from %s (%s): may lose %d", n.name, dead, x.runState(), lost)
				}
				// A pause this long is a crash (see cluster/doc.go): what
				// the paused owner gave back after its last replication
				// is in the replica the key starts from, the mirror of C.
				// What its leave handed over was not given back.
				if back := rep - s.engineCount(x.engine, k) - s.handedAway(x, k, nil); back > 0 {
					if s.hist.givenBackLost == nil {
						s.hist.givenBackLost = map[limiter.Key]int64{}
					}
					s.hist.givenBackLost[k] += back
					s.logf("%s takes over key from %s (%s): may count %d twice: given back since its last replication", n.name, dead, x.runState(), back)
				}
			}
		}
	}
}

// replicaLoss is what the counts of k that live run x holds lack in rep,
// a replica of them that node n starts the key from (or sends on to its
// owner as its counter): lost as at a crash (C, see cluster/doc.go). The
// run's count is its engine's, and what it holds of a key moving to it,
// not settled (no replica holds that yet), as at a crash (heldBy); and,
// if it is leaving, the counter its leave handed to a node the taker
// cannot reach either (its side of the split): what the owner counted is
// there, beyond the replica all the same. What it holds for a key not
// settled is lost only beyond the counter n handed it and keeps until it
// replicates it, which the takeover counts. What it sends on, in
// transfers not acknowledged, is beyond the replica too, as at a crash.
func (s *sim) replicaLoss(n, x *simNode, k limiter.Key, rep int64) int64 {
	unkept := unsettledAt(x, k)
	if st, ok := n.core.replicas.givenTo(k, x.peer()); ok {
		unkept = max(0, unkept-windowCount([]limiter.State{st}))
	}
	held := s.engineCount(x.engine, k) + unkept + s.sentOnBy(x, k)
	return held + s.handedAway(x, k, n) - rep
}

// sentOnBy is what live run x holds of k in counts it sends on, in
// transfers not acknowledged whose receiver has not applied them: its
// count beyond any replica, as heldBy counts them at a crash. Fallback
// counts (F) and the counters its leave handed over (see handedAway) are
// counted elsewhere.
func (s *sim) sentOnBy(x *simNode, k limiter.Key) int64 {
	leaving := len(x.handedOnLeave) > 0
	o := x.core.out
	o.mu.Lock()
	var pending []*pendingTransfer
	for _, seq := range slices.Sorted(maps.Keys(o.transfers)) {
		pending = append(pending, o.transfers[seq])
	}
	o.mu.Unlock()
	var total int64
	for _, pt := range pending {
		switch {
		case pt.t.Mode != ModeAdd && pt.t.Mode != ModeNewer && pt.t.Mode != ModeCopy,
			pt.purpose == purposeReconcile,
			leaving && pt.purpose == purposeHandoff && pt.t.Own:
			continue
		}
		if r := s.current[pt.to.Name]; r != nil && !r.gone && r.inc == pt.to.Inc && r.core.in.has(x.peer(), pt.t.Seq) {
			continue // the counts are at the receiver
		}
		for _, st := range pt.t.States {
			if st.Key == k {
				total += windowCount([]limiter.State{st})
			}
		}
	}
	return total
}

// noteCharged records that what run lost of k to a takeover is counted
// in C: once for a run and key.
func (s *sim) noteCharged(k limiter.Key, run Peer) bool {
	if s.hist.charged == nil {
		s.hist.charged = map[chargedRun]bool{}
	}
	c := chargedRun{key: k, run: run}
	if s.hist.charged[c] {
		return false
	}
	s.hist.charged[c] = true
	return true
}

// chargedRun is a key and a run whose loss to a takeover C counts.
type chargedRun struct {
	key limiter.Key
	run Peer
}

// promotionHook returns the hook that measures, as node n starts a key
// from a replica of a run that still runs (cut off, or paused) other than
// by a hand-off naming the run dead (a pulled replica, or replicas sent on
// once n has a majority), what the run's counts hold beyond the replica:
// a takeover of a cut-off owner is a crash in the bound (C). A run and key
// already counted by takeoverHook are not counted again.
func (s *sim) promotionHook(n *simNode) func(Peer, []limiter.State) {
	return func(owner Peer, states []limiter.State) {
		x := s.current[owner.Name]
		if x == nil || x == n || x.crashed() || x.inc != owner.Inc {
			return // crashed: counted at the crash
		}
		for _, st := range states {
			k := st.Key
			if !s.noteCharged(k, owner) {
				continue
			}
			if lost := s.replicaLoss(n, x, k, windowCount([]limiter.State{st})); lost > 0 {
				s.hist.loss[k] += lost
				s.logf("%s starts key from a replica of %s (%s): may lose %d", n.name, owner.Name, x.runState(), lost)
			}
		}
	}
}

// handedCount is a count of a key a node's leave handed to a node, in
// the transfer numbered seq.
type handedCount struct {
	key limiter.Key
	to  string
	seq uint64
	n   int64
}

// leaveHandOff returns the counters node n's leave hands over: its own
// counters in the hand-off transfers its leave placed.
func leaveHandOff(n *simNode) []handedCount {
	var out []handedCount
	o := n.core.out
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, seq := range slices.Sorted(maps.Keys(o.transfers)) {
		pt := o.transfers[seq]
		if pt.purpose != purposeHandoff || pt.t.Mode != ModeAdd || !pt.t.Own {
			continue
		}
		for _, st := range pt.t.States {
			if c := windowCount([]limiter.State{st}); c > 0 {
				out = append(out, handedCount{key: st.Key, to: pt.to.Name, seq: pt.t.Seq, n: c})
			}
		}
	}
	return out
}

// followHandOff follows the counters leaving node n's leave handed over
// to where they go now: a hand-off transfer n gave up on (its receiver
// taken for dead) and sent in place to another node carries them there.
// Left at the first receiver, a counter gone to a node the taker of n's
// keys cannot reach would look in the taker's reach (see handedAway).
func followHandOff(n *simNode) {
	if !n.leaving || len(n.handedOnLeave) == 0 {
		return
	}
	o := n.core.out
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, seq := range slices.Sorted(maps.Keys(o.transfers)) {
		pt := o.transfers[seq]
		if pt.purpose != purposeHandoff || pt.t.Mode != ModeAdd || pt.t.Was == 0 {
			continue
		}
		for i := range n.handedOnLeave {
			h := &n.handedOnLeave[i]
			if h.seq == pt.t.Was && h.to == pt.t.WasTo.Name && slices.ContainsFunc(pt.t.States, func(st limiter.State) bool { return st.Key == h.key }) {
				h.to, h.seq = pt.to.Name, pt.t.Seq
			}
		}
	}
}

// handedAway is what leaving node x's leave handed over of k: to nodes
// taker cannot reach now, or, taker nil, to any node.
func (s *sim) handedAway(x *simNode, k limiter.Key, taker *simNode) int64 {
	var total int64
	for _, h := range x.handedOnLeave {
		if h.key == k && (taker == nil || !s.canTalk(h.to, taker.name)) {
			total += h.n
		}
	}
	return total
}

// checkTakeover checks, as node n takes over the keys of dead members
// once every survivor sealed, that no survivor that sealed holds a
// fallback count of those keys it admitted since, except where it could
// not wait: the new owner did not answer it, or kept saying not yet. Such
// a count would reach n only after n started counting the key: n would
// admit that much beyond the limit.
func (s *sim) checkTakeover(n *simNode, v *view, plan *handoffPlan) {
	if len(plan.dead) == 0 || n.core.mono(s.now)-plan.since >= int64(simTiming.handoff) {
		return // forced: it counts what has not arrived from nothing
	}
	for _, name := range s.names {
		x := s.current[name]
		if x == nil || x == n || x.gone || x.frozen || !v.ring.Has(name) || !x.core.sealsGiven.gave(n.name, v.ring.Fingerprint()) {
			continue
		}
		note, ok := s.hist.seals[[2]string{name, n.name}]
		if !ok || note.inc != x.inc || !note.reachable || x.core.stats.Activations.Load() != note.activations || x.core.stats.SealedFallbacks.Load() != note.sealed {
			continue
		}
		for z, key := range s.keys {
			k := key.key
			if o, ok := v.ring.Owner(k.Route()); !ok || o.Name != n.name {
				continue
			}
			if so, ok := v.stable.Owner(k.Route()); !ok || plan.deadInc[so.Name] == 0 {
				continue
			}
			if held := s.engineCount(x.core.fallback.engine, k); held > 0 {
				s.violate("takeover", "%s takes key %d over while %s, which sealed to it, holds %d it admitted in fallback since", n.name, z, name, held)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// The checker.

// admitted counts the admitted requests that spent key z: all of them,
// those admitted by fallback, and those admitted by an owner that counted
// alone (S: see simNode.alone).
func (s *sim) admitted(z int) (total, fallback, alone int64) {
	for _, r := range s.hist.reqs {
		if !r.done || !r.d.Allowed {
			continue
		}
		for i, rz := range r.zones {
			if rz == z {
				total++
				switch {
				case r.zoneBy[i] == SourceFallback:
					fallback++
				case r.zoneAlone[i]:
					alone++
				}
			}
		}
	}
	return total, fallback, alone
}

// clusterCount is what the running nodes hold of k, wherever it is.
func (s *sim) clusterCount(k limiter.Key) int64 {
	var total int64
	for _, name := range s.names {
		if n := s.current[name]; n != nil && !n.gone {
			total += s.engineCount(n.engine, k) + s.heldBy(n, k)
		}
	}
	return total
}

// orphans counts, per key, the units owners granted to requests whose
// caller died before it could answer its client: they were spent, though
// no answer says so. The caller may be the owner of some of the request's
// zones: what it counted of them before it died is in its counters (a
// snapshot, a replica) as any other owner's grant is.
func (s *sim) orphans() map[limiter.Key]int64 {
	type item struct {
		caller Peer
		seq    uint64
	}
	finished := map[item]bool{}
	for _, r := range s.hist.reqs {
		if r.done {
			for _, seq := range r.items {
				finished[item{r.node.peer(), seq}] = true
			}
		}
	}
	out := map[limiter.Key]int64{}
	for _, d := range s.hist.decisions {
		if !d.allowed || finished[item{d.caller, d.seq}] {
			continue
		}
		if n := s.current[d.caller.Name]; n == nil || n.inc != d.caller.Inc {
			out[d.key]++
		}
	}
	for _, g := range s.grantsOfLostCallers() {
		out[g.key]++
	}
	return out
}

// ownGrant is a unit a caller counted as the owner of a zone, and when.
type ownGrant struct {
	key limiter.Key
	at  time.Time
}

// grantsOfLostCallers returns the units callers counted as the owners of
// zones of requests they died before deciding.
func (s *sim) grantsOfLostCallers() []ownGrant { return s.unfinishedGrants(SourceOwner) }

// fallbackGrantsOfLostCallers returns the units callers admitted by
// fallback to requests they never finished: the caller's run went away
// (left, crashed, restarted) before it answered its client. Its fallback
// count of them reaches the owner if the run sent it on before it went
// (a leaving run does), else it went with the run: either may be.
func (s *sim) fallbackGrantsOfLostCallers() []ownGrant { return s.unfinishedGrants(SourceFallback) }

// unfinishedGrants returns the units granted, decided by source, to zones
// of requests whose caller's run went away before it answered them.
func (s *sim) unfinishedGrants(source Source) []ownGrant {
	var out []ownGrant
	for _, r := range s.hist.reqs {
		if r.done || s.current[r.node.name] == r.node {
			continue
		}
		for i, z := range r.zones {
			if !r.zoneAt[i].IsZero() && r.zoneOK[i] && r.zoneBy[i] == source {
				out = append(out, ownGrant{key: s.keys[z].key, at: r.zoneAt[i]})
			}
		}
	}
	return out
}

// checkConservation is (b): nothing doubled, nothing lost beyond C.
func (s *sim) checkConservation() {
	orphans := s.orphans()
	twice := s.mayCountTwice()
	for z, key := range s.keys {
		got, _, _ := s.admitted(z)
		got += orphans[key.key]
		held := s.clusterCount(key.key)
		loss := s.hist.loss[key.key]
		if held > got+twice[key.key] {
			s.violate("doubled", "key %d: the cluster holds %d, %d were admitted, %d may count twice (limit %d)", z, held, got, twice[key.key], key.limit)
		}
		if held < got-loss {
			s.violate("lost", "key %d: the cluster holds %d, %d were admitted, at most %d may have been lost (limit %d)", z, held, got, loss, key.limit)
		}
	}
}

// topUp spends every key to its limit through all nodes, one request at a
// time: an owner that lost counts admits again here, one that doubled them
// denies too early (both checked by the bound and the denial checks).
func (s *sim) topUp() {
	var live []*simNode
	for _, name := range s.names {
		if n := s.current[name]; n != nil && !n.gone {
			live = append(live, n)
		}
	}
	for z, key := range s.keys {
		for i := range 2*key.limit + 2 {
			s.request(live[int(i)%len(live)], []int{z})
			s.runUntil(s.now.Add(5 * time.Millisecond))
		}
	}
	s.runUntil(s.now.Add(500 * time.Millisecond))
}

// checkBound is (a).
func (s *sim) checkBound() {
	orphans := s.orphans()
	// Units an owner granted to items no cancel may give back (the owner
	// or the caller crashed: see mayCountTwice) count twice: topping up,
	// the key is denied that much early.
	twice := s.mayCountTwice()
	for z, key := range s.keys {
		got, fb, alone := s.admitted(z)
		// A side of a split admits at most one limit (doc.go's S).
		alone = min(alone, key.limit)
		bound := key.limit + fb + s.hist.loss[key.key] + alone
		if got > bound {
			s.violate("bound", "key %d: %d admitted > limit %d + fallback %d + crash loss %d + counted alone %d", z, got, key.limit, fb, s.hist.loss[key.key], alone)
		}
		if got+orphans[key.key]+twice[key.key] < key.limit {
			s.violate("false-denial", "key %d: only %d admitted of limit %d after topping up", z, got, key.limit)
		}
	}
}

// checkDenials is (c).
func (s *sim) checkDenials() {
	// Owner decisions whose caller gave up on them: an admission counted at
	// the owner until the caller's cancel reaches it. A decision that
	// reached a caller which died before it finished the request is spent
	// too (an orphan, see orphans): nothing gives it back.
	used := s.usedDecisions(true)
	held := map[limiter.Key][]time.Time{} // decision times of units counted at owners
	for _, r := range s.hist.reqs {
		if !r.done {
			continue
		}
		for i, z := range r.zones {
			// An admitted request spends every zone; a denied one spent
			// the zones granted before the denial until they are given back.
			if r.d.Allowed || r.zoneOK[i] {
				held[s.keys[z].key] = append(held[s.keys[z].key], r.zoneAt[i])
			}
		}
	}
	for _, d := range s.hist.decisions {
		if d.allowed && !used[servedKey{d.node, d.nodeInc, d.caller.Inc, d.caller.Name, d.seq}] {
			held[d.key] = append(held[d.key], d.at)
		}
	}
	for _, g := range s.grantsOfLostCallers() {
		held[g.key] = append(held[g.key], g.at)
	}
	// So is a unit a caller admitted by its fallback to a request it went
	// before answering: its fallback count, sent on to the owner, holds
	// it, and the key is denied that much early (cluster/doc.go, "What the
	// cluster holds"; conservation allows it as counted twice).
	for _, g := range s.fallbackGrantsOfLostCallers() {
		held[g.key] = append(held[g.key], g.at)
	}
	for k := range held {
		slices.SortFunc(held[k], func(a, b time.Time) int { return a.Compare(b) })
	}
	countBefore := func(k limiter.Key, t time.Time) int64 {
		ts := held[k]
		return int64(sort.Search(len(ts), func(i int) bool { return ts[i].After(t) }))
	}
	ownerDenied := map[limiter.Key][]time.Time{}
	for _, r := range s.hist.reqs {
		if !r.done {
			continue
		}
		for i, z := range r.zones {
			if !r.zoneDenied[i] {
				continue
			}
			key := s.keys[z]
			switch r.zoneBy[i] {
			case SourceOwner, SourcePeer:
				ownerDenied[key.key] = append(ownerDenied[key.key], r.zoneAt[i])
				if n := countBefore(key.key, r.zoneAt[i]); n < key.limit {
					s.violate("false-denial", "key %d denied by %s at %s with %d of %d counted (request %d through %s)",
						z, r.zoneBy[i], r.zoneAt[i].Sub(simEpoch), n, key.limit, r.id, r.node.name)
				}
			}
		}
	}
	for _, r := range s.hist.reqs {
		if !r.done {
			continue
		}
		for i, z := range r.zones {
			if r.zoneBy[i] == SourceBlockedCache && r.zoneDenied[i] {
				if !slices.ContainsFunc(ownerDenied[s.keys[z].key], func(t time.Time) bool { return !t.After(r.zoneAt[i]) }) {
					s.violate("false-denial", "key %d denied from the blocked cache at %s with no owner's denial before (request %d)", z, r.zoneAt[i].Sub(simEpoch), r.id)
				}
			}
			if !s.hist.faulty && r.zoneBy[i] == SourceFallback {
				s.violate("fallback", "key %d decided by fallback through %s at %s in a schedule of graceful changes only (request %d)", z, r.node.name, r.zoneAt[i].Sub(simEpoch), r.id)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// The test.

var (
	simSeedFlag  = flag.Uint64("sim-seed", 0, "TestSimulation: replay only the schedule with this seed (also TOLLGATE_SIM_SEED)")
	simNodesFlag = flag.Int("sim-nodes", 0, "TestSimulation: force the cluster size")
	simKindsFlag = flag.String("sim-kinds", "", "TestSimulation: comma-separated fault kinds to draw from")
	simLogFlag   = flag.Bool("sim-log", false, "TestSimulation: print what happened in a failing schedule")
	simTraceFlag = flag.Int("sim-trace", -1, "TestSimulation: log the counts and transfers of the key with this index (with -sim-log)")
	simDumpFlag  = flag.String("sim-dump", "", "TestSimulation: with -sim-seed, write the schedule's whole log (every message included) to this file, violating or not")
)

// TestSimulation plays fault schedules on simulated clusters of 3 to 60
// nodes (and some of 100) and checks every key from both sides (see the
// top of this file). By default it plays a fixed set of 200 seeds (40 with
// -short or the race detector), the same every run: the regression seeds
// (fresh seeds that once violated, regressionSeedsFile), then seeds 1, 2,
// …. TOLLGATE_SIM=n plays n schedules: the first 100 fixed, fresh seeds
// after them; with TOLLGATE_SIM_FRESH=f, the last f fresh and the rest
// fixed (f = 0: all n fixed). A failure names its seed: replay it with
// `go test -run '^TestSimulation$' ./cluster/core -sim-seed N -sim-log`.
func TestSimulation(t *testing.T) {
	// Schedules allocate much and keep little: collecting less often
	// plays a quarter more of them in the same time.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	count, fixed := 200, 200
	if testing.Short() || raceDetector {
		count, fixed = 40, 40
	}
	if v := os.Getenv("TOLLGATE_SIM"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TOLLGATE_SIM=%q: want a number of schedules, at least 1", v)
		}
		count, fixed = n, min(n, 100)
		if v := os.Getenv("TOLLGATE_SIM_FRESH"); v != "" {
			fresh, err := strconv.Atoi(v)
			if err != nil || fresh < 0 || fresh > n {
				t.Fatalf("TOLLGATE_SIM_FRESH=%q: want how many of the %d schedules play fresh seeds, 0 to %d", v, n, n)
			}
			fixed = n - fresh // 0: the same seeds every run, a regression suite
		}
	}
	kinds := allFaults
	if *simKindsFlag != "" {
		kinds = nil
		for _, k := range strings.Split(*simKindsFlag, ",") {
			kinds = append(kinds, faultKind(k))
		}
	}
	var seeds, regressions []uint64
	seed := *simSeedFlag
	if v := os.Getenv("TOLLGATE_SIM_SEED"); seed == 0 && v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	if seed != 0 {
		seeds = []uint64{seed}
	} else {
		// A fixed set first, so every run covers the same ground, then
		// fresh seeds: each failure names its own.
		// The fixed set is the regression seeds, then seeds 1, 2, … up
		// to its size.
		if *simNodesFlag == 0 && *simKindsFlag == "" {
			regressions = regressionSeeds(t)
			regressions = regressions[:min(len(regressions), fixed)]
		}
		seeds = append(seeds, regressions...)
		for i := range fixed - len(regressions) {
			seeds = append(seeds, uint64(i+1))
		}
		base := uint64(time.Now().UnixNano())
		for i := range count - fixed {
			seeds = append(seeds, base+uint64(i))
		}
	}
	type result struct {
		sc      simSchedule
		s       *sim
		virtual time.Duration
	}
	work := make(chan uint64)
	results := make(chan result)
	workers := max(1, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for seed := range work {
				sc := newSimSchedule(seed, *simNodesFlag, kinds)
				var record func(string)
				var dump strings.Builder
				if *simDumpFlag != "" && len(seeds) == 1 {
					record = func(line string) { dump.WriteString(line); dump.WriteByte('\n') }
				}
				s := runScheduleRecorded(sc, *simTraceFlag, record)
				if record != nil {
					if err := os.WriteFile(*simDumpFlag, []byte(dump.String()), 0o644); err != nil {
						t.Errorf("-sim-dump: %v", err)
					}
				}
				results <- result{sc: sc, s: s, virtual: s.now.Sub(simEpoch)}
			}
		})
	}
	go func() {
		for _, seed := range seeds {
			work <- seed
		}
		close(work)
		wg.Wait()
		close(results)
	}()
	// The fixed schedules known to violate (the list the docs describe)
	// fail the test only if they stop doing so; a replay always shows its
	// violations.
	var known map[uint64]string
	if seed == 0 && *simNodesFlag == 0 && *simKindsFlag == "" {
		known = knownViolations(t, uint64(fixed-len(regressions)), regressions)
	}
	var schedules, violations, maxNodes int
	var failedSeeds, knownSeeds []uint64
	var virtual time.Duration
	failed := 0
	for r := range results {
		schedules++
		virtual += r.virtual
		maxNodes = max(maxNodes, r.s.maxNodes)
		why, isKnown := known[r.sc.seed]
		if len(r.s.violations) == 0 {
			if isKnown {
				t.Errorf("schedule %d is listed in %s (%s) but has no violation now: remove it from the list", r.sc.seed, knownViolationsFile, why)
			}
			continue
		}
		violations += len(r.s.violations)
		if isKnown {
			knownSeeds = append(knownSeeds, r.sc.seed)
			continue
		}
		failed++
		failedSeeds = append(failedSeeds, r.sc.seed)
		if failed <= 3 {
			msg := fmt.Sprintf("schedule %v\n  %s\nreplay: go test -run '^TestSimulation$' ./cluster/core -sim-seed %d -sim-log",
				r.sc, strings.Join(r.s.violations, "\n  "), r.sc.seed)
			if *simLogFlag {
				msg += "\n" + strings.Join(r.s.log, "\n")
			}
			t.Error(msg)
		}
	}
	summary := fmt.Sprintf("simulation: %d schedules, up to %d nodes, %d virtual seconds, %d violations", schedules, maxNodes, int(virtual.Seconds()), violations)
	if len(failedSeeds) > 0 {
		slices.Sort(failedSeeds)
		summary += fmt.Sprintf(" in %d schedules (seeds %v)", len(failedSeeds), failedSeeds)
	}
	if len(knownSeeds) > 0 {
		slices.Sort(knownSeeds)
		summary += fmt.Sprintf("; %d known schedules violate as listed in %s (seeds %v)", len(knownSeeds), knownViolationsFile, knownSeeds)
	}
	t.Log(summary)
	announce(summary)
}

// knownViolationsFile lists the fixed schedules the checker finds
// violations in, one per line: the seed, then what kind.
const knownViolationsFile = "testdata/simulation-known-violations.txt"

// knownViolations reads the listed seeds up to the last fixed seed, and
// those of more, the regression seeds played with them.
func knownViolations(t *testing.T, last uint64, more []uint64) map[uint64]string {
	t.Helper()
	data, err := os.ReadFile(knownViolationsFile)
	if err != nil {
		t.Fatalf("the list of known violations: %v", err)
	}
	known := map[uint64]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		seedText, why, _ := strings.Cut(line, " ")
		seed, err := strconv.ParseUint(seedText, 10, 64)
		if err != nil || strings.TrimSpace(why) == "" {
			t.Fatalf("%s:%d: %q: want a seed and what it violates", knownViolationsFile, i+1, line)
		}
		if seed <= last || slices.Contains(more, seed) {
			known[seed] = strings.TrimSpace(why)
		}
	}
	return known
}

// regressionSeedsFile lists fresh seeds that once violated, played with
// the fixed ones on every run so that what they found stays found: one a
// line, a comment after it.
const regressionSeedsFile = "testdata/simulation-regression-seeds.txt"

// regressionSeeds reads the seeds of regressionSeedsFile.
func regressionSeeds(t *testing.T) []uint64 {
	t.Helper()
	data, err := os.ReadFile(regressionSeedsFile)
	if err != nil {
		t.Fatalf("the list of regression seeds: %v", err)
	}
	var seeds []uint64
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		text, _, _ := strings.Cut(line, " ")
		seed, err := strconv.ParseUint(text, 10, 64)
		if err != nil || seed == 0 {
			t.Fatalf("%s:%d: %q: want a seed, then a comment", regressionSeedsFile, i+1, line)
		}
		seeds = append(seeds, seed)
	}
	return seeds
}
