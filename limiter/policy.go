package limiter

import (
	"fmt"
	"slices"
	"time"
)

// FullScore is the reputation of a client with no violations on record.
const FullScore = 100.0

// Bucket is a band of reputation scores and the multiplier of limits for
// clients in it.
type Bucket struct {
	Min    float64 // the lowest score in the band
	Factor float64 // limits are multiplied by this, above 0 and at most 1
}

// DefaultReputationBuckets returns the default buckets, a fresh slice each
// time: 100–75 full limits, 74–50 60%, 49–25 30%, 24–0 10%.
func DefaultReputationBuckets() []Bucket {
	return []Bucket{{75, 1}, {50, 0.6}, {25, 0.3}, {0, 0.1}}
}

// ReputationPolicy scores clients by their violations: a client starts at
// FullScore, loses Penalty points for each denied request and regains
// RecoveryPerHour points an hour, computed when next looked at (no job runs
// per client). Its score's bucket scales every rate limit it is checked
// against.
type ReputationPolicy struct {
	Penalty         float64
	RecoveryPerHour float64
	Buckets         []Bucket // by descending Min; the last must start at 0
}

// Validate reports what is wrong with p.
func (p *ReputationPolicy) Validate() error {
	if p.Penalty <= 0 || p.Penalty > FullScore {
		return fmt.Errorf("penalty %g: must be above 0 and at most 100", p.Penalty)
	}
	if p.RecoveryPerHour <= 0 {
		return fmt.Errorf("recovery %g points an hour: must be above 0", p.RecoveryPerHour)
	}
	if len(p.Buckets) == 0 {
		return fmt.Errorf("no buckets")
	}
	for i, b := range p.Buckets {
		if b.Factor <= 0 || b.Factor > 1 {
			return fmt.Errorf("bucket from %g: factor %g must be above 0 and at most 1", b.Min, b.Factor)
		}
		if b.Min < 0 || b.Min > FullScore {
			return fmt.Errorf("bucket from %g: must be from 0 to 100", b.Min)
		}
		if i > 0 && b.Min >= p.Buckets[i-1].Min {
			return fmt.Errorf("buckets must be given from the highest score down; %g follows %g", b.Min, p.Buckets[i-1].Min)
		}
		if i > 0 && b.Factor > p.Buckets[i-1].Factor {
			return fmt.Errorf("bucket from %g: factor %g is above the %g of the bucket from %g; a lower score cannot get more", b.Min, b.Factor, p.Buckets[i-1].Factor, p.Buckets[i-1].Min)
		}
	}
	if last := p.Buckets[len(p.Buckets)-1]; last.Min != 0 {
		return fmt.Errorf("the lowest bucket must start at 0, not %g", last.Min)
	}
	return nil
}

// Factor returns the limit multiplier for a score.
func (p *ReputationPolicy) Factor(score float64) float64 {
	return p.Buckets[p.BucketOf(score)].Factor
}

// BucketOf returns the index of the bucket a score falls in.
func (p *ReputationPolicy) BucketOf(score float64) int {
	for i, b := range p.Buckets {
		if score >= b.Min {
			return i
		}
	}
	return len(p.Buckets) - 1
}

// score is the reputation in e at now.
func (p *ReputationPolicy) score(e entry, now int64) float64 {
	if e.kind() != kindReputation || e.expires <= now {
		return FullScore
	}
	s := float64(e.cur)/1000 + p.RecoveryPerHour*float64(now-e.stamp)/float64(time.Hour)
	return min(FullScore, s)
}

// penalize returns e after one violation at now.
func (p *ReputationPolicy) penalize(e entry, now int64) entry {
	s := max(0, p.score(e, now)-p.Penalty)
	recover := time.Duration((FullScore - s) / p.RecoveryPerHour * float64(time.Hour))
	return entry{prev: markReputation, stamp: now, cur: uint32(s * 1000), expires: now + int64(recover) + 1}
}

