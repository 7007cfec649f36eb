package core

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Hand-offs. When the ring changes, a node sends the counters it no longer
// owns to their new owners, and waits for those of the keys that move to
// it before it counts them. The ring of its last completed hand-off (the
// stable ring) names, for each key it now owns, the node the key comes
// from: its owner there. Until a key is settled here, requests for it wait
// (a call timeout) and are then decided by fallback; a key is settled when
// its source answers a pull for it (with its counts, or with nothing, but
// for a joining node's key that the source holds no counter of and knew
// an earlier run of it to have counted: see PullReply.Earlier), or when every source has sealed: told this node that, under the same ring,
// it holds nothing more of this node's keys, no transfer to it
// unacknowledged, no fallback count for its keys unsent and no dead run's
// replica of them unsent. The sources
// are the members of the stable ring that lost keys to this node: all of
// them for a node that joined, and a node that is leaving. Counts of a
// member that died live in replicas at its successors and in the fallback
// counters of the others: every surviving member is then a source, and the
// dead member's keys settle when all have sealed and the dead member's
// lease has run out (it may have been paused rather than dead). Counts that
// reach a node before their key is settled wait beside its engine (copies
// and additions apart, see Mode, and counters that name whose counts they
// hold as they came, see Transfer.Holds) and join it when the key settles.
// Past HandoffWindow the hand-off ends anyway, and what has not arrived is
// counted from nothing.

// handoffPlan is what a view's hand-off waits for. It is immutable.
type handoffPlan struct {
	ring    string            // fingerprint of the ring the seals are for
	since   int64             // mono: when the view first left the stable ring
	joined  bool              // this node was not in the stable ring
	sources []string          // the nodes that must seal, sorted
	dead    map[string]int64  // stable members that died → mono when their keys may start from replicas
	deadInc map[string]uint64 // the runs that died
	// leavers are nodes leaving that the stable ring lacks: each ring is
	// the stable ring with one of them, naming the keys it may still hold.
	leavers []*Ring
}

// moving is a key that moves here, while it is not settled.
type moving struct {
	source  Peer  // the run to pull it from; none for a dead owner's key
	pulling bool  // a pull is in flight
	retryAt int64 // mono: no pull before
	settled bool
	base    limiter.State // newest copy received (ModeNewer, a replica)
	hasBase bool
	copy    limiter.State // newest whole copy received (ModeCopy): raises the settled count
	hasCopy bool
	adds    limiter.State // counts received to add (ModeAdd)
	hasAdds bool
	own     limiter.State // this node's own counter, handed over and come back (see arrive)
	hasOwn  bool
	// counters are counters that came naming their run, or the other
	// runs' counts they hold, as they came: weighed against what this
	// node holds of those runs when the key settles (see weighHere), sent
	// on as they came if it moves on first.
	counters []arrival
	from     string // the node whose pull settled it (for stats)
	received bool   // something arrived for it
	// counter: a counter of it arrived (a hand-off, a copy), not only what
	// others admitted in fallback.
	counter bool
	// expecting are the runs whose transfers carrying counts of it were
	// refused (this node held no lease from them yet): each sends them
	// again, and a pull does not settle the key before they arrived. The
	// counts of one key may be on their way from several nodes at once
	// (each holds a replica of a crashed run's counter, taken at another
	// time): what one of them brings, or a pull brings from another, says
	// nothing of the others'.
	expecting []Peer
	// away: a source sealed saying it handed the key's counter to
	// another node (source now): the hand-off does not end before that
	// node answers a pull of it.
	away bool
	// sending: its source answered a pull saying the key's counts are on
	// their way from it to another node, not acknowledged yet
	// (PullReply.Sending). Counts of it that come from the source are that
	// transfer placed anew here: the key is pulled again at once then,
	// not a retry later.
	sending bool
	leavers int // how many of the plan's leavers were asked for it
	hops    int // sources that sent its pull on, in a row
	// passedBy are those sources, by name: a pull sent back to one of
	// them goes round (see pastPassers).
	passedBy []string
	// refunds are units given back before the key settled: they are
	// given back from its counter once it has one, out of the windows
	// they were counted in.
	refunds []givenBack
}

// reached returns what came of the key's counters while it moved here
// (ok false: none): replicas and copies name no run; a counter that came
// naming its run, or the other runs' counts it holds, names those; one
// that came as this node's own, or said nothing of its runs, names none.
func (mk *moving) reached() (a reachedRuns, ok bool) {
	if !mk.counter && !mk.hasBase && !mk.hasCopy {
		return reachedRuns{}, false
	}
	a.unnamed = mk.hasBase || mk.hasCopy
	for _, x := range mk.counters {
		switch {
		case x.of.Name != "" || len(x.holds) > 0:
			a = a.with(reachedRunsOf(x.state.Key, x.of, x.holds))
		case x.own || x.copy:
			a.unnamed = true
		}
	}
	if len(a.runs) == 0 {
		a.unnamed = true
	}
	return a, true
}

// arrival is a counter that came for a key moving here, with what it
// says of whose counts it holds.
type arrival struct {
	state limiter.State
	of    Peer   // the run whose counter it is, if named
	holds []Held // other runs' counts it holds
	own   bool   // this node's own counter, come back
	// last: the counter of run of as that run let it go (handed over by
	// it, or sent as it stopped counting, and passed on since, see
	// Transfer.Last): its last word on the counter, which no copy of it
	// holds more than (see weighHere). It goes on saying so if the
	// counter moves on before the key settles.
	last bool
	// copy: it came as a copy of its run's counter, possibly older than
	// a replica of it (a snapshot read back, ModeCopy), and goes on as one:
	// a replica of the run is not stale for it.
	copy bool
	// applied: for a copy, the transfers its run applied, which go with
	// it (see Transfer.Applied).
	applied []Applied
	// was, wasTo: for additions sent again in place of transfer was to
	// wasTo, the transfer they replace, which goes with them (see
	// Transfer.WasFrom): kept apart from other additions, they may go on
	// to wasTo, which skips them if it applied it.
	was     Applied
	wasTo   Peer
	earlier []Replaced // the transfers was replaced (Transfer.Earlier)
	// resent: what the counter holds of counts sent again in place of
	// transfers (Transfer.Resent), which goes with it.
	resent []Resent
}

// lastCopy reports whether a is its run's last word sent as a copy, after
// a copy naming no run that may hold its counts (see Transfer.Last): it
// is weighed where a record of the run's counter is held, and is a copy
// elsewhere.
func (a arrival) lastCopy() bool { return a.copy && a.last && a.of.Name != "" }

// keepLastCopy leaves with the key's counter, count now, what a, its
// run's last word sent as a copy (see lastCopy), holds where it is taken
// for a copy (no record of its run's counter held): where count holds
// nothing beyond it (the copy is the newer), the key's counter holds the
// run's counter as the run let it go, the counters it holds, and the
// counts sent again it holds (a.resent). A counter that comes later
// holding a record of the run's counter is weighed against it, and adds
// what it holds beyond; with no record left, it was added whole beside
// the copy (33 held of 18:
// TestARunsLastWordSentAsACopyBeforeTheCounterThatHoldsItsRecordIsWeighedAgainstIt).
// The counter of a run that applied a transfer the counts sent again
// replace, coming later, added them again (18 held of 16:
// TestARunsLastWordTakenForACopyKeepsTheRecordOfTheCountsSentAgainItHolds).
// Where count holds more than the copy, the copy may hold counts the
// counter lacks: no record is left, and what comes later is added whole
// (counted again, never fewer).
func (c *Core) keepLastCopy(now time.Time, a arrival, count limiter.State) {
	if _, more := limiter.SubState(now, count, a.state); more {
		return
	}
	k := a.state.Key
	c.replicas.noteHeld(now, c.mono(now), append(slices.Clip(a.holds), Held{Run: a.of, Gen: genIn(a.holds, k, a.of), State: a.state, Last: true}))
	c.keepResent(now, a.resent)
}

// marks returns, for additions sent again, the transfers they replace,
// first sent first (see Transfer.marks).
func (a arrival) marks() []Replaced {
	if a.wasTo.Name == "" {
		return nil
	}
	return append(slices.Clip(a.earlier), Replaced{From: a.was.From, Seq: a.was.Seq, To: a.wasTo})
}

// mark sets on t the transfer a's counts replace, if any.
func (a arrival) mark(t *Transfer) {
	if a.wasTo.Name != "" {
		t.Was, t.WasFrom, t.WasTo, t.Earlier = a.was.Seq, a.was.From, a.wasTo, a.earlier
	}
}

// handoffState is the progress of the view's hand-off: sources sealed, and
// the keys moving here. It is safe for concurrent use.
type handoffState struct {
	mu       sync.Mutex
	plan     *handoffPlan
	sealed   map[string]bool
	querying map[string]bool  // a seal query is in flight
	next     map[string]int64 // mono: no seal query before
	keys     map[limiter.Key]*moving
}

func newHandoffState() *handoffState {
	return &handoffState{sealed: map[string]bool{}, querying: map[string]bool{}, next: map[string]int64{}, keys: map[limiter.Key]*moving{}}
}

// reset starts tracking plan. Keys already settled stay settled unless the
// stable ring changed (fresh); seals stay if the ring they are for did.
func (h *handoffState) reset(plan *handoffPlan, fresh bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if plan == nil || h.plan == nil || h.plan.ring != plan.ring {
		h.sealed = map[string]bool{}
		h.querying = map[string]bool{}
		h.next = map[string]int64{}
	}
	h.plan = plan
	if fresh || plan == nil {
		h.keys = map[limiter.Key]*moving{}
	}
}

// planHandoff works out what this node waits for when its ring goes from
// stable to ring (this node a member of ring), or nil if nothing.
func (c *Core) planHandoff(now time.Time, old *view, stable, ring *Ring) *handoffPlan {
	known := c.known.Load()
	self := c.self.Name
	m := c.mono(now)
	p := &handoffPlan{ring: ring.Fingerprint(), since: m, joined: !stable.Has(self)}
	if old != nil && old.ho != nil {
		p.since = old.ho.since
	}
	leaving := map[string]uint64{}
	for _, x := range known.leaving {
		leaving[x.Name] = x.Inc
	}
	alive := func(x Member) bool {
		if i, ok := ring.index(x.Name); ok {
			return ring.member(i).Inc == x.Inc
		}
		inc, ok := leaving[x.Name]
		return ok && inc == x.Inc
	}
	sources := map[string]bool{}
	if p.joined {
		// A node that joins holds nothing, and its stable ring is only its
		// guess at where its keys are: the ring it saw before it joined,
		// which may lack members it learnt of since (a node declared dead
		// that saw the others one by one go). Every member it knows of
		// seals, and its keys settle one by one only from a pull's answer.
		for _, x := range stable.members {
			if alive(x) {
				sources[x.Name] = true
			}
		}
		for _, x := range ring.members {
			if x.Name != self && alive(x) {
				sources[x.Name] = true
			}
		}
	}
	for _, x := range stable.members {
		if x.Name == self || ring.Has(x.Name) && alive(x) {
			continue
		}
		if alive(x) { // leaving
			sources[x.Name] = true
			continue
		}
		wasDead := old != nil && old.ho != nil && old.ho.deadInc != nil && old.ho.deadInc[x.Name] == x.Inc
		if !wasDead && !c.runDied(x.Peer()) && c.sealedHere(old, x.Name) {
			continue // left: it handed everything over before it went
		}
		wait := m
		if ps := c.peers.get(x.Name); ps != nil && ps.peer.Inc == x.Inc {
			wait = ps.heard.Load() + int64(c.cfg.LeaseTime)*9/8
		}
		if p.dead == nil {
			p.dead, p.deadInc = map[string]int64{}, map[string]uint64{}
		}
		p.dead[x.Name], p.deadInc[x.Name] = wait, x.Inc
		for _, y := range stable.members {
			if y.Name != self && ring.Has(y.Name) && alive(y) {
				sources[y.Name] = true
			}
		}
	}
	// A node leaving that the stable ring lacks (it announced its leaving
	// before this node knew of it) may still hold, or be sending, keys that
	// are this node's now: it seals too, and its keys are pulled from it.
	for _, x := range known.leaving {
		if !stable.Has(x.Name) && !ring.Has(x.Name) {
			sources[x.Name] = true
			p.leavers = append(p.leavers, NewRing(c.cfg.Hasher, append(stable.Members(), x)))
		}
	}
	if len(sources) == 0 && len(p.dead) == 0 {
		return nil
	}
	for name := range sources {
		p.sources = append(p.sources, name)
	}
	slices.Sort(p.sources)
	return p
}

