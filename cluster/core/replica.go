package core

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Replicas. An owner notes every key it changes and, every ReplicateEvery,
// sends the current counters of the keys changed since the last time to
// each key's successor (the node that owns it once the owner is gone), in
// one transfer per successor (ModeReplica) and one at a time: a successor
// that is slow to acknowledge gets the newer counters in the next one. The
// successor keeps them apart from its own, the newer replacing the older.
// When the owner dies, the successor starts the keys from their replicas
// (see the hand-off). So a crash loses at most the changes not yet
// replicated: one interval's, and a batch in flight. A single node, or a
// one-member ring, replicates nothing and pays nothing.

// replica is a counter kept for the owner run that sent it, the other
// runs' counts the counter holds (see Transfer.Holds), and when it came.
type replica struct {
	state limiter.State
	owner Peer
	holds []Held
	// resent: what the counter holds of counts sent again in place of
	// transfers to runs taken for dead (Transfer.Resent).
	resent []Resent
	at     int64 // mono
	passed bool  // a leaving node passed it on: when its owner sent it is not known
	// superseded: its owner, the key's owner still, replicates the key
	// to another node since (a ring changed and this node is no longer
	// the key's successor), or will once its ring is this node's (it sent
	// the replica by an older one): the owner's counter goes on without
	// it.
	superseded bool
}

// replicaStore holds the counters this node keeps as a successor, and the
// transfers their owners applied (a transfer a dead owner applied and
// replicated is not applied again when its sender sends it here instead).
// It is safe for concurrent use.
type replicaStore struct {
	mu        sync.Mutex
	states    map[limiter.Key]replica
	max       int
	appliedBy map[Peer]map[Applied]int64      // owner run → transfers it applied → mono when heard
	promoted  map[limiter.Key][]promotion     // per key, the runs' counts this node's counter of it holds (one entry a run)
	restored  map[limiter.Key]restoredCounter // keys this run restored counters of, kept by an earlier run
	// counterless: keys that settled here without any counter of theirs
	// (a dead owner's, whose replica may come later).
	counterless keyMarks
	// gens: keys whose counter this run sent away (handed over, pulled,
	// sent as a node declared dead), with the generation of the counter
	// it counts them in since (see Held.Gen). The counts of this run that
	// a counter holds of its current generation (a replica of this run's
	// counter another node started the key from) are in its own counter
	// already; those of an earlier one are not (see weighHere).
	gens map[limiter.Key]keyGen
	// resent: counts added here, or units given back here, that were sent
	// in place of a transfer to a dead run (Transfer.Was), by that run and
	// transfer: a copy of the run's counters that comes later saying the
	// run applied it holds them already (see lessResent, takeResent).
	resent map[Peer]map[Applied]resentCounts
	// resentHeld: per key, the counts sent in place of transfers to runs
	// taken for dead that this node's counter of the key holds (they
	// joined it), and the units given back in place of such transfers
	// that it lacks (they came off it), by the transfers they replace:
	// they go with the counter (Transfer.Resent). A record of resent
	// taken out (the run's counter came, less the counts, or lacking the
	// units too) drops its entry here too.
	resentHeld map[limiter.Key][]resentHeld
	// given: this run's own counters handed to a run that applied them
	// and has not replicated them here since, where this node succeeds
	// that run in their keys (see Core.keepGiven), by key.
	given map[limiter.Key]givenCounter
	// unions: per key, what this run's counter of it held as counters
	// that named their runs joined it (see unionRecord).
	unions map[limiter.Key][]unionRecord
}

// unionRecord is what this run's counter of a key (of generation gen)
// held once counters that named their runs joined it: all of it (value)
// was the counter as it was before (prefix; nil: it held none) and the
// counters that joined (parts), nothing else. Their counts overlap where
// one holds part of another, so value is less than their sum, and may be
// more than any one of them holds: a counter that arrives holding every
// one of them holds value of the counter here (see weighing.unions).
type unionRecord struct {
	at     int64 // mono
	gen    uint32
	prefix *limiter.State
	parts  []Held
	value  limiter.State
}

// unionsKept is how many union records a key keeps: the newest.
const unionsKept = 8

// noteUnion records that this run's counter of k, prefix before (nil:
// there was none), is value now that the counters parts joined it, and held
// nothing else (see unionRecord). Records of an earlier generation of
// the counter go. A store that keeps records of as many keys as its size
// takes none of a new key (as keepGiven): without one, a counter that
// holds all the join made is weighed as before, its counts beyond any one
// part's counted again, never fewer.
func (r *replicaStore) noteUnion(m int64, k limiter.Key, prefix *limiter.State, parts []Held, value limiter.State) {
	if len(parts) == 0 || value.Kind >= limiter.KindGrant {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	gen := r.gens[k].gen
	if r.unions == nil {
		r.unions = map[limiter.Key][]unionRecord{}
	}
	if _, ok := r.unions[k]; !ok && len(r.unions) >= r.max {
		return
	}
	list := slices.DeleteFunc(r.unions[k], func(u unionRecord) bool { return u.gen != gen })
	list = append(list, unionRecord{at: m, gen: gen, prefix: prefix, parts: slices.Clone(parts), value: value})
	if len(list) > unionsKept {
		list = slices.Delete(list, 0, len(list)-unionsKept)
	}
	r.unions[k] = list
}

// givenCounter is this run's own counter of a key, handed to run to
// (which applied it), with the other runs' counts it holds, the records
// of the counts sent again in place of transfers it holds (see
// Transfer.Resent), and when it was kept (mono).
type givenCounter struct {
	to     Peer
	state  limiter.State
	holds  []Held
	resent []Resent
	at     int64
}

// statesOfGiven returns the counters of given.
func statesOfGiven(given []givenCounter) []limiter.State {
	out := make([]limiter.State, len(given))
	for i, g := range given {
		out[i] = g.state
	}
	return out
}

// resentHeld is a record a counter carries (see Resent), and when its
// counts joined the counter, or its units came off it (mono).
type resentHeld struct {
	rec Resent
	at  int64
}

// keyGen is the generation of this run's counter of a key, and when the
// run last gave one away (mono).
type keyGen struct {
	gen uint32
	at  int64
}

// resentCounts are the counts of a transfer sent in place of one to a
// dead run, added here (states) or given back here (given), and when.
// A give-back is a count of the same kind with the other sign: where the
// run applied the transfer too, its counter holds it as well.
type resentCounts struct {
	states []limiter.State
	given  []givenBack
	at     int64 // mono
}

// givenBack is a request whose units were given back, counted at the
// instant at (Unix ns); marks, if any, are the give-backs it was given
// back again in place of (see refundMarked): it names them wherever it
// waits and goes.
type givenBack struct {
	req   limiter.Request
	at    int64
	marks []Replaced
}

// promotion records counts of a run that this node's counter of a key
// holds (counted here, or waiting to be): a replica of the run's counter
// the key was started from, the run's counter that came, or such counts
// that a counter or a copy that came held. The records go where the
// counter goes (see takeHeld): a copy of the same run's counter that
// meets the counter there adds only what it holds beyond them.
type promotion struct {
	owner Peer
	gen   uint32        // which of the run's counters of the key (see Held.Gen)
	state limiter.State // the run's counter as far as held, the newest weighed
	at    int64         // mono
	// last: state is the counter as its run let it go (handed over, or
	// sent as it stopped counting), its last word: a copy of it holds
	// nothing beyond (what a copy holds more was given back since). It
	// goes with the record (Held.Last).
	last bool
	// in: what this node's counter holds of state, where less (units
	// given back to it took it below state; see Held.In). Of no kind
	// (the zero State): all of it.
	in limiter.State
}

// appliedKeep is how long a successor remembers what its owners applied:
// well past the time their death takes to be noticed.
const appliedKeep = 5 * time.Minute

func newReplicaStore(max int) *replicaStore {
	return &replicaStore{states: make(map[limiter.Key]replica), max: max, appliedBy: map[Peer]map[Applied]int64{}}
}

// notePromoted records the replicas of dead owner runs this node's
// counters start from.
func (r *replicaStore) notePromoted(m int64, taken []takenReplica) {
	if len(taken) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range taken {
		r.setPromotionLocked(t.state.Key, promotion{owner: t.owner, gen: genIn(t.holds, t.state.Key, t.owner), state: t.state, at: m})
	}
}

// holdsRecords reports whether this node's counter of k holds records of
// runs' counts (see promotion).
func (r *replicaStore) holdsRecords(k limiter.Key) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.promoted[k]) > 0
}

