package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// Source says who decided a request.
type Source uint8

const (
	// SourceOwner: this node owns the keys and counted them.
	SourceOwner Source = iota
	// SourcePeer: the owner, another node, counted them.
	SourcePeer
	// SourceBlockedCache: a key was known to be denied; no call was made.
	SourceBlockedCache
	// SourceFallback: the owner could not be reached; this node decided by
	// its fallback mode.
	SourceFallback
)

var sourceNames = [...]string{"owner", "peer", "blocked_cache", "fallback"}

// String names the source, as used in metric labels and logs.
func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return fmt.Sprintf("source(%d)", s)
}

// Node routes every counter to its owner: itself, or the peer the ring
// names. See the package documentation for the consistency model.
//
// A Node is made of parts that each keep their own state behind their own
// lock: the engine of the counters it owns, its fallback counter, the
// caches of what owners said (blocked keys, remaining counts, scores), the
// reconciler, the replica store, the shared-value store, the member table
// and the peer set. A standalone node is a ring of one member: it owns
// every key, and the same code paths serve it.
//
// A Node is safe for concurrent use.
type Node struct {
	cfg        Config
	name       string
	self       atomic.Pointer[Member] // its peer address can be learnt after start
	standalone bool                   // never networked: see Standalone

	engine   *limiter.Engine  // the counters this node owns
	fallback *fallbackCounter // decides for owners it cannot reach
	blocked  blockedCache     // zone key → denied until
	told     *toldCache       // zone key → remaining its owner last reported
	recon    *reconciler      // fallback counters on their way to owners
	dirty    dirtyKeys        // keys changed here since the last replication
	replicas *replicaStore    // counters kept for the owners this node succeeds
	scores   *scoreCache      // client → score its owner told
	shared   *sharedStore     // values every node holds a copy of
	members  *memberTable     // members gossip knows
	peers    *peerSet         // connections to the other members
	transit  *transit         // counters handed off, not yet delivered
	pulls    pullGroup
	stats    nodeStats

	reputation atomic.Pointer[limiter.ReputationPolicy]
	hasher     keyhash.Hasher // ring
	authKey    []byte
	ringHash   [8]byte // identifies the ring settings in node metadata
	log        *slog.Logger

	ml         *memberlist.Memberlist
	gossipAddr string // the address it gossips on, from the start
	listener   net.Listener
	handshakes *handshakeGate // strangers on the peer port, bounded
	state      atomic.Pointer[ringState]
	leaving    atomic.Bool
	started    atomic.Bool // Start was called
	running    atomic.Bool // Start succeeded

	gatherHandler atomic.Pointer[func(string, []byte) []byte]

	handoffMu    sync.Mutex  // one hand-off at a time
	sending      sendingKeys // out of transit, being pushed
	handoffRetry atomic.Bool // a retry of a failed hand-off is due
	rebuild      chan struct{}
	stop         chan struct{}
	wg           sync.WaitGroup
	closeOnce    sync.Once
	reconciling  atomic.Bool
	rejoining    atomic.Bool  // a join of the seeds after a split is under way
	peakMembers  atomic.Int64 // the most members gossip has known
	joined       atomic.Int64 // Unix ns of the first ring with other members
	gate         joinGate     // in its own ring yet? (rejoin.go)
}

// ringState is the membership a node routes by, and the one before it,
// for the hand-off window after a change.
type ringState struct {
	ring    *Ring
	prev    *Ring
	without *Ring // ring minus this node: who owned its keys before it joined
	changed time.Time
	// redirect: keys whose owner, unreachable here, died, and whose new
	// owner took this node's fallback counts before this node saw the death
	// (key → new owner). It lasts until this node's ring changes.
	redirect sync.Map
	// pulled: keys this node pulled since the change (key → struct{}), or
	// tried to in vain (→ Unix ns of the try); a key held is not proof
	// enough, fallback counts may have merged in.
	pulled sync.Map
}