// sealedHere reports whether name, gone from the members without being
// declared dead, sealed to this node before it went: it announced its
// leaving and this node's hand-off heard from it that nothing more of this
// node's keys was there. A stable member that went without doing so may
// have left with its counters on their way here through another node, or
// stuck behind a split: for this node's hand-off it is a member that died
// (its keys start from their replicas, and its counters, if they come
// later, are weighed against them), not one whose counters all came.
func (c *Core) sealedHere(old *view, name string) bool {
	if old == nil || old.ho == nil {
		return false
	}
	h := c.handoff
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.plan == old.ho && h.sealed[name]
}

// stableSource returns the run k comes from in plan: its owner in the
// stable ring, none if that run died (its replica and the seals settle it),
// and whether k moves here at all.
func stableSource(v *view, self string, k limiter.Key) (Peer, bool) {
	owner, ok := v.stable.Owner(k.Route())
	if !ok || owner.Name == self {
		return Peer{}, false
	}
	if _, dead := v.ho.dead[owner.Name]; dead {
		return Peer{}, true
	}
	return owner.Peer(), true
}

// ofTheDead reports whether k, which this node owns by v's ring, was
// owned by a run that died, by the stable ring of v's hand-off: it starts
// from that run's replica as the hand-off completes, and settles then,
// whatever came for it before (a pull's answer, a source's seal). Settled
// on those, it was counted without the replica, which came too late to
// join it (TestADeadOwnersKeyPulledFromAnotherNodeWaitsForItsReplica).
func ofTheDead(v *view, self string, k limiter.Key) bool {
	if v.ho == nil {
		return false
	}
	src, moves := stableSource(v, self, k)
	return moves && src.Name == ""
}

// incoming reports whether k, which this node owns by v's ring, may still
// have counts on their way here. v.ho is not nil.
func (h *handoffState) incoming(v *view, self string, k limiter.Key) bool {
	src, moves := stableSource(v, self, k)
	if !moves {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if mk := h.keys[k]; mk != nil {
		return !mk.settled
	}
	return src.Name == "" || v.ho.joined || !h.sealed[src.Name]
}

// unsealedAll reports whether ok holds for every source of plan that has
// not sealed (false if plan is no longer the one tracked).
func (h *handoffState) unsealedAll(plan *handoffPlan, ok func(src string) bool) bool {
	h.mu.Lock()
	var waiting []string
	if h.plan != plan {
		h.mu.Unlock()
		return false
	}
	for _, src := range plan.sources {
		if !h.sealed[src] {
			waiting = append(waiting, src)
		}
	}
	h.mu.Unlock()
	for _, src := range waiting {
		if !ok(src) {
			return false
		}
	}
	return true
}

// entry returns k's moving record, made if need be; h.mu is held.
func (h *handoffState) entry(v *view, self string, k limiter.Key) *moving {
	mk := h.keys[k]
	if mk == nil {
		src, _ := stableSource(v, self, k)
		mk = &moving{source: src}
		h.keys[k] = mk
	}
	return mk
}

// arrive keeps a counter received for its key while the key is not
// settled here, and reports whether it did (false: count it at once).
// own: it is this node's own counter (ModeAdd), handed over and come back
// (its receiver gone); it is kept apart from what others sent: added like
// them when the key settles, but if the key moves on first, sent as this
// node's hand-off, not as counts passed on for others (see rePlace). A
// counter that names its run or the other runs' counts it holds (a) is
// kept apart too, as it came.
func (h *handoffState) arrive(v *view, self string, mode Mode, own, counter bool, a arrival, now time.Time) bool {
	s := a.state
	if !ownedBy(v, self, s.Key) || !h.incoming(v, self, s.Key) {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	mk := h.entry(v, self, s.Key)
	if mk.settled {
		return false
	}
	mk.received = true
	mk.counter = mk.counter || counter
	if mode == ModeAdd && (a.of.Name != "" || len(a.holds) > 0 || a.wasTo.Name != "" || len(a.resent) > 0) || mode == ModeCopy && a.of.Name != "" {
		a.own = own
		mk.counters = append(mk.counters, a)
		return true
	}
	if mode == ModeCopy {
		if mk.hasCopy {
			mk.copy = limiter.NewerState(mk.copy, s)
		} else {
			mk.copy, mk.hasCopy = s, true
		}
		return true
	}
	if mode == ModeNewer {
		if mk.hasBase {
			mk.base = limiter.NewerState(mk.base, s)
		} else {
			mk.base, mk.hasBase = s, true
		}
		return true
	}
	if own {
		if mk.hasOwn {
			mk.own = limiter.AddState(now, mk.own, s)
		} else {
			mk.own, mk.hasOwn = s, true
		}
		return true
	}
	if mk.hasAdds {
		mk.adds = limiter.AddState(now, mk.adds, s)
	} else {
		mk.adds, mk.hasAdds = s, true
	}
	return true
}

// reweighHeld replaces the record of the counts of run's counter (of
// generation gen) held by a counter of k kept here until the key settles
// (this node's own counter first) by f of it, and reports whether there
// is one.
func (h *handoffState) reweighHeld(run Peer, gen uint32, k limiter.Key, f func(limiter.State) limiter.State) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	mk := h.keys[k]
	if mk == nil || mk.settled {
		return false
	}
	for _, own := range []bool{true, false} {
		for i := range mk.counters {
			a := &mk.counters[i]
			if a.own != own || a.of == run {
				continue
			}
			for j := range a.holds {
				if a.holds[j].Run == run && a.holds[j].Gen == gen && a.holds[j].State.Key == k {
					a.holds[j].State = f(a.holds[j].State)
					return true
				}
			}
		}
	}
	return false
}

// unmark drops mark from the counts of k sent again in place of
// transfers (arrivals naming the transfers they replace) that wait here
// for k to settle.
func (h *handoffState) unmark(k limiter.Key, mark Replaced) {
	h.mu.Lock()
	defer h.mu.Unlock()
	mk := h.keys[k]
	if mk == nil || mk.settled {
		return
	}
	for i := range mk.counters {
		a := &mk.counters[i]
		marks := a.marks()
		if !slices.Contains(marks, mark) {
			continue
		}
		marks = slices.DeleteFunc(marks, func(m Replaced) bool { return m == mark })
		a.was, a.wasTo, a.earlier = Applied{}, Peer{}, nil
		if n := len(marks); n > 0 {
			last := marks[n-1]
			a.was, a.wasTo = Applied{From: last.From, Seq: last.Seq}, last.To
			if n > 1 {
				a.earlier = marks[:n-1]
			}
		}
	}
}

// ownedBy reports whether self owns k by v's ring: the keys whose counts
// may be moving here.
func ownedBy(v *view, self string, k limiter.Key) bool {
	o, ok := v.ring.Owner(k.Route())
	return ok && o.Name == self
}

// expect notes that counts of the keys moving here that states carry are
// on their way from from, a live sender, which will send them again.
func (h *handoffState) expect(v *view, self string, from Peer, states []limiter.State) {
	if v.ho == nil {
		return
	}
	for _, s := range states {
		if !ownedBy(v, self, s.Key) || !h.incoming(v, self, s.Key) {
			continue
		}
		h.mu.Lock()
		if mk := h.entry(v, self, s.Key); !mk.settled && !slices.Contains(mk.expecting, from) {
			mk.expecting = append(mk.expecting, from)
		}
		h.mu.Unlock()
	}
}

// arrivedFrom notes that from's counts of the keys states carry arrived:
// the keys wait for them no more.
//
// It returns the keys whose source from had said their counts were on
// their way elsewhere (moving.sending): they came here instead, and the
// source is asked again at once what more it holds of them.
func (h *handoffState) arrivedFrom(from Peer, states []limiter.State) (again []limiter.Key) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range states {
		mk := h.keys[s.Key]
		if mk == nil {
			continue
		}
		if len(mk.expecting) > 0 {
			mk.expecting = slices.DeleteFunc(mk.expecting, func(p Peer) bool { return p == from })
		}
		if mk.sending && !mk.settled && !mk.pulling && mk.source == from {
			mk.sending, mk.retryAt = false, 0
			again = append(again, s.Key)
		}
	}
	return again
}

// awaitedFrom returns, of keys, those moving here that still wait for
// counts a live run other than asker sends again (see moving.expecting),
// each with the first such run: where those counts are until they come.
func (c *Core) awaitedFrom(keys []limiter.Key, asker Peer) []KeyOwner {
	h := c.handoff
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []KeyOwner
	for _, k := range keys {
		mk := h.keys[k]
		if mk == nil || mk.settled {
			continue
		}
		for _, from := range mk.expecting {
			if p := c.peers.get(from.Name); from.Name != asker.Name && p != nil && p.peer == from {
				out = append(out, KeyOwner{Key: k, Owner: from.Name})
				break
			}
		}
	}
	return out
}

// awaits reports whether mk still waits for counts a run is sending
// again: one of the runs it expects that is still the run of its name
// this node knows (one that died sends nothing more; its counts come
// with the hand-off that takes its keys over). h.mu is held.
func (c *Core) awaits(mk *moving) bool {
	return slices.ContainsFunc(mk.expecting, func(from Peer) bool {
		p := c.peers.get(from.Name)
		return p != nil && p.peer == from
	})
}

// settleLocked marks mk settled and returns the counter it gathered, if
// any: its newest copy with the additions (this node's own counter among
// them, and what the counters that named their runs add to what this node
// holds) on top. h.mu is held.
func (c *Core) settleLocked(k limiter.Key, mk *moving, now time.Time, into *settled) {
	mk.settled = true
	if !mk.counter {
		into.counterless = append(into.counterless, k)
	}
	var lower limiter.State
	hasLess := false
	// What the key gathers is the counters that arrive, and nothing
	// else, where each names its run (or is this run's own, come back):
	// a record says so (see unionRecord).
	union := !mk.hasBase && !mk.hasAdds && !mk.hasCopy && !mk.hasOwn
	var parts []Held
	// A run's last word sent as a copy after a copy naming no run (see
	// placeEvicted) is weighed against the record of the run's counter
	// where one is held, after the counters that came with the records
	// they hold: in the order they came, it was taken for a copy where a
	// counter that came after it held the record, and what it held
	// beyond was lost.
	slices.SortStableFunc(mk.counters, func(a, b arrival) int {
		switch {
		case a.lastCopy() == b.lastCopy():
			return 0
		case a.lastCopy():
			return 1
		}
		return -1
	})
	var copied []arrival // last words taken for copies (see keepLastCopy)
	for _, a := range mk.counters {
		if a.lastCopy() && !c.replicas.promotes(k, a.of, genIn(a.holds, k, a.of)) {
			// No record of the run's counter: a copy, the newer stands.
			union = false
			copied = append(copied, a)
			if mk.hasCopy {
				mk.copy = limiter.NewerState(mk.copy, a.state)
			} else {
				mk.copy, mk.hasCopy = a.state, true
			}
			continue
		}
		switch {
		case !union:
		case a.of.Name != "":
			parts = append(parts, Held{Run: a.of, Gen: genIn(a.holds, k, a.of), State: a.state})
		case a.own:
			parts = append(parts, Held{Run: c.self, Gen: genIn(a.holds, k, c.self), State: a.state})
		default:
			union = false
		}
		if len(a.resent) > 0 {
			// What the counter holds of counts sent again in place of a
			// transfer that a run this node knows of applied (its counter
			// came meanwhile) is held by that run's counter.
			var rest []limiter.State
			if rest, a.resent = c.weighResent(now, a.resent, []limiter.State{a.state}); len(rest) == 0 {
				continue
			}
			a.state = rest[0]
		}
		d, ok, less, lowered := c.replicas.weighHere(now, c.mono(now), c.self, a.of, a.state, a.holds, a.last)
		if lowered {
			// A copy of the run's counter that came before held units
			// the run gave back since: they come off what the key
			// gathered.
			if hasLess {
				lower = limiter.AddState(now, lower, less)
			} else {
				lower, hasLess = less, true
			}
		}
		if !ok {
			continue
		}
		// Counts sent again in place of a transfer join the counter here
		// now: the counter holds them from now on, and names them wherever
		// it goes (see Transfer.Resent).
		if marks := a.marks(); len(marks) > 0 {
			c.replicas.holdResent(c.mono(now), []Resent{{Marks: marks, State: d}})
		}
		c.keepResent(now, a.resent)
		if mk.hasAdds {
			mk.adds = limiter.AddState(now, mk.adds, d)
		} else {
			mk.adds, mk.hasAdds = d, true
		}
	}
	mk.counters = nil
	if mk.hasOwn {
		if mk.hasAdds {
			mk.adds = limiter.AddState(now, mk.adds, mk.own)
		} else {
			mk.adds, mk.hasAdds = mk.own, true
		}
		mk.hasOwn = false
	}
	var out limiter.State
	has := true
	switch {
	case mk.hasBase && mk.hasAdds:
		out = limiter.AddState(now, mk.base, mk.adds)
	case mk.hasBase:
		out = mk.base
	case mk.hasAdds:
		out = mk.adds
	default:
		has = false
	}
	if has && hasLess {
		c.debugCounts("a run's counter handed over holds less than its copy that came before: the difference comes off", []limiter.State{lower})
		out = limiter.LessState(now, out, lower)
	}
	switch {
	case has && mk.hasCopy:
		out = limiter.NewerState(out, mk.copy) // a copy raises the count, never adds to it
	case mk.hasCopy:
		out, has = mk.copy, true
	}
	if has {
		for _, a := range copied {
			c.keepLastCopy(now, a, out)
		}
		into.states = append(into.states, out)
		if union && !hasLess && len(parts) > 0 {
			into.unions = append(into.unions, settledUnion{key: k, parts: parts})
		}
	}
	into.refunds = append(into.refunds, mk.refunds...)
	mk.hasBase, mk.hasAdds, mk.hasCopy, mk.refunds = false, false, false, nil
}

