package cluster

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Queries a node answers about keys it owns, beside takes: grants, leases
// and reputation. Each is a request body and a reply body; the owner answers
// through query, locally or for a peer alike.
const (
	msgGrantPut    byte = 16 // key, grant → stored
	msgGrantGet    byte = 17 // key → found, grant, used
	msgGrantDelete byte = 18 // key → found
	msgRelease     byte = 19 // key, lease ID → held
	msgLeases      byte = 20 // key → leases
	msgReputation  byte = 21 // client key → score (float64)
	msgRepBuckets  byte = 22 // → counts per bucket
)

// ErrUnreachable is returned by queries whose owner cannot be reached.
var ErrUnreachable = errors.New("the key's owner cannot be reached")

// query answers one query about this node's own keys.
func (n *Node) query(kind byte, d *decoder, enc *encoder) error {
	now := time.Now()
	engine := n.engine
	switch kind {
	case msgGrantPut:
		k := limiter.Key(d.u64())
		var g limiter.Grant
		copy(g.Version[:], d.take(16))
		g.Created, g.Amount, g.Expires = int64(d.u64()), int64(d.u64()), int64(d.u64())
		if d.err != nil {
			return d.err
		}
		enc.flag((engine.PutGrant(now, k, g)))
	case msgGrantGet:
		k := limiter.Key(d.u64())
		if d.err != nil {
			return d.err
		}
		g, ok := engine.GetGrant(now, k)
		enc.flag((ok))
		enc.b = append(enc.b, g.Version[:]...)
		enc.u64(uint64(g.Created))
		enc.u64(uint64(g.Amount))
		enc.u64(uint64(g.Expires))
		enc.u64(uint64(g.Used))
	case msgGrantDelete:
		k := limiter.Key(d.u64())
		if d.err != nil {
			return d.err
		}
		enc.flag((engine.DeleteGrant(k)))
	case msgRelease:
		k, id := limiter.Key(d.u64()), d.u64()
		if d.err != nil {
			return d.err
		}
		enc.flag((engine.Release(now, k, id)))
	case msgLeases:
		k := limiter.Key(d.u64())
		if d.err != nil {
			return d.err
		}
		leases := engine.Leases(now, k)
		enc.u16(len(leases))
		for _, l := range leases {
			enc.u64(l.ID)
			enc.u64(uint64(l.Expires))
		}
	case msgReputation:
		k := limiter.Key(d.u64())
		if d.err != nil {
			return d.err
		}
		enc.u64(math.Float64bits(engine.Reputation(now, k)))
	case msgRepBuckets:
		counts := engine.ReputationBuckets(now)
		enc.u16(len(counts))
		for _, c := range counts {
			enc.u32(uint32(c))
		}
	case msgGather:
		return n.answerGather(d, enc)
	default:
		return fmt.Errorf("unknown query %d", kind)
	}
	return nil
}

// ask runs a query at the owner of key (this node or a peer) and returns
// the reply body.
func (n *Node) ask(key limiter.Key, kind byte, body []byte) (*decoder, error) {
	return n.askNode(n.Owner(key).Name, kind, body)
}

func (n *Node) askLocal(kind byte, body []byte) (*decoder, error) {
	enc := &encoder{}
	if err := n.query(kind, &decoder{b: body}, enc); err != nil {
		return nil, err
	}
	return &decoder{b: enc.b}, nil
}

// askNode runs a query at the named node, allowing it the time of an
// admin request.
func (n *Node) askNode(name string, kind byte, body []byte) (*decoder, error) {
	return n.askNodeWithin(name, kind, body, max(n.cfg.CallTimeout, time.Second))
}

// askNodeWithin runs a query at the named node, allowing it within.
func (n *Node) askNodeWithin(name string, kind byte, body []byte, within time.Duration) (*decoder, error) {
	if name == n.Name() {
		return n.askLocal(kind, body)
	}
	p := n.peers.get(name)
	if p == nil || !n.core().Reachable(name) {
		return nil, fmt.Errorf("%w: %s", ErrUnreachable, name)
	}
	reply, err := n.roundTrip(p, kind, body, within)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnreachable, name, err)
	}
	return &decoder{b: reply}, nil
}

