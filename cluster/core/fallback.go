package core

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Fallback. A node decides by its fallback mode the requests whose owner
// it cannot reach, or that their owner cannot count yet (NotYetMine): local
// (the default) counts them in a fallback engine of its own, open admits,
// closed denies. In local mode every limit is multiplied by the fallback
// ratio and by the client's last known reputation factor, and never
// exceeds this node's share of what the key's owner last said remained (or
// of the whole limit, if it said nothing): remaining / (members − 1); an
// owner falling back for its own key says it to itself, by its counter. The
// share is kept per key for the window, exactly, across outages: what this
// node admitted and sent on is taken off it, so a node admits at most its
// share in all the outages of a window together. What a node admits in
// fallback is sent to the key's owner, in transfers (ModeAdd), as soon as
// that owner answers and counts the key, with the cancels of the take
// items of those keys this node sent the owner and gave up on, if the
// owner has not acknowledged them yet; a fallback denial never touches the
// client's reputation.

// fallback is a node's fallback engine and the shares it counts against.
// It is safe for concurrent use.
type fallback struct {
	engine    *limiter.Engine
	modeBits  atomic.Uint32
	ratioBits atomic.Uint64

	// writes counts what may have added a counter to engine (see wrote);
	// emptyAt is writes when engine was last found empty. Equal, nothing
	// was added since, and empty answers without locking the engine.
	writes  atomic.Uint64
	emptyAt atomic.Uint64

	mu        sync.Mutex
	shares    map[limiter.Key]*share
	maxShares int
	sweptAt   int64
	// held records, per key, the runs' counters the engine's counts of
	// the key hold (see Held): counters that came while this node had no
	// majority wait here as additions, and the records go with them
	// wherever they go (see keepHeld, takeHeld).
	held map[limiter.Key][]Held
	// resent records, per key, the counts the engine's counts of the key
	// hold that were sent again in place of transfers to runs taken for
	// dead (see Transfer.Resent): they go with the counts wherever they
	// go (see keepResent, takeResent).
	resent map[limiter.Key][]Resent
	// rates records, per key, the rate the engine's token bucket counter
	// of the key is counted at (see rate): written as the counter is,
	// with outMu held (read), and taken with it (see extract).
	rates map[limiter.Key]rate

	// outMu orders what engine admits against the counters that leave
	// it (see extract, take): outs numbers the extractions, and outAt
	// holds, per key, the number of the last one that took the key's
	// counter, until its window is over. A unit admitted before that
	// extraction left with the counter, wherever it went; one admitted
	// after is in a counter begun anew here (see here).
	// Takes share outMu (read), extractions hold it alone.
	outMu sync.RWMutex
	outs  uint64
	outAt map[limiter.Key]extraction
}

// extraction is the last extraction of a key's fallback counter: its
// number, and when the window of the counter it took is over (Unix ns).
type extraction struct {
	n       uint64
	expires int64
}

// rate is the rate a key's fallback token bucket counter is counted at:
// counted, the least interval a unit it admitted moved its arrival time on
// by (its share of the limit's rate: see fallbackLimits); of, the most
// interval of the limit's own rate, the owner's. plain: the counter is
// counted at the owner's rate, at an interval not known here (counts kept
// here for the key's owner, a charge at the rate asked), and goes on as
// it is. The record holds until expires (Unix ns): no write moved the
// counter's arrival time beyond.
//
// What the counter owes is sent on as owed at the owner's rate (see
// limiter.BucketAtRate): the units admitted, each once. Sent as it is,
// each unit counted at the owner as many of its units as the share's
// interval holds (2 admitted of a share of 15 of 30 counted 4), and
// requests under the limit were refused there. Deciding by a bucket of
// the owner's rate instead, the nodes falling back together would refill
// faster than the limit. A counter holds units of one rate throughout:
// it is converted to the interval a take counts at where that differs
// from the one on record (a client's reputation factor, a ratio changed:
// see rerate), and counts at the owner's rate join it converted to the
// interval it is counted at (see merge). Of intervals that differ still (takes at both
// at once), the least counted and the most of the owner's count a unit
// as no less than one.
type rate struct {
	counted, of time.Duration
	plain       bool
	expires     int64
}