// SetReputation sets the reputation policy; nil turns reputation off.
func (e *Engine) SetReputation(p *ReputationPolicy) {
	if p != nil {
		p = &ReputationPolicy{Penalty: p.Penalty, RecoveryPerHour: p.RecoveryPerHour, Buckets: slices.Clone(p.Buckets)}
	}
	e.reputation.Store(p)
}

// Penalize records a violation of client that was decided elsewhere (a
// denial answered from a cache) and returns the new score.
func (e *Engine) Penalize(now time.Time, client Key) float64 {
	p := e.reputation.Load()
	if p == nil || client == 0 {
		return FullScore
	}
	ns := now.UnixNano()
	s := &e.shards[shardOf(client)]
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.entries[client]
	if !ok && !e.makeRoom(s, ns, 0) {
		return FullScore
	}
	next := p.penalize(cur.entry, ns)
	e.putReputation(s, client, next, cur, !ok)
	return p.score(next, ns)
}

// putReputation stores the reputation e under client, in its shard s,
// whose lock is held, over old (isNew if there was none).
func (e *Engine) putReputation(s *shard, client Key, rep entry, old slot, isNew bool) {
	s.put(client, rep, old, isNew, 0, false)
	e.reps.add(client)
}

// Reputation returns the score kept under client at now.
func (e *Engine) Reputation(now time.Time, client Key) float64 {
	p := e.reputation.Load()
	if p == nil {
		return FullScore
	}
	s := &e.shards[shardOf(client)]
	s.mu.Lock()
	v := s.entries[client].entry
	s.mu.Unlock()
	return p.score(v, now.UnixNano())
}

// ReputationBuckets counts the clients on record in each bucket of the
// policy at now. Clients never penalized, or fully recovered, are not on
// record: the first bucket counts only those recovering.
func (e *Engine) ReputationBuckets(now time.Time) []int {
	p := e.reputation.Load()
	if p == nil {
		return nil
	}
	ns := now.UnixNano()
	counts := make([]int, len(p.Buckets))
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		for _, v := range s.entries {
			if v.kind() == kindReputation && v.expires > ns {
				counts[p.BucketOf(p.score(v.entry, ns))]++
			}
		}
		s.mu.Unlock()
	}
	return counts
}

// Grant is extra quota for one key of one zone, spent only after the zone's
// own limit. A grant is never modified: a new one (a new Version) replaces
// it, and its consumption is counted apart, tagged with the version it was
// spent from, so consumption of an older grant never eats a newer one.
type Grant struct {
	Version [16]byte
	Created int64 // Unix ns; an older grant never replaces a newer one
	Amount  int64
	Expires int64 // Unix ns; after it, the grant is gone
}

// GrantStatus is a grant and what has been spent of it.
type GrantStatus struct {
	Grant
	Used int64
}

// Remaining is what is left of the grant.
func (g GrantStatus) Remaining() int64 { return max(0, g.Amount-g.Used) }

type grantState struct {
	Grant
	used        int64
	usedVersion [16]byte
}

func (g grantState) status() GrantStatus {
	used := g.used
	if g.usedVersion != g.Version {
		used = 0 // a counter of an older grant: ignored
	}
	return GrantStatus{Grant: g.Grant, Used: used}
}

// spend takes cost from the grant for a request the limit denied (denied
// is that answer). If commit, it records the spending in s.grants[key].
func (g grantState) spend(now, cost int64, denied Result, commit bool, s *shard, key Key) Result {
	if g.Expires <= now {
		return denied
	}
	st := g.status()
	if st.Remaining() < cost {
		return denied
	}
	if commit {
		if g.usedVersion != g.Version {
			g.used, g.usedVersion = 0, g.Version
		}
		g.used += cost
		s.grants[key] = g
	}
	return Result{Allowed: true, Remaining: st.Remaining() - cost, Reset: time.Duration(g.Expires - now)}
}

