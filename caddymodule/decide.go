package caddymodule

import (
	"sync"
	"time"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/limiter"
)

// maxInline is the number of limiter requests a decision handles without
// allocating; more (a handler with many zones) spill to the heap.
const maxInline = 8

// scratch is the working memory of one decision. It comes from a pool rather
// than the stack: Caddy's handler chains run deep, and a large frame here
// makes goroutine stacks grow (and, after each GC shrinks them, grow again).
type scratch struct {
	zones  [maxInline]*Zone
	keys   [maxInline]uint64
	reqs   [maxInline]limiter.Request
	zoneOf [maxInline]int
	named  [maxInline]bool
	netw   [maxInline]bool
	dry    [maxInline]bool
	res    [maxInline]limiter.Result
	text   [128]byte
	id     [fingerprint.IDLen]byte
	batch  batch
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// batch is what one request asks of the limiter: the zones that match it,
// and the limiter requests they expand into, each tagged with the index of
// its zone. A zone may expand into several requests, added in any order;
// the request is allowed only if every enforced one is. The slices start
// in the scratch arrays and grow onto the heap past maxInline.
type batch struct {
	zones   []*Zone           // the matching zones, in the handler's order
	keys    []uint64          // the hash of the key each zone counts by, before zone mixing
	reqs    []limiter.Request // what is asked of the limiter
	zoneOf  []int             // reqs[i] is counted for zones[zoneOf[i]]
	named   []bool            // reqs[i] claims a named lease
	dry     []bool            // reqs[i] is a dry run's: it decides nothing
	network []bool            // reqs[i] counts the client's IP network, not the client
	res     []limiter.Result  // the limiter's answer to reqs[i]
}

// reset points b at the inline arrays of sc, empty.
func (b *batch) reset(sc *scratch) {
	b.zones, b.keys, b.reqs, b.zoneOf = sc.zones[:0], sc.keys[:0], sc.reqs[:0], sc.zoneOf[:0]
	b.named, b.dry, b.res = sc.named[:0], sc.dry[:0], sc.res[:0]
	b.network = sc.netw[:0]
}

// add appends a limiter request for zone zi.
func (b *batch) add(zi int, r limiter.Request, named, dry bool) {
	b.reqs = append(b.reqs, r)
	b.zoneOf = append(b.zoneOf, zi)
	b.named = append(b.named, named)
	b.dry = append(b.dry, dry)
	b.network = append(b.network, false)
}

// Ranks of requests, in the order decideAt asks for them.
const (
	rankEnforced = iota
	rankDryRate
	rankDryLease
)

func (b *batch) rank(i int) int {
	switch {
	case !b.dry[i]:
		return rankEnforced
	case b.reqs[i].Limit.Algorithm == limiter.Concurrency:
		return rankDryLease
	}
	return rankDryRate
}

// order sorts the requests by rank, stably, and returns where the dry rate
// requests and the dry lease requests start. It moves nothing when there
// is no dry request.
func (b *batch) order() (dryRates, dryLeases int) {
	for i := 1; i < len(b.reqs); i++ { // insertion sort: few requests, no allocation
		for j := i; j > 0 && b.rank(j) < b.rank(j-1); j-- {
			b.reqs[j], b.reqs[j-1] = b.reqs[j-1], b.reqs[j]
			b.zoneOf[j], b.zoneOf[j-1] = b.zoneOf[j-1], b.zoneOf[j]
			b.named[j], b.named[j-1] = b.named[j-1], b.named[j]
			b.dry[j], b.dry[j-1] = b.dry[j-1], b.dry[j]
			b.network[j], b.network[j-1] = b.network[j-1], b.network[j]
		}
	}
	dryRates, dryLeases = len(b.reqs), len(b.reqs)
	for i := len(b.reqs) - 1; i >= 0; i-- {
		switch b.rank(i) {
		case rankDryLease:
			dryRates, dryLeases = i, i
		case rankDryRate:
			dryRates = i
		}
	}
	return dryRates, dryLeases
}

// results sizes res to the requests, inline when they fit.
func (b *batch) results() []limiter.Result {
	if n := len(b.reqs); n <= cap(b.res) {
		b.res = b.res[:n]
	} else {
		b.res = make([]limiter.Result, n)
	}
	clear(b.res)
	return b.res
}

// zoneOfReq returns the zone request i is counted for.
func (b *batch) zoneOfReq(i int) *Zone { return b.zones[b.zoneOf[i]] }

// asker is what a request is counted as: the client and its standing.
type asker struct {
	identity fingerprint.Identity
	pressure fingerprint.Reading
	key      uint64 // hash of the client ID, the default key
	tier     string
}

// outcome is a decision at one instant.
type outcome struct {
	allowed    bool           // every enforced request was granted
	dryDenied  bool           // a dry run's request would have been denied
	source     cluster.Source // who decided
	score      float64        // the client's reputation, when scoreKnown
	scoreKnown bool
	speaker    int  // index of the request that speaks for the decision
	banned     bool // denied by a zone's ban, before any counter was asked
}

// decideAt decides b at the instant now with d, for the client whose
// reputation is kept under client (0 for none): the one step that spends.
// It fills b.res.
//
// Enforced requests are taken together, with the client's reputation.
// Then the dry run's: if the request is denied, they are only peeked at
// (a denied request spends nothing); else its rate requests are taken
// together without reputation — counted, so a trial zone reports what it
// would have done, but neither penalizing the client nor leaving a
// blocked-cache entry — and its lease requests peeked at, never claimed.
func decideAt(now time.Time, d decider, client limiter.Key, b *batch) outcome {
	res := b.results()
	enforced, dryLeases := b.order() // [0, enforced): enforced; then dry rates, then dry leases
	o := outcome{allowed: true, source: cluster.SourceOwner}
	if enforced > 0 {
		dec := d.TakeFor(now, client, b.reqs[:enforced], res[:enforced])
		o.allowed, o.source, o.score, o.scoreKnown = dec.Allowed, dec.Source, dec.Score, dec.ScoreKnown
	}
	if enforced < len(b.reqs) {
		ok, src := decideDry(now, d, b, enforced, dryLeases, o.allowed)
		o.dryDenied = !ok
		if enforced == 0 {
			o.source = src // nothing enforced was asked
		}
	}
	if o.allowed {
		o.speaker = decidingRequest(res) // a denial here is a dry run's
		if res[o.speaker].Allowed {
			o.speaker = clientSpeaker(b, o.speaker) // the network's budget is never shown
		}
	} else {
		o.speaker = decidingRequest(res[:enforced])
	}
	return o
}

// decideDry decides the dry run's requests b.reqs[rates:], of which those
// from leases on are lease requests, and reports whether they would all
// have been granted, and who answered. allowed is the enforced decision.
func decideDry(now time.Time, node decider, b *batch, rates, leases int, allowed bool) (bool, cluster.Source) {
	res := b.res
	if !allowed {
		src := node.Peek(now, b.reqs[rates:], res[rates:])
		return allGranted(res[rates:]), src
	}
	ok, src := true, cluster.SourceOwner
	if rates < leases {
		ok, src = node.Take(now, b.reqs[rates:leases], res[rates:leases])
		if !ok && src != cluster.SourceOwner {
			// A peer's denial is cached to spare the next call; a trial's
			// must not be, as the cache answers enforced requests too. The
			// source is the worst of the zones' (one zone may have been
			// decided in fallback, another denied by its owner), so any
			// source but this node's own engine may have left an entry.
			for i := rates; i < leases; i++ {
				if !res[i].Allowed {
					node.Forget(b.reqs[i].Key)
				}
			}
		}
	}
	if leases < len(b.reqs) {
		s := node.Peek(now, b.reqs[leases:], res[leases:])
		if rates == leases {
			src = s
		}
		ok = ok && allGranted(res[leases:])
	}
	return ok, src
}

func allGranted(res []limiter.Result) bool {
	for i := range res {
		if !res[i].Allowed {
			return false
		}
	}
	return true
}

// decidingRequest returns the index of the request that speaks for a
// decision: the denied one that asks for the longest wait, or, when all were
// allowed, the one with the fewest requests left.
func decidingRequest(res []limiter.Result) int {
	best := 0
	for i := 1; i < len(res); i++ {
		a, b := &res[i], &res[best]
		switch {
		case a.Allowed != b.Allowed:
			if !a.Allowed {
				best = i
			}
		case !a.Allowed:
			if a.RetryAfter > b.RetryAfter {
				best = i
			}
		case a.Remaining >= 0 && (b.Remaining < 0 || a.Remaining < b.Remaining):
			best = i // unknown counts (-1, from a cache or an open fallback) rank last
		}
	}
	return best
}