// settled is what keys just settled gathered: their counters, and the
// units given back meanwhile; and the keys none of whose counters came
// (what came was only what others admitted in fallback, or nothing).
type settled struct {
	states      []limiter.State
	refunds     []givenBack
	counterless []limiter.Key
	unions      []settledUnion
}

// settledUnion names the counters a key that settled gathered, where
// they are all it gathered (see unionRecord).
type settledUnion struct {
	key   limiter.Key
	parts []Held
}

// settle settles keys and counts what they gathered.
func (c *Core) settle(now time.Time, keys []limiter.Key) {
	v := c.view.Load()
	var done settled
	c.handoff.mu.Lock()
	for _, k := range keys {
		c.settleLocked(k, c.handoff.entry(v, c.self.Name, k), now, &done)
	}
	// Counted before the lock goes: a take that finds a key settled finds
	// its counts in the engine too, never the engine without them.
	c.countSettled(now, done)
	c.handoff.mu.Unlock()
	c.foldFallback(now, v, keys)
	c.notifySettled()
}

// countSettled adds the counters of keys just settled to the engine, then
// gives back what was given back meanwhile. The hand-off's lock is held:
// takes run beside the core's other entry points, and one that finds a
// key settled (under that lock) must find what it gathered counted.
func (c *Core) countSettled(now time.Time, done settled) {
	c.replicas.noteCounterless(c.mono(now), done.counterless)
	c.debugCounts("keys settled: what arrived for them joins the engine", done.states)
	if len(done.states) > 0 {
		before := make([][]limiter.State, len(done.unions))
		for i, u := range done.unions {
			before[i] = c.engine.StatesOf(now, []limiter.Key{u.key})
		}
		c.engine.Merge(now, sortStates(done.states))
		for _, s := range done.states {
			c.dirty.noteKey(s.Key)
		}
		for i, u := range done.unions {
			if after := c.engine.StatesOf(now, []limiter.Key{u.key}); len(after) == 1 {
				var prefix *limiter.State
				if len(before[i]) == 1 {
					prefix = &before[i][0]
				}
				c.replicas.noteUnion(c.mono(now), u.key, prefix, u.parts, after[0])
			}
		}
	}
	for _, g := range done.refunds {
		r := g.req
		if len(c.refundAfterCounter(now, g.at, []limiter.Request{r}, g.marks)) == 0 {
			continue
		}
		if r.Limit.Algorithm != limiter.Concurrency && !c.engine.Has(now, r.Key) {
			// The key settled without its counter here: what this node
			// held of it went on meanwhile (in a pull's reply to a newer
			// owner) or waits in its fallback counts. Given back from an
			// engine that lacks the key, the units would be lost and
			// stay counted where the counter went: they wait, and are
			// given back as refund gives them back, where the counter is.
			c.settling.hold(heldSettle{refund: true, at: g.at, req: r, marks: g.marks})
			c.debugGivenBack("units given back as their key settled without its counter wait for it", []limiter.Request{r})
			continue
		}
		if len(g.marks) > 0 && r.Limit.Algorithm != limiter.Concurrency {
			c.refundMarkedHere(now, g.at, r, g.marks) // the record says what came off
		} else {
			settleIn(c.engine, now, g.at, false, r)
			c.heldBelow(now, r.Key)
		}
		c.dirty.noteKey(r.Key)
	}
}

// refundLater keeps units given back for keys not settled here, with the
// instant at they were counted at and the give-backs they replace
// (marks): it reports which of reqs it did not keep, and which it kept.
func (h *handoffState) refundLater(v *view, self string, at int64, reqs []limiter.Request, marks []Replaced) (rest, kept []limiter.Request) {
	for _, r := range reqs {
		if v.ho == nil || r.Limit.Algorithm == limiter.Concurrency || !ownedBy(v, self, r.Key) || !h.incoming(v, self, r.Key) {
			rest = append(rest, r)
			continue
		}
		h.mu.Lock()
		mk := h.entry(v, self, r.Key)
		if mk.settled {
			rest = append(rest, r)
		} else {
			mk.refunds = append(mk.refunds, givenBack{at: at, req: r, marks: marks})
			kept = append(kept, r)
		}
		h.mu.Unlock()
	}
	return rest, kept
}

// requestKeys starts what makes keys countable here: a pull of each key
// moving here from a live source, not pulled already.
func (c *Core) requestKeys(now time.Time, v *view, keys []limiter.Key) {
	m := c.mono(now)
	bySource := map[string][]limiter.Key{}
	c.handoff.mu.Lock()
	for _, k := range keys {
		mk := c.handoff.entry(v, c.self.Name, k)
		if mk.settled || mk.pulling || mk.source.Name == "" || m < mk.retryAt {
			continue
		}
		if mk.source.Name == c.self.Name {
			var done settled
			c.settleLocked(k, mk, now, &done) // nothing can come from here: nothing gathered either
			continue
		}
		if p := c.peers.get(mk.source.Name); p != nil && p.peer != mk.source {
			// The run it comes from is gone: another run of the name never
			// held what that one did. What it held comes with the
			// hand-off: from the replicas of it if it died, or handed over
			// before it went.
			mk.source = Peer{}
			continue
		}
		mk.pulling = true
		bySource[mk.source.Name] = append(bySource[mk.source.Name], k)
	}
	c.handoff.mu.Unlock()
	for _, name := range sortedKeys(bySource) {
		p := c.peers.get(name)
		if p == nil {
			c.pullFailed(now, bySource[name])
			continue
		}
		ks := bySource[name]
		slices.Sort(ks)
		c.stats.PullCalls.Add(1)
		c.out.request(p.peer, Pull{To: p.peer.Inc, Keys: ks}, m, nil)
	}
	c.notifyOutbox()
}

// maxPullHops is how many sources in a row may send a key's pull on to
// another before the next pull waits a retry.
const maxPullHops = 3

// pullRetry is how long a new owner waits before it pulls again a key it
// could not pull.
func (c *Core) pullRetry() int64 { return int64(max(4*c.cfg.CallTimeout, 200*time.Millisecond)) }

// pullFailed makes keys pullable again after pullRetry.
func (c *Core) pullFailed(now time.Time, keys []limiter.Key) {
	at := c.mono(now) + c.pullRetry()
	c.handoff.mu.Lock()
	for _, k := range keys {
		if mk := c.handoff.keys[k]; mk != nil {
			mk.pulling = false
			mk.retryAt = at
		}
	}
	c.handoff.mu.Unlock()
	c.notifySettled()
}

// pulled takes a source's answer to a pull of keys.
func (c *Core) pulled(now time.Time, r *pendingRequest, reply PullReply) {
	asked := r.msg.(Pull).Keys
	if reply.Refused {
		c.pullFailed(now, asked)
		return
	}
	c.takeUnreached(now, reply.Unreached) // before what was given counts
	refused, counters := map[limiter.Key]bool{}, map[limiter.Key]bool{}
	for _, t := range reply.Given {
		ack := c.handleTransfer(now, r.to, t, true)
		c.out.send(r.to, ack)
		for _, s := range t.States {
			if ack.Refused {
				refused[s.Key] = true // not applied: not settled, pulled again
			} else {
				counters[s.Key] = counters[s.Key] || t.carriesCounter()
			}
		}
		if !ack.Refused {
			c.stats.Pulled.Add(uint64(len(t.States)))
		}
	}
	v := c.view.Load()
	var again []limiter.Key
	moved := map[limiter.Key]string{}
	for _, ko := range reply.Moved {
		moved[ko.Key] = ko.Owner
	}
	var done, earlier []limiter.Key
	retry := c.mono(now) + int64(c.cfg.CallTimeout)
	c.handoff.mu.Lock()
	for _, k := range asked {
		mk := c.handoff.keys[k]
		if mk == nil {
			continue
		}
		mk.pulling = false
		mk.sending = slices.Contains(reply.Sending, k)
		if mk.sending {
			// On its way to another node, not acknowledged yet: asked
			// here again, which then names where it went (or at once,
			// should the counts come here: see arrivedFrom).
			mk.retryAt = retry
			continue
		}
		if to, ok := moved[k]; ok && to != c.self.Name {
			// It is there now, or the source holds nothing of it and counts
			// it elsewhere: pull it from there. Sources that disagree
			// about where it is (their rings differ for a moment) send the
			// pull around: past a few hops it waits a retry between them.
			mk.passedBy = append(mk.passedBy, r.to.Name)
			if slices.Contains(mk.passedBy, to) {
				if o, ok := c.pastPassers(v, k, mk.passedBy); ok {
					to = o
				}
			}
			if p := c.peers.get(to); p != nil {
				mk.source = p.peer
			}
			if mk.hops++; mk.hops > maxPullHops {
				mk.hops, mk.passedBy, mk.retryAt = 0, nil, c.mono(now)+c.pullRetry()
			}
			continue
		}
		if refused[k] || c.awaits(mk) {
			mk.retryAt = retry
			continue
		}
		if slices.Contains(reply.Earlier, k) && c.handoff.plan != nil && c.handoff.plan.joined {
			// The source holds no counter of it (nothing, or only
			// fallback units), but knew this node's earlier run, which
			// crashed: that run's replica of the key may be with any
			// node this hand-off waits for, and comes here before that
			// node seals. The key settles when every source has sealed,
			// as a dead owner's key does.
			mk.source = Peer{}
			earlier = append(earlier, k)
			continue
		}
		if ofTheDead(v, c.self.Name, k) {
			// What the pull gave is here: the key waits for the hand-off
			// to complete, and starts from its dead owner's replica then.
			mk.source, mk.away = Peer{}, false
			continue
		}
		if !counters[k] && !mk.counter {
			// No counter of it came, from the pull or otherwise (what did
			// may be only what others admitted in fallback): a node leaving
			// that would have owned it may still hold it, or be sending it
			// (to a run of this node that died).
			if l := c.leaverFor(v, k, mk.leavers); l.Name != "" {
				mk.leavers++
				mk.source = l
				again = append(again, k)
				continue
			}
		}
		done = append(done, k)
	}
	c.handoff.mu.Unlock()
	if c.debugOn() && len(earlier) > 0 {
		c.log.Debug("pulled keys of this node's earlier run wait for every seal", "node", c.self.Name, "peer", r.to.Name, "keys", earlier)
	}
	c.settle(now, done)
	if len(again) > 0 {
		c.requestKeys(now, v, again)
	}
}

// pastPassers returns where to pull k once its pull came back to a node
// that had sent it on: its owner in the stable ring without the nodes that
// sent it on (passed), a live peer. Nodes joining at once take each other
// for members: one sends the pull on to the next it ranks below itself
// (see beforeJoin), and that one, ranking the first above itself, sends it
// back, while the key's counter is at a node ranked below them all, which
// may have heard of none of them
// (TestThreeNodesJoiningAtOnceDoNotSendAKeysPullRoundAmongThemselves).
// Each of them said it holds nothing of k. Only for this node's own
// join: its stable ring is the ring it saw as it joined, a guess at where
// its keys are; the stable ring of any other hand-off names where they
// were, and a pull that goes round there goes round between sources whose
// rings differ for a moment, and waits for them to agree.
func (c *Core) pastPassers(v *view, k limiter.Key, passed []string) (string, bool) {
	if v.ho == nil || !v.ho.joined {
		return "", false
	}
	ms := slices.DeleteFunc(v.stable.Members(), func(m Member) bool { return m.Name == c.self.Name || slices.Contains(passed, m.Name) })
	o, ok := NewRing(c.cfg.Hasher, ms).Owner(k.Route())
	if !ok || !c.liveSource(v, o) {
		return "", false
	}
	return o.Name, true
}