// share is one key's fallback share in one window.
type share struct {
	left    int64 // what the owner last said remained, or the whole quota
	of      int64 // the nodes that may count the key in fallback, when it was made
	spent   int64 // what this node admitted in fallback and sent on since
	expires int64 // Unix ns: the window is over
}

func newFallback(maxKeys int, mode FallbackMode, ratio float64) *fallback {
	f := &fallback{
		engine:    limiter.New(limiter.Config{MaxKeys: maxKeys}),
		shares:    map[limiter.Key]*share{},
		maxShares: maxKeys,
		outAt:     map[limiter.Key]extraction{},
	}
	f.set(mode, ratio)
	return f
}

// set changes the mode and the ratio; a ratio outside (0, 1] means
// DefaultFallbackRatio.
func (f *fallback) set(mode FallbackMode, ratio float64) {
	if ratio <= 0 || ratio > 1 {
		ratio = DefaultFallbackRatio
	}
	f.modeBits.Store(uint32(mode))
	f.ratioBits.Store(math.Float64bits(ratio))
}

// wrote records that engine may hold a counter more: call it after each
// call that may have added one, so that an empty that did not see the
// counter sees writes changed.
func (f *fallback) wrote() { f.writes.Add(1) }

// empty reports whether engine holds no counter. It reads every shard of
// the engine only when something was written since it last found it empty.
func (f *fallback) empty() bool {
	w := f.writes.Load()
	if f.emptyAt.Load() == w {
		return true
	}
	if f.engine.Stats().Keys > 0 {
		return false
	}
	f.emptyAt.Store(w) // a write after w was read makes writes differ again
	return true
}

// keepHeld records that the engine's counts hold the runs' counters holds
// names (of each counter, the record that stands: see newerHeld), and forgets the records of
// their keys' windows over by now (Unix ns); the others' go with the
// timed sweep (see sweep). A counter kept here as additions without
// them would be added again wherever a copy of it (a replica sent on, a
// snapshot read back) meets the counts.
func (f *fallback) keepHeld(holds []Held, now int64) {
	if len(holds) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held == nil {
		f.held = map[limiter.Key][]Held{}
	}
	for _, h := range holds {
		k := h.State.Key
		f.held[k] = slices.DeleteFunc(f.held[k], func(x Held) bool { return x.State.Expires <= now })
		i := slices.IndexFunc(f.held[k], func(x Held) bool { return x.Run == h.Run && x.Gen == h.Gen })
		if i < 0 {
			f.held[k] = append(f.held[k], h)
			continue
		}
		f.held[k][i] = newerHeld(f.held[k][i], h)
	}
}

// takeHeld returns the records of the runs' counters the counts states,
// taken out of the engine, hold, sorted, and forgets them here: they go
// with the counts.
func (f *fallback) takeHeld(states []limiter.State) []Held {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Held
	for _, s := range states {
		if hs, ok := f.held[s.Key]; ok {
			out = append(out, hs...)
			delete(f.held, s.Key)
		}
	}
	return sortHolds(out)
}

// keepResent records that the engine's counts hold the counts of list,
// sent again in place of transfers, and forgets the records of their
// keys' windows over by now (Unix ns); the others' go with the timed
// sweep (see sweep). Kept here without them, the counts joined their
// key's counter with no record of them, and the counter of a run that
// applied the transfer they replace added them again where it met them
// (TestCountsSentAgainKeptInFallbackAreNotAddedAgainByTheDeadRunsCounter).
func (f *fallback) keepResent(list []Resent, now int64) {
	if len(list) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.resent == nil {
		f.resent = map[limiter.Key][]Resent{}
	}
	for _, x := range list {
		k := x.key()
		xs := slices.DeleteFunc(f.resent[k], func(y Resent) bool { return y.expires() <= now })
		f.resent[k] = withResent(xs, []Resent{x})
	}
}

