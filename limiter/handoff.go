package limiter

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"time"
)

// State is one counter as it moves between engines, when a key changes
// owner. It holds no more than the engine keeps: the key's hash and its
// timestamps and counts.
type State struct {
	Key     Key
	Kind    uint8 // what it holds: a counter (window, bucket, reputation), KindGrant or KindLeases
	Stamp   int64 // window start, token bucket arrival time or reputation change, Unix ns
	Expires int64 // Unix ns after which the counter equals a fresh one
	Cur     uint32
	Prev    uint32

	// For KindGrant: the grant and what was spent of it (Expires is the
	// grant's).
	Grant       Grant
	Used        int64
	UsedVersion [16]byte
	// For KindLeases: the leases held.
	Leases []Lease
}

// Kinds of State that are not counters.
const (
	KindGrant  uint8 = 16
	KindLeases uint8 = 17
)

func grantStateOf(k Key, g grantState) State {
	return State{Key: k, Kind: KindGrant, Expires: g.Expires, Grant: g.Grant, Used: g.used, UsedVersion: g.usedVersion}
}

func leasesStateOf(k Key, list []Lease, now int64) (State, bool) {
	var live []Lease
	var last int64
	for _, l := range list {
		if l.Expires > now {
			live = append(live, l)
			last = max(last, l.Expires)
		}
	}
	return State{Key: k, Kind: KindLeases, Expires: last, Leases: live}, len(live) > 0
}

func (s State) entry() entry {
	return entry{stamp: s.Stamp, expires: s.Expires, cur: s.Cur, prev: s.Prev}.withKind(s.Kind)
}

func stateOf(k Key, e entry) State {
	st := State{Key: k, Kind: e.kind(), Stamp: e.stamp, Expires: e.expires, Cur: e.cur}
	if st.Kind == kindWindow {
		st.Prev = e.prev
	}
	return st
}

// Extract removes and returns up to max live counters (all if max <= 0)
// whose key satisfies move, in one pass over the shards; each shard is
// locked while it is searched, so a counter is either extracted or updated
// by a concurrent Take, never both. They come sorted by key, then kind:
// what a caller sends of them, and in which order, is then a function of
// the engine's contents, not of the order its maps are walked in (which
// counters a max > 0 leaves behind still is).
func (e *Engine) Extract(now time.Time, move func(Key) bool, limit int) []State {
	ns := now.UnixNano()
	var out []State
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		for k, v := range s.entries {
			if !move(k) {
				continue
			}
			s.remove(k, v)
			if v.expires > ns {
				out = append(out, stateOf(k, v.entry))
			}
		}
		for k, g := range s.grants {
			if move(k) {
				delete(s.grants, k)
				if g.Expires > ns {
					out = append(out, grantStateOf(k, g))
				}
			}
		}
		for k, list := range s.leases {
			if move(k) {
				delete(s.leases, k)
				if st, ok := leasesStateOf(k, list, ns); ok {
					out = append(out, st)
				}
			}
		}
		s.mu.Unlock()
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	slices.SortFunc(out, func(a, b State) int { return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Kind, b.Kind)) })
	return out
}

// StatesOf returns copies of the live counters of the given keys, leaving
// them in place: what an owner sends its successor as a replica.
func (e *Engine) StatesOf(now time.Time, keys []Key) []State {
	ns := now.UnixNano()
	var out []State
	for _, k := range keys {
		s := &e.shards[shardOf(k)]
		s.mu.Lock()
		if v, ok := s.entries[k]; ok && v.expires > ns {
			out = append(out, stateOf(k, v.entry))
		}
		s.mu.Unlock()
	}
	return out
}

// ExtractKeys removes and returns the live counters of the given
// keys, for a new owner that asks for them.
func (e *Engine) ExtractKeys(now time.Time, keys []Key) []State {
	ns := now.UnixNano()
	var out []State
	for _, k := range keys {
		s := &e.shards[shardOf(k)]
		s.mu.Lock()
		if v, ok := s.entries[k]; ok {
			s.remove(k, v)
			if v.expires > ns {
				out = append(out, stateOf(k, v.entry))
			}
		}
		if g, ok := s.grants[k]; ok {
			delete(s.grants, k)
			if g.Expires > ns {
				out = append(out, grantStateOf(k, g))
			}
		}
		if list, ok := s.leases[k]; ok {
			delete(s.leases, k)
			if st, ok := leasesStateOf(k, list, ns); ok {
				out = append(out, st)
			}
		}
		s.mu.Unlock()
	}
	return out
}

// Merge adds counters handed over by another engine to this one's. Counts
// of the same window add up, so requests admitted on either side are all
// accounted for; a token bucket adds the time the other side had spent.
// New keys make room as Take does, so the engine stays within MaxKeys.
func (e *Engine) Merge(now time.Time, states []State) { e.merge(now, states, false) }