// PutGrant gives key the grant g, replacing its grant unless that one was
// created later. It reports whether g is now the key's grant.
func (e *Engine) PutGrant(now time.Time, key Key, g Grant) bool {
	s := &e.shards[shardOf(key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.grants[key]; ok && old.Expires > now.UnixNano() && old.Created > g.Created {
		return false
	}
	old := s.grants[key]
	s.grants[key] = grantState{Grant: g, used: old.used, usedVersion: old.usedVersion}
	return true
}

// GetGrant returns key's grant, if it has a live one.
func (e *Engine) GetGrant(now time.Time, key Key) (GrantStatus, bool) {
	s := &e.shards[shardOf(key)]
	s.mu.Lock()
	g, ok := s.grants[key]
	s.mu.Unlock()
	if !ok || g.Expires <= now.UnixNano() {
		return GrantStatus{}, false
	}
	return g.status(), true
}

// DeleteGrant revokes key's grant and reports whether it had one.
func (e *Engine) DeleteGrant(key Key) bool {
	s := &e.shards[shardOf(key)]
	s.mu.Lock()
	_, ok := s.grants[key]
	delete(s.grants, key)
	s.mu.Unlock()
	return ok
}

// Lease is one concurrency slot held.
type Lease struct {
	ID      uint64
	Expires int64 // Unix ns
}

// checkLease answers a Concurrency request without changing anything:
// a lease already held is always renewed, even at the cap; a new one is
// granted while fewer than Quota live leases are held.
func (e *Engine) checkLease(s *shard, now int64, req *Request) Result {
	list := s.leases[req.Key]
	held, present, earliest := 0, false, int64(0)
	for _, l := range list {
		if l.Expires <= now {
			continue
		}
		held++
		present = present || l.ID == req.LeaseID
		if earliest == 0 || l.Expires < earliest {
			earliest = l.Expires
		}
	}
	cap, ttl := req.Limit.Quota, req.Limit.Window
	switch {
	case present:
		return Result{Allowed: true, Remaining: cap - int64(held), Reset: ttl}
	case int64(held) < cap:
		if len(list) == 0 && len(s.leases) >= int(e.shardCap.Load()) && !e.makeLeaseRoom(s, now) {
			break // memory full of live leases: no new holder
		}
		return Result{Allowed: true, Remaining: cap - int64(held) - 1, Reset: ttl}
	}
	wait := time.Second
	if earliest > now {
		wait = max(wait, time.Duration(earliest-now))
	}
	return Result{Reset: wait, RetryAfter: wait}
}

// claimLease records the lease of an allowed Concurrency request.
func (e *Engine) claimLease(s *shard, now int64, req *Request) {
	list := s.leases[req.Key]
	live := list[:0]
	found := false
	for _, l := range list {
		if l.ID == req.LeaseID {
			l.Expires, found = now+int64(req.Limit.Window), true
		}
		if l.Expires > now {
			live = append(live, l)
		}
	}
	if !found {
		live = append(live, Lease{ID: req.LeaseID, Expires: now + int64(req.Limit.Window)})
	}
	s.leases[req.Key] = live
}

// makeLeaseRoom drops lease lists with no live lease from a sample.
func (e *Engine) makeLeaseRoom(s *shard, now int64) bool {
	seen := 0
	for k, list := range s.leases {
		live := false
		for _, l := range list {
			live = live || l.Expires > now
		}
		if !live {
			delete(s.leases, k)
		}
		if seen++; seen == reclaimSample {
			break
		}
	}
	return len(s.leases) < int(e.shardCap.Load())
}

// Release gives up the lease id of key and reports whether it was held.
func (e *Engine) Release(now time.Time, key Key, id uint64) bool {
	s := &e.shards[shardOf(key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.leases[key]
	for i, l := range list {
		if l.ID == id {
			list = slices.Delete(list, i, i+1)
			if len(list) == 0 {
				delete(s.leases, key)
			} else {
				s.leases[key] = list
			}
			return l.Expires > now.UnixNano()
		}
	}
	return false
}

// Leases returns the live leases of key.
func (e *Engine) Leases(now time.Time, key Key) []Lease {
	ns := now.UnixNano()
	s := &e.shards[shardOf(key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Lease
	for _, l := range s.leases[key] {
		if l.Expires > ns {
			out = append(out, l)
		}
	}
	return out
}
