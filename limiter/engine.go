package limiter

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
)

// DefaultMaxKeys is the key bound of an Engine whose Config leaves it zero.
const DefaultMaxKeys = 1 << 20

// numShards is the number of independently locked parts of an Engine. A
// power of two, so a key picks its shard with a mask.
const numShards = 256

// reclaimSample is how many entries an insert into a full shard looks at for
// expired ones it can drop, and for the least recently used one it can evict,
// before it falls back to an overflow counter.
const reclaimSample = 16

// DefaultNetworkShare is the part of MaxKeys one IP network may hold when
// Config leaves NetworkShare zero: one eighth.
const DefaultNetworkShare = 8

// maxOverflowCounters bounds the overflow shard: past it, new keys of a
// zone share that zone's counter whatever their network.
const maxOverflowCounters = 4 * numShards

// Request asks to spend Cost units of Limit under Key.
type Request struct {
	Key Key
	// Zone is the seed of the zone the key belongs to (Hasher.Zone). When
	// the engine is full, new keys of a zone share one overflow counter per
	// zone instead of getting counters of their own.
	Zone  uint64
	Limit Limit
	// Network is a hash of the client's IP network (its /32 or /64), or 0
	// when it is unknown. It caps the keys one network may hold and
	// separates the overflow counters of networks.
	Network uint32
	// Cost is the number of units to spend; zero means 1.
	Cost int64
	// LeaseID names the lease a Concurrency request claims: a request
	// that claims a lease already held renews it.
	LeaseID uint64
	// MaxDelay, when above zero, books a rate request the limit would deny
	// for the earliest instant its units fit, if that is at most MaxDelay
	// away: it is then allowed, with Result.Delay the time to wait, and
	// counted at that instant (like x/time/rate's Reserve). Zero denies
	// it, as always.
	MaxDelay time.Duration
}

func (r *Request) cost() int64 {
	if r.Cost <= 0 {
		return 1
	}
	return r.Cost
}

// Config sets up an Engine.
type Config struct {
	// MaxKeys bounds the number of counters held. Zero means DefaultMaxKeys.
	MaxKeys int
	// NetworkShare is the part of MaxKeys one IP network may hold, as a
	// divisor: 8 means an eighth. Zero means DefaultNetworkShare.
	NetworkShare int
}

// Stats are an Engine's counters since it was created.
type Stats struct {
	// Keys is the number of counters held now, expired ones included until
	// they are swept.
	Keys int
	// MaxKeys is the configured bound.
	MaxKeys int
	// Reclaimed counts expired counters dropped to make room for new ones.
	Reclaimed uint64
	// Evicted counts live counters, none of them exhausted, dropped (least
	// recently used first) to make room for new ones.
	Evicted uint64
	// Overflowed counts requests of new keys that were counted in a shared
	// overflow counter, because the engine was full of exhausted counters
	// or their network held its share of the keys.
	Overflowed uint64
	// Swept counts expired counters dropped by Sweep.
	Swept uint64
}

// Engine counts requests per key, exactly: every update to a key happens
// under its shard's lock, so concurrent requests always see each other's
// effect (single writer, read-your-writes).
//
// Memory is bounded by MaxKeys (at most 128 bytes per key). Expired counters
// are dropped lazily: when a full shard needs room, and by Sweep, which the
// owner calls periodically (one shard per call; there is no timer or
// goroutine per key). When a shard is full of live counters, a new key
// evicts, of a sample of them, the one closest to expiring (for one zone,
// the least recently used) that is not exhausted:
// a counter that has spent its quota, or was denied, is kept until its state
// expires, so a flood of keys can never give a denied client a fresh budget.
// One IP network (Request.Network) may hold at most 1/NetworkShare of each
// shard; past that, a new key of the network evicts one of that network's
// own counters, so one source cannot fill the table.
//
// Only when a sample holds nothing evictable (a shard full of exhausted
// counters, or a network whose share is all exhausted) is a new key counted
// in an overflow counter shared by the new keys of its zone and network, with
// the zone's normal limit. An evicted counter that was not exhausted starts
// afresh if its key returns: the most a key can regain per eviction is what
// it had spent, less than one quota.
//
// An Engine is safe for concurrent use. Time is always passed in.
type Engine struct {
	shards     [numShards]shard
	overflow   shard // keyed by zone seed and network
	shardCap   atomic.Int64
	netCap     atomic.Int64 // keys per shard one network may hold
	netShare   int64
	maxKeys    atomic.Int64
	sweepNext  atomic.Uint32
	reclaimed  atomic.Uint64
	evicted    atomic.Uint64
	overflowed atomic.Uint64
	swept      atomic.Uint64
	reputation atomic.Pointer[ReputationPolicy]
	reps       reputations // which keys may hold a reputation
}