// MergeNewer merges counters that may be older copies of this engine's
// own (a snapshot read back, or what a node held before it was declared
// dead and came back): for each key the newer state wins, never the sum.
// Counts of the same window take the larger of the two; a later window
// replaces an earlier one; a token bucket keeps the later arrival time; a
// grant keeps the later one, and of the same grant the larger use. Leases
// are the union, as in Merge.
func (e *Engine) MergeNewer(now time.Time, states []State) { e.merge(now, states, true) }

// merge is Merge, or MergeNewer when newer.
func (e *Engine) merge(now time.Time, states []State, newer bool) {
	ns := now.UnixNano()
	for _, st := range states {
		if st.Expires <= ns {
			continue
		}
		s := &e.shards[shardOf(st.Key)]
		s.mu.Lock()
		switch st.Kind {
		case KindGrant:
			in := grantState{Grant: st.Grant, used: st.Used, usedVersion: st.UsedVersion}
			cur, ok := s.grants[st.Key]
			switch {
			case !ok || cur.Expires <= ns || in.Created > cur.Created:
				s.grants[st.Key] = in
			case in.Version == cur.Version && in.usedVersion == cur.usedVersion && newer:
				cur.used = max(cur.used, in.used) // the same spending, seen later
				s.grants[st.Key] = cur
			case in.Version == cur.Version && in.usedVersion == cur.usedVersion:
				cur.used += in.used // both sides spent from this grant
				s.grants[st.Key] = cur
			}
		case KindLeases:
			s.leases[st.Key] = mergeLeases(s.leases[st.Key], st.Leases)
		default:
			cur, ok := s.entries[st.Key]
			if !ok && !e.makeRoom(s, ns, 0) {
				// The table is full of counters that may not be evicted
				// (exhausted ones): the bound on memory wins, and this
				// counter is not kept.
				break
			}
			next := st.entry()
			switch {
			case ok && cur.expires > ns && newer:
				next = newerEntry(cur.entry, next)
			case ok && cur.expires > ns:
				next = mergeEntries(cur.entry, next, ns)
			}
			cur.entry = next // the key table's note stays this node's
			s.entries[st.Key] = cur
			if next.kind() == kindReputation {
				e.reps.add(st.Key)
			}
		}
		s.mu.Unlock()
	}
}

// Lower takes counts off this engine's counters: each of states is what
// a copy of a counter added here held beyond the counter itself, as its
// own run later handed it over (units given back there since the copy
// was taken), as SubState gives it at now. Windows come down window by
// window, never below nothing; a bucket's arrival time comes back by the
// time the copy's had moved beyond the counter's, never before now (a
// bucket owes nothing then). Other counters, and keys not held, are left
// as they are.
func (e *Engine) Lower(now time.Time, states []State) {
	ns := now.UnixNano()
	for _, st := range states {
		if st.Kind >= KindGrant || st.Expires <= ns {
			continue
		}
		s := &e.shards[shardOf(st.Key)]
		s.mu.Lock()
		if cur, ok := s.entries[st.Key]; ok && cur.expires > ns {
			cur.entry = lessEntry(cur.entry, st.entry(), ns)
			s.entries[st.Key] = cur
		}
		s.mu.Unlock()
	}
}

// LessState returns counter s with the counts of less (as SubState gives
// them at now) taken off, as Lower takes them off a counter the engine
// holds.
func LessState(now time.Time, s, less State) State {
	if s.Kind >= KindGrant || less.Kind >= KindGrant {
		return s
	}
	return stateOf(s.Key, lessEntry(s.entry(), less.entry(), now.UnixNano()))
}

// lessEntry returns a less b, b what a copy held beyond a as SubState
// gives it at now: window counts window by window, never below nothing;
// a bucket's arrival time by what b owes beyond now, never before now.
// a of another kind is returned as it is.
func lessEntry(a, b entry, now int64) entry {
	if a.kind() == kindBucket && b.kind() == kindBucket {
		moved := b.stamp - now
		if moved <= 0 || a.stamp <= now {
			return a
		}
		tat := max(a.stamp-moved, now)
		return entry{stamp: tat, expires: tat, prev: markBucket}
	}
	if a.kind() != kindWindow || b.kind() != kindWindow {
		return a
	}
	sub := func(x, y uint32) uint32 { return x - min(x, y) }
	w := (a.expires - a.stamp) / 2
	switch {
	case a.stamp == b.stamp:
		a.cur, a.prev = sub(a.cur, b.cur), sub(a.prev, b.prev)
	case a.stamp-b.stamp == w:
		a.prev = sub(a.prev, b.cur) // b's current window is a's previous one
	}
	return a
}

