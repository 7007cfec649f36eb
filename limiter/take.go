package limiter

import (
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
)

// Take spends the requests' units if every one of them can be granted, and
// none of them otherwise: the decision across all requests and the commit
// happen atomically. It fills res (which must be as long as reqs) and
// reports whether the requests were granted.
//
// A rate request the limit denies is granted from the key's grant, if it has
// one with enough left (see PutGrant). A Concurrency request claims a lease.
func (e *Engine) Take(now time.Time, reqs []Request, res []Result) bool {
	ok, _ := e.TakeFor(now, 0, reqs, res)
	return ok
}

// TakeFor is Take on behalf of a client whose reputation, kept under the key
// client, scales every rate limit of the requests, and drops when they are
// denied. client 0, or no reputation policy set, means no reputation. It
// also returns the client's reputation score after the decision (100 when
// there is none).
func (e *Engine) TakeFor(now time.Time, client Key, reqs []Request, res []Result) (bool, float64) {
	ns := now.UnixNano()
	rep := e.reputation.Load()
	if rep == nil {
		client = 0
	}
	if len(reqs) == 1 && client == 0 && reqs[0].Limit.Algorithm != Concurrency {
		return e.takeOne(ns, &reqs[0], &res[0]), FullScore
	}
	return e.takeMany(ns, rep, client, reqs, res)
}

// TakeOne is Take for a single request.
func (e *Engine) TakeOne(now time.Time, req Request) Result {
	var res [1]Result
	e.Take(now, []Request{req}, res[:])
	return res[0]
}

func (e *Engine) takeOne(now int64, req *Request, res *Result) bool {
	s := &e.shards[shardOf(req.Key)]
	s.mu.Lock()
	cur, ok := s.entries[req.Key]
	if !ok && !e.makeRoom(s, now, req.Network) {
		s.mu.Unlock()
		return e.takeOverflow(now, req, res)
	}
	next, r := req.Limit.apply(cur.entry, now, req.cost())
	if r.Allowed {
		s.put(req.Key, next, cur, !ok, req.Network, r.Remaining == 0)
	} else {
		if len(s.grants) > 0 {
			if g, ok := s.grants[req.Key]; ok {
				r = g.spend(now, req.cost(), r, true, s, req.Key)
			}
		}
		if !r.Allowed && req.MaxDelay > 0 {
			if next, r = req.Limit.book(cur.entry, now, req.cost(), int64(req.MaxDelay), r); r.Allowed {
				s.put(req.Key, next, cur, !ok, req.Network, true)
			}
		}
		if !r.Allowed && ok && cur.note&exhaustedBit == 0 {
			cur.note |= exhaustedBit
			s.entries[req.Key] = cur
		}
	}
	s.mu.Unlock()
	*res = r
	return r.Allowed
}

// takeOverflow counts req in its zone's overflow counter.
func (e *Engine) takeOverflow(now int64, req *Request, res *Result) bool {
	e.overflowed.Add(1)
	o := &e.overflow
	o.mu.Lock()
	k := e.overflowKey(req)
	next, r := req.Limit.apply(o.entries[k].entry, now, req.cost())
	if r.Allowed {
		o.entries[k] = slot{entry: next}
	}
	o.mu.Unlock()
	*res = r
	return r.Allowed
}

// overflowKey returns the overflow counter of req: one per zone and
// network while the overflow shard has room, one per zone past that. The
// overflow lock must be held.
func (e *Engine) overflowKey(req *Request) Key {
	k := Key(req.Zone)
	if req.Network == 0 {
		return k
	}
	kn := Key(req.Zone ^ keyhash.Mix(uint64(req.Network)|1<<63))
	if _, ok := e.overflow.entries[kn]; ok || len(e.overflow.entries) < maxOverflowCounters {
		return kn
	}
	return k
}

// maxBatch is the largest batch Take handles without allocating.
const maxBatch = 8