// takeResent returns the records of counts sent again that the counts
// states, taken out of the engine, hold, and forgets them here: they go
// with the counts.
func (f *fallback) takeResent(states []limiter.State) []Resent {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Resent
	for _, s := range states {
		if xs, ok := f.resent[s.Key]; ok {
			out = append(out, xs...)
			delete(f.resent, s.Key)
		}
	}
	return out
}

func (f *fallback) mode() FallbackMode { return FallbackMode(f.modeBits.Load()) }
func (f *fallback) ratio() float64     { return math.Float64frombits(f.ratioBits.Load()) }

// available returns what this node may still admit of k in fallback in
// this window: its share (one of others) of what the owner last said
// remained (told), or of quota, less what it admitted and sent on. The
// share is made at the first call of the window, and holds for it: a
// membership change meanwhile does not make it larger (the nodes falling
// back together would admit more than the limit). When the table is full
// of live shares, nothing is available.
func (f *fallback) available(k limiter.Key, quota int64, told func() (int64, bool), now int64, window time.Duration, others int64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.shares[k]
	if s == nil || s.expires <= now {
		if len(f.shares) >= f.maxShares {
			f.sweepLocked(now)
			if len(f.shares) >= f.maxShares {
				return 0
			}
		}
		left := quota
		if l, ok := told(); ok {
			left = min(l, quota)
		}
		s = &share{left: left, of: max(others, 1), expires: now + int64(window)}
		f.shares[k] = s
	}
	share := s.left / s.of
	if quota == 1 && s.left == 1 {
		// A limit of one (a one-use challenge proof's ID): shared by two
		// or more nodes it would round to nothing, and a genuine proof
		// would be refused as a replay on every node while the ID's owner
		// is away. Each node may admit it once.
		share = 1
	}
	return share - s.spent
}

// spend records that this node admitted used of k in fallback and sent it
// on (or counted it as its owner).
func (f *fallback) spend(k limiter.Key, used int64, now int64) {
	f.mu.Lock()
	if s := f.shares[k]; s != nil && s.expires > now {
		s.spent += used
	}
	f.mu.Unlock()
}

// sweep drops expired shares, the records of extractions, of counters
// held and of counts sent again of windows over, and one shard of
// expired fallback counters.
func (f *fallback) sweep(now time.Time) {
	f.engine.Sweep(now)
	ns := now.UnixNano()
	f.mu.Lock()
	f.sweepLocked(ns)
	for k, hs := range f.held {
		if hs = slices.DeleteFunc(hs, func(h Held) bool { return h.State.Expires <= ns }); len(hs) == 0 {
			delete(f.held, k)
		} else {
			f.held[k] = hs
		}
	}
	for k, xs := range f.resent {
		if xs = slices.DeleteFunc(xs, func(x Resent) bool { return x.expires() <= ns }); len(xs) == 0 {
			delete(f.resent, k)
		} else {
			f.resent[k] = xs
		}
	}
	for k, r := range f.rates {
		if r.expires <= ns {
			delete(f.rates, k)
		}
	}
	f.mu.Unlock()
	f.outMu.Lock()
	for k, e := range f.outAt {
		if e.expires <= ns {
			delete(f.outAt, k)
		}
	}
	f.outMu.Unlock()
}

// take admits reqs in engine, filling res (see limiter.Engine.TakeFor,
// without reputation), and returns the number of the last extraction
// before it: what it admitted is here until an extraction after it (see
// here). own are reqs at their limits' own rates (their owner's), in the
// same order: the rates of token buckets are recorded (see rate).
func (f *fallback) take(now time.Time, own, reqs []limiter.Request, res []limiter.Result) (ok bool, mark uint64) {
	if !anyBucket(reqs) { // windows: no rate to record or convert
		f.outMu.RLock()
		defer f.outMu.RUnlock()
		ok, _ = f.engine.TakeFor(now, 0, reqs, res)
		f.wrote()
		return ok, f.outs
	}
	for {
		f.rerate(now, own, reqs)
		f.outMu.RLock()
		// A counter counted at the owner's rate meanwhile (see merge) is
		// converted before the take counts in it.
		if !f.rerates(now.UnixNano(), own, reqs, true) {
			break
		}
		f.outMu.RUnlock()
	}
	defer f.outMu.RUnlock()
	f.countedAt(now, own, reqs)
	ok, _ = f.engine.TakeFor(now, 0, reqs, res)
	f.wrote()
	return ok, f.outs
}