// liveSource reports whether m, a node the hand-off under way would take
// a key from, is a live peer: not among the runs it takes for dead, and
// the run this node's peer of that name is.
func (c *Core) liveSource(v *view, m Member) bool {
	if _, dead := v.ho.dead[m.Name]; dead {
		return false
	}
	p := c.peers.get(m.Name)
	return p != nil && p.peer == m.Peer()
}

// leaverFor returns the next node still leaving, from the plan's i-th on,
// that would own k, or none.
func (c *Core) leaverFor(v *view, k limiter.Key, i int) Peer {
	if v.ho == nil {
		return Peer{}
	}
	leaving := c.known.Load().leaving
	for ; i < len(v.ho.leavers); i++ {
		o, ok := v.ho.leavers[i].Owner(k.Route())
		if !ok || v.stable.Has(o.Name) {
			continue
		}
		if slices.ContainsFunc(leaving, func(m Member) bool { return m.Name == o.Name && m.Inc == o.Inc }) {
			return o.Peer()
		}
		// Gone since: it handed everything over before it went.
	}
	return Peer{}
}

// handlePull answers a pull of keys by from, which owns them now: what this
// node holds of them goes to it, in transfers it acknowledges, and from now
// on this node sends requests for them there.
func (c *Core) handlePull(now time.Time, from Peer, p Pull) PullReply {
	if p.To != c.self.Inc {
		// Another run of this node was asked: what it held is not here
		// (it lives on in its replicas), and "nothing here" would have the
		// asker count the keys from nothing.
		if c.debugOn() {
			c.log.Debug("pull refused: meant for another run", "node", c.self.Name, "peer", from.Name, "run", p.To)
		}
		return PullReply{Refused: true}
	}
	c.viewMu.Lock()
	v := c.view.Load()
	dead := c.runDied(from)
	c.viewMu.Unlock()
	if dead {
		return PullReply{Refused: true}
	}
	given, sending := c.out.holdingFor(p.Keys, from, c.mono(now)+int64(2*c.cfg.CallTimeout))
	held := len(given)
	var take []limiter.Key
	var moved []KeyOwner
	for _, k := range p.Keys {
		if slices.Contains(sending, k) {
			continue
		}
		// A key with a transfer on its way to the asker is held here: the
		// transfer goes again, and so does whatever else this node holds
		// of the key (counts that came for it since, waiting for it to
		// settle here). Given alone, the transfer would have the asker
		// settle the key on part of its counts.
		if to, lent := c.lent.get(k); lent && to.Name != from.Name && !c.heldFor(given, k) {
			moved = append(moved, KeyOwner{Key: k, Owner: to.Name})
			continue
		}
		take = append(take, k)
	}
	// Counts of a key moving here that a live run sends again (this node
	// refused them: it held no lease from that run yet) are not here but
	// there: the asker pulls them there. Told "nothing here", it would
	// count the key from what this node gives, and the counts, sent on,
	// come on top.
	awaited := c.awaitedFrom(take, from)
	moved = append(moved, awaited...)
	states := c.engine.ExtractKeys(now, take)
	m := c.mono(now)
	named := c.replicas.gaveAway(m, c.self, states)
	ownHeld := sortHolds(append(c.replicas.takeHeld(keysOf(states)), named...)) // the other runs' counts its counters hold, and their generations
	moving := c.handoff.extract(take)
	bases, adds := moving.bases, moving.adds
	states = append(states, moving.owns...) // its own counters, come back
	// Replicas this node keeps of the puller's earlier run, of keys nobody
	// handed over here: the puller restarted without a hand-off (it
	// crashed), and those keys' counts live in the replicas. So do those
	// of any run that died by what this node knows, which no hand-off
	// here took over (yet: this node is without a majority, or its
	// hand-off waits for others): the replica is the key's counter, and
	// this node no longer owns the key. Kept back, the asker would count
	// the key from nothing.
	c.viewMu.Lock()
	earlier := c.replicas.takeOwned(now, func(owner Peer, k limiter.Key) bool {
		return (owner.Name == from.Name && owner.Inc < from.Inc || owner.Name != from.Name && c.runDied(owner)) && slices.Contains(p.Keys, k) &&
			!slices.ContainsFunc(states, func(s limiter.State) bool { return s.Key == k })
	})
	c.viewMu.Unlock()
	// The copies go with the counts of other runs they hold (see noteHeld).
	baseHeld := c.replicas.takeHeld(keysOf(moving.bases))
	// A key held nowhere here that this node counts elsewhere (by its
	// ring without the asker) is there, or on its way there: the asker
	// guessed this node from a ring this node no longer shares (it was
	// declared dead and saw the others go one by one). Saying "nothing
	// here" would have it counted from nothing. But where this node held
	// every count of the key (it owned it by the ring of its last
	// completed hand-off) and its ring names the asker the owner since,
	// the asker guessed right: what this node had of it went, or goes,
	// to the asker, and nothing here means there was nothing.
	var elsewhere, earlierRun, heldHere []limiter.Key
	knewEarlier := c.knewEarlierRun(from)
	for _, k := range take {
		if slices.ContainsFunc(awaited, func(a KeyOwner) bool { return a.Key == k }) {
			continue
		}
		if c.heldFor(given, k) || heldIn(states, k) || heldIn(adds, k) || heldIn(bases, k) || heldIn(statesOfTaken(earlier), k) || heldIn(moving.copies, k) || slices.ContainsFunc(moving.counters, func(a arrival) bool { return a.state.Key == k }) || slices.ContainsFunc(moving.refunds, func(g givenBack) bool { return g.req.Key == k }) {
			heldHere = append(heldHere, k)
			continue
		}
		if to, ok := c.handed.get(k); ok && to.Name != c.self.Name {
			// Its counter went from here to a node: the asker has it, or
			// finds it there (it went by a ring the asker's did not
			// follow).
			if to.Name != from.Name {
				moved = append(moved, KeyOwner{Key: k, Owner: to.Name})
				elsewhere = append(elsewhere, k)
				continue
			}
			if to == from {
				continue
			}
		}
		if c.passedTo(v, k, from) {
			continue
		}
		if o, ok := v.ring.OwnerWithout(k.Route(), from.Name); ok && o.Name != c.self.Name {
			moved = append(moved, KeyOwner{Key: k, Owner: o.Name})
			elsewhere = append(elsewhere, k)
			continue
		}
		if src, ok := c.beforeJoin(v, k, from); ok {
			moved = append(moved, KeyOwner{Key: k, Owner: src.Name})
			elsewhere = append(elsewhere, k)
			continue
		}
		// A key this node owns whose counts are still on their way here
		// (its hand-off waits for them: a restarted node sent its restored
		// counter away as a copy) is not "nothing": the asker pulls it from
		// the run sending it, or asks here again.
		if src, coming := c.stillComing(v, k); coming {
			switch {
			case src.Name == from.Name: // the asker sends it itself
			case src.Name != "":
				moved = append(moved, KeyOwner{Key: k, Owner: src.Name})
			default:
				sending = append(sending, k)
			}
			continue
		}
		// Nothing here. Where the asker is a later run of a member that
		// crashed, the earlier run's counter of the key may be a replica
		// at a node that succeeded it in the key before this one did (or
		// before a ring change the crashed run never followed), which has
		// not heard of the asker yet: this node's "nothing" is only its
		// own (see PullReply.Earlier).
		if knewEarlier {
			earlierRun = append(earlierRun, k)
		}
	}
	// This node's own counters go as its own (the asker weighs a replica of
	// them it may get later against them), with the other runs' counts
	// they hold; what others sent here for the keys goes as additions, and
	// counters that named their runs as they came.
	for _, part := range SplitStates(sortStates(states), TransferBytes) {
		holds := holdsOf(ownHeld, part)
		given = append(given, c.out.transfer(from, Transfer{Mode: ModeAdd, Own: true, Holds: holds, States: part, Taken: c.handedTaken(part), Applied: c.appliedHeld(part, true, Peer{}, holds), Resent: c.replicas.takeResentHeld(keysOf(part))}, purposePull, m+int64(2*c.cfg.CallTimeout), false))
	}
	for _, a := range moving.counters {
		t := Transfer{Mode: ModeAdd, CountersOf: a.of, Holds: a.holds, States: []limiter.State{a.state}, Resent: a.resent, Last: a.last}
		if a.copy {
			t.Mode, t.Applied = ModeCopy, a.applied
		}
		if a.own {
			t.Own, t.CountersOf = true, Peer{}
		}
		if t.Mode == ModeAdd && (t.carriesCounter() || len(t.Holds) > 0) {
			t.Applied = c.appliedHeld(t.States, t.Own, t.CountersOf, t.Holds)
		}
		a.mark(&t)
		given = append(given, c.out.transfer(from, t, purposePull, m+int64(2*c.cfg.CallTimeout), false))
	}
	for _, part := range SplitStates(sortStates(adds), TransferBytes) {
		given = append(given, c.out.transfer(from, Transfer{Mode: ModeAdd, States: part, Applied: c.carried.held.of(keysOf(part))}, purposePull, m+int64(2*c.cfg.CallTimeout), false))
	}
	if len(bases) > 0 {
		given = append(given, c.out.transfer(from, Transfer{Mode: ModeNewer, States: sortStates(bases), Holds: baseHeld}, purposePull, m+int64(2*c.cfg.CallTimeout), false))
	}
	if len(moving.copies) > 0 {
		given = append(given, c.out.transfer(from, Transfer{Mode: ModeCopy, States: moving.copies}, purposePull, m+int64(2*c.cfg.CallTimeout), false))
	}
	// The replicas of the asker's earlier runs go naming their run, run by
	// run: another copy of the same counter (an older replica another node
	// kept, sent on naming the run) is weighed against them there, not
	// added to them.
	for _, g := range takenByRun(earlier) {
		states := statesOfTaken(g)
		given = append(given, c.out.transfer(from, Transfer{Mode: ModeNewer, ReplicaOf: g[0].owner, States: sortStates(states), Holds: holdsOf(holdsOfTaken(g), states)}, purposePull, m+int64(2*c.cfg.CallTimeout), false))
	}
	// A key held here without a counter of it (what is given of it is
	// only what others admitted in fallback, additions) is, for the
	// puller's earlier run, as one held nothing of: that run's counter may
	// be a replica at a node that has not heard of the puller yet, and
	// the additions say nothing of it.
	if knewEarlier {
		for _, k := range heldHere {
			if !counterGiven(given, k) {
				earlierRun = append(earlierRun, k)
			}
		}
	}
	for i, t := range given {
		msg := "transfer given in a pull's reply"
		if i < held {
			msg = "transfer on its way given again in a pull's reply"
		}
		c.debugTransfer(msg, from, t, purposePull)
	}
	if len(moving.refunds) > 0 {
		c.refundEach(now, moving.refunds) // lent on: they follow the counter
	}
	for _, k := range take {
		if slices.Contains(elsewhere, k) {
			continue
		}
		if owner, ok := v.ring.Owner(k.Route()); ok && owner.Name == c.self.Name || c.engine.Has(now, k) {
			c.lent.set(k, from) // this node would count it: send it there instead
		}
	}
	return PullReply{Given: given, Moved: moved, Unreached: c.passUnreached(now), Sending: sending, Earlier: earlierRun}
}

// knewEarlierRun reports whether this node knew an earlier run of from as
// a member that did not announce its leaving: a run that crashed (or was
// declared dead), whose counters live on in its replicas. One that left
// handed them over before it went.
func (c *Core) knewEarlierRun(from Peer) bool {
	for _, r := range c.known.Load().seen[from.Name] {
		if r.inc < from.Inc && r.member && !r.leaving {
			return true
		}
	}
	return false
}