// mergeEntries combines two live states of one key: what both sides
// counted, added.
func mergeEntries(a, b entry, now int64) entry {
	if a.kind() == kindBucket && b.kind() == kindBucket {
		// Arrival times: add what b had spent beyond now to a. It stays
		// the key's counter, at nothing if neither owes any more, until
		// the later arrival time either had, as a bucket given back all
		// it owed does: merged as one ending now, units given back again
		// had no counter of the key to be put back into
		// (TestUnitsGivenBackAgainInPlaceOfAllTheDeadOwnerHeldArePutBackWhereItsCountersCome).
		tat := max(a.stamp, now) + max(0, b.stamp-now)
		return entry{stamp: tat, expires: max(tat, a.expires, b.expires), prev: markBucket}
	}
	return combineEntries(a, b, addCounts)
}

// AddState returns the counter Merge keeps for a key that held a when b
// is merged in: what both sides counted, added. Grants and leases are not
// counters: b is returned for them.
func AddState(now time.Time, a, b State) State {
	if a.Kind >= KindGrant || b.Kind >= KindGrant {
		return b
	}
	return stateOf(b.Key, mergeEntries(a.entry(), b.entry(), now.UnixNano()))
}

// BucketAtRate returns token bucket s, counted where each unit admitted
// moved its arrival time on by counted, as counted where each unit moves
// it on by at: what it owes beyond now, made units of counted, is owed in
// units of at (rounded up, to the nanosecond: never less than it owes).
// A bucket counted at a share of a limit's rate (a node's fallback
// share) goes so to the key's owner, which counts it at the limit's
// rate: as it is, each unit would count there as many of the owner's
// units as its own interval holds. Other counters, a bucket owing
// nothing, and intervals not positive leave s as it is.
func BucketAtRate(now time.Time, s State, counted, at time.Duration) State {
	ns := now.UnixNano()
	if s.Kind != kindBucket || counted <= 0 || at <= 0 || counted == at || s.Stamp <= ns {
		return s
	}
	hi, lo := bits.Mul64(uint64(s.Stamp-ns), uint64(at))
	room := uint64(math.MaxInt64 - ns)
	owed := room
	if hi < uint64(counted) {
		q, r := bits.Div64(hi, lo, uint64(counted))
		if r > 0 {
			q++
		}
		owed = min(q, room)
	}
	tat := ns + int64(owed)
	return stateOf(s.Key, entry{stamp: tat, expires: tat, prev: markBucket})
}

// RefundState returns counter s with req's units, counted at the instant
// at, given back as RefundAt gives them back from a counter the engine
// holds: the record of a counter's counts lowered as the counter was.
// Grants and leases are not counters: s is returned for them.
func RefundState(now, at time.Time, s State, req Request) State {
	if s.Kind >= KindGrant || req.Limit.Algorithm == Concurrency {
		return s
	}
	return stateOf(s.Key, req.Limit.refund(s.entry(), now.UnixNano(), at.UnixNano(), req.cost()))
}

// ChargeState returns counter s with req's units, counted at the instant
// at, spent again as ChargeAt spends them on a counter the engine holds:
// in the window of at, or as a bucket's debt; s may be a counter at
// nothing (State{Key: k}). Grants and leases are not counters: s is
// returned for them.
func ChargeState(now, at time.Time, s State, req Request) State {
	if s.Kind >= KindGrant || req.Limit.Algorithm == Concurrency {
		return s
	}
	e := s.entry()
	if e.expires <= now.UnixNano() {
		e = entry{}
	}
	return stateOf(s.Key, req.Limit.charge(e, now.UnixNano(), at.UnixNano(), min(req.cost(), int64(MaxQuota))))
}

// UnitsOff returns the units of req that came off counter s to leave
// after, s given back req's units (RefundState): a window's counts, or a
// bucket's debt in whole units, rounded up. A counter holding fewer than
// req's units gives back what it holds, and no more. Grants and leases
// hold no units.
func UnitsOff(req Request, s, after State) int64 {
	if s.Kind >= KindGrant || after.Kind >= KindGrant {
		return 0
	}
	a, b := s.entry(), after.entry()
	switch {
	case a.kind() == kindBucket && b.kind() == kindBucket:
		d := a.stamp - b.stamp
		if d <= 0 {
			return 0
		}
		iv := req.Limit.interval()
		return (d + iv - 1) / iv
	case a.kind() == kindWindow && b.kind() == kindWindow:
		return int64(a.cur) + int64(a.prev) - int64(b.cur) - int64(b.prev)
	}
	return 0
}