// anyBucket reports whether any of reqs is a token bucket's.
func anyBucket(reqs []limiter.Request) bool {
	for _, r := range reqs {
		if r.Limit.Algorithm == limiter.TokenBucket {
			return true
		}
	}
	return false
}

// rerate converts the token bucket counters of reqs' keys counted here
// at an interval other than the one reqs are counted at now (the share
// changed: a ratio, a reputation factor, what the owner said remained)
// to that interval, each unit owed kept one unit (see
// limiter.BucketAtRate), and records them counted at it: a counter holds
// units of one rate, which it goes on at converted, and what is given
// back comes off at (see atCountedRate). Counted at both, its units were
// converted at the least, and each unit of the other counted as more of
// the owner's than one (7 held of 5 admitted, a request under the limit
// refused). A counter counted at the owner's rate (plain: counts kept
// here for the owner, a charge) is converted from the rate of own, reqs
// at their limits' own rates, in the same order: left as it was, each
// unit a share admitted in it went on as more than one of the owner's
// (15 held of 7 admitted).
func (f *fallback) rerate(now time.Time, own, reqs []limiter.Request) {
	ns := now.UnixNano()
	if !f.rerates(ns, own, reqs, false) {
		return
	}
	f.outMu.Lock() // no take, settlement or extraction meanwhile
	defer f.outMu.Unlock()
	for i, r := range reqs {
		f.mu.Lock()
		x, from, ok := f.differs(ns, own, reqs, i)
		f.mu.Unlock()
		if !ok {
			continue
		}
		every := r.Limit.Interval()
		x.expires = max(x.expires, f.convert(now, r.Key, from, every))
		if x.plain {
			x.plain, x.of = false, from
		}
		x.counted = every
		f.mu.Lock()
		f.rates[r.Key] = x
		f.mu.Unlock()
	}
}

// rerates reports whether rerate would convert a counter of reqs' keys
// at ns (Unix ns); plain: a counter counted at the owner's rate only.
func (f *fallback) rerates(ns int64, own, reqs []limiter.Request, plain bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range reqs {
		if x, _, ok := f.differs(ns, own, reqs, i); ok && (x.plain || !plain) {
			return true
		}
	}
	return false
}

// differs returns the rate on record of reqs[i]'s key's counter, the
// interval it is counted at (the owner's, own[i]'s, where it is counted
// plainly), and whether that differs from the interval reqs[i] counts at.
// f.mu is held.
func (f *fallback) differs(ns int64, own, reqs []limiter.Request, i int) (rate, time.Duration, bool) {
	r := reqs[i]
	if r.Limit.Algorithm != limiter.TokenBucket {
		return rate{}, 0, false
	}
	x, ok := f.rates[r.Key]
	every := r.Limit.Interval()
	if !ok || x.expires <= ns || every <= 0 {
		return x, 0, false
	}
	from := x.counted
	if x.plain {
		from = 0
		if len(own) == len(reqs) && own[i].Limit.Algorithm == limiter.TokenBucket {
			from = own[i].Limit.Interval()
		}
	}
	return x, from, from > 0 && from != every
}

// convert converts k's counter in engine, counted at the interval from,
// to the interval to, each unit owed kept one (see limiter.BucketAtRate),
// and returns when it is owed until (Unix ns; 0 if there is none).
// f.outMu is held.
func (f *fallback) convert(now time.Time, k limiter.Key, from, to time.Duration) int64 {
	var until int64
	for _, st := range f.engine.ExtractKeys(now, []limiter.Key{k}) {
		st = limiter.BucketAtRate(now, st, from, to)
		f.engine.Merge(now, []limiter.State{st})
		until = max(until, st.Expires)
	}
	f.wrote()
	return until
}