// Standalone returns a node that owns every key, Tollgate without a
// cluster: a ring of one member that never starts a network. It has no
// secret; the caches of what other owners said are never consulted, so
// they are kept minimal.
func Standalone(engine *limiter.Engine) *Node {
	cfg := Config{Name: "local", BlockedKeys: 1, Logger: slog.New(slog.DiscardHandler)}
	cfg.setDefaults()
	n := newNode(cfg, engine, keyhash.FromKey(0, 0))
	n.standalone = true
	return n
}

// Start creates a node and starts it: New followed by Node.Start.
func Start(cfg Config, engine *limiter.Engine) (*Node, error) {
	n, err := New(cfg, engine)
	if err != nil {
		return nil, err
	}
	if err := n.Start(); err != nil {
		return nil, err
	}
	return n, nil
}

// New creates a node from cfg without starting it: it binds no port,
// joins nobody and runs no goroutine until Start, so a configuration can be
// checked on a machine where the node it describes is running. engine holds
// the counters the node owns.
func New(cfg Config, engine *limiter.Engine) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return newNode(cfg, engine, keyhash.New(cfg.Secret, "tollgate ring v1")), nil
}

// newNode builds a node and its parts from cfg, with its defaults set
// (checked, unless the node is standalone and never networks).
func newNode(cfg Config, engine *limiter.Engine, hasher keyhash.Hasher) *Node {
	maxKeys := engine.Stats().MaxKeys
	n := &Node{
		cfg:        cfg,
		name:       cfg.Name,
		engine:     engine,
		fallback:   newFallbackCounter(maxKeys, cfg.Fallback, cfg.FallbackRatio),
		told:       newToldCache(cfg.BlockedKeys),
		recon:      newReconciler(),
		replicas:   newReplicaStore(maxKeys),
		scores:     newScoreCache(cfg.BlockedKeys),
		members:    newMemberTable(),
		peers:      newPeerSet(),
		handshakes: newHandshakeGate(),
		transit:    newTransit(),
		hasher:     hasher,
		authKey:    authKey(cfg.Secret),
		log:        cfg.Logger,
		rebuild:    make(chan struct{}, 1),
		stop:       make(chan struct{}),
	}
	n.shared = newSharedStore(sharedKeyOf(cfg.Secret), cfg.Logger, n.blocked.forgetAll)
	copy(n.ringHash[:], macOf(cfg.Secret, []byte("tollgate ring settings v1")))
	n.self.Store(&Member{Name: n.name})
	n.initGate()
	n.state.Store(&ringState{ring: NewRing(n.hasher, n.currentMembers()), changed: time.Now()})
	return n
}

// Start binds the node's listeners, starts gossip and begins joining the
// cluster in the background. A node starts once; one that failed to start
// has released what it bound and can only be closed. A standalone node has
// nothing to start.
func (n *Node) Start() error {
	if n.standalone {
		return nil
	}
	if !n.started.CompareAndSwap(false, true) {
		return errors.New("cluster node started twice")
	}
	if err := n.blocked.start(n.cfg.BlockedKeys); err != nil {
		return err
	}
	release := func() {
		n.blocked.close()
		n.listener = nil
	}
	var err error
	n.listener, err = net.Listen("tcp", n.cfg.PeerListen)
	if err != nil {
		release()
		return fmt.Errorf("peer_listen %s: %w", n.cfg.PeerListen, err)
	}
	if err := n.startMemberlist(); err != nil {
		n.listener.Close()
		release()
		return err
	}
	n.state.Store(&ringState{ring: NewRing(n.hasher, n.currentMembers()), changed: time.Now()})

	watchStalls()
	n.wg.Add(5)
	go n.replicate()
	go n.serve()
	go n.watch()
	go n.join()
	go func() {
		defer n.wg.Done()
		n.shared.deliver(n.stop)
	}()
	n.running.Store(true)
	n.log.Info("cluster node started", "node", n.name, "gossip", n.gossipAddr, "peer", n.PeerAddr())
	return nil
}

// Name returns the node's name in the cluster.
func (n *Node) Name() string { return n.name }

// PeerAddr returns the address the node's peer RPC listens on.
func (n *Node) PeerAddr() string { return n.self.Load().PeerAddr }

// GossipAddr returns the address the node gossips on.
func (n *Node) GossipAddr() string {
	if n.ml == nil {
		return ""
	}
	return n.gossipAddr // memberlist changes its local node in place
}