// heldBelow notes that this node's counter of its key came down to
// counter (units given back, or given back since a copy it counted was
// taken): of each record of a run's counts it holds above it, it holds
// no more than counter now (promotion.in), whatever it counts later; the
// record stays, and goes with the counter with what the counter holds of
// it (Held.In).
func (r *replicaStore) heldBelow(now time.Time, counter limiter.State) {
	if counter.Kind >= limiter.KindGrant {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, p := range r.promoted[counter.Key] {
		base := p.state
		if p.in.Kind != 0 {
			base = p.in
		}
		if base.Kind != counter.Kind {
			continue
		}
		if _, above := limiter.SubState(now, base, counter); !above {
			continue
		}
		r.promoted[counter.Key][i].in = olderState(now, base, counter)
	}
}

// heldOfBoth returns what a counter holds of a run's counter, where it
// held a (its record) and took in a counter that held b of it: no more
// than the more of what each held (Held.In; the zero State: all of its
// record), window by window. Not the sum: both hold the same counter's
// counts, up to the units given back to either.
func heldOfBoth(now time.Time, a, b Held) limiter.State {
	x, y := a.State, b.State
	if a.In.Kind != 0 {
		x = a.In
	}
	if b.In.Kind != 0 {
		y = b.In
	}
	if x.Kind != y.Kind || x.Kind >= limiter.KindGrant {
		return limiter.State{}
	}
	return limiter.NewerState(x, y)
}

// takeHeld returns, for the counters of keys that leave this node, the
// runs' counts they hold (see promotion), sorted by key and run, and
// forgets them here: they go with the counters. So does what this node's
// counter of each was made of (see unionRecord): the records of its parts
// gone, a counter that comes naming them is weighed against no record
// here but the union. Counts that leave for this node's fallback (see
// placeHere) come back into the same counter, naming those parts, and
// were taken for a counter holding the whole union: they added nothing
// (TestFallbackCountsKeepingTheRecordsOfAJoinedCounterAreAddedWhenTheyJoinIt).
func (r *replicaStore) takeHeld(keys []limiter.Key) []Held {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Held
	for _, k := range keys {
		for _, p := range r.promoted[k] {
			out = append(out, p.held())
		}
		delete(r.promoted, k)
		delete(r.unions, k)
	}
	return sortHolds(out)
}

// takeHeldBut returns the records of the runs' counts of k that are not
// of the counters had names (run and generation), sorted, and forgets
// them here: the records a counter that arrived brought, which go with
// its counts where those leave the counter here (the records had names
// are its own, and stay).
func (r *replicaStore) takeHeldBut(k limiter.Key, had []Held) []Held {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Held
	r.promoted[k] = slices.DeleteFunc(r.promoted[k], func(p promotion) bool {
		if slices.ContainsFunc(had, func(h Held) bool { return h.Run == p.owner && h.Gen == p.gen }) {
			return false
		}
		out = append(out, p.held())
		return true
	})
	if len(r.promoted[k]) == 0 {
		delete(r.promoted, k)
	}
	return sortHolds(out)
}

// held returns the record p as it goes with its counter.
func (p promotion) held() Held {
	return Held{Run: p.owner, Gen: p.gen, State: p.state, Last: p.last, In: p.in}
}

// noteHeld records that this node's counters hold the runs' counts holds
// names: a copy of a counter that holds them is kept here (of each run's
// counts, the record that stands: see newerHeld). A run's last word
// stands as it was said: a copy does not raise it, and it replaces the
// record of an earlier copy. Where a record is held already, the counter
// here holds of it what it held, or what the counter that holds holds
// does, the more (see heldOfBoth).
func (r *replicaStore) noteHeld(now time.Time, m int64, holds []Held) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range holds {
		p, _, found := r.promotionLocked(h.State.Key, h.Run, h.Gen)
		if found {
			in := heldOfBoth(now, p.held(), h)
			h = newerHeld(p.held(), h)
			h.In = in
			if in.Kind != 0 && in.Kind == h.State.Kind {
				if _, below := limiter.SubState(now, h.State, in); !below {
					h.In = limiter.State{} // all of it
				} else {
					h.In = olderState(now, in, h.State)
				}
			}
		}
		r.setPromotionLocked(h.State.Key, promotion{owner: h.Run, gen: h.Gen, state: h.State, at: m, last: h.Last, in: h.In})
	}
}

// gaveAway records that this run's counters states, of self, leave it:
// the run counts their keys in new counters from now on, a generation
// later. It returns the records that name the generations of those that
// are not the first (see Held.Gen), which go with them.
func (r *replicaStore) gaveAway(m int64, self Peer, states []limiter.State) []Held {
	if len(states) == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	named := r.ownHeldLocked(self, states)
	if r.gens == nil {
		r.gens = map[limiter.Key]keyGen{}
	}
	bumped := map[limiter.Key]bool{}
	for _, s := range states {
		if s.Kind >= limiter.KindGrant || bumped[s.Key] {
			continue
		}
		bumped[s.Key] = true
		g := r.gens[s.Key]
		g.gen, g.at = g.gen+1, m
		r.gens[s.Key] = g
	}
	return named
}

// genOf returns the generation of this run's counter of k (see Held.Gen).
func (r *replicaStore) genOf(k limiter.Key) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gens[k].gen
}

// ownHeld returns the records that name the generations of this run's
// (self's) counters states, where they are not the first (see Held.Gen):
// they go with the counters, and with copies of them.
func (r *replicaStore) ownHeld(self Peer, states []limiter.State) []Held {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ownHeldLocked(self, states)
}

func (r *replicaStore) ownHeldLocked(self Peer, states []limiter.State) []Held {
	var out []Held
	for _, s := range states {
		if g := r.gens[s.Key].gen; g > 0 && s.Kind < limiter.KindGrant {
			out = append(out, Held{Run: self, Gen: g, State: s})
		}
	}
	return out
}

// weighHere returns what s, a counter of its key that arrives to be
// counted here, adds to what this node counts of the key (ok false:
// nothing): s is the counter of the run of (if named), of the generation
// holds names (see Held.Gen), and holds the counts of the other counters
// that holds names. Where this node's counter holds counts of one of
// those counters too (a record of them: a replica it started the key
// from, the counter that came before, itself or inside another), both
// hold that counter's counts up to the older of the two; s adds what it
// counted beyond the largest such share, and from now on this node holds
// the newer of each. The largest, not the sum: the counts a counter holds
// nest (a counter started from a replica of one that was started from
// another's), and counts held twice are only ever those of one counter;
// where the counter here is several counters joined, each holding part of
// another, and s holds them all, s holds all they made of it (see
// weighing.unions), more than any one of them.
// Of each counter s holds, s shares no more than it holds of it: units
// given back to s (or to a counter it went on from) may have taken it
// below the copy it holds, and what it counted after is its own
// (Held.In; TestACounterBelowTheCopyItHoldsAddsWhatItAdmittedBeyondItsReplica).
// Two counters of one run are two counters: neither shares the other's
// counts. Counts of this run (self) a counter holds, or that s holds as
// this run's own counter (of is self), are in this run's own counter of
// the key if they are of its current generation; of an earlier one (it
// sent that counter away since, see gaveAway), they are weighed like any
// run's.
//
// A counter its own run let go (last: handed over, or sent as it
// stopped counting, declared dead; passed on or not) is that run's last
// word on it: a counter comes down as well as up (units given back), so
// an earlier copy of it may hold more. Where this node holds a record of
// the counter that holds more than s, the difference was given back
// since, and comes off what this node counts of the key (less, lowered);
// a copy of the counter that comes later holds nothing beyond s. So it
// is with the last words among holds (Held.Last): the counter that holds
// one went on from where its run let it go, and the record says so
// wherever it goes.
func (r *replicaStore) weighHere(now time.Time, m int64, self, of Peer, s limiter.State, holds []Held, last bool) (delta limiter.State, ok bool, less limiter.State, lowered bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.weighingLocked(now, m, s.Key)
	cur := r.gens[s.Key].gen // of this run's counter of k
	gen := genIn(holds, s.Key, of)
	switch {
	case of.Name == "":
	case of == self && gen == cur:
		// This run's own counter, come back (a replica of it sent on by a
		// node that took this run for dead): its counts are in the
		// counter here.
		w.share(s)
	case last:
		w.weighLast(of, gen, s, limiter.State{})
	default:
		w.weigh(of, gen, s, limiter.State{})
	}
	w.holds(self, cur, of, gen, holds)
	w.unions(self, cur, of, gen, s, holds)
	delta, ok = w.beyond(s)
	if !ok {
		w.lowerBelow(s)
	}
	return delta, ok, w.less, w.lowered
}

// unions weighs what the counter here held as counters joined it (see
// unionRecord) against s, the arriving counter (run of, generation gen),
// and the counters it holds: where s, or a counter it holds, holds a copy
// of each counter a record names, and of the counter here as it was
// before they joined (the counter here of this generation, as s holds it,
// or as an earlier record held it that s holds too), s holds all the
// counter here held then but what those copies lack of what the record
// says they were: the joined counts lose at most what a part loses. The
// counts of the counters that joined, where one held part of another, are
// no one counter's, so the largest share of one alone is less
// (TestACounterThatHoldsAllTheCountersTheReceiversIsMadeOfAddsNothing,
// TestACounterHoldingAnOlderCopyOfOnePartIsNotTakenForHoldingTheJoin).
func (w *weighing) unions(self Peer, cur uint32, of Peer, gen uint32, s limiter.State, holds []Held) {
	recs := w.r.unions[w.k]
	if len(recs) == 0 {
		return
	}
	// lacks returns what copy lacks of level (ok false: nothing).
	// heldOf returns what the copies s holds of run's counter of
	// generation g lack of level, the least (lacking false: nothing),
	// and whether s holds any.
	heldOf := func(run Peer, g uint32, level limiter.State, more []limiter.State) (less limiter.State, lacking, found bool) {
		var copies []limiter.State
		if run == of && g == gen && of.Name != "" {
			copies = append(copies, s)
		}
		for _, h := range holds {
			if h.State.Key == w.k && h.Run == run && h.Gen == g {
				copies = append(copies, h.State)
			}
		}
		copies = append(copies, more...)
		for _, c := range copies {
			d, ok := limiter.SubState(w.now, level, c) // what copy c lacks of level
			if !ok {
				return limiter.State{}, false, true
			}
			if !found || !lacking {
				less, lacking, found = d, true, true
			} else if _, more := limiter.SubState(w.now, less, d); more {
				less = d
			}
		}
		return less, lacking, found
	}
	held := make([]limiter.State, 0, len(recs)) // what s holds of each record weighed so far
	for _, u := range recs {
		if u.gen != cur {
			continue
		}
		var less limiter.State
		lacking, all := false, true
		note := func(d limiter.State, ok, found bool) {
			switch {
			case !found:
				all = false
			case !ok:
			case lacking:
				less = limiter.AddState(w.now, less, d)
			default:
				less, lacking = d, true
			}
		}
		if u.prefix != nil {
			note(heldOf(self, cur, *u.prefix, held))
		}
		for _, p := range u.parts {
			if !all {
				break
			}
			if p.Run == self && p.Gen == cur {
				note(heldOf(self, cur, p.State, held))
			} else {
				note(heldOf(p.Run, p.Gen, p.State, nil))
			}
		}
		if !all {
			continue
		}
		v := u.value
		if lacking {
			var ok bool
			if less.Kind != u.value.Kind {
				continue // not what the record's counter lacks
			}
			if v, ok = limiter.SubState(w.now, u.value, less); !ok {
				continue
			}
		}
		held = append(held, v)
		w.share(v)
	}
}