// atCountedRate returns r, a token bucket's units to give back in
// engine, at the interval its counter is counted at here (see rate), if
// one is on record: units come off as the counter counted them, never
// more than a unit added.
func (f *fallback) atCountedRate(r limiter.Request, now int64) limiter.Request {
	if r.Limit.Algorithm != limiter.TokenBucket {
		return r
	}
	f.mu.Lock()
	x, ok := f.rates[r.Key]
	f.mu.Unlock()
	if ok && x.expires > now && x.counted > 0 {
		r.Limit = limiter.Limit{Algorithm: limiter.TokenBucket, Quota: 1, Window: x.counted}
	}
	return r
}

// countedAt records the rates the token buckets of reqs are counted at
// here, own being reqs at their limits' own rates (see rate), before they
// are counted. f.outMu is held (read).
func (f *fallback) countedAt(now time.Time, own, reqs []limiter.Request) {
	ns := now.UnixNano()
	for i, r := range reqs {
		if r.Limit.Algorithm != limiter.TokenBucket {
			continue
		}
		counted := r.Limit.Interval()
		of := counted
		if len(own) == len(reqs) && own[i].Limit.Algorithm == limiter.TokenBucket {
			of = own[i].Limit.Interval()
		}
		f.noteRate(r.Key, rate{counted: counted, of: of, expires: owedUntil(r, ns)}, ns)
	}
}

// owedUntil is the latest a take or a charge of r at ns (Unix ns) moves a
// token bucket's arrival time on to, where it was no later: its capacity
// and cost past ns (booked, past the instant booked).
func owedUntil(r limiter.Request, ns int64) int64 {
	every, from := int64(r.Limit.Interval()), ns+int64(max(r.MaxDelay, 0))
	n := r.Limit.Capacity() + max(r.Cost, 1)
	if every <= 0 || n > (math.MaxInt64-from)/every {
		return math.MaxInt64
	}
	return from + every*n
}

// merge adds counter s, kept here for its key's owner, to engine's: it
// was counted at the owner's rate. Where the counter is counted at a
// share's interval, s joins it converted to that interval, each unit owed
// kept one (see limiter.BucketAtRate): the counter holds units of one
// rate. Marked as counted at the owner's rate (plain) instead, the
// share's units went on unconverted, each counted at the owner as more
// than one of its units (15 held of 7 admitted, a request under the limit
// refused); converted to the owner's rate, they refilled at it, not at the
// share's, and this node admitted more than its share (5 for 1 in 13
// minutes). Where it is not, the counter goes on as it is (see rate).
func (f *fallback) merge(now time.Time, s limiter.State) {
	f.outMu.RLock()
	defer f.outMu.RUnlock()
	f.mergeLocked(now, s)
}

// mergeLocked is merge, f.outMu held (read).
func (f *fallback) mergeLocked(now time.Time, s limiter.State) {
	ns := now.UnixNano()
	x, share := f.shareRate(s.Key, ns)
	note := func(expires int64) {
		if share {
			f.noteRate(s.Key, rate{counted: x.counted, of: x.of, expires: expires}, ns)
			return
		}
		f.countedPlainly(s.Key, expires, ns)
	}
	if share {
		s = limiter.BucketAtRate(now, s, x.of, x.counted)
	}
	note(s.Expires)
	f.engine.Merge(now, []limiter.State{s})
	f.wrote()
	// Added to a bucket owing already, it owes beyond s's arrival time.
	for _, st := range f.engine.StatesOf(now, []limiter.Key{s.Key}) {
		note(st.Expires)
	}
}

// shareRate returns the rate on record of k's counter, and whether it is
// counted at a share's interval (not plainly) at ns (Unix ns).
func (f *fallback) shareRate(k limiter.Key, ns int64) (rate, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	x, ok := f.rates[k]
	return x, ok && x.expires > ns && !x.plain && x.counted > 0 && x.of > 0
}