type shard struct {
	mu      sync.Mutex
	entries map[Key]slot       // counters and reputations
	nets    map[uint32]int32   // entries held per network
	grants  map[Key]grantState // extra quota, by zone key
	leases  map[Key][]Lease    // concurrency slots held, by zone key
	_       [24]byte           // one shard per cache line: no false sharing of locks
}

// slot is what the key table holds under a key: the counter, and the
// table's note on it. The algorithms see only the entry.
type slot struct {
	entry
	// note is the key's network (the low 31 bits of Request.Network; 0
	// if unknown) and exhaustedBit once the counter has spent its quota or
	// been denied: it is then not evicted until its state expires. (A
	// counter that was exhausted once stays held while it is in use; it is
	// evicted only once idle.)
	note uint32
}

const (
	exhaustedBit = 1 << 31
	netMask      = exhaustedBit - 1
)

// held reports whether v may not be evicted at now.
func (v slot) held(now int64) bool { return v.note&exhaustedBit != 0 && v.expires > now }

// net returns the network of v, 0 if unknown.
func (v slot) net() uint32 { return v.note & netMask }

// put stores e under k: a new key with the note of network net (counted
// in nets), an existing one keeping its note from old. exhausted marks it.
func (s *shard) put(k Key, e entry, old slot, isNew bool, net uint32, exhausted bool) {
	note := old.note
	if isNew {
		if note = net & netMask; note != 0 {
			s.nets[note]++
		}
	}
	if exhausted {
		note |= exhaustedBit
	}
	s.entries[k] = slot{entry: e, note: note}
}

// remove drops k, which holds v, and its part of the per-network count.
func (s *shard) remove(k Key, v slot) {
	delete(s.entries, k)
	net := v.net()
	if net == 0 {
		return
	}
	if n := s.nets[net] - 1; n > 0 {
		s.nets[net] = n
	} else {
		delete(s.nets, net)
	}
}

// New returns an empty Engine.
func New(cfg Config) *Engine {
	e := new(Engine)
	for i := range e.shards {
		e.shards[i].entries = make(map[Key]slot)
		e.shards[i].nets = make(map[uint32]int32)
		e.shards[i].grants = make(map[Key]grantState)
		e.shards[i].leases = make(map[Key][]Lease)
	}
	e.overflow.entries = make(map[Key]slot)
	e.netShare = int64(cfg.NetworkShare)
	if e.netShare <= 0 {
		e.netShare = DefaultNetworkShare
	}
	e.SetMaxKeys(cfg.MaxKeys)
	return e
}

// SetMaxKeys changes the key bound; zero means DefaultMaxKeys. Lowering it
// drops no counters: shards above the new bound stop growing until expired
// counters are swept.
func (e *Engine) SetMaxKeys(n int) {
	if n <= 0 {
		n = DefaultMaxKeys
	}
	e.maxKeys.Store(int64(n))
	shardCap := int64(max(1, (n+numShards-1)/numShards))
	e.shardCap.Store(shardCap)
	e.netCap.Store(max(1, (shardCap+e.netShare-1)/e.netShare))
}

func shardOf(k Key) uint32 {
	// The low bits mix in the zone; the high bits are the route. Use both so
	// one client's zones and one zone's clients both spread over shards.
	return uint32(keyhash.Mix(uint64(k))) & (numShards - 1)
}

// insertSorted adds v to the sorted set s.
func insertSorted(s []uint32, v uint32) []uint32 {
	i := 0
	for i < len(s) && s[i] < v {
		i++
	}
	if i < len(s) && s[i] == v {
		return s
	}
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}

// Peek returns what Take would answer for req without spending anything:
// for a Concurrency request, whether its lease could be claimed, without
// claiming it.
func (e *Engine) Peek(now time.Time, req Request) Result {
	ns := now.UnixNano()
	s := &e.shards[shardOf(req.Key)]
	s.mu.Lock()
	if req.Limit.Algorithm == Concurrency {
		r := e.checkLease(s, ns, &req)
		s.mu.Unlock()
		if r.Allowed {
			r.Remaining++ // nothing was claimed
		}
		return r
	}
	cur := s.entries[req.Key].entry
	s.mu.Unlock()
	_, r := req.Limit.apply(cur, ns, req.cost())
	if r.Allowed {
		r.Remaining += req.cost()
	}
	return r
}

