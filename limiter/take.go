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
//
// A client with no reputation on record (one never denied, or recovered
// and swept) costs nothing more than one without reputation, unless it is
// denied: its score is full, and nothing of its reputation is read.
func (e *Engine) TakeFor(now time.Time, client Key, reqs []Request, res []Result) (bool, float64) {
	ns := now.UnixNano()
	rep := e.reputation.Load()
	if rep == nil {
		client = 0
	}
	if len(reqs) == 1 && reqs[0].Limit.Algorithm != Concurrency {
		return e.takeOne(ns, rep, client, reqs, res)
	}
	return e.takeBatch(ns, rep, client, reqs, res)
}

// takeBatch is TakeFor on the path of several requests, or of a client
// that may hold a reputation or was denied: takeMany, with the client's
// shard locked only if it may hold the client's reputation, and again
// with it if it turns out to be needed.
func (e *Engine) takeBatch(now int64, rep *ReputationPolicy, client Key, reqs []Request, res []Result) (bool, float64) {
	withClient := client != 0 && e.reps.mayHold(client)
	ok, score, decided := e.takeMany(now, rep, client, withClient, reqs, res)
	if !decided {
		ok, score, _ = e.takeMany(now, rep, client, true, reqs, res)
	}
	return ok, score
}

// TakeOne is Take for a single request.
func (e *Engine) TakeOne(now time.Time, req Request) Result {
	var res [1]Result
	e.Take(now, []Request{req}, res[:])
	return res[0]
}

