package caddymodule

import (
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A ban is a counter of its own, kept by the key's owner beside the zone's
// counter: a token bucket holding one token that refills over the ban's
// duration. A denial takes the token; while it is gone the key is banned,
// for as long as the bucket says it takes to refill. So a ban needs nothing
// the cluster does not already do for counters: it is routed to the owner,
// replicated, handed off and snapshotted like one, survives reloads, and
// DELETE /tollgate/clients/{id} lifts it by resetting it.

// banSeedOf returns the seed of the ban counters of a zone identity.
func banSeedOf(h limiter.Hasher, scope string) uint64 { return h.Zone(scope + "\x00ban") }

// banRequest returns the ban counter's request of zone z for the key whose
// counter request in z is req.
func (z *Zone) banRequest(keyHash uint64, network uint32) limiter.Request {
	return limiter.Request{
		Key:     limiter.ZoneKey(keyHash, z.outcome.banSeed),
		Zone:    z.outcome.banSeed,
		Limit:   z.outcome.ban,
		Network: network,
	}
}

// checkBans asks the owners whether the keys of b's ban zones are banned
// and, if one is, returns the denial: that zone speaks for it, with
// Retry-After the ban's remaining time; the other zones are not asked.
func (h *Handler) checkBans(now time.Time, b *batch) (outcome, bool) {
	var reqBuf [maxInline]limiter.Request
	var idxBuf [maxInline]int
	reqs, idx := reqBuf[:0], idxBuf[:0]
	for i := range b.reqs {
		z := b.zoneOfReq(i)
		if z.Ban == 0 || b.dry[i] || b.network[i] {
			continue
		}
		reqs = append(reqs, z.banRequest(b.keys[b.zoneOf[i]], b.reqs[i].Network))
		idx = append(idx, i)
	}
	if len(reqs) == 0 {
		return outcome{}, false
	}
	var resBuf [maxInline]limiter.Result
	res := resBuf[:0]
	if len(reqs) > maxInline {
		res = make([]limiter.Result, len(reqs))
	} else {
		res = resBuf[:len(reqs)]
	}
	src := h.decider.Peek(now, reqs, res)
	banned := -1
	for j := range res {
		if !res[j].Allowed && (banned < 0 || res[j].RetryAfter > res[banned].RetryAfter) {
			banned = j
		}
	}
	if banned < 0 {
		return outcome{}, false
	}
	all := b.results()
	for i := range all {
		all[i] = limiter.Result{Allowed: true, Remaining: -1} // not asked
	}
	wait := res[banned].RetryAfter
	all[idx[banned]] = limiter.Result{Reset: wait, RetryAfter: wait}
	return outcome{source: src, speaker: idx[banned], banned: true}, true
}

// setBans bans the keys that b's ban zones denied.
func (h *Handler) setBans(now time.Time, b *batch) {
	var reqBuf [maxInline]limiter.Request
	reqs := reqBuf[:0]
	for i := range b.reqs {
		z := b.zoneOfReq(i)
		if z.Ban == 0 || b.dry[i] || b.network[i] || b.res[i].Allowed || b.reqs[i].Limit.Algorithm == limiter.Concurrency {
			continue
		}
		reqs = append(reqs, z.banRequest(b.keys[b.zoneOf[i]], b.reqs[i].Network))
	}
	if len(reqs) == 0 {
		return
	}
	res := make([]limiter.Result, len(reqs))
	for i := range reqs { // each on its own: one key already banned must not keep another from it
		if ok, _ := h.decider.Take(now, reqs[i:i+1], res[i:i+1]); ok {
			outcomeCounters().bans.Inc()
		}
	}
}

// banView reads how long a key is banned from zone z, in seconds (0 when
// not banned), at its owner.
func (a *App) banView(z *Zone, keyHash uint64) int64 {
	if z.Ban == 0 {
		return 0
	}
	res := make([]limiter.Result, 1)
	a.node.Peek(time.Now(), []limiter.Request{z.banRequest(keyHash, 0)}, res)
	if res[0].Allowed {
		return 0
	}
	return headerSeconds(res[0].RetryAfter)
}

// banKeys returns the ban counters of keyHash in the zones that ban.
func banKeys(zones []*Zone, keyHash uint64) []limiter.Key {
	var keys []limiter.Key
	for _, z := range zones {
		if z.Ban != 0 {
			keys = append(keys, limiter.ZoneKey(keyHash, z.outcome.banSeed))
		}
	}
	return keys
}