// Ring returns the ring the node routes by now.
func (n *Node) Ring() *Ring { return n.state.Load().ring }

// Owner returns the member that owns key.
func (n *Node) Owner(k limiter.Key) Member {
	m, _ := n.state.Load().ring.Owner(k.Route())
	return m
}

// Take spends the requests' units at their owner if every one of them can
// be granted, and none of them otherwise, filling res. It reports whether
// they were granted and who decided. Requests owned by different nodes are
// taken one owner after the other, and given back to the earlier owners if
// a later one denies. now is used only where this node decides: owners
// decide by their own clock.
func (n *Node) Take(now time.Time, reqs []limiter.Request, res []limiter.Result) (bool, Source) {
	ok, src, _ := n.takeFor(now, 0, reqs, res)
	return ok, src
}

// action is what a take item does with its requests, wherever it is
// performed: here, at a peer (the peer protocol encodes it), or in fallback.
type action uint8

const (
	actTake action = iota
	actPeek
	actRefund
	// actPenalize records a violation of the item's client, decided by a
	// node's blocked cache; it has no zones.
	actPenalize
)

// Decision is what a take decided for a request's zones.
type Decision struct {
	// Allowed: every zone granted its units (and all were spent).
	Allowed bool
	// Source says who decided.
	Source Source
	// Score is the client's reputation as its owner knows it after the
	// decision (limiter.FullScore without reputation), when ScoreKnown.
	Score float64
	// ScoreKnown is false when the blocked cache answered: no owner was
	// asked (it still hears of the violation).
	ScoreKnown bool
}

// unknownScore marks, inside the node, a score not learnt.
const unknownScore = -1.0

// TakeFor is Take on behalf of a client whose reputation is kept under the
// key client (0 for none), at the client's owner: it scales and is lowered
// by the requests that owner decides, which are all of them when the zones
// are keyed by the client ID. The decision carries the client's reputation
// score as the owner knows it.
func (n *Node) TakeFor(now time.Time, client limiter.Key, reqs []limiter.Request, res []limiter.Result) Decision {
	ok, src, score := n.takeFor(now, client, reqs, res)
	return Decision{Allowed: ok, Source: src, Score: max(score, 0), ScoreKnown: score != unknownScore}
}

// takeFor is TakeFor, with the score unknownScore when not learnt.
func (n *Node) takeFor(now time.Time, client limiter.Key, reqs []limiter.Request, res []limiter.Result) (bool, Source, float64) {
	if len(reqs) == 0 {
		return true, SourceOwner, unknownScore // nothing asked, nobody to ask
	}
	n.holdWhileJoining()
	st := n.state.Load()
	owner, same := n.commonOwner(st.ring, reqs)
	if !same {
		return n.takeAcross(st, now, client, reqs, res)
	}
	if client != 0 && n.reputation.Load() != nil {
		if m, _ := st.ring.Owner(client.Route()); m.Name != owner.Name {
			return n.takeAway(st, owner, m.Name, now, client, reqs, res)
		}
	}
	return n.takeAt(st, owner, now, actTake, client, reqs, res)
}

// takeAway takes reqs at an owner that does not keep the client's
// reputation: with limits scaled to the client's score, and a denial
// reported to clientOwner.
func (n *Node) takeAway(st *ringState, owner Member, clientOwner string, now time.Time, client limiter.Key, reqs []limiter.Request, res []limiter.Result) (bool, Source, float64) {
	score := n.clientScore(now, clientOwner, client)
	var buf [8]limiter.Request
	ok, src, _ := n.takeAt(st, owner, now, actTake, 0, n.scaleFor(score, reqs, buf[:]), res)
	if !ok && src != SourceFallback {
		score = n.penalizeRemote(now, clientOwner, client, score)
	}
	return ok, src, score
}

// Peek returns what Take would answer, spending nothing.
func (n *Node) Peek(now time.Time, reqs []limiter.Request, res []limiter.Result) Source {
	st := n.state.Load()
	src := SourceOwner
	for i := range reqs {
		owner, _ := st.ring.Owner(reqs[i].Key.Route())
		_, src, _ = n.takeAt(st, owner, now, actPeek, 0, reqs[i:i+1], res[i:i+1])
	}
	return src
}