// settle gives r's units back in engine, or charges them (see settleIn),
// counted at the instant at (Unix ns, 0 for now). A token bucket charged
// at the rate asked (the limit's own, the owner's) is charged as counts
// kept for the owner join it (see merge). Units of a token bucket given
// back come off as this node counted them, at the least interval its
// share moved the counter's arrival time on by (see rate), not at the
// rate asked (the limit's own, the caller's): at that rate a unit took
// off a part of the share's unit only, and the rest went on to the key's
// owner as units nobody was admitted.
func (f *fallback) settle(now time.Time, at int64, charge bool, r limiter.Request) {
	f.outMu.RLock()
	defer f.outMu.RUnlock()
	if r.Limit.Algorithm == limiter.TokenBucket {
		if charge {
			if _, share := f.shareRate(r.Key, now.UnixNano()); share {
				when := now
				if at != 0 {
					when = time.Unix(0, at)
				}
				f.mergeLocked(now, limiter.ChargeState(now, when, limiter.State{Key: r.Key}, r))
				return
			}
			f.countedPlainly(r.Key, owedUntil(r, now.UnixNano()), now.UnixNano())
		} else {
			r = f.atCountedRate(r, now.UnixNano())
		}
	}
	settleIn(f.engine, now, at, charge, r)
	f.wrote()
}

// countedPlainly records that k's counter holds time counted at the
// owner's rate only, until expires (Unix ns): it goes on as it is (see
// rate).
func (f *fallback) countedPlainly(k limiter.Key, expires int64, now int64) {
	f.noteRate(k, rate{plain: true, expires: expires}, now)
}

// noteRate records that k's counter is counted at x too (see rate).
// Counted at the owner's rate (plain) already, it was converted to x's
// interval before (see rerate), and is counted at x now.
func (f *fallback) noteRate(k limiter.Key, x rate, now int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rates == nil {
		f.rates = map[limiter.Key]rate{}
	}
	r, ok := f.rates[k]
	switch {
	case !ok || r.expires <= now:
		r = x
	case r.plain:
		x.expires = max(x.expires, r.expires)
		r = x
	default:
		if r.counted == 0 || x.counted > 0 && x.counted < r.counted {
			r.counted = x.counted
		}
		r.of = max(r.of, x.of)
		r.expires = max(r.expires, x.expires)
	}
	f.rates[k] = r
}

// atOwnersRate returns states, taken out of engine, with their token
// buckets owed at their owners' rates (see rate), and forgets their
// rates here: they go with the counters. f.outMu is held.
func (f *fallback) atOwnersRate(now time.Time, states []limiter.State) []limiter.State {
	ns := now.UnixNano()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range states {
		r, ok := f.rates[s.Key]
		if !ok {
			continue
		}
		delete(f.rates, s.Key)
		if !r.plain && r.expires > ns && r.counted > r.of && r.of > 0 {
			states[i] = limiter.BucketAtRate(now, s, r.counted, r.of)
		}
	}
	return states
}

// extract takes the counters of the keys keep accepts out of engine,
// recording the extraction for each key it took.
func (f *fallback) extract(now time.Time, keep func(limiter.Key) bool) []limiter.State {
	f.outMu.Lock()
	defer f.outMu.Unlock()
	states := f.engine.Extract(now, keep, 0)
	if len(states) == 0 {
		return nil
	}
	states = f.atOwnersRate(now, states)
	f.outs++
	for _, s := range states {
		e := f.outAt[s.Key]
		f.outAt[s.Key] = extraction{n: f.outs, expires: max(e.expires, s.Expires)}
	}
	return states
}

// here reports whether what engine admitted of k by a take that returned
// mark is still in engine's counter of k: no extraction took the key's
// counter since. Taken, the units are where that counter went (a key's
// owner, or this node's own counter of it), not in a counter of the key
// begun here anew, which holds what was admitted after only.
// f.outMu is held.
func (f *fallback) here(k limiter.Key, mark uint64) bool {
	e, ok := f.outAt[k]
	return !ok || e.n <= mark
}

// refundIfHere gives r's units back in engine if they are still in its
// counter of r's key (see here) and reports whether it did: no extraction
// can take the counter between the look and the refund.
func (f *fallback) refundIfHere(now time.Time, r limiter.Request, mark uint64) bool {
	f.outMu.RLock()
	defer f.outMu.RUnlock()
	if !f.engine.Has(now, r.Key) || !f.here(r.Key, mark) {
		return false
	}
	f.engine.Refund(now, f.atCountedRate(r, now.UnixNano()))
	f.wrote()
	return true
}