// beforeJoin returns, for a key this node holds nothing of and would own
// by its ring without the asker, where the key is while this node's own
// join hand-off is under way: its owner in this node's stable ring (the
// ring it joined) without the asker, a live peer. The asker, another node
// joining at the same time, took this node for a member that counted its
// keys (it heard of it as one, as a member it knows nothing of the
// joining of); but a joining node has counted nothing yet, and the key's
// counter is still where this node's own hand-off would take it from, at
// a node that may not have heard of either joiner and counts on. Told
// "nothing here", the asker would count the key from nothing beside it
// (TestTwoNodesJoiningAtOnceDoNotCountAKeyBesideItsOwner). Several nodes
// joining at once may send the pull back to one of them: the asker then
// pulls where none of them is (see pastPassers).
func (c *Core) beforeJoin(v *view, k limiter.Key, asker Peer) (Peer, bool) {
	if v.ho == nil || !v.ho.joined || v.self < 0 {
		return Peer{}, false
	}
	if o, ok := v.ring.OwnerWithout(k.Route(), asker.Name); !ok || o.Name != c.self.Name {
		return Peer{}, false
	}
	src, ok := v.stable.OwnerWithout(k.Route(), asker.Name)
	if !ok || src.Name == c.self.Name || !c.liveSource(v, src) {
		return Peer{}, false
	}
	return src.Peer(), true
}

// stillComing reports whether k, owned here by v's ring, still waits for
// counts the hand-off brings, and the live run they come from (none if
// that run is not one this node can pull from).
func (c *Core) stillComing(v *view, k limiter.Key) (Peer, bool) {
	if v.ho == nil {
		return Peer{}, false
	}
	if o, ok := v.ring.Owner(k.Route()); !ok || o.Name != c.self.Name {
		return Peer{}, false
	}
	if !c.handoff.incoming(v, c.self.Name, k) {
		return Peer{}, false
	}
	src, _ := stableSource(v, c.self.Name, k)
	c.handoff.mu.Lock()
	if mk := c.handoff.keys[k]; mk != nil {
		src = mk.source
	}
	c.handoff.mu.Unlock()
	if p := c.peers.get(src.Name); src.Name == "" || p == nil || p.peer != src {
		return Peer{}, true
	}
	return src, true
}

// passedTo reports whether this node owned k, holding every count of it,
// by the latest ring of v's past whose hand-off completed here, and v's
// ring names to its owner since.
func (c *Core) passedTo(v *view, k limiter.Key, to Peer) bool {
	if v.owned == nil {
		return false
	}
	was, ok := v.owned.Owner(k.Route())
	if !ok || was.Name != c.self.Name {
		return false
	}
	now, ok := v.ring.Owner(k.Route())
	return ok && now.Name == to.Name && now.Inc == to.Inc
}

// keysOf returns the keys of states.
func keysOf(states []limiter.State) []limiter.Key {
	keys := make([]limiter.Key, len(states))
	for i, s := range states {
		keys[i] = s.Key
	}
	return keys
}

// heldIn reports whether states hold a counter of k.
func heldIn(states []limiter.State, k limiter.Key) bool {
	return slices.ContainsFunc(states, func(s limiter.State) bool { return s.Key == k })
}

// counterGiven reports whether one of ts carries a counter of k (see
// Transfer.carriesCounter).
func counterGiven(ts []Transfer, k limiter.Key) bool {
	return slices.ContainsFunc(ts, func(t Transfer) bool {
		return t.carriesCounter() && heldIn(t.States, k)
	})
}

// heldFor reports whether one of ts carries k.
func (c *Core) heldFor(ts []Transfer, k limiter.Key) bool {
	for _, t := range ts {
		if slices.ContainsFunc(t.States, func(s limiter.State) bool { return s.Key == k }) {
			return true
		}
	}
	return false
}

// takeArrived removes and returns everything that arrived for keys not
// settled, sorted by key; the keys stay as they are (settled or not,
// pulling or not).
func (h *handoffState) takeArrived() (a arrived) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, mk := range h.keys {
		if mk.settled {
			continue
		}
		a.takeLocked(mk)
	}
	a.sort()
	return a
}

// arrived is what came for keys not settled, taken out to be placed anew:
// owns are this node's own counters that came back, adds what it passes
// on for others, counters those that named their runs (see moving).
type arrived struct {
	bases, adds, owns, copies []limiter.State
	counters                  []arrival
	refunds                   []givenBack
}

// takeLocked moves what came for mk into a.
func (a *arrived) takeLocked(mk *moving) {
	if mk.hasBase {
		a.bases = append(a.bases, mk.base)
	}
	if mk.hasAdds {
		a.adds = append(a.adds, mk.adds)
	}
	if mk.hasOwn {
		a.owns = append(a.owns, mk.own)
	}
	if mk.hasCopy {
		a.copies = append(a.copies, mk.copy)
	}
	a.counters = append(a.counters, mk.counters...)
	a.refunds = append(a.refunds, mk.refunds...)
	mk.hasBase, mk.hasAdds, mk.hasOwn, mk.hasCopy, mk.counters, mk.refunds = false, false, false, false, nil, nil
}

// sort orders a by key: what is sent does not depend on a map walk.
func (a *arrived) sort() {
	sortStates(a.bases)
	sortStates(a.adds)
	sortStates(a.owns)
	sortStates(a.copies)
	slices.SortStableFunc(a.counters, func(x, y arrival) int { return cmpUint(uint64(x.state.Key), uint64(y.state.Key)) })
	// Stable: the units given back for one key keep the order they came
	// in, whatever the order the keys were walked in.
	slices.SortStableFunc(a.refunds, func(x, y givenBack) int { return cmpUint(uint64(x.req.Key), uint64(y.req.Key)) })
}

// extract removes and returns what arrived for keys not settled here.
func (h *handoffState) extract(keys []limiter.Key) (a arrived) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range keys {
		mk := h.keys[k]
		if mk == nil || mk.settled {
			continue
		}
		a.takeLocked(mk)
		delete(h.keys, k)
	}
	a.sort()
	return a
}

// handleSeal answers whether this node holds nothing more, under ring, for
// the keys from owns. Asked of another run of this node (q.To), it does
// not seal: that run's counters are not here.
func (c *Core) handleSeal(now time.Time, from Peer, q SealQuery) SealReply {
	if q.To != c.self.Inc {
		if c.debugOn() {
			c.log.Debug("seal refused: meant for another run", "node", c.self.Name, "peer", from.Name, "run", q.To)
		}
		return SealReply{}
	}
	v := c.view.Load()
	if v.ring.Fingerprint() != q.Ring {
		return SealReply{}
	}
	if c.out.moving(from.Name) > 0 {
		return SealReply{}
	}
	if c.out.sendingAway(v.ring, from.Name) {
		// A counter of the asker's keys is on its way to another node,
		// unacknowledged: sealed now, the asker would count the key from
		// nothing while the counter may still arrive there, or come back
		// here to be sent to the asker.
		return SealReply{}
	}
	if c.reconcileTo(now, v, from) {
		return SealReply{} // sent now: sealed once acknowledged
	}
	if c.replicas.keeps(now, func(owner Peer, k limiter.Key) bool {
		o, ok := v.ring.Owner(k.Route())
		return ok && o.Name == from.Name && c.runDied(owner)
	}) {
		// A dead run's replica of one of the asker's keys: this node
		// sends it to the asker as that run's counter once it has a
		// majority (handOverReplicas), and not before. Sealed meanwhile,
		// the asker would count the key from what it has, and the
		// replica come later, on top.
		return SealReply{}
	}
	c.sealsGiven.note(from.Name, v.ring)
	// An heir this node seals to stays one (see heirsOf): the answer may
	// be lost, its hand-off still under way, and dying then it never
	// counted the keys it is an heir of
	// (TestAKeyTakenOverByASuccessorWhoseSealAnswerWasLostIsOutOfReach).
	if c.debugOn() {
		c.log.Debug("sealed: nothing more here for the asker's keys", "node", c.self.Name, "peer", from.Name, "ring", q.Ring)
	}
	return SealReply{Sealed: true, Unreached: c.passUnreached(now), Moved: c.handed.awayFrom(v.ring, from.Name)}
}

// sealsGiven remembers, for each node this node sealed to, the ring it
// sealed under: from then on, what this node admits in fallback for that
// node's keys would reach it only after it may have started counting them
// (see Replied). It also keeps the rings this node's view went through
// since, so that a seal holds for a key only while every one of them left
// the key with the node sealed to (see gaveFor). It is safe for concurrent
// use.
type sealsGiven struct {
	mu    sync.Mutex
	rings map[string]*sealGiven
	last  *Ring // the ring of the last view change passed (nil: none yet)
}

// sealGiven is one seal this node gave: the ring it was given under and
// the rings this node's view changed to since, oldest first.
type sealGiven struct {
	ring  *Ring
	since []*Ring
}

// maxRingsSinceSeal bounds the ring changes a seal is followed through: a
// seal whose view changed more often since no longer holds across a ring
// change (only under the very ring it was given by).
const maxRingsSinceSeal = 8

// note records a seal given to name under ring, the ring of the view the
// seal was decided by. If the view has changed since (passed ran between
// the view's load and this note), the rings between are unknown: the seal
// then holds only under the very ring it was given by (see gaveFor).
func (s *sealsGiven) note(name string, ring *Ring) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rings == nil {
		s.rings = map[string]*sealGiven{}
	}
	g := &sealGiven{ring: ring}
	if s.last != nil && s.last != ring {
		g.since = make([]*Ring, maxRingsSinceSeal+1)
	}
	s.rings[name] = g
}

// passed records that this node's view changed to ring after the seals
// it gave, and forgets the seals given to nodes ring no longer lists:
// a later ring that lists them again came after one that gave their keys
// to others.
func (s *sealsGiven) passed(ring *Ring) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = ring
	for name, g := range s.rings {
		switch {
		case !ring.Has(name):
			delete(s.rings, name)
		case len(g.since) <= maxRingsSinceSeal:
			g.since = append(g.since, ring)
		}
	}
}

// gave reports whether this node sealed to name under the ring whose
// fingerprint is ring.
func (s *sealsGiven) gave(name, ring string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.rings[name]
	return g != nil && g.ring.Fingerprint() == ring
}

// gaveFor reports whether this node's last seal to owner's name was under
// a ring that gives k to owner, this run of it, and every ring this node's
// view changed to since gave k to it too: a ring between that gave k to
// another node (the owner was declared dead, a node joined and left) may
// have sent this node's counts for k there, and the owner counts k by a
// hand-off of its own since.
func (s *sealsGiven) gaveFor(owner Member, k limiter.Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.rings[owner.Name]
	if g == nil || len(g.since) > maxRingsSinceSeal {
		return false
	}
	gives := func(r *Ring) bool {
		o, ok := r.Owner(k.Route())
		return ok && o.Name == owner.Name && o.Inc == owner.Inc
	}
	if !gives(g.ring) {
		return false
	}
	for _, r := range g.since {
		if !gives(r) {
			return false
		}
	}
	return true
}

// mayCount reports whether a node this node sealed to was given k by the
// ring it sealed by, and ring (this node's view now) still lists that run
// of it: the node may not have seen the rings since, its hand-off of the
// ring sealed by may still be under way, and it may start counting k by
// that seal at any moment. What this node admits for k in fallback now
// would reach it only after.
func (s *sealsGiven) mayCount(ring *Ring, k limiter.Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, g := range s.rings {
		o, ok := g.ring.Owner(k.Route())
		if !ok || o.Name != name {
			continue
		}
		if i, ok := ring.index(name); ok && ring.member(i).Inc == o.Inc {
			return true
		}
	}
	return false
}

// sealReplied records a source's answer to a seal query.
func (c *Core) sealReplied(now time.Time, r *pendingRequest, reply SealReply) {
	q := r.msg.(SealQuery)
	c.takeUnreached(now, reply.Unreached)
	h := c.handoff
	h.mu.Lock()
	if h.plan == nil || h.plan.ring != q.Ring {
		h.mu.Unlock()
		return
	}
	delete(h.querying, r.to.Name)
	if !reply.Sealed {
		h.next[r.to.Name] = c.mono(now) + c.sealRetry()
		h.mu.Unlock()
		return
	}
	h.sealed[r.to.Name] = true
	if p := c.peers.get(r.to.Name); p != nil && p.peer.Inc == r.to.Inc {
		c.sealedRuns.Store(r.to, c.mono(now))
	}
	if c.debugOn() {
		c.log.Debug("hand-off source sealed", "node", c.self.Name, "peer", r.to.Name, "ring", q.Ring, "moved", len(reply.Moved))
	}
	v := c.view.Load()
	var away []limiter.Key
	for _, ko := range reply.Moved {
		// Its counter went elsewhere: the seal says nothing of it.
		p := c.peers.get(ko.Owner)
		if p == nil || v.ho == nil || !ownedBy(v, c.self.Name, ko.Key) {
			continue
		}
		if _, moves := stableSource(v, c.self.Name, ko.Key); !moves {
			continue
		}
		if mk := h.entry(v, c.self.Name, ko.Key); !mk.settled {
			mk.source, mk.away, mk.hops, mk.passedBy = p.peer, true, 0, nil
			away = append(away, ko.Key)
		}
	}
	var done []limiter.Key
	for k, mk := range h.keys {
		// A joining node's keys wait for every seal (see planHandoff):
		// the source it guessed sealing says nothing of the others.
		if !mk.settled && mk.source == r.to && !h.plan.joined && !ofTheDead(v, c.self.Name, k) {
			done = append(done, k)
		}
	}
	h.mu.Unlock()
	slices.Sort(done)
	c.settle(now, done)
	if len(away) > 0 {
		slices.Sort(away)
		c.requestKeys(now, v, away)
	}
	c.tickHandoff(now, c.mono(now))
}