func (n *Node) commonOwner(r *Ring, reqs []limiter.Request) (Member, bool) {
	first, _ := r.Owner(reqs[0].Key.Route())
	if r.Len() == 1 {
		return first, true
	}
	for i := 1; i < len(reqs); i++ {
		if reqs[i].Key.Route() == reqs[0].Key.Route() {
			continue
		}
		if m, _ := r.Owner(reqs[i].Key.Route()); m.Name != first.Name {
			return first, false
		}
	}
	return first, true
}

// takeAcross takes requests with several owners, owner by owner; the
// client's owner, if among them, goes first and applies its reputation.
func (n *Node) takeAcross(st *ringState, now time.Time, client limiter.Key, reqs []limiter.Request, res []limiter.Result) (bool, Source, float64) {
	type group struct {
		owner  Member
		idx    []int
		src    Source
		client limiter.Key       // the client its owner scored, if any
		taken  []limiter.Request // as taken: limits scaled by the score
	}
	var groups []*group
	clientOwner := "" // the node keeping the client's score
	if client != 0 {
		m, _ := st.ring.Owner(client.Route())
		clientOwner = m.Name
		groups = append(groups, &group{owner: m})
	}
	scoreAsked := false // the client's owner decides a group, and is asked with it
	for i := range reqs {
		m, _ := st.ring.Owner(reqs[i].Key.Route())
		j := slices.IndexFunc(groups, func(g *group) bool { return g.owner.Name == m.Name })
		if j < 0 {
			groups = append(groups, &group{owner: m})
			j = len(groups) - 1
		}
		groups[j].idx = append(groups[j].idx, i)
	}
	src, score := SourceOwner, limiter.FullScore
	if client != 0 {
		if scoreAsked = len(groups[0].idx) > 0; !scoreAsked {
			groups = groups[1:] // the client's owner decides none of these zones
			if n.reputation.Load() != nil {
				score = n.clientScore(now, clientOwner, client)
			}
		}
	}
	for gi, g := range groups {
		sub := make([]limiter.Request, len(g.idx))
		subRes := make([]limiter.Result, len(g.idx))
		for k, i := range g.idx {
			sub[k] = reqs[i]
		}
		c := limiter.Key(0)
		if scoreAsked && g.owner.Name == clientOwner {
			c = client
		} else if client != 0 {
			sub = n.scaleFor(score, sub, sub)
		}
		g.client, g.taken = c, sub
		ok, s, sc := n.takeAt(st, g.owner, now, actTake, c, sub, subRes)
		switch {
		case c != 0:
			score = sc
		case !ok && client != 0 && s != SourceFallback:
			score = n.penalizeRemote(now, clientOwner, client, score)
		}
		g.src = s
		if s > src {
			src = s
		}
		for k, i := range g.idx {
			res[i] = subRes[k]
		}
		if !ok {
			for _, done := range groups[:gi] {
				n.refund(st, done.owner, done.src, done.client, now, done.taken)
			}
			// Zones of owners not asked yet: unknown.
			for _, later := range groups[gi+1:] {
				for _, i := range later.idx {
					res[i] = limiter.Result{Allowed: true, Remaining: -1}
				}
			}
			return false, src, score
		}
	}
	return true, src, score
}

// refund gives back what an earlier owner granted in a batch that a later
// owner denied (a lease claimed is released), with the limits it was
// taken with: a token bucket's refund depends on its quota.
func (n *Node) refund(st *ringState, owner Member, src Source, client limiter.Key, now time.Time, taken []limiter.Request) {
	switch src {
	case SourceOwner:
		for _, r := range taken {
			n.engine.Refund(now, r)
		}
	case SourceFallback:
		scaled, _ := n.fallbackLimits(client, taken, make([]limiter.Request, 0, len(taken)))
		n.fallback.refund(now, scaled)
	case SourcePeer:
		n.takeAt(st, owner, now, actRefund, 0, taken, make([]limiter.Result, len(taken)))
	}
}