func (f *fallback) sweepLocked(now int64) {
	for k, s := range f.shares {
		if s.expires <= now {
			delete(f.shares, k)
		}
	}
}

// forget drops keys' fallback counters and shares.
func (f *fallback) forget(keys []limiter.Key) {
	f.engine.Reset(keys...)
	f.mu.Lock()
	for _, k := range keys {
		delete(f.shares, k)
		delete(f.rates, k)
	}
	f.mu.Unlock()
}

// fallbackLimits returns reqs with the limits this node applies in
// fallback, in buf: the ratio, the client's last known reputation factor,
// and its share. none is the index of a zone whose share is used up, or -1.
func (c *Core) fallbackLimits(now time.Time, v *view, client limiter.Key, reqs []limiter.Request, buf []limiter.Request) (scaled []limiter.Request, none int) {
	none = -1
	f := c.fallback
	ratio := f.ratio()
	factor := 1.0
	if p := c.reputation.Load(); p != nil && client != 0 {
		if score, ok := c.scores.last(client); ok {
			factor = p.Factor(score)
		}
	}
	ns := now.UnixNano()
	others := int64(v.shareOf)
	scaled = buf[:0]
	for _, r := range reqs {
		if r.Limit.Algorithm == limiter.Concurrency {
			r.Limit = r.Limit.Scale(ratio)
			scaled = append(scaled, r)
			continue
		}
		k := r.Key
		// What the key's owner last said remained: its answer, or, where
		// this node holds the key's counter (it owns the key but cannot
		// count it now: no majority, its successor's lease ran out, or
		// it did), what that counter leaves, if less. Read only when a
		// share is made (under the fallback's lock, which no holder of
		// the engine's waits for).
		told := func() (int64, bool) {
			own := c.engine.Peek(now, r).Remaining
			l, ok := c.told.get(k, ns)
			if own >= 0 && own < r.Limit.Quota && (!ok || own < l) {
				return own, true
			}
			return l, ok
		}
		avail := f.available(k, r.Limit.Quota, told, ns, r.Limit.Window, others)
		r.Limit = r.Limit.Scale(ratio * factor)
		if avail <= 0 && none < 0 {
			none = len(scaled)
		}
		r.Limit.Quota = max(1, min(r.Limit.Quota, avail))
		scaled = append(scaled, r)
	}
	return scaled, none
}

// decideFallback performs op for reqs (limits scaled already; own are
// them at their limits' own rates) by the fallback mode, filling res;
// none names a zone whose share is used up.
// With what it admitted in the fallback engine, it returns the mark that
// tells whether the units are still there (see fallback.here).
func (c *Core) decideFallback(now time.Time, op Op, own, reqs []limiter.Request, none int, res []limiter.Result) (bool, uint64) {
	deny := func(i int) bool {
		for j := range res {
			res[j] = limiter.Result{Allowed: true, Remaining: -1}
		}
		for j := range res {
			if i < 0 || j == i {
				res[j] = limiter.Result{Reset: time.Second, RetryAfter: time.Second}
			}
		}
		return false
	}
	switch c.fallback.mode() {
	case FallbackOpen:
		for i := range res {
			res[i] = limiter.Result{Allowed: true, Remaining: -1}
		}
		return true, 0
	case FallbackClosed:
		if op == OpPeek {
			return true, 0
		}
		return deny(-1), 0
	}
	if op == OpPeek {
		for i := range reqs {
			res[i] = c.fallback.engine.Peek(now, reqs[i])
		}
		return true, 0
	}
	if none >= 0 {
		return deny(none), 0
	}
	return c.fallback.take(now, own, reqs, res) // no reputation: a fallback denial is not the client's doing
}