// PutGrant gives key the grant g at its owner, unless the key has a grant
// created later. It reports whether g is now the key's grant.
func (n *Node) PutGrant(key limiter.Key, g limiter.Grant) (bool, error) {
	e := &encoder{}
	e.u64(uint64(key))
	e.b = append(e.b, g.Version[:]...)
	e.u64(uint64(g.Created))
	e.u64(uint64(g.Amount))
	e.u64(uint64(g.Expires))
	d, err := n.ask(key, msgGrantPut, e.b)
	if err != nil {
		return false, err
	}
	stored := d.u8() == 1
	n.Forget(key) // a blocked answer may no longer hold
	n.forgetEverywhere(key)
	return stored, d.err
}

// GetGrant returns key's grant at its owner, if it has a live one.
func (n *Node) GetGrant(key limiter.Key) (limiter.GrantStatus, bool, error) {
	e := &encoder{}
	e.u64(uint64(key))
	d, err := n.ask(key, msgGrantGet, e.b)
	if err != nil {
		return limiter.GrantStatus{}, false, err
	}
	var g limiter.GrantStatus
	ok := d.u8() == 1
	copy(g.Version[:], d.take(16))
	g.Created, g.Amount, g.Expires, g.Used = int64(d.u64()), int64(d.u64()), int64(d.u64()), int64(d.u64())
	return g, ok, d.err
}

// DeleteGrant revokes key's grant at its owner and reports whether it had one.
func (n *Node) DeleteGrant(key limiter.Key) (bool, error) {
	e := &encoder{}
	e.u64(uint64(key))
	d, err := n.ask(key, msgGrantDelete, e.b)
	if err != nil {
		return false, err
	}
	return d.u8() == 1, d.err
}

// Release gives up a lease wherever it may live: at the key's owner, and
// in this node's fallback. A lease claimed in fallback may have been renewed
// at the owner since, or the other way round, and a request's zones may have
// been decided in different places; releasing an absent lease does nothing.
// It reports an owner that could not be reached (the lease there frees when
// its TTL runs out).
func (n *Node) Release(now time.Time, key limiter.Key, id uint64) error {
	n.core().ReleaseFallback(now, key, id)
	e := &encoder{}
	e.u64(uint64(key))
	e.u64(id)
	_, err := n.ask(key, msgRelease, e.b)
	return err
}

// Leases returns the live leases of key at its owner.
func (n *Node) Leases(key limiter.Key) ([]limiter.Lease, error) {
	e := &encoder{}
	e.u64(uint64(key))
	d, err := n.ask(key, msgLeases, e.b)
	if err != nil {
		return nil, err
	}
	count := d.count(maxZones*4, 16)
	out := make([]limiter.Lease, 0, count)
	for range count {
		out = append(out, limiter.Lease{ID: d.u64(), Expires: int64(d.u64())})
	}
	return out, d.err
}

// Reputation returns the score of the client kept under key, at its owner.
func (n *Node) Reputation(key limiter.Key) (float64, error) {
	return n.reputationAt(n.Owner(key).Name, key, max(n.cfg.CallTimeout, time.Second))
}

// reputationAt asks the named node for the score kept under key.
func (n *Node) reputationAt(name string, key limiter.Key, within time.Duration) (float64, error) {
	if name == n.Name() {
		return n.engine.Reputation(time.Now(), key), nil
	}
	e := &encoder{}
	e.u64(uint64(key))
	d, err := n.askNodeWithin(name, msgReputation, e.b, within)
	if err != nil {
		return 0, err
	}
	return math.Float64frombits(d.u64()), d.err
}

// ReputationBuckets counts, across the cluster, the clients on record in
// each reputation bucket, and lists the nodes it could not ask.
func (n *Node) ReputationBuckets() ([]int, []string) {
	var total []int
	var missing []string
	for _, m := range n.Ring().Members() {
		d, err := n.askNode(m.Name, msgRepBuckets, nil)
		if err != nil {
			missing = append(missing, m.Name)
			continue
		}
		count := d.count(64, 4)
		for i := range count {
			if i >= len(total) {
				total = append(total, 0)
			}
			total[i] += int(d.u32())
		}
	}
	return total, missing
}

// forgetEverywhere clears keys from every peer's blocked cache, without
// waiting.
func (n *Node) forgetEverywhere(keys ...limiter.Key) {
	e := &encoder{}
	encodeKeys(e, keys)
	for _, p := range n.peers.all() {
		c := newCall(msgForget, func(*call) {}) // nobody waits for it
		c.body = e.b
		p.send(c, time.Now().Add(max(n.cfg.CallTimeout, time.Second)))
	}
}