// takeAt performs op for reqs at owner.
func (n *Node) takeAt(st *ringState, owner Member, now time.Time, op action, client limiter.Key, reqs []limiter.Request, res []limiter.Result) (bool, Source, float64) {
	if to, lent := n.lentTo(st, owner, reqs[0].Key); lent {
		owner = to // pulled away by a node that owns it now
	} else if owner.Name == n.name && !n.leaving.Load() && n.owning() {
		if n.pullMissing(st, now, reqs, client) {
			ok, score := n.local(now, op, client, reqs, res)
			return ok, SourceOwner, score
		}
		ok, score := n.unpulledTake(now, op, client, reqs, res)
		return ok, SourceFallback, score
	}
	if op == actTake && n.blocked.answer(now, reqs, res) {
		if client != 0 {
			n.penalizeAsync(owner.Name, client)
		}
		return false, SourceBlockedCache, unknownScore
	}
	for hop := 0; hop < 2; hop++ {
		p := n.peers.get(owner.Name)
		ok, probe := false, false
		if p != nil {
			ok, probe = p.breaker.admit(now)
		}
		if !ok {
			if to, moved := st.redirect.Load(reqs[0].Key); moved && to.(string) != owner.Name && hop == 0 {
				owner = Member{Name: to.(string)} // its new owner counts it
				continue
			}
			break
		}
		if probe && !n.reconcileWith(p, now) {
			// The owner is back only once it has heard what was admitted
			// in its absence.
			p.noteFailure(errors.New("sending fallback counts"))
			break
		}
		c := newTakeCall(op, client, reqs, res)
		sent := time.Now()
		if err := n.await(p, c, sent); err != nil {
			n.cfg.Observer.PeerCall(time.Since(sent), false)
			p.noteFailure(err)
			break
		}
		n.cfg.Observer.PeerCall(time.Since(sent), true)
		n.answered(p, probe)
		if c.moved == "" {
			if op == actTake {
				n.rememberTold(reqs, res)
				if client != 0 {
					n.scores.set(client, c.score, now)
				}
				if !c.allowed {
					n.blocked.remember(now, reqs, res)
				}
			}
			return c.allowed || op != actTake, SourcePeer, c.score
		}
		if c.moved == n.name && !n.leaving.Load() && n.owning() {
			if !n.pullMissing(st, now, reqs, client) {
				break // not held: fallback
			}
			ok, score := n.local(now, op, client, reqs, res)
			return ok, SourceOwner, score
		}
		owner = Member{Name: c.moved}
	}
	ok, score := n.fallbackTake(now, op, client, reqs, res)
	return ok, SourceFallback, score
}

// penalizeAsync tells the client's owner of a violation decided here,
// without waiting: it rides in the next batch to that owner.
func (n *Node) penalizeAsync(owner string, client limiter.Key) {
	p := n.peers.get(owner)
	if p == nil || !p.connected.Load() {
		return
	}
	p.post(newTakeCall(actPenalize, client, nil, nil)) // a full queue loses the penalty, not the denial
}

// local performs op on this node's own engine, and notes the keys it
// changed for their successor (a single node has none).
func (n *Node) local(now time.Time, op action, client limiter.Key, reqs []limiter.Request, res []limiter.Result) (bool, float64) {
	ok, score := apply(n.engine, now, op, client, reqs, res)
	if op != actPeek && n.state.Load().ring.Len() > 1 {
		n.dirty.note(reqs, client)
		n.rememberOwnTold(now, op, reqs, res)
	}
	return ok, score
}

// apply performs op on engine e.
func apply(e *limiter.Engine, now time.Time, op action, client limiter.Key, reqs []limiter.Request, res []limiter.Result) (bool, float64) {
	switch op {
	case actPeek:
		for i := range reqs {
			res[i] = e.Peek(now, reqs[i])
		}
		return true, limiter.FullScore
	case actRefund:
		for i := range reqs {
			e.Refund(now, reqs[i])
		}
		return true, limiter.FullScore
	}
	return e.TakeFor(now, client, reqs, res)
}

