package core

import (
	"slices"
	"sync"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Settling. A request's real cost may be known only after it was served
// (a response that does not match what a zone counts, a cost the upstream
// reports): the caller then gives units back, or spends more, where the
// key is counted. A settlement is a transfer like a refund (ModeRefund,
// ModeCharge), numbered by its sender and applied once by the node that
// counts the key, which notes the key for its successors: it follows the
// key through hand-offs (a transfer whose receiver can no longer apply it
// goes where the key is now), and one for a key still on its way here, or
// one this node owns whose counter is out of reach (see outOfReach), waits
// for its counter. A refund carries the instant its units were
// counted (Transfer.At), and keeps it while it waits: the units come out
// of the window that counted them, so a refund after the window rolled
// over never lends the current window a unit. A charge carries the
// instant it was charged at, and is spent in that window, so one that
// waited never holds the current window a unit it did not admit. Nodes' clocks differ by little; a refund crossing a
// window's end by less than that difference is given to the later window,
// like one made by the owner just after it.

// settles reports whether transfers of mode m give back or spend units.
func (m Mode) settles() bool { return m == ModeRefund || m == ModeCharge }

// Settle gives back the units of reqs (charge false), counted by a take
// of this node at the instant at, or spends reqs' units once more (charge
// true): each request's Cost is the units settled. src is who decided the
// take: what fallback admitted is settled in the fallback engine while
// the counter is still there, else at the key's owner; what an owner (this
// node or a peer) admitted is settled wherever the key is counted now. A
// denial answered by a known denial counted nothing, and settles nothing.
// reqs are copied where kept. It returns the numbers of the transfers it
// sent to other nodes (nil if it settled everything here): a caller that
// wants its next request to see the settlement waits until
// SettlementPending says they were acknowledged.
func (c *Core) Settle(now, at time.Time, src Source, charge bool, reqs []limiter.Request) []uint64 {
	if len(reqs) == 0 || src == SourceBlockedCache {
		return nil
	}
	ns := at.UnixNano()
	if src == SourceFallback {
		var rest []limiter.Request
		for _, r := range reqs {
			if r.Limit.Algorithm == limiter.Concurrency || c.fallback.engine.Has(now, r.Key) {
				c.fallback.settle(now, ns, charge, r)
				continue
			}
			rest = append(rest, r)
		}
		reqs = rest
	}
	return c.settleAt(now, ns, charge, reqs)
}

// SettlementPending reports whether the settling transfer seq (one Settle
// returned) is still on its way: not acknowledged by its receiver, nor
// sent on elsewhere. Refused, it goes again to the same receiver under
// another number, and is still on its way.
func (c *Core) SettlementPending(seq uint64) bool {
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	if _, ok := c.out.transfers[seq]; ok {
		return true
	}
	for _, pt := range c.out.transfers {
		if pt.first == seq {
			return true
		}
	}
	return false
}

// heldBelow notes, for the keys given back to here, where their counters
// came down below the records of the runs' counts they hold (see
// replicaStore.heldBelow).
func (c *Core) heldBelow(now time.Time, keys ...limiter.Key) {
	keys = slices.DeleteFunc(keys, func(k limiter.Key) bool { return !c.replicas.holdsRecords(k) })
	if len(keys) == 0 {
		return
	}
	for _, s := range c.engine.StatesOf(now, keys) {
		c.replicas.heldBelow(now, s)
	}
}

// settleIn applies one settlement to engine e.
func settleIn(e *limiter.Engine, now time.Time, at int64, charge bool, r limiter.Request) {
	if charge {
		if at == 0 {
			e.Charge(now, r)
			return
		}
		e.ChargeAt(now, time.Unix(0, at), r)
		return
	}
	if at == 0 {
		e.Refund(now, r)
		return
	}
	e.RefundAt(now, time.Unix(0, at), r)
}

// settleAt settles reqs where their counters are: here (a key this node
// counts, or whose counter it still holds), later (a key whose counter is
// on its way here, or out of reach (see refundOutOfReach), or it or what
// this node admitted of it in fallback in a transfer of this node's not
// acknowledged yet: see carries), or at the node that counts them, in a
// transfer. It returns the numbers of the transfers it sent.
func (c *Core) settleAt(now time.Time, at int64, charge bool, reqs []limiter.Request) (sent []uint64) {
	if len(reqs) == 0 {
		return nil
	}
	v := c.view.Load()
	m := c.mono(now)
	var away map[string][]limiter.Request
	owners := map[string]Member{}
	for _, r := range reqs {
		if v.standalone {
			settleIn(c.engine, now, at, charge, r)
			continue
		}
		to, self, ok := c.placeOf(v, r.Key)
		if r.Limit.Algorithm != limiter.Concurrency && (self && (v.ho != nil && c.handoff.incoming(v, c.self.Name, r.Key) || c.lacksCounter(r.Key, m)) || c.out.carries(r.Key)) {
			c.settling.hold(heldSettle{at: at, charge: charge, req: r})
			continue
		}
		if self || !ok || c.engine.Has(now, r.Key) || r.Limit.Algorithm == limiter.Concurrency {
			settleIn(c.engine, now, at, charge, r)
			if !charge {
				c.heldBelow(now, r.Key)
			}
			c.dirty.noteKey(r.Key) // its successor's replica must see it
			continue
		}
		if away == nil {
			away = map[string][]limiter.Request{}
		}
		away[to.Name] = append(away[to.Name], r)
		owners[to.Name] = to
	}
	mode := ModeRefund
	if charge {
		mode = ModeCharge
	}
	for _, name := range sortedKeys(away) {
		t := c.out.transfer(owners[name].Peer(), Transfer{Mode: mode, At: at, Reqs: away[name]}, purposeRefund, m, true)
		sent = append(sent, t.Seq)
	}
	if len(sent) > 0 {
		c.notifyOutbox()
	}
	return sent
}

// applySettle applies reqs of a settling transfer like t: a refund as
// refunds of a take's other zones are, out of the window of t.At (of now
// if it carries none), naming the give-backs marks names if it was sent
// again in their place (see refundMarked); a charge by settleAt.
func (c *Core) applySettle(now time.Time, t Transfer, reqs []limiter.Request, marks []Replaced) {
	if t.Mode == ModeRefund {
		c.refundMarked(now, t.At, reqs, marks)
		return
	}
	c.settleAt(now, t.At, true, reqs)
}

// tickSettles settles again what waited for keys on their way here, or
// for their counters out of reach.
func (c *Core) tickSettles(now time.Time) {
	held := c.settling.drain()
	if len(held) == 0 {
		return
	}
	// In the order they came, one at a time: each may wait again.
	for _, h := range held {
		if h.refund {
			c.refundMarked(now, h.at, []limiter.Request{h.req}, h.marks)
			continue
		}
		c.settleAt(now, h.at, h.charge, []limiter.Request{h.req})
	}
}

// heldSettle is a settlement waiting for its key's counter.
type heldSettle struct {
	// at is the instant the units were counted at (Unix ns): they come out
	// of its window, however long they waited.
	at     int64
	charge bool
	// refund: units given back as refund gives them back (see refund),
	// waiting for a counter on its way from this node, or out of reach.
	refund bool
	req    limiter.Request
	// marks: the units were given back again in place of these give-backs
	// (see refundMarked), and name them wherever they go.
	marks []Replaced
}

// heldSettles are the settlements of keys whose counters are on their way
// here, or out of reach. It is safe for concurrent use.
type heldSettles struct {
	mu   sync.Mutex
	list []heldSettle
}

func (h *heldSettles) hold(s heldSettle) {
	h.mu.Lock()
	h.list = append(h.list, s)
	h.mu.Unlock()
}

// empty reports whether no settlement waits.
func (h *heldSettles) empty() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.list) == 0
}

func (h *heldSettles) drain() []heldSettle {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.list) == 0 {
		return nil
	}
	out := slices.Clone(h.list)
	h.list = h.list[:0]
	return out
}
