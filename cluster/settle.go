package cluster

import (
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Settling what a request cost once its response is known: units given
// back (a response a zone does not count, a cost reported lower than was
// taken) or spent once more (a cost reported higher), where the key is
// counted. See core.Core.Settle.

// RefundAt gives back the units of reqs (each request's Cost) that a take
// of this node decided by src counted at the instant at: the decision's
// time, or the instant a booked request was booked for. The units come out
// of the window that counted them, at the key's owner wherever the key is
// counted now (this node, a peer, the node it moved to), or in this node's
// fallback counter if fallback admitted it and still holds it. A refund
// that must travel is numbered and applied once, even if it is sent again,
// and reaches the key's successor with the owner's next replication.
func (n *Node) RefundAt(now, at time.Time, src Source, reqs []limiter.Request) {
	n.coreMu.RLock()
	defer n.coreMu.RUnlock()
	n.core().Settle(now, at, src, false, reqs)
}

// Charge spends the units of reqs once more, where RefundAt would give
// them back: a cost settled after the request was served. A charge beyond
// what remains leaves the key exhausted (see limiter.Engine.Charge).
func (n *Node) Charge(now time.Time, src Source, reqs []limiter.Request) {
	n.coreMu.RLock()
	defer n.coreMu.RUnlock()
	n.core().Settle(now, now, src, true, reqs)
}