// weighing is the weighing of a counter of key k that arrives against
// the counts this node's counter of k holds (see weighHere): the largest
// share of counts both hold so far, and what comes off the counter here
// (units given back since a copy it holds was taken: see weighLast). r.mu
// is held while it is used.
type weighing struct {
	r        *replicaStore
	now      time.Time
	m        int64
	k        limiter.Key
	shared   limiter.State
	anyShare bool
	less     limiter.State
	lowered  bool
	// below: what the arriving counter says it went below the copies it
	// holds (Held.In): units given back to it since it took them, the
	// most that may come off the counter here (see lowerBelow); anyBelow
	// whether any.
	below    limiter.State
	anyBelow bool
}

// weighingLocked starts a weighing of a counter of k. r.mu is held.
func (r *replicaStore) weighingLocked(now time.Time, m int64, k limiter.Key) *weighing {
	return &weighing{r: r, now: now, m: m, k: k}
}

// share notes x as counts both hold; the largest stands.
func (w *weighing) share(x limiter.State) {
	if w.anyShare {
		w.shared = limiter.NewerState(w.shared, x)
	} else {
		w.shared, w.anyShare = x, true
	}
}

// weigh notes x, run's counter of generation gen as the arriving counter
// holds it: where this node's counter holds a record of that counter, both
// hold the older of the two; from now on this node holds the newer.
//
// in, where of a kind, is what the arriving counter holds of x (see Held.In):
// both hold no more of the run's counts than the more of that and what
// the counter here holds of its record (see shareIn). What the counter
// here holds of its record (promotion.in) grows by what x holds beyond
// the record.
func (w *weighing) weigh(run Peer, gen uint32, x limiter.State, in limiter.State) {
	r := w.r
	p, _, found := r.promotionLocked(w.k, run, gen)
	if !found {
		r.setPromotionLocked(w.k, promotion{owner: run, gen: gen, state: x, at: w.m, in: in})
		return
	}
	if p.last {
		// The run handed the counter over, and it is held here as
		// handed: x, a copy of it, holds nothing more.
		w.shareIn(x, in, p.in)
		return
	}
	w.shareIn(olderState(w.now, x, p.state), in, p.in)
	if p.in.Kind != 0 {
		if d, ok := limiter.SubState(w.now, x, p.state); ok && d.Kind == p.in.Kind {
			p.in = limiter.AddState(w.now, p.in, d)
		}
	}
	p.state, p.at = limiter.NewerState(p.state, x), w.m
	r.setPromotionLocked(w.k, p)
}

// shareIn notes x, counts of a run's counter, as counts both hold, no
// more than the more of what each holds of that counter: in, what the
// arriving counter holds of it (see Held.In), and here, what the counter
// here holds of its record (promotion.in); of no kind, all of it. Units
// given back to one counter alone are still in the other: where the
// counter here holds the copy whole (the run's own counter came here,
// with no replica of the arriving counter's), the unit given back to the
// arriving counter is in it, and the two share all of the copy; shared
// no more than the arriving counter holds, that unit was counted again
// (TestACounterBelowTheCopyItHoldsSharesAllOfItWhereTheCounterHereHoldsTheCopyWhole).
// Where the counter here went on from the arriving counter's replica,
// it lacks the same units, and holds no more of the copy than the
// arriving counter does
// (TestACounterBelowTheCopyItHoldsAddsWhatItAdmittedBeyondItsReplica).
func (w *weighing) shareIn(x, in, here limiter.State) {
	if in.Kind != 0 && in.Kind == x.Kind && here.Kind != 0 && here.Kind == x.Kind {
		x = olderState(w.now, x, limiter.NewerState(in, here))
	}
	w.share(x)
}

// weighLast notes x, run's counter of generation gen as the run itself
// let it go: both hold the older of x and the record of the counter
// here, if any, and from now on this node holds x, the run's last word
// on it. What the record held beyond x (units the run gave back since
// the copy recorded was taken) comes off the counter here (w.less).
//
// A record that is the run's last word already says x (the same word,
// come again by another way: inside a counter that went on from it, and
// passed on itself): nothing comes off. The run counts the key in a new
// counter, a generation later, once it let this one go, so no counter
// of this generation counted more since; a record of another
// generation is another counter's, never lowered by x.
//
// in is what the arriving counter holds of x, as weigh takes it.
func (w *weighing) weighLast(run Peer, gen uint32, x limiter.State, in limiter.State) {
	r := w.r
	p, _, found := r.promotionLocked(w.k, run, gen)
	if found && p.last {
		w.shareIn(olderState(w.now, x, p.state), in, p.in)
		return
	}
	if !found {
		r.setPromotionLocked(w.k, promotion{owner: run, gen: gen, state: x, at: w.m, last: true, in: in})
		return
	}
	held := p.in
	switch {
	case held.Kind == 0:
	case held.Kind != x.Kind:
		held = limiter.State{} // another counter's: x holds all of itself
	default:
		held = olderState(w.now, held, x)
	}
	r.setPromotionLocked(w.k, promotion{owner: run, gen: gen, state: x, at: w.m, last: true, in: held})
	w.shareIn(olderState(w.now, x, p.state), in, p.in)
	w.lower(givenBackSince(w.now, p.state, x))
}

// lower notes less (if ok) as coming off the counter here.
func (w *weighing) lower(less limiter.State, ok bool) {
	switch {
	case !ok:
	case w.lowered:
		w.less = limiter.AddState(w.now, w.less, less)
	default:
		w.less, w.lowered = less, true
	}
}

// givenBackSince returns what rec, a record of a run's counter, held
// beyond last, the run's last word on the counter: units given back
// since (ok false: none). A counter of another kind (the zone's
// algorithm changed) is no earlier copy of last: nothing.
func givenBackSince(now time.Time, rec, last limiter.State) (limiter.State, bool) {
	if rec.Kind != last.Kind {
		return limiter.State{}, false
	}
	return limiter.SubState(now, rec, last)
}

// holds weighs the counts of other counters that the arriving counter
// (run of, generation gen) holds: this run's (self's) own counter of its
// current generation cur is the counter here, whole; the others are
// weighed against the records of them, a run's last word on its counter
// as weighLast weighs it. Of each, the arriving counter shares no more
// than it holds of it (Held.In).
func (w *weighing) holds(self Peer, cur uint32, of Peer, gen uint32, holds []Held) {
	for _, h := range holds {
		if h.State.Key != w.k || h.Run == of && h.Gen == gen {
			continue // the arriving counter itself
		}
		w.noteBelow(h)
		switch {
		case h.Run == self && h.Gen == cur:
			w.shareIn(h.State, h.In, limiter.State{}) // the counter here, whole
		case h.Last:
			w.weighLast(h.Run, h.Gen, h.State, h.In)
		default:
			w.weigh(h.Run, h.Gen, h.State, h.In)
		}
	}
}

// beyond returns what s counted beyond the largest share (ok false:
// nothing).
func (w *weighing) beyond(s limiter.State) (limiter.State, bool) {
	if !w.anyShare {
		return s, true
	}
	return limiter.SubState(w.now, s, w.shared)
}

// noteBelow notes what the counter here holds of the copy h of a run's
// counter that the arriving counter holds, beyond what the arriving
// counter holds of it (Held.In): units given back to the arriving
// counter since it took the copy, still in the counter here (see
// lowerBelow). Before h is weighed.
func (w *weighing) noteBelow(h Held) {
	if h.In.Kind == 0 || h.In.Kind != h.State.Kind {
		return
	}
	p, _, found := w.r.promotionLocked(w.k, h.Run, h.Gen)
	if !found {
		return
	}
	here := p.state
	if p.in.Kind != 0 {
		here = p.in
	}
	if here.Kind != h.State.Kind {
		return
	}
	d, ok := limiter.SubState(w.now, olderState(w.now, here, h.State), h.In)
	switch {
	case !ok:
	case !w.anyBelow:
		w.below, w.anyBelow = d, true
	case w.below.Kind == d.Kind:
		w.below = limiter.AddState(w.now, w.below, d)
	}
}

// lowerBelow notes, where s holds less than the largest share, what it
// lacks of it beyond what comes off already (w.less), and no more than it
// says it went below the copies it holds (w.below), as coming off the
// counter here: the share is counts the counter here holds, and s went
// below them by units given back to it (or to a counter it went on
// from) after it took its copy, which are in the counter here still
// (a give-back comes off one counter). Weighed as holding nothing beyond
// the share, s took nothing off, and those units were counted again
// (TestAUnitGivenBackToACounterBelowACopyComesOffACounterHoldingTheCopyWhole).
func (w *weighing) lowerBelow(s limiter.State) {
	if !w.anyShare || !w.anyBelow || s.Kind >= limiter.KindGrant || w.shared.Kind != s.Kind || w.below.Kind != s.Kind {
		return
	}
	gap, ok := limiter.SubState(w.now, w.shared, s)
	if !ok {
		return
	}
	gap = olderState(w.now, gap, w.below) // no more than it says it went below
	if w.lowered {
		if w.less.Kind != gap.Kind {
			return
		}
		if gap, ok = limiter.SubState(w.now, gap, w.less); !ok {
			return
		}
	}
	w.lower(gap, true)
}

