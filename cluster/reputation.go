package cluster

import (
	"sync"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A client's reputation lives at the owner of its reputation key; its zones
// may live elsewhere (a zone keyed by a user header, say). Those zones are
// decided with the client's score as last heard from its owner, kept here
// for scoreTTL, and a denial there is a violation the client's owner hears
// of in the next batch. So every zone's limit follows the client's
// reputation, at the cost of one extra call per client and scoreTTL on a
// node, and of a score that may be up to scoreTTL old.

// scoreTTL is how long a node trusts a client's score it heard from the
// client's owner.
const scoreTTL = 2 * time.Second

// SetReputation sets the reputation policy the node applies to zones whose
// owner is not the client's, and to the counters it keeps in fallback.
func (n *Node) SetReputation(p *limiter.ReputationPolicy) {
	n.reputation.Store(p)
	if n.fallback != nil {
		n.fallback.SetReputation(p)
	}
}

// clientScore returns the score of client, kept by the node named owner:
// read here if that is this node, else the one cached here, else asked of
// the owner. An owner that cannot be asked gives a full score for a while:
// not knowing is no reason to cut anyone's limit.
func (n *Node) clientScore(now time.Time, owner string, client limiter.Key) float64 {
	if owner == n.name && !n.leaving.Load() {
		return n.engine.Reputation(now, client)
	}
	if s, ok := n.scores.get(client, now); ok {
		return s
	}
	score, err := n.reputationAt(owner, client, n.cfg.CallTimeout)
	if err != nil {
		score = limiter.FullScore
	}
	n.scores.set(client, score, now)
	return score
}

// scaleFor returns reqs with their rate limits scaled to score, in buf when
// it has room; reqs itself when the score costs nothing.
func (n *Node) scaleFor(score float64, reqs []limiter.Request, buf []limiter.Request) []limiter.Request {
	p := n.reputation.Load()
	if p == nil {
		return reqs
	}
	factor := p.Factor(score)
	if factor == 1 {
		return reqs
	}
	scaled := buf[:0]
	for _, r := range reqs {
		if r.Limit.Algorithm != limiter.Concurrency {
			r.Limit = r.Limit.Scale(factor)
		}
		scaled = append(scaled, r)
	}
	return scaled
}

// penalizeRemote records a violation of client, decided at a node that is
// not the client's owner, and returns the client's score as this node now
// believes it.
func (n *Node) penalizeRemote(now time.Time, owner string, client limiter.Key, score float64) float64 {
	p := n.reputation.Load()
	if p == nil {
		return limiter.FullScore
	}
	if owner == n.name && !n.leaving.Load() {
		return n.engine.Penalize(now, client)
	}
	n.penalizeAsync(owner, client)
	score = max(0, score-p.Penalty)
	n.scores.set(client, score, now)
	return score
}

// scoreCache keeps the scores a node heard from clients' owners, for
// scoreTTL: a fixed table where a client takes the slot its key falls in,
// so it stays bounded whatever the number of clients, and a score set is
// seen by the very next lookup.
type scoreCache struct {
	locks [64]sync.Mutex
	slots []scoreSlot
}

type scoreSlot struct {
	client  limiter.Key
	score   float64
	expires int64
}

func newScoreCache(size int) *scoreCache {
	return &scoreCache{slots: make([]scoreSlot, max(64, size))}
}

func (c *scoreCache) slot(client limiter.Key) (*sync.Mutex, *scoreSlot) {
	i := uint64(client) % uint64(len(c.slots))
	return &c.locks[i%uint64(len(c.locks))], &c.slots[i]
}

func (c *scoreCache) get(client limiter.Key, now time.Time) (float64, bool) {
	mu, s := c.slot(client)
	mu.Lock()
	defer mu.Unlock()
	if s.client != client || s.expires <= now.UnixNano() {
		return 0, false
	}
	return s.score, true
}

// last returns the client's score last heard, however old: what fallback
// scales by when the owner cannot be asked.
func (c *scoreCache) last(client limiter.Key) (float64, bool) {
	mu, s := c.slot(client)
	mu.Lock()
	defer mu.Unlock()
	if s.client != client {
		return 0, false
	}
	return s.score, true
}

func (c *scoreCache) set(client limiter.Key, score float64, now time.Time) {
	mu, s := c.slot(client)
	mu.Lock()
	*s = scoreSlot{client: client, score: score, expires: now.Add(scoreTTL).UnixNano()}
	mu.Unlock()
}

func (c *scoreCache) forget(client limiter.Key) {
	mu, s := c.slot(client)
	mu.Lock()
	if s.client == client {
		*s = scoreSlot{}
	}
	mu.Unlock()
}