// sealRetry is how long a hand-off waits before it asks again a source
// that answered its seal query without sealing: a quarter of a call
// timeout. Such a source is about to seal, as a rule: it has not heard of
// the ring yet (gossip reaches the nodes of a cluster a few milliseconds
// apart), or counts it sent the asker wait for their acknowledgement.
// Meanwhile the asker holds the requests for its keys that reach it, each
// for a call timeout: asked again a call timeout later, a source that
// heard of the ring just after it refused sealed only after a request
// held since then was answered NotYetMine, and its caller decided it by
// fallback in a graceful join
// (TestASealRefusedForARingTheSourceHadNotHeardOfIsAskedAgainWithinAHold).
func (c *Core) sealRetry() int64 { return int64(c.cfg.CallTimeout / 4) }

// sealFailed makes a seal query go again later: a call timeout later, the
// query having gone unanswered.
func (c *Core) sealFailed(now time.Time, r *pendingRequest) {
	h := c.handoff
	h.mu.Lock()
	delete(h.querying, r.to.Name)
	h.next[r.to.Name] = c.mono(now) + int64(c.cfg.CallTimeout)
	h.mu.Unlock()
}

// tickHandoff asks the sources that have not sealed, and ends the
// hand-off once all have (and dead members' leases ran out) or once
// HandoffWindow has passed.
func (c *Core) tickHandoff(now time.Time, m int64) {
	v := c.view.Load()
	plan := v.ho
	if plan == nil {
		return
	}
	h := c.handoff
	var ask []string
	h.mu.Lock()
	if h.plan != plan {
		h.mu.Unlock()
		return
	}
	all := true
	for _, src := range plan.sources {
		if h.sealed[src] {
			continue
		}
		all = false
		if !h.querying[src] && m >= h.next[src] {
			h.querying[src] = true
			ask = append(ask, src)
		}
	}
	// Keys a source sealed without, their counters handed elsewhere, wait
	// for the node they went to.
	var away []limiter.Key
	for k, mk := range h.keys {
		if mk.away && !mk.settled {
			all = false
			away = append(away, k)
		}
	}
	h.mu.Unlock()
	if len(away) > 0 {
		slices.Sort(away)
		c.requestKeys(now, v, away)
	}
	for _, src := range ask {
		if p := c.peers.get(src); p != nil {
			c.out.request(p.peer, SealQuery{Ring: plan.ring, To: p.peer.Inc}, m, nil)
		}
	}
	if all {
		// A dead member's keys start from their replicas only once it has
		// been silent here for its lease and an eighth more: a member that
		// still talks to this node (its death was a mistake) keeps them.
		for name, at := range plan.dead {
			if p := c.peers.get(name); p != nil && p.peer.Inc == plan.deadInc[name] {
				at = max(at, p.heard.Load()+int64(c.cfg.LeaseTime)*9/8)
			}
			if m < at {
				all = false
			}
		}
	}
	forced := m-plan.since >= int64(c.cfg.HandoffWindow)
	if (all || forced) && c.majority(v) {
		c.completeHandoff(now, plan, forced && !all)
	}
}

// completeHandoff ends the hand-off of plan: dead members' keys start from
// their replicas (with what arrived for them), every key waiting is
// settled, and the ring becomes the stable one.
func (c *Core) completeHandoff(now time.Time, plan *handoffPlan, forced bool) {
	c.viewMu.Lock()
	v := c.view.Load()
	if v.ho != plan {
		c.viewMu.Unlock()
		return
	}
	if c.completing != nil {
		c.completing(plan)
	}
	if forced {
		c.stats.HandoffsForced.Add(1)
		c.log.Warn("hand-off window passed before every source sealed; counting what has not arrived from nothing", "node", c.self.Name)
	}
	// Replicas of dead members' keys this node owns now join what arrived
	// for them, as their newest copy.
	taken := c.replicas.takeOwned(now, func(owner Peer, k limiter.Key) bool {
		if inc, dead := plan.deadInc[owner.Name]; !dead || owner.Inc > inc {
			return false
		}
		o, ok := v.ring.Owner(k.Route())
		return ok && o.Name == c.self.Name
	})
	// Counters this run handed to a dead run that had not replicated them
	// yet come back as this run's own, of the generations they were: the
	// dead run's replica lacks them.
	given := c.replicas.takeGiven(now, func(to Peer, k limiter.Key) bool {
		if inc, dead := plan.deadInc[to.Name]; !dead || to.Inc > inc {
			return false
		}
		_, self, ok := c.placeOf(v, k)
		return ok && self
	})
	c.debugCounts("hand-off completing: counters handed to dead members, not replicated by them, come back", statesOfGiven(given))
	reps := make([]limiter.State, len(taken))
	for i, t := range taken {
		reps[i] = t.state
	}
	c.stats.FromReplica.Add(uint64(len(reps)))
	c.debugCounts("hand-off completing: keys start from dead members' replicas", reps)
	for name, inc := range plan.deadInc {
		c.tookOver(Member{Name: name, Inc: inc}) // its pings are told so from now on
	}
	// A key lent meanwhile to a node that owns it by a newer ring: its
	// replica goes there, as a copy. A replica of a key whose counter here
	// holds the dead run's counts already (the run handed the counter
	// over, and a node that kept the run's replica of it, stale since,
	// passed that on) is a copy of counts counted here: only what it holds
	// beyond them is added.
	var lent, kept []takenReplica
	var beyond []limiter.State
	reps = reps[:0]
	superseded := map[limiter.Key]bool{}
	for _, t := range taken {
		if _, self, _ := c.placeOf(v, t.state.Key); !self {
			lent = append(lent, t)
			continue
		}
		if d, more, held, _, _ := c.replicas.beyondPromoted(now, c.mono(now), c.self, t.state.Key, t.owner, genIn(t.holds, t.state.Key, t.owner), t.state, t.holds, false); held {
			if more {
				beyond = append(beyond, d)
			}
			continue
		}
		kept = append(kept, t)
		reps = append(reps, t.state)
		if t.superseded {
			superseded[t.state.Key] = true
		}
	}
	c.debugCounts("hand-off completing: replicas of counts held here add what they hold beyond them", beyond)
	c.replicas.notePromoted(c.mono(now), kept)
	c.replicas.noteHeld(now, c.mono(now), holdsOfTaken(kept))
	// The counts sent again in place of transfers to runs taken for dead
	// that the replicas' counters held are held here now: a counter of
	// such a run that comes saying it applied one adds them no more, and
	// they go with the key's counter wherever it goes
	// (TestCountsSentAgainInAReplicaAreNotAddedAgainByTheDeadRunsCounter).
	for _, t := range kept {
		c.keepResent(now, t.resent)
	}
	// Gaps other nodes passed on while the hand-off was under way were
	// weighed without these replicas (see takeUnreached): they reach
	// their keys now, as counters of their runs. Else a key whose heir
	// counted it, replicated it here and died was decided by fallback
	// for the gap's window, its counter in hand
	// (TestAKeyAnHeirCountedAndReplicatedIsInReachAfterTheHeirDies).
	for _, t := range kept {
		if !t.superseded {
			c.unreached.reached([]limiter.State{t.state}, t.owner, t.holds)
		}
	}

	var done settled
	h := c.handoff
	h.mu.Lock()
	for _, s := range reps {
		mk := h.entry(v, c.self.Name, s.Key)
		if superseded[s.Key] && (mk.hasBase || mk.counter || mk.hasCopy) {
			delete(superseded, s.Key) // a counter of it here besides
		}
		if mk.hasBase {
			mk.base = limiter.NewerState(mk.base, s)
		} else {
			mk.base, mk.hasBase = s, true
		}
	}
	for _, s := range beyond {
		mk := h.entry(v, c.self.Name, s.Key)
		if mk.hasAdds {
			mk.adds = limiter.AddState(now, mk.adds, s)
		} else {
			mk.adds, mk.hasAdds = s, true
		}
	}
	var givenSettled []givenCounter
	for _, g := range given {
		mk := h.entry(v, c.self.Name, g.state.Key)
		if mk.settled {
			givenSettled = append(givenSettled, g) // counted at once, below
			continue
		}
		mk.received, mk.counter = true, true
		mk.counters = append(mk.counters, arrival{state: g.state, holds: g.holds, own: true, resent: g.resent})
	}
	if gaps := c.gapsOf(plan, v.stable); !forced && len(gaps) > 0 {
		// Keys whose dead owner's successor died too (with it, or before
		// it counted them: an heir, see heirsOf) have no counter here
		// unless one came: fallback decides them until one does (see
		// outOfReach). Noted before they settle: none is counted from
		// what arrived meanwhile. A replica whose owner has replicated
		// the key elsewhere since is no counter of it: the one the
		// successor kept may come back with counts it lacks.
		found := map[limiter.Key]reachedRuns{}
		for k, mk := range h.keys {
			if a, ok := mk.reached(); ok && !superseded[k] {
				found[k] = a
			}
		}
		for _, g := range gaps {
			c.unreached.add(g, found)
		}
		c.log.Info("hand-off of members that died together: keys both held are decided by fallback until a counter of theirs comes", "node", c.self.Name, "dead", len(plan.deadInc), "gaps", len(gaps))
	}
	if !forced && len(plan.deadInc) > 0 {
		// The members that took the dead runs' keys over beside this node
		// count them only once this node sealed to them (see heirsOf).
		heirs := map[string]uint64{}
		for _, x := range v.stable.members {
			if _, dead := plan.deadInc[x.Name]; dead || x.Name == c.self.Name {
				continue
			}
			if i, ok := v.ring.index(x.Name); ok && v.ring.member(i).Inc == x.Inc && !c.sealsGiven.gave(x.Name, v.ring.Fingerprint()) {
				heirs[x.Name] = x.Inc
			}
		}
		c.unreached.addHeirs(v.stable, plan, heirs, plan.since+int64(c.cfg.HandoffWindow), c.mono(now))
	}
	// In key order, as settle takes its keys: what the keys gathered is
	// counted, and units given back that wait for a counter on its way
	// are held (and given back later, one at a time), in this order.
	for _, k := range slices.Sorted(maps.Keys(h.keys)) {
		if mk := h.keys[k]; !mk.settled {
			c.settleLocked(k, mk, now, &done)
		}
	}
	c.countSettled(now, done) // before the lock goes, as in settle
	h.mu.Unlock()
	c.sendReplicasOn(now, lent)
	next := *v
	next.ho, next.stable = nil, v.ring
	next.shareOf = max(1, v.ring.Len()-1)
	h.reset(nil, true)
	c.foldFallback(now, &next, nil)
	c.view.Store(&next)
	for _, g := range givenSettled {
		c.placeHere(now, &next, Transfer{Mode: ModeAdd, Own: true, Holds: g.holds, Resent: g.resent}, []limiter.State{g.state})
	}
	c.updateAnswering()
	c.viewMu.Unlock()
	c.log.Info("hand-off complete", "node", c.self.Name, "ring", v.ring.Fingerprint(), "from_replicas", len(reps))
	c.notifySettled()
}

// handOver sends the counters this node holds but does not own by v to
// their owners: the engine's (see sendAway), and replicas of dead members'
// keys that other nodes own now. Units given back while this node could
// not know where its keys are counted (see holdRefund) come off first,
// if it knows now (a leaver, out of its ring, does): they go with the
// counters. Given back after the counters left, they would wait for
// the counters' acknowledgements (see refundAfterCounter), and a leaver
// whose run ends before those come (its leave timed out) would take them
// along while its counters stand where they went: counted twice there.
func (c *Core) handOver(now time.Time, v *view) {
	c.tickRefunds(now)
	away := func(k limiter.Key) bool {
		_, mine, ok := c.placeOf(v, k)
		return ok && !mine
	}
	c.sendAway(now, c.engine.Extract(now, away, 0))
	c.handOverReplicas(now, v)
}