// takeMany decides several requests, and the client's reputation, under the
// locks of all the shards they touch, taken in shard order.
func (e *Engine) takeMany(now int64, rep *ReputationPolicy, client Key, reqs []Request, res []Result) (bool, float64) {
	var idxBuf [maxBatch + 1]uint32
	idx := idxBuf[:0]
	var shardBuf [maxBatch]uint32
	shardIdx := shardBuf[:0]
	if len(reqs) > maxBatch {
		shardIdx = make([]uint32, 0, len(reqs))
	}
	for i := range reqs {
		si := shardOf(reqs[i].Key)
		shardIdx = append(shardIdx, si)
		idx = insertSorted(idx, si)
	}
	if client != 0 {
		idx = insertSorted(idx, shardOf(client))
	}
	for _, i := range idx {
		e.shards[i].mu.Lock()
	}
	// The overflow shard is always locked last, after any regular shard, so
	// the lock order is the same for every caller.
	var overflowBuf, existedBuf [maxBatch]bool
	var oldBuf [maxBatch]slot
	overflow, existed, old := overflowBuf[:0], existedBuf[:0], oldBuf[:0]
	usesOverflow := false
	for i := range reqs {
		of, ok := false, false
		var v slot
		if reqs[i].Limit.Algorithm != Concurrency {
			s := &e.shards[shardIdx[i]]
			v, ok = s.entries[reqs[i].Key]
			of = !ok && !e.makeRoom(s, now, reqs[i].Network)
		}
		overflow, existed, old = append(overflow, of), append(existed, ok), append(old, v)
		usesOverflow = usesOverflow || of
	}
	var okeyBuf [maxBatch]Key
	okeys := okeyBuf[:0]
	if len(reqs) > maxBatch {
		okeys = make([]Key, len(reqs))
	} else {
		okeys = okeyBuf[:len(reqs)]
	}
	if usesOverflow {
		e.overflow.mu.Lock()
		for i := range reqs {
			if overflow[i] {
				okeys[i] = e.overflowKey(&reqs[i])
			}
		}
	}

	score, factor := FullScore, 1.0
	var clientEntry entry
	if client != 0 {
		clientEntry = e.shards[shardOf(client)].entries[client].entry
		score = rep.score(clientEntry, now)
		factor = rep.Factor(score)
	}

	var nextBuf [maxBatch]entry
	var viaGrantBuf [maxBatch]bool
	next, viaGrant := nextBuf[:0], viaGrantBuf[:0]
	all := true
	for i := range reqs {
		req := &reqs[i]
		s := &e.shards[shardIdx[i]]
		if req.Limit.Algorithm == Concurrency {
			res[i] = e.checkLease(s, now, req)
			next, viaGrant = append(next, entry{}), append(viaGrant, false)
			all = all && res[i].Allowed
			continue
		}
		cur := old[i].entry // read once, above
		if overflow[i] {
			cur = e.overflow.entries[okeys[i]].entry
			e.overflowed.Add(1)
		}
		for j := range i { // an earlier request in this batch on the same counter
			if sameCounter(reqs, overflow, okeys, i, j) {
				cur = next[j]
			}
		}
		limit := req.Limit
		if factor != 1 {
			limit = limit.Scale(factor)
		}
		n, r := limit.apply(cur, now, req.cost())
		grant := false
		if !r.Allowed {
			n = cur
			if g, ok := s.grants[req.Key]; ok && !overflow[i] {
				if r2 := g.spend(now, req.cost(), r, false, nil, 0); r2.Allowed {
					r, grant = r2, true
				}
			}
			if !r.Allowed && req.MaxDelay > 0 {
				n, r = limit.book(cur, now, req.cost(), int64(req.MaxDelay), r)
			}
		}
		next, viaGrant = append(next, n), append(viaGrant, grant)
		res[i] = r
		all = all && r.Allowed
	}
	if all {
		for i := range reqs {
			req := &reqs[i]
			s := &e.shards[shardIdx[i]]
			switch {
			case req.Limit.Algorithm == Concurrency:
				e.claimLease(s, now, req)
			case viaGrant[i]:
				g := s.grants[req.Key]
				g.spend(now, req.cost(), Result{}, true, s, req.Key)
			case overflow[i]:
				e.overflow.entries[okeys[i]] = slot{entry: next[i]}
			default:
				s.put(req.Key, next[i], old[i], !existed[i], req.Network, res[i].Remaining == 0)
			}
		}
	} else {
		// A counter that denied its request is exhausted: mark it so the
		// key table keeps it until its state expires.
		for i := range reqs {
			req := &reqs[i]
			if res[i].Allowed || overflow[i] || req.Limit.Algorithm == Concurrency {
				continue
			}
			if existed[i] && old[i].note&exhaustedBit == 0 {
				v := old[i]
				v.note |= exhaustedBit
				e.shards[shardIdx[i]].entries[req.Key] = v
			}
		}
		// Nothing was spent: the allowed ones still have their units.
		for i := range res {
			if res[i].Allowed && reqs[i].Limit.Algorithm != Concurrency {
				res[i].Remaining += reqs[i].cost()
			}
		}
		if client != 0 {
			s := &e.shards[shardOf(client)]
			if v, ok := s.entries[client]; ok || e.makeRoom(s, now, 0) {
				pen := rep.penalize(clientEntry, now)
				s.put(client, pen, v, !ok, 0, false)
				score = rep.score(pen, now)
			}
		}
	}

	if usesOverflow {
		e.overflow.mu.Unlock()
	}
	for _, i := range idx {
		e.shards[i].mu.Unlock()
	}
	return all, score
}

func sameCounter(reqs []Request, overflow []bool, okeys []Key, i, j int) bool {
	if overflow[i] != overflow[j] {
		return false
	}
	if overflow[i] {
		return okeys[i] == okeys[j]
	}
	return reqs[i].Key == reqs[j].Key
}

// makeRoom reports whether shard s, whose lock is held, can take a new key
// of network net. When the shard is full, or net holds its share of it, it
// looks at a sample of the shard's counters: it drops the expired ones and,
// if that is not enough, evicts the one closest to expiring (for counters of
// one zone, the least recently used) that is not exhausted, of network net
// when net is over its share.
func (e *Engine) makeRoom(s *shard, now int64, net uint32) bool {
	limit := int(e.shardCap.Load())
	netCap := int32(e.netCap.Load())
	net &= netMask
	netFull := net != 0 && s.nets[net] >= netCap
	if !netFull && len(s.entries) < limit {
		return true
	}
	var victim Key
	var victimSlot slot
	var victimExpires int64
	found, seen := false, 0
	for k, v := range s.entries { // map iteration starts at a random place
		switch {
		case v.expires <= now:
			s.remove(k, v)
			e.reclaimed.Add(1)
		case found && v.expires >= victimExpires:
		case netFull && v.net() != net:
		case v.held(now):
		default:
			victim, victimSlot, victimExpires, found = k, v, v.expires, true
		}
		if seen++; seen == reclaimSample {
			break
		}
	}
	netFull = net != 0 && s.nets[net] >= netCap
	if !netFull && len(s.entries) < limit {
		return true
	}
	if !found {
		return false
	}
	s.remove(victim, victimSlot)
	e.evicted.Add(1)
	return true
}