// olderState returns what two copies of one run's counter, possibly of
// different ages, both hold: the older, window by window.
func olderState(now time.Time, a, b limiter.State) limiter.State {
	beyond, ok := limiter.SubState(now, a, b)
	if !ok {
		return a // a holds nothing b does not
	}
	if older, ok := limiter.SubState(now, a, beyond); ok {
		return older
	}
	return limiter.State{Key: a.Key, Kind: a.Kind, Stamp: a.Stamp, Expires: a.Expires}
}

// promotionLocked returns the record of the counts of run's counter of k
// of generation gen, if any, and where it is in the key's list. r.mu is
// held.
func (r *replicaStore) promotionLocked(k limiter.Key, run Peer, gen uint32) (promotion, int, bool) {
	for i, p := range r.promoted[k] {
		if p.owner == run && p.gen == gen {
			return p, i, true
		}
	}
	return promotion{}, -1, false
}

// promotes reports whether this node's counter of k holds a record of
// run's counter of it of generation gen (see promotion).
func (r *replicaStore) promotes(k limiter.Key, run Peer, gen uint32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _, ok := r.promotionLocked(k, run, gen)
	return ok
}

// setPromotionLocked records p for k, in place of the record of the same
// counter (run and generation). r.mu is held.
func (r *replicaStore) setPromotionLocked(k limiter.Key, p promotion) {
	if r.promoted == nil {
		r.promoted = map[limiter.Key][]promotion{}
	}
	if _, i, ok := r.promotionLocked(k, p.owner, p.gen); ok {
		r.promoted[k][i] = p
		return
	}
	r.promoted[k] = append(r.promoted[k], p)
}

// noteRestored records the keys of counters an earlier run of this node
// kept (a snapshot), sent as copies to their owners, with the runs whose
// counts each holds (Kept.Holds: those of the replicas the earlier run
// started the key from and of the counters it weighed in), where the
// snapshot names its run; one that does not (an earlier format) tells
// nothing of what its counters hold.
func (r *replicaStore) noteRestored(m int64, k Kept) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.restored == nil {
		r.restored = map[limiter.Key]restoredCounter{}
	}
	holds := make(map[limiter.Key][]Peer, len(k.Holds))
	for _, h := range k.Holds {
		if !slices.Contains(holds[h.State.Key], h.Run) {
			holds[h.State.Key] = append(holds[h.State.Key], h.Run)
		}
	}
	for _, s := range k.States {
		if s.Kind >= limiter.KindGrant {
			continue
		}
		r.restored[s.Key] = restoredCounter{at: m, run: k.Run, unnamed: k.Run.Name == "", holds: holds[s.Key]}
	}
}

// restoredCounter is what a run knows of a counter of a key it restored
// from a snapshot an earlier run of its node kept: when, and the runs
// whose counts it may hold.
type restoredCounter struct {
	at      int64
	run     Peer   // the earlier run that kept it (none: not named)
	unnamed bool   // the snapshot named no run, or went out naming none: it may hold any run's counts
	holds   []Peer // the runs whose counts it holds (Kept.Holds)
}

// reachedHere returns, for the keys whose counters here were started from
// runs' replicas or restored from an earlier run's snapshot, the runs
// whose counts they hold (see reachedRuns): those counters are here, and
// a gap that names those runs leaves the keys in reach.
func (r *replicaStore) reachedHere() map[limiter.Key]reachedRuns {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[limiter.Key]reachedRuns, len(r.promoted)+len(r.restored))
	for k, ps := range r.promoted {
		for _, p := range ps {
			out[k] = out[k].with(reachedRuns{runs: []Peer{p.owner}})
		}
	}
	for k, rc := range r.restored {
		a := reachedRuns{unnamed: rc.unnamed, runs: slices.Clone(rc.holds)}
		if rc.run.Name != "" && !slices.Contains(a.runs, rc.run) {
			a.runs = append(a.runs, rc.run)
		}
		out[k] = out[k].with(a)
	}
	return out
}

// noteCounterless records keys that settled here without a counter.
func (r *replicaStore) noteCounterless(m int64, keys []limiter.Key) {
	if len(keys) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counterless.mark(m, keys...)
}

// takeCounterless reports whether k settled here without a counter, and
// forgets it: the first counter that comes for it is the one it lacked.
func (r *replicaStore) takeCounterless(k limiter.Key) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counterless.take(k)
}

// unnameRestored records that the restored counters of states went to
// their owners as copies that name no run (their snapshot was too old to
// be weighed): no record of whose counts they hold went with them.
func (r *replicaStore) unnameRestored(states []limiter.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range states {
		if rc, ok := r.restored[s.Key]; ok {
			rc.unnamed, rc.holds = true, nil
			r.restored[s.Key] = rc
		}
	}
}

// restoredUnnamed reports whether this run restored a counter of k that
// an earlier run kept and whose snapshot names no run: it may hold any
// run's counts, and no record says which, or up to what.
func (r *replicaStore) restoredUnnamed(k limiter.Key) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc, ok := r.restored[k]
	return ok && rc.unnamed
}

// absorbCopy keeps, of states copied from a snapshot that a later run of
// their node sent (from) or sent on (naming the run of, if it did), the
// newer of each and the replica that run (or, naming none, an earlier run
// of from) sent here, where there is one, with the newer of the other
// runs' counts each holds (holds); it returns the states that have none.
func (r *replicaStore) absorbCopy(from, of Peer, states []limiter.State, holds []Held) (rest []limiter.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range states {
		rep, ok := r.states[s.Key]
		if of.Name != "" {
			ok = ok && rep.owner == of && genIn(rep.holds, s.Key, of) == genIn(holds, s.Key, of)
		} else {
			ok = ok && rep.owner.Name == from.Name && rep.owner.Inc < from.Inc
		}
		if !ok {
			rest = append(rest, s)
			continue
		}
		rep.state = limiter.NewerState(rep.state, s)
		rep.holds = newerHolds(rep.holds, holdsOf(holds, []limiter.State{s}))
		r.states[s.Key] = rep
	}
	return rest
}

// takenReplica is a replica taken out of the store, its owner, the
// other runs' counts it holds, and when it came (see replica).
type takenReplica struct {
	owner      Peer
	state      limiter.State
	holds      []Held
	resent     []Resent
	at         int64
	passed     bool
	superseded bool
}

// holdsOfTaken returns the counts the replicas of taken hold.
func holdsOfTaken(taken []takenReplica) []Held {
	var out []Held
	for _, t := range taken {
		out = append(out, t.holds...)
	}
	return out
}

// resentOfTaken returns the records of counts sent again that the
// counters of taken hold (see Transfer.Resent): they go wherever the
// replicas go.
func resentOfTaken(taken []takenReplica) []Resent {
	var out []Resent
	for _, t := range taken {
		out = append(out, t.resent...)
	}
	return out
}

// withResent returns list with the records of more it does not hold
// already (the same transfers' counts of the same key: see noteResent).
func withResent(list, more []Resent) []Resent {
	for _, x := range more {
		if !slices.ContainsFunc(list, x.same) {
			list = append(list, x)
		}
	}
	return list
}

// beyondPromoted returns what s, a copy of owner's counter of its key of
// generation gen, counted beyond the counts of that counter that this
// node's counter of the key holds (ok false: it holds none on record: see
// promotion). This node's counter holds s's counts from then on: a later
// copy adds only what it counted beyond s, so two copies of the same
// counts (the run's own counter, and a replica of it another node sent
// on) are not both added. The other counters' counts that s holds
// (holds) are weighed too, as weighHere weighs them: owner's counter may
// have taken in others since this node's started from it, this run's
// own among them (a counter of this run's sent to owner, displaced where
// owner replicated to, see Core.sendDisplaced), and what both hold of
// those is not added again either.
//
// Where s is owner's last word on the counter (last: its counters as it
// stopped counting, declared dead), it is weighed as weighHere weighs a
// counter its run handed over: what the record held beyond s (units
// given back since the copy recorded) is returned (less, lowered), to
// come off the counter here, and from now on the record is s; so is what
// the records held beyond the last words among holds (see weighHere).
func (r *replicaStore) beyondPromoted(now time.Time, m int64, self Peer, k limiter.Key, owner Peer, gen uint32, s limiter.State, holds []Held, last bool) (delta limiter.State, more, ok bool, less limiter.State, lowered bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, _, ok := r.promotionLocked(k, owner, gen)
	if !ok {
		return limiter.State{}, false, false, limiter.State{}, false
	}
	w := r.weighingLocked(now, m, k)
	switch {
	case last && !p.last:
		w.share(olderState(now, s, p.state))
		w.lower(givenBackSince(now, p.state, s))
		p.state, p.last = s, true
	case last:
		w.share(olderState(now, s, p.state)) // that word again (see weighLast)
	case p.last:
		w.share(s) // a copy of the counter its run had the last word on
	default:
		w.share(p.state)
		p.state = limiter.NewerState(p.state, s)
	}
	r.setPromotionLocked(k, p)
	w.holds(self, r.gens[k].gen, owner, gen, holds)
	w.unions(self, r.gens[k].gen, owner, gen, s, holds)
	delta, more = w.beyond(s)
	return delta, more, true, w.less, w.lowered
}

// noteApplied records transfers owner applied (those of list naming
// another run (By) as that run's).
func (r *replicaStore) noteApplied(m int64, owner Peer, list []Applied) {
	if len(list) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range list {
		by := owner
		if a.By.Name != "" {
			by = a.By
		}
		set := r.appliedBy[by]
		if set == nil {
			set = map[Applied]int64{}
			r.appliedBy[by] = set
		}
		set[a.key()] = m
	}
}

// appliedListedMax bounds the transfers of one run a counter lists as
// applied (Transfer.Applied), well under the peer protocol's list limit:
// a run that applied more within appliedKeep (fallback counts of many
// callers through a long fault) lists the newest, the transfers whose
// senders may still send them again.
const appliedListedMax = 4096