// SetFallback changes what the node does for owners it cannot reach; a
// config reload uses it, since the node itself outlives reloads. A ratio
// outside (0, 1] means DefaultFallbackRatio.
func (n *Node) SetFallback(mode FallbackMode, ratio float64) { n.fallback.set(mode, ratio) }

// fallbackTake decides for an owner that cannot be reached, with the
// limits scaled for fallback.
func (n *Node) fallbackTake(now time.Time, op action, client limiter.Key, reqs []limiter.Request, res []limiter.Result) (bool, float64) {
	var buf [8]limiter.Request
	scaled, none := n.fallbackLimits(client, reqs, buf[:])
	return n.fallback.decide(now, op, client, scaled, none, res)
}

// Forget drops keys from this node's caches of blocked keys and scores.
func (n *Node) Forget(keys ...limiter.Key) {
	for _, k := range keys {
		n.blocked.forget(k)
		n.scores.forget(k)
	}
}

// pullGroup makes concurrent pulls of one key wait for the first.
type pullGroup struct {
	mu       sync.Mutex
	inflight map[limiter.Key]chan struct{}
}

// pulling reports whether keys may need pulling now: within the hand-off
// window after a membership change.
func (n *Node) pulling(st *ringState, now time.Time) bool {
	return st.prev != nil && now.Sub(st.changed) <= n.cfg.HandoffWindow
}

// pullMissing asks the nodes that may hold keys this node now owns but
// does not hold for their counters, within the hand-off window after a
// membership change, so a key that moved here keeps its count even before
// the push arrives. Only keys whose owner changed are pulled: those whose
// owner in the previous ring was another node, and, for a node that joined
// recently (its previous rings are partial views), those another node would
// own without it. Keys are asked for in one call per node holding any, the
// calls made at once: a batch costs one round trip, not one per key.
//
// It reports whether every key that moved here is held now: a new owner
// never counts a key it could not pull (the caller decides by fallback).
func (n *Node) pullMissing(st *ringState, now time.Time, reqs []limiter.Request, client limiter.Key) bool {
	if !n.pulling(st, now) {
		return true
	}
	var buf [9]limiter.Key
	keys := buf[:0]
	for i := range reqs {
		keys = append(keys, reqs[i].Key)
	}
	if client != 0 {
		keys = append(keys, client)
	}
	return len(n.pullKeys(st, now, keys)) == 0
}

// pullKeys pulls those of keys that moved here and are not held, and
// returns those it could not pull.
func (n *Node) pullKeys(st *ringState, now time.Time, keys []limiter.Key) (failed []limiter.Key) {
	// Worked out for the first key that may need pulling: most calls find
	// every key pulled already, or not this node's.
	var joined, looked bool
	var gone map[string]bool
	var from map[string][]limiter.Key
	var mine []limiter.Key // keys this call pulls; others wait for theirs
	var waits []chan struct{}
	var waitKeys []limiter.Key
	for _, k := range keys {
		if slices.Contains(mine, k) {
			continue
		}
		if v, seen := st.pulled.Load(k); seen {
			// Pulled already, or tried lately in vain: not held, and not
			// asked again before pullRetry (a stuck source would stall
			// every frame that names the key).
			at, tried := v.(int64)
			if !tried {
				continue // pulled
			}
			if time.Now().UnixNano()-at < int64(n.pullRetry()) {
				failed = append(failed, k)
				continue
			}
		}
		if m, _ := st.ring.Owner(k.Route()); m.Name != n.name {
			continue // not this node's to count
		}
		if !looked {
			joined, gone, looked = now.Sub(n.joinedAt()) <= n.cfg.HandoffWindow, n.goneSince(st), true
		}
		var src [2]string
		if m, ok := st.prev.Owner(k.Route()); ok && m.Name != n.name {
			if !gone[m.Name] { // a dead owner's count comes from the replica
				src[0] = m.Name
			}
		}
		if joined && st.without != nil {
			if m, ok := st.without.Owner(k.Route()); ok && m.Name != n.name && m.Name != src[0] {
				src[1] = m.Name
			}
		}
		if src[0] == "" && src[1] == "" {
			continue // it was this node's before the change: nothing to pull
		}
		n.pulls.mu.Lock()
		if n.pulls.inflight == nil {
			n.pulls.inflight = make(map[limiter.Key]chan struct{})
		}
		if wait, busy := n.pulls.inflight[k]; busy {
			n.pulls.mu.Unlock()
			waits = append(waits, wait)
			waitKeys = append(waitKeys, k)
			continue
		}
		n.pulls.inflight[k] = make(chan struct{})
		n.pulls.mu.Unlock()
		mine = append(mine, k)
		if from == nil {
			from = make(map[string][]limiter.Key, 2)
		}
		for _, name := range src {
			if name != "" {
				from[name] = append(from[name], k)
			}
		}
	}
	if len(from) > 0 {
		var wg sync.WaitGroup
		var failed sync.Map // keys of a pull that failed: asked again next time
		for name, ks := range from {
			wg.Go(func() {
				if !n.pull(name, ks, now) {
					for _, k := range ks {
						failed.Store(k, struct{}{})
					}
				}
			})
		}
		wg.Wait()
		n.pulls.mu.Lock()
		for _, k := range mine {
			if _, f := failed.Load(k); !f {
				st.pulled.Store(k, struct{}{})
			} else {
				st.pulled.Store(k, time.Now().UnixNano())
			}
			close(n.pulls.inflight[k])
			delete(n.pulls.inflight, k)
		}
		n.pulls.mu.Unlock()
	}
	for i, w := range waits {
		<-w
		mine = append(mine, waitKeys[i])
	}
	for _, k := range mine {
		if v, _ := st.pulled.Load(k); v != (struct{}{}) {
			failed = append(failed, k)
		}
	}
	return failed
}