// Refund gives back the units of req, spent earlier by Take, when the
// request was turned away by a decision made elsewhere.
func (e *Engine) Refund(now time.Time, req Request) { e.RefundAt(now, now, req) }

// RefundAt gives back the units of req that Take counted at the instant
// at: when it decided (now, for Refund), or, for a booking, the instant
// it was booked for (the decision's time plus Result.Delay). The units
// come out of the window that counted them, so a refund that arrives
// after its window has rolled over never lends the current window a unit.
func (e *Engine) RefundAt(now, at time.Time, req Request) {
	if req.Limit.Algorithm == Concurrency {
		e.Release(now, req.Key, req.LeaseID)
		return
	}
	ns := now.UnixNano()
	s := &e.shards[shardOf(req.Key)]
	s.mu.Lock()
	if cur, ok := s.entries[req.Key]; ok {
		cur.entry = req.Limit.refund(cur.entry, ns, at.UnixNano(), req.cost())
		s.entries[req.Key] = cur
	}
	s.mu.Unlock()
}

// Charge spends req's units at now whatever its limit says: a cost that
// was settled after the request was served (a response header reporting
// what it cost). A charge beyond what remains leaves the key exhausted,
// owing at most req's units, never more. It spends nothing from grants,
// and nothing of a Concurrency request.
func (e *Engine) Charge(now time.Time, req Request) { e.ChargeAt(now, now, req) }

// ChargeAt spends req's units as Charge does, charged at the instant at
// (at or before now: a charge that waited to be applied). The units of a
// window limit are spent in the window of at, as RefundAt gives units
// back out of it: a charge applied after its window rolled over never
// holds the current window a unit it did not admit.
func (e *Engine) ChargeAt(now, at time.Time, req Request) {
	if req.Limit.Algorithm == Concurrency {
		return
	}
	ns := now.UnixNano()
	n := min(req.cost(), int64(MaxQuota))
	s := &e.shards[shardOf(req.Key)]
	s.mu.Lock()
	cur, ok := s.entries[req.Key]
	if ok || e.makeRoom(s, ns, req.Network) {
		next := req.Limit.charge(cur.entry, ns, at.UnixNano(), n)
		s.put(req.Key, next, cur, !ok, req.Network, true)
	}
	s.mu.Unlock()
}

// Reset drops the counters and leases of the given keys (and the
// reputation, for a reputation key), so their next requests start with a
// full quota and free slots. Grants stay. It reports how many keys had any.
func (e *Engine) Reset(keys ...Key) int {
	n := 0
	for _, k := range keys {
		s := &e.shards[shardOf(k)]
		s.mu.Lock()
		v, counted := s.entries[k]
		_, leased := s.leases[k]
		if counted {
			s.remove(k, v)
		}
		delete(s.leases, k)
		if counted || leased {
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// Sweep drops the expired counters of the next shard in turn and reports how
// many it dropped. Calling it numShards times covers the whole engine.
func (e *Engine) Sweep(now time.Time) int {
	ns := now.UnixNano()
	i := (e.sweepNext.Add(1) - 1) % numShards
	if i == numShards-1 {
		e.sweepOverflow(ns)
	}
	s := &e.shards[i]
	dropped := 0
	s.mu.Lock()
	for k, v := range s.entries {
		if v.expires <= ns {
			s.remove(k, v)
			dropped++
		}
	}
	e.reps.rebuild(i, s)
	for k, g := range s.grants {
		if g.Expires <= ns {
			delete(s.grants, k)
		}
	}
	for k, list := range s.leases {
		if _, live := leasesStateOf(k, list, ns); !live {
			delete(s.leases, k)
		}
	}
	s.mu.Unlock()
	e.swept.Add(uint64(dropped))
	return dropped
}

func (e *Engine) sweepOverflow(now int64) {
	e.overflow.mu.Lock()
	for k, v := range e.overflow.entries {
		if v.expires <= now {
			delete(e.overflow.entries, k)
		}
	}
	e.overflow.mu.Unlock()
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	st := Stats{
		MaxKeys:    int(e.maxKeys.Load()),
		Reclaimed:  e.reclaimed.Load(),
		Evicted:    e.evicted.Load(),
		Overflowed: e.overflowed.Load(),
		Swept:      e.swept.Load(),
	}
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		st.Keys += len(s.entries)
		s.mu.Unlock()
	}
	return st
}

// SweepEvery is how often the owner of an Engine should call Sweep so that
// every shard is swept about once a minute.
const SweepEvery = time.Minute / numShards