// appliedOf returns, sorted, the transfers run applied on record here,
// each naming run (By): the newest appliedListedMax of them.
func (r *replicaStore) appliedOf(run Peer) []Applied {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.appliedBy[run]
	out := make([]Applied, 0, len(set))
	for a := range set {
		out = append(out, Applied{From: a.From, Seq: a.Seq, By: run})
	}
	if len(out) > appliedListedMax {
		slices.SortFunc(out, func(x, y Applied) int { // newest first
			return cmp.Or(cmp.Compare(set[y.key()], set[x.key()]), cmpApplied(x, y))
		})
		out = out[:appliedListedMax]
	}
	slices.SortFunc(out, cmpApplied)
	return out
}

// key is a, without the run that applied it: as appliedBy records it.
func (a Applied) key() Applied { return Applied{From: a.From, Seq: a.Seq} }

// cmpApplied orders transfers by sender, then by number.
func cmpApplied(x, y Applied) int {
	return cmp.Or(strings.Compare(x.From.Name, y.From.Name), cmpUint(x.From.Inc, y.From.Inc), cmpUint(x.Seq, y.Seq))
}

// resentOfLocked returns the records of counts sent in place of
// transfers to run, made if need be. r.mu is held.
func (r *replicaStore) resentOfLocked(run Peer) map[Applied]resentCounts {
	if r.resent == nil {
		r.resent = map[Peer]map[Applied]resentCounts{}
	}
	set := r.resent[run]
	if set == nil {
		set = map[Applied]resentCounts{}
		r.resent[run] = set
	}
	return set
}

// noteResent records that the counts states, sent in place of transfer a
// to the dead run, were added here. The counts of a key are those of
// the transfer's for that key, added once (see inbox.firstCopies): a
// record of them that comes again (with a copy of the counter that holds
// them, by another path: its replica taken over, and a snapshot of it
// read back) is the same record, and is not kept twice. Kept twice, they
// came out of the run's counter twice.
func (r *replicaStore) noteResent(m int64, run Peer, a Applied, states []limiter.State) {
	if len(states) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.resentOfLocked(run)
	rec := set[a]
	for _, s := range states {
		if !heldIn(rec.states, s.Key) {
			rec.states = append(rec.states, s)
		}
	}
	rec.at = m
	set[a] = rec
}

// holdResent records that this node's counter of the key of each of
// list holds its counts, sent in place of its transfers.
func (r *replicaStore) holdResent(m int64, list []Resent) {
	if len(list) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.resentHeld == nil {
		r.resentHeld = map[limiter.Key][]resentHeld{}
	}
	for _, x := range list {
		if x.Given == nil && x.State.Kind >= limiter.KindGrant || len(x.Marks) == 0 {
			continue
		}
		k := x.key()
		if slices.ContainsFunc(r.resentHeld[k], func(h resentHeld) bool { return h.rec.same(x) }) {
			continue // the same record, come again (see noteResent)
		}
		x.Marks = slices.Clone(x.Marks)
		r.resentHeld[k] = append(r.resentHeld[k], resentHeld{rec: x, at: m})
	}
}

// resentHeldOf returns the records of counts sent in place of transfers
// that this node's counters of keys hold (see holdResent), keeping them:
// they go with the counters' replicas.
func (r *replicaStore) resentHeldOf(keys []limiter.Key) []Resent {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.resentHeld) == 0 {
		return nil // most replication batches: no record to look a key up in
	}
	var out []Resent
	for _, k := range keys {
		for _, h := range r.resentHeld[k] {
			x := h.rec
			x.Marks = slices.Clone(x.Marks)
			out = append(out, x)
		}
	}
	return out
}

// takeResentHeld returns the records of counts sent in place of
// transfers that this node's counters of keys hold (see holdResent), and
// forgets them here, with the records of those counts as added here (see
// noteResent): the counters leave with them.
func (r *replicaStore) takeResentHeld(keys []limiter.Key) []Resent {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.resentHeld) == 0 {
		return nil
	}
	var out []Resent
	for _, k := range keys {
		list := r.resentHeld[k]
		if len(list) == 0 {
			continue
		}
		delete(r.resentHeld, k)
		for _, h := range list {
			out = append(out, h.rec)
		}
		for _, h := range list {
			r.forgetNotedLocked(h.rec)
		}
	}
	return out
}

// dropResentHeldLocked forgets the records of counts of the keys of
// gone, sent in place of transfer a to run, that counters here hold: a
// counter of run came, less them. r.mu is held.
func (r *replicaStore) dropResentHeldLocked(run Peer, a Applied, gone []limiter.State) {
	if len(r.resentHeld) == 0 {
		return
	}
	mark := Replaced{From: a.From, Seq: a.Seq, To: run}
	for _, s := range gone {
		list := slices.DeleteFunc(r.resentHeld[s.Key], func(h resentHeld) bool { return h.rec.Given == nil && slices.Contains(h.rec.Marks, mark) })
		if len(list) == 0 {
			delete(r.resentHeld, s.Key)
		} else {
			r.resentHeld[s.Key] = list
		}
	}
}

// anyResent reports whether counts or units sent in place of a transfer
// to a dead run are on record here.
func (r *replicaStore) anyResent() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.resent) > 0
}

// noteGivenBack records that the units of reqs, counted at the instant at
// (Unix ns) and given back in place of transfer a to the dead run, were
// given back here. A record of them that comes again (with a copy of the
// counter they came off, by another path: its replica taken over, and a
// snapshot of it read back) is the same record, and is not kept twice:
// kept twice, they were put back twice.
func (r *replicaStore) noteGivenBack(m int64, run Peer, a Applied, reqs []limiter.Request, at int64) {
	if len(reqs) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.resentOfLocked(run)
	rec := set[a]
	for _, q := range reqs {
		if q.Limit.Algorithm != limiter.Concurrency && !slices.ContainsFunc(rec.given, func(g givenBack) bool { return g.req.Key == q.Key && g.at == at }) {
			rec.given = append(rec.given, givenBack{req: q, at: at})
		}
	}
	rec.at = m
	set[a] = rec
}

// forgetGivenBack drops the record noteGivenBack made of the units of
// reqs, counted at the instant at and given back in place of transfer a
// to run, which went on from here without coming off a counter here (to
// the node that counts their key, naming a): the counter here does not
// lack them, and that node weighs them. Kept, the record put them back
// into run's counters if they came here, which lacked them once already
// (TestUnitsGivenBackAgainThatWaitedForARingAreNotPutBackIntoTheOwnersCounters).
func (r *replicaStore) forgetGivenBack(run Peer, a Applied, reqs []limiter.Request, at int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range reqs {
		r.forgetGivenBackLocked(run, a, q.Key, at)
	}
}

// forgetGivenBackLocked drops the record of the units of k, counted at
// the instant at and given back in place of transfer a to run: as given
// back here (see noteGivenBack), and as lacked by the counter here (see
// holdResent). r.mu is held.
func (r *replicaStore) forgetGivenBackLocked(run Peer, a Applied, k limiter.Key, at int64) {
	r.dropGivenHeldLocked(run, a, k, at)
	set := r.resent[run]
	rec, ok := set[a]
	if !ok || len(rec.given) == 0 {
		return
	}
	if i := slices.IndexFunc(rec.given, func(g givenBack) bool { return g.req.Key == k && g.at == at }); i >= 0 {
		rec.given = slices.Delete(slices.Clone(rec.given), i, i+1)
	}
	if len(rec.states) == 0 && len(rec.given) == 0 {
		delete(set, a)
		if len(set) == 0 {
			delete(r.resent, run)
		}
		return
	}
	set[a] = rec
}

// givenBackOnly leaves the record of the units of k, counted at the
// instant at and given back here in place of transfer a to run (see
// noteGivenBack, holdResent), as off units: what came off the counter
// here. With none, it goes, as forgetGivenBack drops it.
func (r *replicaStore) givenBackOnly(run Peer, a Applied, k limiter.Key, at, off int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if off <= 0 {
		r.forgetGivenBackLocked(run, a, k, at)
		return
	}
	if set := r.resent[run]; set != nil {
		if rec, ok := set[a]; ok {
			if i := slices.IndexFunc(rec.given, func(g givenBack) bool { return g.req.Key == k && g.at == at }); i >= 0 {
				rec.given = slices.Clone(rec.given)
				rec.given[i].req.Cost = off
				set[a] = rec
			}
		}
	}
	mark := Replaced{From: a.From, Seq: a.Seq, To: run}
	list := slices.Clone(r.resentHeld[k])
	for i, h := range list {
		if h.rec.Given != nil && h.rec.Given.At == at && slices.Contains(h.rec.Marks, mark) {
			g := *h.rec.Given
			g.Req.Cost = off
			list[i].rec.Given = &g
		}
	}
	if len(list) > 0 {
		r.resentHeld[k] = list
	}
}

// dropGivenHeldLocked forgets, of the record carried by the counter of k
// here of its units counted at the instant at that were given back in
// place of transfers to runs taken for dead (see holdResent), the
// transfer a to run: the record goes on naming the others, and goes when
// it names none. Each run that applied one of those give-backs lacks the
// units in its counters, and gets them back once where they meet the
// record: dropped whole as the first run's counters took it, the record
// left the second run's note here, and its counters, meeting the key's
// counter where it went, lacked the units a second time
// (TestUnitsGivenBackAgainInPlaceOfTwoRunsArePutBackForEachWhereTheKeysCounterWent).
// r.mu is held.
func (r *replicaStore) dropGivenHeldLocked(run Peer, a Applied, k limiter.Key, at int64) {
	list, ok := r.resentHeld[k]
	if !ok {
		return
	}
	mark := Replaced{From: a.From, Seq: a.Seq, To: run}
	out := list[:0:0]
	for _, h := range list {
		if h.rec.Given != nil && h.rec.Given.At == at && slices.Contains(h.rec.Marks, mark) {
			h.rec.Marks = slices.DeleteFunc(slices.Clone(h.rec.Marks), func(m Replaced) bool { return m == mark })
			if len(h.rec.Marks) == 0 {
				continue
			}
		}
		out = append(out, h)
	}
	if len(out) == 0 {
		delete(r.resentHeld, k)
	} else {
		r.resentHeld[k] = out
	}
}