// handOverReplicas drops the replicas of owners that left gracefully (see
// runLeft: gone, not only leaving): they are stale, their counters were
// handed over. Those of owners that died
// (or were replaced by a later run), of keys another node owns now, go
// there as copies, once this node has a majority (until then the dead may
// be alive on the other side of a split: it keeps their replicas, and sends
// them on when the majority answers again), and only once the dead run's
// lease from this node ran out (see leaseRunsLocked): a run only cut off
// counts its keys until then, and a counter started from its replica
// meanwhile, or from a counter given to it, would count them beside it.
// A hand-off that takes the run over waits for that lease itself. So do
// those of keys this node
// owns whose run no hand-off under way takes over (this node was declared
// dead before its hand-off of the run completed, and joined again: a
// joiner's hand-off takes no run over): they are the keys' counters, and
// are placed here like a counter come from elsewhere, weighed against
// what is held here of their run. Kept back, the keys settled here
// without them. A leaving node owns no key:
// with a majority, the replicas of dead runs it still keeps (of keys it
// owned, its hand-off not complete, so none of them is its counter yet)
// go to their keys' owners as those runs' counters too; passed on as
// replicas, a node that took the run for dead before they came would keep
// them as such and count the keys without them. viewMu is held.
func (c *Core) handOverReplicas(now time.Time, v *view) {
	self := c.self.Name
	c.replicas.take(now, func(owner Peer, _ limiter.Key) bool { return c.runLeft(owner) })
	c.replicas.takeGiven(now, func(to Peer, _ limiter.Key) bool { return c.runLeft(to) }) // it handed them on
	if c.gate.isLeaving() {
		if c.majority(v) {
			c.sendReplicasOn(now, c.replicas.takeOwned(now, func(owner Peer, _ limiter.Key) bool { return c.runDied(owner) }))
			c.placeGiven(now, c.replicas.takeGiven(now, func(to Peer, _ limiter.Key) bool { return c.runDied(to) }))
		}
		c.passReplicasOn(now, v)
		return
	}
	if !c.majority(v) {
		return
	}
	m := c.mono(now)
	pick := func(owner Peer, k limiter.Key) bool {
		o, ok := v.ring.Owner(k.Route())
		if !ok || !c.runDied(owner) {
			return false
		}
		if o.Name == self && c.takesOver(v, owner) {
			return false
		}
		return !c.leaseRunsLocked(owner, m)
	}
	c.sendReplicasOn(now, c.replicas.takeOwned(now, pick))
	c.placeGiven(now, c.replicas.takeGiven(now, pick))
}

// placeGiven places counters this run handed to runs that died before
// they replicated them (see Core.keepGiven) where their keys are counted,
// as this run's own counters come back, naming the generations they were:
// the dead runs' replicas lack them, and what a dead run that was only
// cut off sends on of them is weighed against them there.
func (c *Core) placeGiven(now time.Time, given []givenCounter) {
	if len(given) == 0 {
		return
	}
	c.debugCounts("counters handed to dead runs, not replicated by them, come back", statesOfGiven(given))
	for _, g := range given {
		c.placeAs(now, Transfer{Mode: ModeAdd, Own: true, Holds: g.holds, Resent: g.resent}, purposeHandoff, []limiter.State{g.state})
	}
}

// takesOver reports whether the hand-off under way by v takes the dead run
// owner over: its keys this node owns start from their replicas when it
// completes (see completeHandoff). viewMu is held.
func (c *Core) takesOver(v *view, owner Peer) bool {
	if v.ho == nil {
		return false
	}
	inc, dead := v.ho.deadInc[owner.Name]
	return dead && owner.Inc <= inc
}

// passReplicasOn sends the replicas a leaving node keeps to the nodes that
// succeed their owners without it, as replicas still: an owner that died
// unnoticed (or is taken for dead only on this node's side of a split) is
// taken over from them there, under that node's majority, and a live
// owner's next replica replaces them. Counted here instead, or dropped,
// they would be counted twice or lost. viewMu is held.
func (c *Core) passReplicasOn(now time.Time, v *view) {
	type dest struct {
		to    string
		owner Peer
	}
	byDest := map[dest][]limiter.State{}
	members := map[string]Member{}
	taken := c.replicas.takeOwned(now, func(Peer, limiter.Key) bool { return true })
	held, resent := holdsOfTaken(taken), resentOfTaken(taken)
	for _, t := range taken {
		to, ok := v.ring.OwnerWithout(t.state.Key.Route(), t.owner.Name)
		if !ok || to.Name == c.self.Name {
			continue
		}
		d := dest{to: to.Name, owner: t.owner}
		byDest[d] = append(byDest[d], t.state)
		members[to.Name] = to
	}
	dests := make([]dest, 0, len(byDest))
	for d := range byDest {
		dests = append(dests, d)
	}
	slices.SortFunc(dests, func(a, b dest) int {
		return cmp.Or(cmp.Compare(a.to, b.to), cmp.Compare(a.owner.Name, b.owner.Name), cmp.Compare(a.owner.Inc, b.owner.Inc))
	})
	for _, d := range dests {
		for _, part := range SplitStates(byDest[d], TransferBytes) {
			c.sendTransfer(now, members[d.to].Peer(), Transfer{Mode: ModeReplica, ReplicaOf: d.owner, States: part, Holds: holdsOf(held, part), Resent: resentOf(resent, part)}, purposeReplica)
		}
	}
}

// sendReplicasOn sends replicas of dead runs to their keys' owners (see
// sendDeadReplicas).
func (c *Core) sendReplicasOn(now time.Time, taken []takenReplica) {
	if c.promoting != nil {
		for _, run := range takenByRun(taken) {
			c.promoting(run[0].owner, statesOfTaken(run))
		}
	}
	c.sendDeadReplicas(now, taken, func(like Transfer, p purpose, states []limiter.State) { c.placeAs(now, like, p, states) })
}

// sendDisplaced sends on the replicas of other runs that a replica from
// the run from replaced, to from (see sendDeadReplicas): this node kept
// them as those runs' successor and had not sent them on yet, and from,
// which counts the keys now, may well have started them without them, and
// counted others since. A dead run's (this node was cut off from the
// majority, or has not heard of from, a later run of the dead owner) is
// nowhere else. So may be a run's that this node takes for alive: from
// counts its keys because it has heard of the run's death first, or the
// run is cut off from it; the run may never hand its counters over.
// Dropped, their counts were nowhere. Sent, they name their run and are
// weighed where their keys are counted: where the run handed its counter
// over, they add only what it did not hold. Replicas of runs that left
// gracefully are stale: their counters were handed over.
func (c *Core) sendDisplaced(now time.Time, from Peer, displaced []takenReplica) {
	var dead []takenReplica
	for _, d := range displaced {
		if !c.runLeft(d.owner) || d.owner.Name == from.Name && d.owner.Inc < from.Inc {
			dead = append(dead, d)
		}
	}
	if c.debugOn() && len(dead) > 0 {
		c.debugCounts("replicas of other runs displaced by a run's: sent on to it", statesOfTaken(dead), "to", from.Name)
	}
	c.sendDeadReplicas(now, dead, func(like Transfer, p purpose, states []limiter.State) {
		for _, part := range SplitStates(states, TransferBytes) {
			t := like
			t.States, t.Holds, t.Resent = part, holdsOf(like.Holds, part), resentOf(like.Resent, part)
			c.sendTransfer(now, from, t, p)
		}
	})
}

// sendDeadReplicas sends replicas of dead runs on, by send, run by run.
// One that came recently (within keptNamedWithin) goes as that run's
// counter (ModeAdd naming it), weighed where its key is counted like any
// counter that names its run: what the counter there holds of the run is
// not added again (a record of it, see promotion, lives longer than that),
// the rest is, to whatever else was counted meanwhile. As a copy that the
// newer of it and the count there replaces (ModeNewer), it lost either
// what the dead run counted or what the key's owner counted without it
// (a key that settled at its new owner from others' fallback counts, its
// counter out of reach, and moved on since). Older ones, and those a
// leaving node passed on (whose age is not known), go as such copies:
// what records of their counts the counters may hold may be forgotten.
func (c *Core) sendDeadReplicas(now time.Time, taken []takenReplica, send func(like Transfer, p purpose, states []limiter.State)) {
	if len(taken) == 0 {
		return
	}
	m := c.mono(now)
	type group struct {
		run   Peer
		named bool
	}
	byGroup := map[group][]takenReplica{}
	var groups []group
	for _, t := range taken {
		g := group{run: t.owner, named: !t.passed && m-t.at <= int64(keptNamedWithin)}
		if _, ok := byGroup[g]; !ok {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], t)
	}
	for _, g := range groups {
		part := byGroup[g]
		states, held := statesOfTaken(part), holdsOfTaken(part)
		if g.named {
			// With the records of the counts sent again that the run's
			// counters hold: without them, where the counter of a run
			// that applied the transfer those replace met them, it added
			// them again
			// (TestCountsSentAgainInADeadRunsReplicaSentOnAreNotAddedAgainByTheDeadRunsCounter).
			send(Transfer{Mode: ModeAdd, CountersOf: g.run, Holds: holdsOf(held, states), Resent: resentOf(resentOfTaken(part), states)}, purposeForward, states)
		} else {
			send(Transfer{Mode: ModeNewer, ReplicaOf: g.run, Holds: holdsOf(held, states)}, purposeHandoff, states)
		}
	}
}

// takenByRun groups taken by the run that owned them, in order of run.
func takenByRun(taken []takenReplica) [][]takenReplica {
	byRun := map[Peer][]takenReplica{}
	var runs []Peer
	for _, t := range taken {
		if _, ok := byRun[t.owner]; !ok {
			runs = append(runs, t.owner)
		}
		byRun[t.owner] = append(byRun[t.owner], t)
	}
	slices.SortFunc(runs, func(a, b Peer) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Inc, b.Inc)) })
	out := make([][]takenReplica, len(runs))
	for i, r := range runs {
		out[i] = byRun[r]
	}
	return out
}

// statesOfTaken returns the counters of taken.
func statesOfTaken(taken []takenReplica) []limiter.State {
	out := make([]limiter.State, len(taken))
	for i, t := range taken {
		out[i] = t.state
	}
	return out
}

// leaseRunsLocked reports whether the gone run to may still hold a lease
// from this node at m: this node heard from it less than LeaseTime ago,
// and an eighth more for the clocks' drift (see deadReceivers, and a
// hand-off's wait for a dead member). A run this node keeps no state of
// holds none it can know of: a later run of its node is known, or the
// driver forgot it, or it left. While it does, it may count the keys it
// owns by its ring, lent ones too: what this node holds for them (their
// loans, its replicas, the counters given to it) waits, and a tick looks
// again once the lease ran out (see tickGone). viewMu is held.
func (c *Core) leaseRunsLocked(to Peer, m int64) bool {
	h, ok := c.peers.heardOf(to)
	if !ok {
		return false
	}
	until := h + int64(c.cfg.LeaseTime)*9/8
	if m >= until {
		return false
	}
	for {
		w := c.goneWait.Load()
		if w != 0 && w <= until || c.goneWait.CompareAndSwap(w, until) {
			return true
		}
	}
}

// endGoneLoansLocked ends the loans to runs that are gone and whose lease
// from this node ran out by m. viewMu is held.
func (c *Core) endGoneLoansLocked(m int64) {
	c.lent.endGone(func(to Peer) bool { return c.goneLocked(to) && !c.leaseRunsLocked(to, m) })
}

// tickGone, once the earliest lease of a gone run that something here
// waits for has run out, does what a membership update would have done
// had the lease run out by then (see rerouteLocked): it ends the run's
// loans, then gives up on the transfers to it, so that their counts come
// here, not to it again, places anew the refused transfers of the keys
// lent, and places the run's replicas and the counters given to it (see
// handOverReplicas).
func (c *Core) tickGone(now time.Time, m int64) {
	if w := c.goneWait.Load(); w == 0 || m < w {
		return
	}
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	c.goneWait.Store(0)
	v := c.view.Load()
	if v == nil || v.standalone {
		return
	}
	c.endGoneLoansLocked(m)
	c.deadReceivers(now, c.peers.heardOf)
	c.replaceRefusedLocked(now)
	if c.majority(v) && !c.gate.isLeaving() {
		c.handOverReplicas(now, v)
	}
}

