package cluster

import (
	"sync"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Fallback that the owner hears of. A node counting a key in fallback
// (its owner unreachable) keeps what it admitted in its fallback engine;
// once the owner answers again, the node sends it those counters, batched,
// and the owner merges them into its own: the window's total is what an
// exact limiter would allow once the fallback admissions are counted. A
// batch carries a sequence number, increasing per sending node (from the
// clock at its start, so across restarts too); the owner applies a batch
// only if its number is above the last it applied from that node, so a retry
// after a lost reply adds nothing twice. A batch not acknowledged stays
// pending and is sent again, with its number, before any new one.
//
// In fallback a node also starts from what the owner last said: callers
// keep the remaining count each owner reply reported for a key (a bounded
// cache, until the window resets), and admit at most their share of it
// (divided among the nodes other than the owner), and never more than
// fallback_ratio × the limit. The client's last known reputation scales
// fallback limits as it scales the owner's.

// reconciler holds each owner's pending batches of fallback counters.
type reconciler struct {
	mu      sync.Mutex
	seq     uint64                      // the last sequence number used
	pending map[string][]reconcileBatch // owner → batches not acknowledged, in order
	applied map[string]uint64           // origin → last sequence applied here
}

// reconcileBatch is one frame's worth of fallback counters for an owner.
type reconcileBatch struct {
	seq    uint64
	states []limiter.State
}

func newReconciler() *reconciler {
	return &reconciler{
		seq:     uint64(time.Now().UnixNano()),
		pending: make(map[string][]reconcileBatch),
		applied: make(map[string]uint64),
	}
}

// reconcile sends what this node counted in fallback to the owners that
// answer again, and merges into its own engine what it now owns itself.
func (n *Node) reconcile(now time.Time) {
	n.reconcileBy(now, n.state.Load().ring)
}

// reconcileBy is reconcile with the owners ring names. Batches pending for
// a node that is no longer in the ring go back to the fallback engine, to
// be sent to the keys' new owners.
func (n *Node) reconcileBy(now time.Time, ring *Ring) {
	r := n.recon
	r.mu.Lock()
	for name, batches := range r.pending {
		if ring.Has(name) {
			continue
		}
		delete(r.pending, name)
		for _, b := range batches {
			n.fallback.Merge(now, b.states)
		}
	}
	r.mu.Unlock()
	for _, p := range n.peers.all() {
		if p.connected.Load() && !p.breaker.open() {
			n.reconcileOn(p, now, ring)
		}
	}
	if n.leaving.Load() || n.fallback.Stats().Keys == 0 {
		return
	}
	mine := n.fallback.Extract(now, func(k limiter.Key) bool {
		m, _ := ring.Owner(k.Route())
		return m.Name == n.name
	}, 0)
	if len(mine) > 0 {
		n.toldSpent(now, mine)
		n.engine.Merge(now, mine)
		n.stats.reconciled.Add(uint64(len(mine)))
	}
}

// reconcileWith sends p's node its pending batches, or new ones made of the
// fallback counters of the keys it owns. It reports whether nothing is left
// to send.
func (n *Node) reconcileWith(p *peer, now time.Time) bool {
	return n.reconcileOn(p, now, n.state.Load().ring)
}

// reconcileOn is reconcileWith, for the keys ring says p's node owns.
func (n *Node) reconcileOn(p *peer, now time.Time, ring *Ring) bool {
	if p.breaker.open() && n.await(p, newCall(msgPing), time.Now()) != nil {
		// The counters stay in the fallback engine, where they cap what
		// this node admits, until the owner answers: taken out to be sent,
		// they would let it admit a fresh cap at every probe.
		return false
	}
	return n.sendFallback(p, now, ring)
}

// sendFallback is reconcileOn, for an owner known to answer.
func (n *Node) sendFallback(p *peer, now time.Time, ring *Ring) bool {
	r := n.recon
	name := p.member.Name
	r.mu.Lock()
	if len(r.pending[name]) == 0 && n.fallback.Stats().Keys > 0 {
		states := n.fallback.Extract(now, func(k limiter.Key) bool {
			m, _ := ring.Owner(k.Route())
			return m.Name == name
		}, 0)
		n.toldSpent(now, states)
		for _, part := range splitStates(states, handoffFrameBytes) {
			r.seq++
			r.pending[name] = append(r.pending[name], reconcileBatch{seq: r.seq, states: part})
		}
	}
	r.mu.Unlock()
	for {
		r.mu.Lock()
		if len(r.pending[name]) == 0 {
			delete(r.pending, name)
			r.mu.Unlock()
			return true
		}
		b := r.pending[name][0]
		r.mu.Unlock()
		e := &encoder{}
		e.str(n.name)
		e.u64(b.seq)
		encodeStates(e, b.states)
		c := newCall(msgReconcile)
		c.body = e.b
		if err := p.do(c, time.Now().Add(max(n.cfg.CallTimeout, time.Second))); err != nil {
			return false // sent again, with its number, next time
		}
		r.mu.Lock()
		if q := r.pending[name]; len(q) > 0 && q[0].seq == b.seq {
			r.pending[name] = q[1:]
		}
		r.mu.Unlock()
		n.stats.reconciled.Add(uint64(len(b.states)))
	}
}

// applyReconcile merges a batch of fallback counters from origin, unless a
// batch with this number or a later one was applied already (a retry).
func (n *Node) applyReconcile(now time.Time, origin string, seq uint64, states []limiter.State) {
	r := n.recon
	r.mu.Lock()
	if seq <= r.applied[origin] {
		r.mu.Unlock()
		return
	}
	r.applied[origin] = seq
	r.mu.Unlock()
	n.engine.Merge(now, states)
}

// told keeps what owners last reported about keys: the count remaining,
// until the key's window resets.
func (n *Node) rememberTold(reqs []limiter.Request, res []limiter.Result) {
	var now int64
	for i := range res {
		if r := res[i]; r.Remaining >= 0 && r.Reset > 0 && reqs[i].Limit.Algorithm != limiter.Concurrency {
			if now == 0 {
				now = time.Now().UnixNano()
			}
			n.told.set(reqs[i].Key, r.Remaining, now+int64(r.Reset))
		}
	}
}

// toldSpent records what this node admitted in fallback, now on its way to
// the owners: the fallback counters start afresh, and the share they may
// admit of what the owner last said must not.
func (n *Node) toldSpent(now time.Time, states []limiter.State) {
	ns := now.UnixNano()
	for _, s := range states {
		if s.Kind < limiter.KindGrant && s.Cur > 0 {
			n.told.spend(s.Key, int64(s.Cur), ns)
		}
	}
}

// toldCache keeps the remaining counts owners reported, until their window
// resets: a fixed table where a key takes the slot it falls in (a newer key
// in the slot replaces it), so it stays bounded and costs no allocation.
type toldCache struct {
	locks [64]sync.Mutex
	slots []toldSlot
}

type toldSlot struct {
	key     limiter.Key
	left    int64 // what the owner said remained
	spent   int64 // what this node admitted in fallback since, and sent on
	expires int64
}

func newToldCache(size int) *toldCache {
	return &toldCache{slots: make([]toldSlot, max(64, size))}
}

func (c *toldCache) slot(k limiter.Key) (*sync.Mutex, *toldSlot) {
	i := uint64(k) % uint64(len(c.slots))
	return &c.locks[i%uint64(len(c.locks))], &c.slots[i]
}

func (c *toldCache) set(k limiter.Key, left, expires int64) {
	mu, s := c.slot(k)
	mu.Lock()
	*s = toldSlot{key: k, left: left, expires: expires}
	mu.Unlock()
}

// spend records that this node admitted used of k in fallback and sent it
// on, if anything is known of k.
func (c *toldCache) spend(k limiter.Key, used, now int64) {
	mu, s := c.slot(k)
	mu.Lock()
	if s.key == k && s.expires > now {
		s.spent += used
	}
	mu.Unlock()
}

// assume returns what is known of k as get does; if nothing is, it
// records that k has at most left remaining until expires (nothing heard
// from the owner), so what this node admits of it in fallback and sends on
// is counted against its share from then on.
func (c *toldCache) assume(k limiter.Key, left, now, expires int64) (known, spent int64) {
	mu, s := c.slot(k)
	mu.Lock()
	defer mu.Unlock()
	if s.key != k || s.expires <= now {
		*s = toldSlot{key: k, left: left, expires: expires}
	}
	return s.left, s.spent
}

// get returns what the owner last said remained of k and what this node
// has admitted of it in fallback since (and sent on), if it still holds.
func (c *toldCache) get(k limiter.Key, now int64) (left, spent int64, ok bool) {
	mu, s := c.slot(k)
	mu.Lock()
	defer mu.Unlock()
	if s.key != k || s.expires <= now {
		return 0, 0, false
	}
	return s.left, s.spent, true
}

// fallbackLimits returns reqs with the limits this node applies in fallback:
// fallback_ratio × the limit, scaled by the client's last known reputation,
// and no more than this node's share of what the owner last said remained.
// A zone whose share is nothing is reported in none (it is denied).
func (n *Node) fallbackLimits(client limiter.Key, reqs []limiter.Request, buf []limiter.Request) (scaled []limiter.Request, none int) {
	none = -1
	ratio := n.fallback.ratio()
	factor := 1.0
	if p := n.reputation.Load(); p != nil && client != 0 {
		if score, ok := n.scores.last(client); ok {
			factor = p.Factor(score)
		}
	}
	// The nodes that may be counting in fallback: every member but the
	// owner, of the larger of the rings before and after a change (while
	// the others catch up, the old members still count).
	st, now := n.state.Load(), time.Now()
	members := st.ring.Len()
	if n.pulling(st, now) { // in the hand-off window
		members = max(members, st.prev.Len())
	}
	ns := now.UnixNano()
	others := int64(max(1, members-1))
	scaled = buf[:0]
	for _, r := range reqs {
		if r.Limit.Algorithm != limiter.Concurrency {
			// What the owner said remained, or, if it said nothing yet,
			// the whole quota: either way what this node admitted of it
			// already (counters since sent on) is taken off its share, so
			// the fallback counters starting afresh after each outage do
			// not give the share again.
			left, spent := n.told.assume(r.Key, r.Limit.Quota, ns, ns+int64(r.Limit.Window))
			r.Limit = r.Limit.Scale(ratio * factor)
			share := left/others - spent
			if share <= 0 && none < 0 {
				none = len(scaled)
			}
			r.Limit.Quota = max(1, min(r.Limit.Quota, share))
		} else {
			r.Limit = r.Limit.Scale(ratio)
		}
		scaled = append(scaled, r)
	}
	return scaled, none
}

// Late answers. A call its caller gave up on may still reach the owner and
// be counted there, though the caller decided it in fallback (where it is
// counted too, and reconciled). When the owner's answer to such a call
// arrives after all and says it admitted it, the caller gives the units
// back at the owner: the request is counted once, where it was decided.
func (p *peer) giveBack(c *call) {
	if len(c.item) == 0 || c.item[0] != opOf(actTake) {
		return
	}
	r := newCall(msgTake)
	r.item = append(r.buf[:0], c.item...)
	r.item[0] = opOf(actRefund)
	go p.do(r, time.Now().Add(max(p.node.cfg.CallTimeout, time.Second)))
}

// clock is a monotonic clock in nanoseconds, as calls' deadlines are
// kept (it runs while the process is stopped).
func clock() int64 { return monoNanos(time.Now()) }