// pull asks one node for the counters of keys and merges what it gives.
// It reports whether the node answered.
func (n *Node) pull(from string, keys []limiter.Key, now time.Time) bool {
	p := n.peers.get(from)
	if p == nil || !p.breaker.allow(now) {
		return false
	}
	e := &encoder{}
	e.str(n.name)
	encodeKeys(e, keys)
	c := newCall(msgPull)
	c.body = e.b
	n.stats.pullCalls.Add(1)
	if err := p.do(c, time.Now().Add(n.cfg.CallTimeout)); err != nil {
		p.noteFailure(err) // resolves the breaker's probe, if this was it
		return false
	}
	n.answered(p, false)
	d := &decoder{b: c.reply}
	if states := decodeStates(d); d.err == nil && len(states) > 0 {
		n.engine.Merge(now, states)
		n.stats.pulled.Add(uint64(len(states)))
	}
	complete := d.u8() == 1 // else a push of some is still on its way
	return d.err == nil && complete
}

// goneSince returns the members of the previous ring that are neither in
// the current one nor leaving gracefully: dead, so only their replicas are
// left of their counts.
func (n *Node) goneSince(st *ringState) map[string]bool {
	var gone map[string]bool
	leaving := n.members.leaving()
	for _, m := range st.prev.Members() {
		if !st.ring.Has(m.Name) && !leaving[m.Name] {
			if gone == nil {
				gone = make(map[string]bool)
			}
			gone[m.Name] = true
		}
	}
	return gone
}

// joinedAt returns when this node first saw a ring with other members.
func (n *Node) joinedAt() time.Time {
	if ns := n.joined.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Reset drops the counters of keys at their owners and clears them from
// every node's blocked cache, so the clients they belong to start afresh
// everywhere at once. It reports the peers it could not reach.
func (n *Node) Reset(keys ...limiter.Key) []string {
	n.engine.Reset(keys...)
	n.fallback.Reset(keys...)
	n.replicas.drop(keys)
	n.Forget(keys...)
	peers := n.peers.all()
	// Every peer drops the keys it owns and forgets the ones it blocked:
	// one message does both.
	var failed []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Go(func() {
			e := &encoder{}
			encodeKeys(e, keys)
			c := newCall(msgReset)
			c.body = e.b
			if err := p.do(c, time.Now().Add(max(n.cfg.CallTimeout, time.Second))); err != nil {
				mu.Lock()
				failed = append(failed, p.member.Name)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(failed)
	return failed
}
