package caddymodule

import (
	"time"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/limiter"
)

// decider decides limiter requests on the request path: for the zones, the
// session minting budget, the challenge's tokens and leases. A
// *cluster.Node is one; without a cluster block, the app hands out a
// standaloneDecider instead, chosen at Provision, so that a single node
// pays nothing for clustering on the request path. The methods mean what
// the cluster.Node methods of the same names mean.
type decider interface {
	TakeFor(now time.Time, client limiter.Key, reqs []limiter.Request, res []limiter.Result) cluster.Decision
	Take(now time.Time, reqs []limiter.Request, res []limiter.Result) (bool, cluster.Source)
	Peek(now time.Time, reqs []limiter.Request, res []limiter.Result) cluster.Source
	Forget(keys ...limiter.Key)
	Release(now time.Time, key limiter.Key, id uint64) error
}

// standaloneDecider decides on the engine itself: what a standalone
// cluster node does for keys it owns (all of them), without its routing,
// hand-off, join and pause checks. Every decision is the owner's. Safe for
// concurrent use.
type standaloneDecider struct {
	engine *limiter.Engine
}

// TakeFor takes reqs for the client whose reputation is kept under client.
func (d standaloneDecider) TakeFor(now time.Time, client limiter.Key, reqs []limiter.Request, res []limiter.Result) cluster.Decision {
	if len(reqs) == 0 {
		return cluster.Decision{Allowed: true, Source: cluster.SourceOwner} // nothing asked: no score learnt
	}
	ok, score := d.engine.TakeFor(now, client, reqs, res)
	return cluster.Decision{Allowed: ok, Source: cluster.SourceOwner, Score: max(score, 0), ScoreKnown: true}
}

// Take takes reqs, all or none.
func (d standaloneDecider) Take(now time.Time, reqs []limiter.Request, res []limiter.Result) (bool, cluster.Source) {
	return d.engine.Take(now, reqs, res), cluster.SourceOwner
}

// Peek answers what Take would, spending nothing.
func (d standaloneDecider) Peek(now time.Time, reqs []limiter.Request, res []limiter.Result) cluster.Source {
	for i := range reqs {
		res[i] = d.engine.Peek(now, reqs[i])
	}
	return cluster.SourceOwner
}

// Forget does nothing: a single node caches no other owner's answers.
func (standaloneDecider) Forget(...limiter.Key) {}

// Release gives back the lease id of key.
func (d standaloneDecider) Release(now time.Time, key limiter.Key, id uint64) error {
	d.engine.Release(now, key, id)
	return nil
}

// Interface guards
var (
	_ decider = (*cluster.Node)(nil)
	_ decider = standaloneDecider{}
)