// lessResent returns states, copies of run's counters (a snapshot read
// back) that hold the counts of the transfers applied lists, less the
// counts added here that were sent in place of those transfers (see
// noteResent), and what it took out. A copy that holds nothing more is
// left out. The records stay: the same copy may come again by another
// path. Windows subtract exactly; a bucket's debt, by no more than the
// counts added.
func (r *replicaStore) lessResent(now time.Time, run Peer, applied []Applied, states []limiter.State) (rest, less []limiter.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rest, less, _ = r.lessResentLocked(now, run, applied, states)
	// The counters here that hold those counts hold them once now, with
	// the copy: they name them no more (see holdResent).
	for _, a := range applied {
		r.dropResentHeldLocked(run, a.key(), less)
	}
	return rest, less
}

// lessResentBy returns states, bare additions (what nodes admitted in
// fallback) that hold the counts of the transfers applied lists, each
// naming the run that applied it (By), less the counts added here that
// were sent in place of those transfers to those runs (see noteResent),
// what it took out, and applied without the transfers whose counts it
// took out: the counts left hold them no more. The records of the counts
// taken out go (as with takeResent): another list naming the same
// transfer for the same key (the counter the counts joined, sent in the
// same pull reply) takes them out no more.
func (r *replicaStore) lessResentBy(now time.Time, applied []Applied, states []limiter.State) (rest, less []limiter.State, still []Applied) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rest = states
	for _, a := range applied {
		if a.By.Name != "" {
			var l []limiter.State
			var used bool
			rest, l, used = r.lessResentLocked(now, a.By, []Applied{a}, rest)
			if used {
				less = append(less, l...)
				r.forgetResentLocked(a.By, a.key(), l)
				continue
			}
		}
		still = append(still, a)
	}
	return rest, less, still
}

// forgetNoted forgets the records of the counts of list as added here
// (see noteResent) and as held by this node's counters (see holdResent):
// they go on with the counts, and are recorded where the counts are
// placed.
func (r *replicaStore) forgetNoted(list []Resent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range list {
		r.forgetNotedLocked(x)
	}
}

// forgetNotedLocked forgets the records of x, for each transfer it
// names, as added or given back here, and as held by the counter here.
// r.mu is held.
func (r *replicaStore) forgetNotedLocked(x Resent) {
	for _, m := range x.Marks {
		a := Applied{From: m.From, Seq: m.Seq}
		if x.Given != nil {
			r.forgetGivenBackLocked(m.To, a, x.Given.Req.Key, x.Given.At)
		} else {
			r.forgetResentLocked(m.To, a, []limiter.State{x.State})
		}
	}
}

// forgetResentLocked drops, from the record of counts sent in place of
// transfer a to run, those of the keys of gone. r.mu is held.
func (r *replicaStore) forgetResentLocked(run Peer, a Applied, gone []limiter.State) {
	set := r.resent[run]
	rec, ok := set[a]
	if !ok {
		return
	}
	r.dropResentHeldLocked(run, a, gone)
	rec.states = slices.DeleteFunc(slices.Clone(rec.states), func(x limiter.State) bool { return heldIn(gone, x.Key) })
	if len(rec.states) == 0 && len(rec.given) == 0 {
		delete(set, a)
	} else {
		set[a] = rec
	}
	if len(set) == 0 {
		delete(r.resent, run)
	}
}

// lessResentLocked is lessResent, and reports whether any record of
// applied met a count of states. r.mu is held.
func (r *replicaStore) lessResentLocked(now time.Time, run Peer, applied []Applied, states []limiter.State) (rest, less []limiter.State, used bool) {
	set := r.resent[run]
	if len(set) == 0 {
		return states, nil, false
	}
	rest = slices.Clone(states)
	drop := make([]bool, len(rest))
	for _, a := range applied {
		rec, ok := set[a.key()]
		if !ok {
			continue
		}
		for _, x := range rec.states {
			if x.Kind >= limiter.KindGrant {
				continue
			}
			for i := range rest {
				if drop[i] || rest[i].Key != x.Key || rest[i].Kind >= limiter.KindGrant {
					continue
				}
				less = append(less, x)
				used = true
				if d, ok := limiter.SubState(now, rest[i], x); ok {
					rest[i] = d
				} else {
					drop[i] = true
				}
			}
		}
	}
	out := rest[:0]
	for i, s := range rest {
		if !drop[i] {
			out = append(out, s)
		}
	}
	return out, less, used
}

// takeResent returns the counts of the keys of states added here, each
// with the transfer it was sent in place of (Resent.Marks, one mark), and
// the units of the keys of givenOf given back here, that were sent in
// place of the transfers of applied to run (see noteResent,
// noteGivenBack), and forgets them: run applied those transfers, so its
// counters hold the counts, and lack the units, too.
func (r *replicaStore) takeResent(run Peer, applied []Applied, states, givenOf []limiter.State) (adds []Resent, given []givenBack) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.resent[run]
	for _, a := range applied {
		rec, ok := set[a]
		if !ok {
			continue
		}
		rest := rec.states[:0:0]
		for _, x := range rec.states {
			if heldIn(states, x.Key) {
				adds = append(adds, Resent{Marks: []Replaced{{From: a.From, Seq: a.Seq, To: run}}, State: x})
			} else {
				rest = append(rest, x)
			}
		}
		r.dropResentHeldLocked(run, a, states)
		left := rec.given[:0:0]
		for _, g := range rec.given {
			if heldIn(givenOf, g.req.Key) {
				given = append(given, g)
				// Weighed here for run: the record goes on for the
				// other runs it names, if any.
				r.dropGivenHeldLocked(run, a, g.req.Key, g.at)
			} else {
				left = append(left, g)
			}
		}
		if len(rest) == 0 && len(left) == 0 {
			delete(set, a)
		} else {
			rec.states, rec.given = rest, left
			set[a] = rec
		}
	}
	if len(set) == 0 {
		delete(r.resent, run)
	}
	return adds, given
}

// reweighPromoted replaces the record of the counts of run's counter (of
// generation gen) that this node's counter of k holds by f of it, and
// reports whether there is one (the counter is here).
func (r *replicaStore) reweighPromoted(run Peer, gen uint32, k limiter.Key, f func(limiter.State) limiter.State) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, _, ok := r.promotionLocked(k, run, gen)
	if !ok {
		return false
	}
	p.state = f(p.state)
	r.setPromotionLocked(k, p)
	return true
}

// applied reports whether owner applied transfer a, by what it replicated
// here, or by what a copy of its counters read back from a snapshot said.
func (r *replicaStore) applied(owner Peer, a Applied) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.appliedBy[owner][a]
	return ok
}

// forgetApplied drops what owners applied longer than appliedKeep ago.
func (r *replicaStore) forgetApplied(m int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, list := range r.promoted {
		list = slices.DeleteFunc(list, func(p promotion) bool { return m-p.at > int64(appliedKeep) })
		if len(list) == 0 {
			delete(r.promoted, k)
		} else {
			r.promoted[k] = list
		}
	}
	r.counterless.forgetBefore(m - int64(appliedKeep))
	for k, rc := range r.restored {
		if rc.at < m-int64(appliedKeep) {
			delete(r.restored, k)
		}
	}
	for k, g := range r.gens {
		if m-g.at > int64(appliedKeep) {
			delete(r.gens, k)
		}
	}
	for k, list := range r.unions {
		list = slices.DeleteFunc(list, func(u unionRecord) bool { return m-u.at > int64(appliedKeep) })
		if len(list) == 0 {
			delete(r.unions, k)
		} else {
			r.unions[k] = list
		}
	}
	for k, list := range r.resentHeld {
		list = slices.DeleteFunc(list, func(h resentHeld) bool { return m-h.at > int64(appliedKeep) })
		if len(list) == 0 {
			delete(r.resentHeld, k)
		} else {
			r.resentHeld[k] = list
		}
	}
	for run, set := range r.resent {
		for a, rec := range set {
			if m-rec.at > int64(appliedKeep) {
				delete(set, a)
			}
		}
		if len(set) == 0 {
			delete(r.resent, run)
		}
	}
	for owner, set := range r.appliedBy {
		for a, at := range set {
			if m-at > int64(appliedKeep) {
				delete(set, a)
			}
		}
		if len(set) == 0 {
			delete(r.appliedBy, owner)
		}
	}
}