// SubState returns what later counted beyond earlier, an earlier copy of
// the same counter (a replica of it), as a counter to add where earlier's
// counts are held already; ok is false when later counted nothing more.
// Windows subtract window by window; a bucket gives the time its arrival
// time moved on beyond earlier's, or beyond now where earlier's bucket has
// refilled, from now; a reputation, or a counter whose algorithm
// changed, is later itself (merging keeps the worse score, or the fuller
// counter). Grants and leases are not counters: later is returned.
func SubState(now time.Time, later, earlier State) (delta State, ok bool) {
	if later.Kind >= KindGrant || earlier.Kind >= KindGrant {
		return later, true
	}
	a, b := later.entry(), earlier.entry()
	switch {
	case a.kind() != b.kind(), a.kind() == kindReputation:
		return later, true
	case a.kind() == kindBucket:
		// What later took beyond earlier, as earlier's debt stands now:
		// a debt earlier's bucket refilled by now is no longer owed.
		moved := a.stamp - max(b.stamp, now.UnixNano())
		if moved <= 0 {
			return State{}, false
		}
		tat := now.UnixNano() + moved
		return stateOf(later.Key, entry{stamp: tat, expires: tat, prev: markBucket}), true
	}
	if a.stamp < b.stamp {
		return State{}, false // not an earlier copy
	}
	a = lessEntry(a, b, now.UnixNano())
	if a.cur == 0 && a.prev == 0 {
		return State{}, false
	}
	return stateOf(later.Key, a), true
}

// NewerState returns, of two counters of one key (one possibly an older
// copy of the other), what MergeNewer would keep. Grants and leases are not
// counters: b is returned for them.
func NewerState(a, b State) State {
	if a.Kind >= KindGrant || b.Kind >= KindGrant {
		return b
	}
	return stateOf(b.Key, newerEntry(a.entry(), b.entry()))
}

// newerEntry combines two live states of one key, one possibly an older
// copy of the other: the newer wins, counts of one window take the larger.
func newerEntry(a, b entry) entry {
	if a.kind() == kindBucket && b.kind() == kindBucket {
		if b.stamp > a.stamp { // the later arrival time spent more
			return b
		}
		return a
	}
	return combineEntries(a, b, func(x, y uint32) uint32 { return max(x, y) })
}

// combineEntries combines two live states of one key other than two
// buckets, with counts of the same window combined by count.
func combineEntries(a, b entry, count func(x, y uint32) uint32) entry {
	switch {
	case a.kind() != b.kind():
		// Different algorithms (the zone changed): keep the fuller one.
		if b.expires > a.expires {
			return b
		}
		return a
	case a.kind() == kindReputation:
		// Keep the worse score: a violation on either side counts.
		if b.cur < a.cur {
			return b
		}
		return a
	}
	// Windows: expires is stamp + 2 windows, so the window length is known.
	w := (a.expires - a.stamp) / 2
	if b.stamp > a.stamp {
		a, b = b, a // a is the newer window
	}
	switch {
	case a.stamp == b.stamp:
		a.cur = count(a.cur, b.cur)
		a.prev = count(a.prev, b.prev)
	case a.stamp-b.stamp == w:
		a.prev = count(a.prev, b.cur) // b's current window is a's previous one
	}
	return a
}

// addCounts adds two counts, stopping at MaxQuota, so a count never takes
// a value prev uses as a mark.
func addCounts(a, b uint32) uint32 {
	return uint32(min(uint64(a)+uint64(b), MaxQuota))
}

// mergeLeases is the union of two lease lists, the later expiry winning.
func mergeLeases(a, b []Lease) []Lease {
	out := slices.Clone(a)
	for _, l := range b {
		if i := slices.IndexFunc(out, func(x Lease) bool { return x.ID == l.ID }); i >= 0 {
			out[i].Expires = max(out[i].Expires, l.Expires)
		} else {
			out = append(out, l)
		}
	}
	return out
}

// Range calls fn for every live counter, grant and lease list until fn
// returns false. Each shard is locked while it is visited, so fn must not
// call the engine.
func (e *Engine) Range(now time.Time, fn func(State) bool) {
	ns := now.UnixNano()
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		ok := true
		for k, v := range s.entries {
			if ok && v.expires > ns {
				ok = fn(stateOf(k, v.entry))
			}
		}
		for k, g := range s.grants {
			if ok && g.Expires > ns {
				ok = fn(grantStateOf(k, g))
			}
		}
		for k, list := range s.leases {
			if st, live := leasesStateOf(k, list, ns); ok && live {
				ok = fn(st)
			}
		}
		s.mu.Unlock()
		if !ok {
			return
		}
	}
}

// Has reports whether the engine holds a live counter for k.
func (e *Engine) Has(now time.Time, k Key) bool {
	s := &e.shards[shardOf(k)]
	s.mu.Lock()
	v, ok := s.entries[k]
	s.mu.Unlock()
	return ok && v.expires > now.UnixNano()
}