// takeOne is TakeFor for reqs[0], a rate request, alone. It passes a
// client that may have a reputation on record, or whose request is denied
// (which penalizes it), to takeBatch, having changed nothing.
func (e *Engine) takeOne(now int64, rep *ReputationPolicy, client Key, reqs []Request, results []Result) (bool, float64) {
	req, res := &reqs[0], &results[0]
	s := &e.shards[shardOf(req.Key)]
	s.mu.Lock()
	if client != 0 && e.reps.mayHold(client) { // read under the lock: see reputations
		s.mu.Unlock()
		return e.takeBatch(now, rep, client, reqs, results)
	}
	cur, ok := s.entries[req.Key]
	if !ok && !e.makeRoom(s, now, req.Network) {
		s.mu.Unlock()
		if client != 0 {
			return e.takeBatch(now, rep, client, reqs, results)
		}
		return e.takeOverflow(now, req, res), FullScore
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
		if !r.Allowed && client != 0 {
			s.mu.Unlock()
			return e.takeBatch(now, rep, client, reqs, results)
		}
		if !r.Allowed && ok && cur.note&exhaustedBit == 0 {
			cur.note |= exhaustedBit
			s.entries[req.Key] = cur
		}
	}
	s.mu.Unlock()
	*res = r
	return r.Allowed, FullScore
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

// pending is what takeMany knows of one request of its batch while it
// decides: where its counter is, what it held, and what it holds if the
// batch is granted.
type pending struct {
	shard    uint32 // the request's shard (shardOf)
	existed  bool   // its counter was in the key table
	overflow bool   // it is counted in the overflow counter okey
	viaGrant bool   // it is granted from its key's grant
	okey     Key
	old      slot  // what the counter held
	next     entry // what it holds if the batch is granted
}

// takeMany decides several requests, and the client's reputation, under the
// locks of all the shards they touch, taken in shard order. The client's
// shard is among them only withClient: without it, a client with no
// reputation on record has a full score, and takeMany gives up (decided
// false, having changed nothing) if the client may hold a reputation after
// all or if the requests are denied, which penalizes it; withClient, it
// always decides.
func (e *Engine) takeMany(now int64, rep *ReputationPolicy, client Key, withClient bool, reqs []Request, res []Result) (granted bool, score float64, decided bool) {
	var psBuf [maxBatch]pending
	var ps []pending
	if len(reqs) > maxBatch {
		ps = make([]pending, len(reqs))
	} else {
		ps = psBuf[:len(reqs)]
	}
	var idxBuf [maxBatch + 1]uint32
	idx := idxBuf[:0]
	for i := range reqs {
		si := shardOf(reqs[i].Key)
		ps[i].shard = si
		idx = insertSorted(idx, si)
	}
	if withClient {
		idx = insertSorted(idx, shardOf(client))
	}
	for _, i := range idx {
		e.shards[i].mu.Lock()
	}
	if client != 0 && !withClient && e.reps.mayHold(client) { // read under the locks: see reputations
		e.unlockShards(idx)
		return false, 0, false
	}
	usesOverflow := false
	for i := range reqs {
		p := &ps[i]
		if reqs[i].Limit.Algorithm != Concurrency {
			s := &e.shards[p.shard]
			p.old, p.existed = s.entries[reqs[i].Key]
			p.overflow = !p.existed && !e.makeRoom(s, now, reqs[i].Network)
			usesOverflow = usesOverflow || p.overflow
		}
	}
	// The overflow shard is always locked last, after any regular shard, so
	// the lock order is the same for every caller.
	if usesOverflow {
		e.overflow.mu.Lock()
		for i := range reqs {
			if ps[i].overflow {
				ps[i].okey = e.overflowKey(&reqs[i])
			}
		}
	}

	score, factor := FullScore, 1.0
	var clientEntry entry
	if withClient {
		clientEntry = e.shards[shardOf(client)].entries[client].entry
		score = rep.score(clientEntry, now)
		factor = rep.Factor(score)
	}

	all := true
	for i := range reqs {
		req, p := &reqs[i], &ps[i]
		s := &e.shards[p.shard]
		if req.Limit.Algorithm == Concurrency {
			res[i] = e.checkLease(s, now, req)
			all = all && res[i].Allowed
			continue
		}
		cur := p.old.entry // read once, above
		if p.overflow {
			cur = e.overflow.entries[p.okey].entry
		}
		for j := range i { // an earlier request in this batch on the same counter
			if sameCounter(reqs, ps, i, j) {
				cur = ps[j].next
			}
		}
		limit := req.Limit
		if factor != 1 {
			limit = limit.Scale(factor)
		}
		n, r := limit.apply(cur, now, req.cost())
		if !r.Allowed {
			n = cur
			if g, ok := s.grants[req.Key]; ok && !p.overflow {
				if r2 := g.spend(now, req.cost(), r, false, nil, 0); r2.Allowed {
					r, p.viaGrant = r2, true
				}
			}
			if !r.Allowed && req.MaxDelay > 0 {
				n, r = limit.book(cur, now, req.cost(), int64(req.MaxDelay), r)
			}
		}
		p.next = n
		res[i] = r
		all = all && r.Allowed
	}
	if !all && client != 0 && !withClient { // a denial penalizes: again, with the client's shard
		if usesOverflow {
			e.overflow.mu.Unlock()
		}
		e.unlockShards(idx)
		return false, 0, false
	}
	if usesOverflow {
		for i := range reqs {
			if ps[i].overflow {
				e.overflowed.Add(1)
			}
		}
	}
	if all {
		for i := range reqs {
			req, p := &reqs[i], &ps[i]
			s := &e.shards[p.shard]
			switch {
			case req.Limit.Algorithm == Concurrency:
				e.claimLease(s, now, req)
			case p.viaGrant:
				g := s.grants[req.Key]
				g.spend(now, req.cost(), Result{}, true, s, req.Key)
			case p.overflow:
				e.overflow.entries[p.okey] = slot{entry: p.next}
			default:
				s.put(req.Key, p.next, p.old, !p.existed, req.Network, res[i].Remaining == 0)
			}
		}
	} else {
		// A counter that denied its request is exhausted: mark it so the
		// key table keeps it until its state expires.
		for i := range reqs {
			req, p := &reqs[i], &ps[i]
			if res[i].Allowed || p.overflow || req.Limit.Algorithm == Concurrency {
				continue
			}
			if p.existed && p.old.note&exhaustedBit == 0 {
				v := p.old
				v.note |= exhaustedBit
				e.shards[p.shard].entries[req.Key] = v
			}
		}
		// Nothing was spent: the allowed ones still have their units.
		for i := range res {
			if res[i].Allowed && reqs[i].Limit.Algorithm != Concurrency {
				res[i].Remaining += reqs[i].cost()
			}
		}
		if client != 0 { // withClient: see above
			s := &e.shards[shardOf(client)]
			if v, ok := s.entries[client]; ok || e.makeRoom(s, now, 0) {
				pen := rep.penalize(clientEntry, now)
				e.putReputation(s, client, pen, v, !ok)
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
	return all, score, true
}

// unlockShards unlocks the shards idx lists.
func (e *Engine) unlockShards(idx []uint32) {
	for _, i := range idx {
		e.shards[i].mu.Unlock()
	}
}

// sameCounter reports whether requests i and j of a batch count on one
// counter.
func sameCounter(reqs []Request, ps []pending, i, j int) bool {
	if ps[i].overflow != ps[j].overflow {
		return false
	}
	if ps[i].overflow {
		return ps[i].okey == ps[j].okey
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