// put keeps owner's states, and the counts they hold of other runs,
// replacing older ones of the same keys, but for a later run's of the
// owner's node. A full store drops expired
// replicas first, then refuses new keys. It returns the live replicas of
// other runs that owner's replaced, sorted by key: they may hold counts
// that owner's counters do not (see Core.sendDisplaced). Each is marked
// superseded as supersede marks them by ring, this node's (self's) ring:
// an owner that sent it by an older one, where this node succeeded it,
// replicates the key to the other node once it has this ring, and the
// replica falls behind its counter then as one kept from an earlier ring
// does (TestAReplicaItsOwnerSentByAnOlderRingIsNoCounterOfAKeyOutOfReach:
// before, the replica undid the mark, and a node that took the key over
// counted it on from it).
func (r *replicaStore) put(now time.Time, m int64, owner Peer, states []limiter.State, holds []Held, resent []Resent, ring *Ring, self string) (displaced []takenReplica) {
	ns := now.UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range states {
		old, ok := r.states[s.Key]
		if !ok && len(r.states) >= r.max {
			r.sweepLocked(ns)
			if len(r.states) >= r.max {
				continue
			}
		}
		if ok && old.owner.Name == owner.Name && old.owner.Inc > owner.Inc {
			// A later run of the owner's node replicates the key here:
			// this replica of an earlier run (held up on the way) is
			// older than the counter that run's counts went on in.
			// Standing in for the later run's, it was the counter a
			// takeover of that run started the key from, and what the
			// later run counted was admitted again.
			continue
		}
		if ok && old.owner != owner && old.state.Expires > ns {
			// With the records of the counts sent again its counter
			// holds: sent on without them, the counter of a run that
			// applied the transfer they replace added them again
			// (TestCountsSentAgainInADisplacedReplicaAreNotAddedAgainByTheDeadRunsCounter).
			displaced = append(displaced, takenReplica{owner: old.owner, state: old.state, holds: old.holds, resent: old.resent, at: old.at, passed: old.passed})
		}
		r.states[s.Key] = replica{state: s, owner: owner, holds: holdsOf(holds, []limiter.State{s}), resent: resentOf(resent, []limiter.State{s}), at: m, superseded: supersededBy(ring, self, owner, s.Key)}
		if g, ok := r.given[s.Key]; ok && g.to == owner {
			delete(r.given, s.Key) // counted there, and replicated: the replica holds it
		}
	}
	return displaced
}

// keepGiven keeps this run's own counters that t handed over to run to,
// which applied them, where this node is to's successor for their keys:
// until to counts them (its key settles there) and replicates them, they
// are in no engine and in none of to's replicas. They stay this run's
// counters, of the generations they were (see cameBack): a takeover of
// to here counts them as such (see takeGiven), weighed like any counter
// of an earlier generation, so that when to, cut off and taken over,
// sends them on, what it sends is weighed against them, not added again.
func (c *Core) keepGiven(now time.Time, to Peer, t Transfer) {
	v := c.view.Load()
	if v.self < 0 {
		return
	}
	var kept []givenCounter
	for _, s := range t.States {
		if s.Kind >= limiter.KindGrant {
			continue
		}
		first, second := v.ring.top2(s.Key.Route())
		if first < 0 || second != v.self || v.ring.member(first).Peer() != to {
			continue
		}
		kept = append(kept, givenCounter{to: to, state: s, holds: c.cameBack(s, holdsOf(t.Holds, []limiter.State{s})), resent: resentOf(t.Resent, []limiter.State{s})})
	}
	if len(kept) == 0 {
		return
	}
	c.debugCounts("counters handed over kept until their receiver replicates them", statesOfGiven(kept), "peer", to.Name)
	c.replicas.keepGiven(c.mono(now), kept)
}

// keepGiven records counters this run handed over, each with the run it
// handed it to, the counts it holds, this run's own among them, and the
// records of counts sent again that it holds (see Core.keepGiven). A
// full store keeps none beyond its size.
func (r *replicaStore) keepGiven(m int64, given []givenCounter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.given == nil {
		r.given = map[limiter.Key]givenCounter{}
	}
	for _, g := range given {
		if _, ok := r.given[g.state.Key]; !ok && len(r.given) >= r.max {
			continue
		}
		g.at = m
		r.given[g.state.Key] = g
	}
}

// takeGiven removes and returns, sorted by key, the live counters this
// run handed over that pick chooses (by the run it handed them to).
func (r *replicaStore) takeGiven(now time.Time, pick func(to Peer, k limiter.Key) bool) []givenCounter {
	ns := now.UnixNano()
	r.mu.Lock()
	var out []givenCounter
	for k, g := range r.given {
		if !pick(g.to, k) {
			continue
		}
		delete(r.given, k)
		if g.state.Expires > ns {
			out = append(out, g)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b givenCounter) int { return cmpUint(uint64(a.state.Key), uint64(b.state.Key)) })
	return out
}

// givenTo returns the counter of k this run handed to to and keeps
// until to replicates it, if any.
func (r *replicaStore) givenTo(k limiter.Key, to Peer) (limiter.State, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.given[k]
	if !ok || g.to != to {
		return limiter.State{}, false
	}
	return g.state, true
}

// putPassed keeps states of owner that another node kept and passed on:
// each where this node keeps no replica of its key, an older one of the
// same run, or one of a counter whose run's last word on it the passed
// one holds (see lastWordOn). A full store refuses new keys. The records
// of counts sent again that the counters hold (resent) stay with the
// replicas: a replica passed on without them was taken over holding the
// counts with no record of them, and the counter of a run that applied
// the transfer they replace added them again
// (TestCountsSentAgainInAReplicaPassedOnAreNotAddedAgainByTheDeadRunsCounter).
func (r *replicaStore) putPassed(m int64, owner Peer, states []limiter.State, holds []Held, resent []Resent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range states {
		rep, ok := r.states[s.Key]
		held := holdsOf(holds, []limiter.State{s})
		again := resentOf(resent, []limiter.State{s})
		switch {
		case !ok && len(r.states) < r.max:
			r.states[s.Key] = replica{state: s, owner: owner, holds: held, resent: again, at: m, passed: true}
		case ok && rep.owner == owner && genIn(rep.holds, s.Key, owner) == genIn(held, s.Key, owner):
			rep.state = limiter.NewerState(rep.state, s)
			rep.holds = newerHolds(rep.holds, held)
			rep.resent = withResent(slices.Clone(rep.resent), again)
			r.states[s.Key] = rep
		case ok && rep.owner != owner && lastWordOn(held, rep):
			r.states[s.Key] = replica{state: s, owner: owner, holds: held, resent: again, at: m, passed: true}
		}
	}
}

// lastWordOn reports whether holds, a counter's, hold the last word of
// rep's run on the counter rep is a replica of (same run, same
// generation): the run let that counter go, and the counter holding its
// last word took it in. rep is stale then, a copy of counts the other
// counter holds, and holds nothing beyond its last word (see Held.Last).
// Kept instead of a replica of that counter passed on, it went as its run
// left (or went on as a dead run's), and the key was counted without
// either (TestAReplicaPassedOnReplacesAStaleReplicaOfTheRunItsCounterHolds:
// a rolling restart, the owner crashes and its successor, leaving, passes
// its replica on to a node that kept the successor's stale one: 41
// admitted of 30).
func lastWordOn(holds []Held, rep replica) bool {
	k := rep.state.Key
	gen := genIn(rep.holds, k, rep.owner)
	return slices.ContainsFunc(holds, func(h Held) bool {
		return h.Last && h.Run == rep.owner && h.Gen == gen && h.State.Key == k
	})
}

// newerHolds merges two lists of counts held: of each counter (run and
// generation), the record that stands (see newerHeld).
func newerHolds(a, b []Held) []Held {
	out := slices.Clone(a)
	for _, h := range b {
		if i := slices.IndexFunc(out, func(x Held) bool { return x.Run == h.Run && x.Gen == h.Gen && x.State.Key == h.State.Key }); i >= 0 {
			out[i] = newerHeld(out[i], h)
		} else {
			out = append(out, h)
		}
	}
	return out
}

// heldOf returns, for the counters of keys, the runs' counts they hold
// (see takeHeld), which stay here: a replica of the counters holds them
// too.
func (r *replicaStore) heldOf(keys []limiter.Key) []Held {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Held
	for _, k := range keys {
		for _, p := range r.promoted[k] {
			out = append(out, p.held())
		}
	}
	return out
}

// take removes and returns, sorted by key, the live replicas pick chooses.
func (r *replicaStore) take(now time.Time, pick func(owner Peer, k limiter.Key) bool) []limiter.State {
	taken := r.takeOwned(now, pick)
	out := make([]limiter.State, len(taken))
	for i, t := range taken {
		out[i] = t.state
	}
	return out
}

// takeOwned is take, with each replica's owner.
func (r *replicaStore) takeOwned(now time.Time, pick func(owner Peer, k limiter.Key) bool) []takenReplica {
	ns := now.UnixNano()
	r.mu.Lock()
	var out []takenReplica
	for k, rep := range r.states {
		if !pick(rep.owner, k) {
			continue
		}
		delete(r.states, k)
		if rep.state.Expires > ns {
			out = append(out, takenReplica{owner: rep.owner, state: rep.state, holds: rep.holds, resent: rep.resent, at: rep.at, passed: rep.passed, superseded: rep.superseded})
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b takenReplica) int { return cmpUint(uint64(a.state.Key), uint64(b.state.Key)) })
	return out
}

// supersede marks the replicas whose owner run owns their key by ring
// and has another successor there than self: the owner replicates the
// key there from now on, and a replica kept here falls behind its
// counter. A replica the owner sends here later replaces the mark (see
// put), marked anew by the ring of this node then: the owner took this
// node for the key's successor, but may have done so by an older ring
// than this node's. It drops
// the counters this run handed over and keeps for their receiver (see
// Core.keepGiven) where the receiver is in ring and this node succeeds
// it in the key no more, or it owns the key no more: another node
// replicates its counter, or its counter goes on to the key's new owner.
// A receiver out of ring is taken for dead: its takeover counts them.
func (r *replicaStore) supersede(ring *Ring, self string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, g := range r.given {
		i, ok := ring.index(g.to.Name)
		if !ok || ring.member(i).Peer() != g.to {
			continue
		}
		if first, second := ring.top2(k.Route()); first != i || second < 0 || ring.member(second).Name != self {
			delete(r.given, k)
		}
	}
	for k, rep := range r.states {
		if rep.superseded || !supersededBy(ring, self, rep.owner, k) {
			continue
		}
		rep.superseded = true
		r.states[k] = rep
	}
}