// reconcile sends what this node admitted in fallback to the owners that
// count the keys now: peers that answer get transfers (acknowledged before
// the counts leave this node's books), and the keys this node owns and can
// count join its engine. A transfer to an owner repeats the cancels this
// node has not had acknowledged for items it sent that owner, of the same
// keys (see Transfer.Cancels): the counts may hold the requests those
// items asked for.
func (c *Core) reconcile(now time.Time, v *view) {
	if c.fallback.empty() {
		return
	}
	ns := now.UnixNano()
	m := c.mono(now)
	states := c.fallback.extract(now, func(k limiter.Key) bool {
		to, self, ok := c.placeOf(v, k)
		if !ok {
			return false
		}
		if self {
			return c.counting(v, k, m)
		}
		p := c.peers.get(to.Name)
		return p != nil && p.peer.Inc == to.Inc && p.calls()
	})
	if len(states) == 0 {
		return
	}
	c.spent(states, ns)
	c.stats.Reconciled.Add(uint64(len(states)))
	c.debugCounts("fallback counts go to their owners", states)
	// The records of counts sent again the counts hold go with them, and
	// are recorded where they are placed (this node, for keys it counts):
	// kept here as well, where the counts went on, the counter of the run
	// that applied the transfer they replace came in less them here and
	// again there.
	resent := c.fallback.takeResent(states)
	c.replicas.forgetNoted(resent)
	c.placeAs(now, Transfer{Mode: ModeAdd, Holds: c.fallback.takeHeld(states), Applied: c.carried.fallback.take(keysOf(states)), Resent: resent}, purposeReconcile, sortStates(states))
}

// reconcileTo sends to the node called to what this node admitted in
// fallback for the keys it owns, and reports whether there was any.
func (c *Core) reconcileTo(now time.Time, v *view, to Peer) bool {
	if c.fallback.empty() {
		return false
	}
	states := c.fallback.extract(now, func(k limiter.Key) bool {
		o, _, ok := c.placeOf(v, k)
		return ok && o.Name == to.Name
	})
	if len(states) == 0 {
		return false
	}
	c.spent(states, now.UnixNano())
	c.stats.Reconciled.Add(uint64(len(states)))
	if c.debugOn() {
		c.debugCounts("fallback counts go to the owner that asked for a seal or answers again", states, "to", to.Name)
	}
	holds, resent := c.fallback.takeHeld(states), c.fallback.takeResent(states)
	c.replicas.forgetNoted(resent) // recorded where they are placed (see reconcile)
	for _, part := range SplitStates(sortStates(states), TransferBytes) {
		t := Transfer{Mode: ModeAdd, States: part, Holds: holdsOf(holds, part), Resent: resentOf(resent, part), Cancels: c.out.cancelsFor(to, part, c.runDied)}
		if len(t.Holds) > 0 {
			t.Applied = c.appliedHeld(part, false, Peer{}, t.Holds)
		}
		t.Applied = withApplied(t.Applied, c.carried.fallback.take(keysOf(part)))
		c.sendTransfer(now, to, t, purposeReconcile)
	}
	return true
}

// spent takes what fallback counters sent on admitted off their shares.
func (c *Core) spent(states []limiter.State, ns int64) {
	for _, s := range states {
		if s.Kind < limiter.KindGrant && s.Cur > 0 {
			c.fallback.spend(s.Key, int64(s.Cur), ns)
		}
	}
}

// foldFallback counts, as their owner, what this node admitted in fallback
// for keys it owns by v (all of them if keys is nil) as they become
// countable here: they join its engine before it counts them, not a
// reconciliation later, or it would admit that much beyond their limit
// meanwhile.
func (c *Core) foldFallback(now time.Time, v *view, keys []limiter.Key) {
	if c.fallback.empty() || keys != nil && len(keys) == 0 {
		return
	}
	states := c.fallback.extract(now, func(k limiter.Key) bool {
		if keys != nil && !slices.Contains(keys, k) {
			return false
		}
		_, self, ok := c.placeOf(v, k)
		return ok && self
	})
	if len(states) == 0 {
		return
	}
	c.spent(states, now.UnixNano())
	c.stats.Reconciled.Add(uint64(len(states)))
	c.debugCounts("fallback counts folded into keys this node counts now", states)
	c.placeHere(now, v, Transfer{Mode: ModeAdd, Holds: c.fallback.takeHeld(states), Applied: c.carried.fallback.take(keysOf(states)), Resent: c.fallback.takeResent(states)}, sortStates(states))
}