// runDied reports whether the owner run died by what is known: declared
// dead, replaced by a later run (one that was leaving only if it had not
// sealed here: its leave not known complete), or joining again under the
// same run (it was declared dead and stopped counting: what it held comes
// as copies).
// viewMu is held.
func (c *Core) runDied(owner Peer) bool {
	known := c.known.Load()
	for _, d := range known.dead {
		if d.Name == owner.Name && d.Inc >= owner.Inc {
			return true
		}
	}
	for _, j := range known.joining {
		if r, _ := known.run(owner); j.Name == owner.Name && j.Inc == owner.Inc && r.member {
			return true // it was a member, and joins again: it was declared dead
		}
	}
	later := false
	for _, lists := range [][]Member{known.members, known.leaving, known.joining} {
		for _, m := range lists {
			if m.Name == owner.Name && m.Inc > owner.Inc {
				later = true
			}
		}
	}
	if r, ok := known.run(owner); ok && r.leaving {
		// It announced its leaving: gone, it left gracefully, handing over
		// what it held, if its leave is known complete here (it sealed to
		// this node's hand-off). Replaced by a later run of its node before
		// that, it may have crashed while it left and restarted at once,
		// never declared dead: what it did not hand over lives on only in
		// its replicas, which go on as a dead run's, weighed against what
		// it did hand over
		// (TestAnOwnerThatCrashesWhileLeavingAndRestartsLeavesItsReplica).
		return later && !c.leaveSealed(owner)
	}
	for _, lists := range [][]Member{known.members, known.leaving, known.joining} {
		for _, m := range lists {
			if m.Name == owner.Name && m.Inc > owner.Inc {
				return true
			}
		}
	}
	return false
}

// leaveSealed reports whether the run owner, leaving, sealed to this
// node's hand-off: it handed over all it held of this node's keys.
func (c *Core) leaveSealed(owner Peer) bool {
	_, ok := c.sealedRuns.Load(owner)
	return ok
}

// forgetSealedRuns drops the runs that last sealed to this node before
// mono before: their leaves, if they left, are long complete, their
// replicas long handed on.
func (c *Core) forgetSealedRuns(before int64) {
	c.sealedRuns.Range(func(run, at any) bool {
		if at.(int64) < before {
			c.sealedRuns.Delete(run)
		}
		return true
	})
}

// runLeft reports whether the owner run left gracefully: gone without
// being declared dead or replaced. A run the hand-off under way takes for
// dead did not, whatever it is said to have done since: that hand-off
// waits for none of its keys' counters, they start from its replicas when
// it completes. Nor did a run listed as a member or as joining: a joiner
// that borrowed a key counts it, its replica here is the key's only copy
// beside its counter
// (TestAReplicaOfAJoiningBorrowerOutlivesAMembershipUpdateOfTheSameRing).
// Nor did a run listed as leaving, yet: until its counters arrive (each
// replaces its replica where it comes, see handleTransfer) its replicas
// here are its counters' only copies, and if it crashes before it handed
// them over (it is declared dead then) they go on as a dead run's,
// weighed where their keys are counted against what it did hand over, its
// last word on them (TestAnOwnerThatCrashesWhileLeavingLeavesItsReplica,
// TestABorrowerThatCrashesWhileLeavingLeavesItsReplicaAtTheLender).
// Once it is gone, not declared dead nor replaced before it sealed here
// (see runDied), it handed everything over, and what is kept here of it
// is stale. viewMu is held.
func (c *Core) runLeft(owner Peer) bool {
	if c.runDied(owner) {
		return false
	}
	if v := c.view.Load(); v != nil && v.ho != nil {
		if inc, dead := v.ho.deadInc[owner.Name]; dead && inc == owner.Inc {
			return false
		}
	}
	known := c.known.Load()
	for _, list := range [][]Member{known.members, known.leaving, known.joining} {
		for _, m := range list {
			if m.Name == owner.Name && m.Inc == owner.Inc {
				return false
			}
		}
	}
	return true
}

// pushStray sends on counters counted under an older view by requests
// that were deciding while the view changed.
func (c *Core) pushStray(now time.Time) {
	v := c.view.Load()
	c.sendAway(now, c.engine.Extract(now, func(k limiter.Key) bool {
		_, mine, ok := c.placeOf(v, k)
		return ok && !mine
	}, 0))
}

// sendAway sends counters taken out of the engine to their owners, to be
// added. A node declared dead sends them too, before it joins again: an
// owner that started a key from this run's replica keeps the newer of the
// two (what this node counted after its last replica is lost, as in a
// crash), and one that did not, because its takeover had not completed
// when this node came back, adds them (ModeEvicted). Its grants and leases
// go as copies.
func (c *Core) sendAway(now time.Time, states []limiter.State) {
	named := c.replicas.gaveAway(c.mono(now), c.self, states)
	holds := sortHolds(append(c.replicas.takeHeld(keysOf(states)), named...))
	if c.gate.evicted() {
		c.sendEvicted(now, states, holds)
		return
	}
	sortStates(states)
	c.placeAs(now, Transfer{Mode: ModeAdd, Own: true, Holds: holds}, purposeHandoff, states)
}

// sendEvicted sends the states a node declared dead held: grants and
// leases to their owners as copies, counters to the node that kept their
// replicas (see replicaHolder), which alone knows whether it started them
// from those replicas. Counters without one go to their owners now. The
// other runs' counts they hold (holds) go with them. viewMu is held.
func (c *Core) sendEvicted(now time.Time, states []limiter.State, holds []Held) {
	var counters, copies []limiter.State
	for _, s := range states {
		if s.Kind >= limiter.KindGrant {
			copies = append(copies, s)
		} else {
			counters = append(counters, s)
		}
	}
	if len(counters) > 0 {
		c.log.Warn("declared dead: counting nothing; the counters this node held go to the nodes that kept their replicas", "node", c.self.Name, "counters", len(counters))
	}
	c.place(now, ModeNewer, purposeHeld, sortStates(copies))
	like := Transfer{Mode: ModeEvicted, Evicted: c.self, Holds: holds}
	bySucc := map[string][]limiter.State{}
	succs := map[string]Member{}
	var rest []limiter.State
	for _, s := range sortStates(counters) {
		succ, ok := c.replicaHolder(s.Key)
		if !ok {
			rest = append(rest, s)
			continue
		}
		bySucc[succ.Name] = append(bySucc[succ.Name], s)
		succs[succ.Name] = succ
	}
	counted := c.countedApplied()
	for _, name := range sortedKeys(bySucc) {
		for _, part := range SplitStates(bySucc[name], TransferBytes) {
			t := like
			t.States, t.Holds = part, holdsOf(holds, part)
			t.Applied = appliedTo(counted, part)
			t.Resent = c.replicas.takeResentHeld(keysOf(part))
			c.sendTransfer(now, succs[name].Peer(), t, purposeHeld)
		}
	}
	like.Resent = c.replicas.takeResentHeld(keysOf(rest))
	c.placeAs(now, like, purposeHeld, rest)
}

// appliedTo returns, of the transfers counted (applied here, their
// senders perhaps not told), those whose counts joined the counters of
// states.
func appliedTo(counted []KeptApplied, states []limiter.State) []Applied {
	var out []Applied
	for _, a := range counted {
		if slices.ContainsFunc(a.Keys, func(k limiter.Key) bool { return heldIn(states, k) }) {
			out = append(out, Applied{From: a.From, Seq: a.Seq})
		}
	}
	return out
}

// tookOver records that this node takes over the keys of x, declared dead
// as of its join epoch then: x learns of it from this node's answers to its
// pings, until it joins again.
func (c *Core) tookOver(x Member) {
	if p := c.peers.get(x.Name); p != nil && p.peer.Inc == x.Inc {
		c.gate.tookOver(x.Peer(), p.epoch.Load())
		return
	}
	c.gate.tookOver(x.Peer(), 0)
}

// lentKeys are keys a node that owns them by a newer ring pulled from this
// node, which its own ring still gives to this node: requests for them go
// there. It is safe for concurrent use, and cheap to ask when empty.
type lentKeys struct {
	mu   sync.RWMutex
	keys map[limiter.Key]Peer
	n    atomic.Int64
	max  int
}

func newLentKeys(max int) *lentKeys { return &lentKeys{keys: map[limiter.Key]Peer{}, max: max} }

// get returns the node k was lent to.
func (l *lentKeys) get(k limiter.Key) (Peer, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if len(l.keys) == 0 {
		return Peer{}, false
	}
	to, ok := l.keys[k]
	return to, ok
}

// set records that k went to to. A full table records nothing more: the
// key is then counted here too until the rings agree (a split).
func (l *lentKeys) set(k limiter.Key, to Peer) {
	l.mu.Lock()
	if _, ok := l.keys[k]; ok || len(l.keys) < l.max {
		l.keys[k] = to
	}
	l.n.Store(int64(len(l.keys)))
	l.mu.Unlock()
}

// endFrom ends the loans to from of the keys of states: their counters
// came back from it.
func (l *lentKeys) endFrom(from Peer, states []limiter.State) {
	if l.n.Load() == 0 {
		return
	}
	l.mu.Lock()
	for _, s := range states {
		if to, ok := l.keys[s.Key]; ok && to == from {
			delete(l.keys, s.Key)
		}
	}
	l.n.Store(int64(len(l.keys)))
	l.mu.Unlock()
}

// count returns how many keys are lent, without a lock.
func (l *lentKeys) count() int64 { return l.n.Load() }

// keepOwned drops the keys ring no longer gives to self, or whose holder
// is gone. A holder this node has not seen join yet keeps them: it pulled
// them because its ring, newer than this one, gives them to it.
func (l *lentKeys) keepOwned(ring *Ring, self string, gone func(Peer) bool) {
	l.keep(func(k limiter.Key, to Peer) bool {
		o, ok := ring.Owner(k.Route())
		return ok && o.Name == self && !gone(to)
	})
}

// endGone ends the loans to runs that are gone: whatever their ring, they
// count nothing any more. What they held comes back by the ways a gone
// run's counts do: handed over as it left, given up on here once it could
// no longer apply it, or lost with it (a crash).
func (l *lentKeys) endGone(gone func(Peer) bool) {
	if l.n.Load() == 0 {
		return
	}
	l.keep(func(_ limiter.Key, to Peer) bool { return !gone(to) })
}

// keep drops the keys keep reports false for.
func (l *lentKeys) keep(keep func(limiter.Key, Peer) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, to := range l.keys {
		if !keep(k, to) {
			delete(l.keys, k)
		}
	}
	l.n.Store(int64(len(l.keys)))
}

// handedKeys are keys whose counters this node handed to another node (a
// hand-off, a pull's answer, a counter passed on), acknowledged: the node
// they went to, as of the last one. A node that owns a key by a ring this
// node's hand-off did not follow (the key went to another node by a ring
// of one side of a split) asks this node for it, and is told where it went
// (see handlePull, handleSeal) rather than that nothing is here. It is safe
// for concurrent use, and cheap to ask when empty.
type handedKeys struct {
	mu   sync.RWMutex
	keys map[limiter.Key]Peer
	n    atomic.Int64
	max  int
}

func newHandedKeys(max int) *handedKeys {
	return &handedKeys{keys: map[limiter.Key]Peer{}, max: max}
}

// get returns the node k's counter was handed to.
func (h *handedKeys) get(k limiter.Key) (Peer, bool) {
	if h.n.Load() == 0 {
		return Peer{}, false
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	to, ok := h.keys[k]
	return to, ok
}

// set records that the counters of states went to to. A full table
// records no new key.
func (h *handedKeys) set(states []limiter.State, to Peer) {
	h.mu.Lock()
	for _, s := range states {
		if _, ok := h.keys[s.Key]; ok || len(h.keys) < h.max {
			h.keys[s.Key] = to
		}
	}
	h.n.Store(int64(len(h.keys)))
	h.mu.Unlock()
}

// awayFrom returns the keys ring gives to asker that went to another node.
func (h *handedKeys) awayFrom(ring *Ring, asker string) []KeyOwner {
	if h.n.Load() == 0 {
		return nil
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	var out []KeyOwner
	for k, to := range h.keys {
		if o, ok := ring.Owner(k.Route()); ok && o.Name == asker && to.Name != asker {
			out = append(out, KeyOwner{Key: k, Owner: to.Name})
		}
	}
	slices.SortFunc(out, func(a, b KeyOwner) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// keepOwned drops the keys ring gives to self (their counters come back
// here with its hand-off), and those whose holder is gone (what it held
// went on with its own hand-off, or lives in its replicas).
func (h *handedKeys) keepOwned(ring *Ring, self string, gone func(Peer) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, to := range h.keys {
		if o, ok := ring.Owner(k.Route()); !ok || o.Name == self || gone(to) {
			delete(h.keys, k)
		}
	}
	h.n.Store(int64(len(h.keys)))
}