// supersededBy reports whether, by ring, owner owns k and another node
// than self succeeds it there: owner replicates k to that node, and a
// replica of it here falls behind its counter.
func supersededBy(ring *Ring, self string, owner Peer, k limiter.Key) bool {
	first, second := ring.top2(k.Route())
	return first >= 0 && second >= 0 && ring.member(first).Peer() == owner && ring.member(second).Name != self
}

// keeps reports whether a live replica pick chooses is kept, or a
// counter this run handed to the replica's run in place of one (see
// Core.keepGiven).
func (r *replicaStore) keeps(now time.Time, pick func(owner Peer, k limiter.Key) bool) bool {
	ns := now.UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, rep := range r.states {
		if rep.state.Expires > ns && pick(rep.owner, k) {
			return true
		}
	}
	for k, g := range r.given {
		if g.state.Expires > ns && pick(g.to, k) {
			return true // in place of the run's replica, which lacks it
		}
	}
	return false
}

// dropOf removes the replica of k if owner keeps it; it reports whether
// it did.
func (r *replicaStore) dropOf(k limiter.Key, owner Peer) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g, ok := r.given[k]; ok && g.to == owner {
		delete(r.given, k) // owner handed the key's counter on, what it was given with it
	}
	if rep, ok := r.states[k]; ok && rep.owner == owner {
		delete(r.states, k)
		return true
	}
	return false
}

// takeNewerOf takes out the replicas owner keeps of the keys of states,
// copies of the same counters as states, and returns, key by key, the
// newer of the two, and the newer of the other runs' counts both hold.
// Where states are owner's last word on its counters (last), they stand
// as they are: a replica of them, an earlier copy, holds nothing beyond
// (what it holds more was given back since).
func (r *replicaStore) takeNewerOf(owner Peer, states []limiter.State, holds []Held, last bool) ([]limiter.State, []Held) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(states)
	for i, s := range out {
		rep, ok := r.states[s.Key]
		if !ok || rep.owner != owner || genIn(rep.holds, s.Key, owner) != genIn(holds, s.Key, owner) {
			continue // another counter of the run's, if any: not a copy
		}
		delete(r.states, s.Key)
		if !last {
			out[i] = limiter.NewerState(rep.state, s)
		}
		holds = newerHolds(holds, rep.holds)
	}
	return out, holds
}

// get returns the replica of k and its owner.
func (r *replicaStore) get(k limiter.Key) (limiter.State, Peer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep, ok := r.states[k]
	return rep.state, rep.owner, ok
}

// drop removes the replicas of keys.
func (r *replicaStore) drop(keys []limiter.Key) {
	r.mu.Lock()
	for _, k := range keys {
		delete(r.states, k)
	}
	r.mu.Unlock()
}

// sweep drops expired replicas.
func (r *replicaStore) sweep(now time.Time) {
	r.mu.Lock()
	r.sweepLocked(now.UnixNano())
	r.mu.Unlock()
}

func (r *replicaStore) sweepLocked(ns int64) {
	for k, rep := range r.states {
		if rep.state.Expires <= ns {
			delete(r.states, k)
		}
	}
	for k, g := range r.given {
		if g.state.Expires <= ns {
			delete(r.given, k)
		}
	}
}

// len returns how many replicas are held.
func (r *replicaStore) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.states)
}

// Replicas returns how many counters this node keeps for the owners it
// succeeds.
func (c *Core) Replicas() int { return c.replicas.len() }

// replicate sends the counters changed since the last time to their
// successors, one transfer per successor at a time.
func (c *Core) replicate(now time.Time, m int64) {
	keys := c.dirty.drain()
	if len(keys) == 0 {
		return
	}
	v := c.view.Load()
	if v.self < 0 || v.ring.Len() < 2 {
		return // nobody to replicate to
	}
	slices.Sort(keys)
	states := c.engine.StatesOf(now, keys)
	held := append(c.replicas.heldOf(keysOf(states)), c.replicas.ownHeld(c.self, states)...) // the replicas hold them too, and name their counters' generations
	bySucc := map[string][]limiter.State{}
	succs := map[string]Member{}
	for _, s := range states {
		owner, second := v.ring.top2(s.Key.Route())
		if owner != v.self || second < 0 {
			continue // no longer ours: the hand-off moves it
		}
		succ := v.ring.member(second)
		bySucc[succ.Name] = append(bySucc[succ.Name], s)
		succs[succ.Name] = succ
	}
	applied := c.takeApplied()
	for name := range applied {
		if _, ok := bySucc[name]; !ok {
			if i, in := v.ring.index(name); in && name != c.self.Name {
				bySucc[name] = nil
				succs[name] = v.ring.member(i)
			}
		}
	}
	for _, name := range sortedKeys(bySucc) {
		list := bySucc[name]
		p := c.peers.get(name)
		if p == nil || !p.calls() || c.out.pendingFor(name, purposeReplica) > 0 {
			// Not reachable, or a replica is on its way: these go with the
			// next one, so a successor that comes back gets them.
			c.dirty.noteStates(list)
			c.requeueApplied(name, applied[name])
			continue
		}
		parts := SplitStates(list, TransferBytes)
		if len(parts) == 0 {
			parts = [][]limiter.State{nil}
		}
		for i, part := range parts {
			c.stats.ReplicaStates.Add(uint64(len(part)))
			t := c.out.transfer(succs[name].Peer(), Transfer{Mode: ModeReplica, States: part, Holds: holdsOf(held, part), Resent: c.replicas.resentHeldOf(keysOf(part))}, purposeReplica, m, false)
			if c.majority(v) {
				c.out.tagRing(t.Seq, v.ring) // a ring without a majority promotes nothing
			}
			if i == 0 {
				c.out.attachApplied(t.Seq, applied[name], m)
			} else {
				c.out.attachApplied(t.Seq, nil, m)
			}
		}
	}
}

// appliedLog queues, per successor, the transfers this node applied that
// touched keys it succeeds them in, for the next replica.
type appliedLog struct {
	mu    sync.Mutex
	queue map[string][]Applied
}

// noteApplied queues transfer t from from for the successors of its keys.
func (c *Core) noteApplied(from Peer, t Transfer) {
	v := c.view.Load()
	if v.self < 0 || v.ring.Len() < 2 {
		return
	}
	a := Applied{From: from, Seq: t.Seq}
	var succs []string
	note := func(k limiter.Key) {
		if _, second := v.ring.top2(k.Route()); second >= 0 {
			if name := v.ring.member(second).Name; !slices.Contains(succs, name) {
				succs = append(succs, name)
			}
		}
	}
	for _, s := range t.States {
		note(s.Key)
	}
	for _, r := range t.Reqs {
		note(r.Key)
	}
	c.appliedLog.mu.Lock()
	if c.appliedLog.queue == nil {
		c.appliedLog.queue = map[string][]Applied{}
	}
	for _, name := range succs {
		c.appliedLog.queue[name] = append(c.appliedLog.queue[name], a)
	}
	c.appliedLog.mu.Unlock()
}

// takeApplied returns and empties the queues.
func (c *Core) takeApplied() map[string][]Applied {
	c.appliedLog.mu.Lock()
	defer c.appliedLog.mu.Unlock()
	q := c.appliedLog.queue
	c.appliedLog.queue = nil
	return q
}

// requeueApplied puts back what a replica that failed carried.
func (c *Core) requeueApplied(name string, list []Applied) {
	if len(list) == 0 {
		return
	}
	c.appliedLog.mu.Lock()
	if c.appliedLog.queue == nil {
		c.appliedLog.queue = map[string][]Applied{}
	}
	c.appliedLog.queue[name] = append(list, c.appliedLog.queue[name]...)
	c.appliedLog.mu.Unlock()
}

// replicaFailed drops a replica transfer that got no answer and notes its
// keys again: the next replica carries their newer counters, and what it
// said was applied.
func (c *Core) replicaFailed(seq uint64) {
	if pt, ok := c.out.settle(seq); ok {
		c.dirty.noteStates(pt.t.States)
		c.requeueApplied(pt.to.Name, pt.t.Applied)
	}
}

// resync marks for replication every counter this node owns in ring whose
// successor differs from the one prev named: a new successor holds no
// replica of keys that have not changed since.
func (c *Core) resync(now time.Time, prev, ring *Ring) {
	if ring.Len() < 2 {
		return
	}
	self, ok := ring.index(c.self.Name)
	if !ok {
		return
	}
	var keys []limiter.Key
	c.engine.Range(now, func(s limiter.State) bool {
		if s.Kind >= limiter.KindGrant {
			return true
		}
		route := s.Key.Route()
		owner, second := ring.top2(route)
		if owner != self || second < 0 {
			return true
		}
		if was, ok := prev.Successor(route); !ok || was.Name != ring.member(second).Name {
			keys = append(keys, s.Key)
		}
		return true
	})
	c.dirty.noteKeys(keys)
}

// keyMarks records keys, each with the instant (mono) it was last marked,
// until they are forgotten as too old. The zero value is empty and ready:
// its map is made on the first mark. Its owner's lock guards it.
type keyMarks map[limiter.Key]int64

// mark records keys at m.
func (s *keyMarks) mark(m int64, keys ...limiter.Key) {
	if len(keys) == 0 {
		return
	}
	if *s == nil {
		*s = keyMarks{}
	}
	for _, k := range keys {
		(*s)[k] = m
	}
}

// has reports whether k is marked.
func (s keyMarks) has(k limiter.Key) bool {
	_, ok := s[k]
	return ok
}

// take reports whether k is marked, and forgets it.
func (s keyMarks) take(k limiter.Key) bool {
	_, ok := s[k]
	delete(s, k)
	return ok
}

// forgetBefore forgets the keys last marked before cut.
func (s keyMarks) forgetBefore(cut int64) {
	for k, at := range s {
		if at < cut {
			delete(s, k)
		}
	}
}
