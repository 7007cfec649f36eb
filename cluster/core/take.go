package core

import (
	"slices"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Takes. A request's zones are decided by the owners of their keys. When
// this node owns them all and may count them (the common case, and every
// case on a single node), Take decides at once, without allocating. Else it
// starts a TakeOp, which the driver advances: each Step returns what to do
// next (call a peer, wait for keys to settle, or done), and the driver
// reports what happened (Replied, CallFailed), until the op is done. Zones
// of different owners are decided owner after owner, the client's owner
// first (it applies the client's reputation); if a later owner denies, the
// units the earlier ones granted are given back, in transfers. A denial
// penalizes the client's reputation only when an owner (or a known denial)
// decided it, never when fallback did.

// ActionKind says what a TakeOp needs its driver to do.
type ActionKind uint8

const (
	// ActDone: the op is decided (TakeOp.Decision).
	ActDone ActionKind = iota
	// ActCall: send Action.Msg to Action.To and report its answer
	// (Core.Replied) or that none came (Core.CallFailed).
	ActCall
	// ActWait: wait until Action.Until, or until the core says keys
	// settled (Hooks.Settled), then Step again.
	ActWait
)

// Action is what a TakeOp needs next.
type Action struct {
	Kind  ActionKind
	To    Peer
	Msg   Message // a TakeItem or a ScoreQuery
	Until time.Time
}

// maxHops bounds how often one zone group follows a MovedTo before it is
// decided by fallback: views disagree only briefly.
const maxHops = 2

// scoreTTL is how long a node trusts a client's score it heard from the
// client's owner.
const scoreTTL = 2 * time.Second

// TakeOp is one request's way through the cluster. The caller owns it
// (it may live on the caller's stack) and the core advances it.
type TakeOp struct {
	op     Op
	client limiter.Key // the client whose reputation scales the zones, or 0
	reqs   []limiter.Request
	res    []limiter.Result

	groups      []takeGroup
	gbuf        [1]takeGroup
	cur         int
	clientOwner string
	scoreStep   bool  // the client's score is asked of its owner first
	deadline    int64 // mono: past it, a group whose owner the views disagree on is decided by fallback

	to   Peer     // the peer of the call under way
	call TakeItem // the call under way
	// callAt is when the call under way was sent (Unix ns): the instant
	// its owner counted it at, as near as this node knows, which a cancel
	// of it carries (Transfer.At).
	callAt int64
	// calling: the take item under way awaits its answer (counted in
	// Core.calling until Replied or CallFailed).
	calling bool

	decision Decision
	done     bool
}

// takeGroup is the zones one owner decides.
type takeGroup struct {
	owner    string
	idx      []int             // positions in the op's requests; nil: all of them
	reqs     []limiter.Request // as asked (scaled by the client's score where another owner keeps it)
	res      []limiter.Result
	client   limiter.Key // the client this group's owner scores, or 0
	scaled   bool
	hops     int
	resealed int // times an owner this node had sealed to was asked again: after its NotYetMine, or a redirect late in the op's patience
	waited   bool
	until    int64 // mono: end of the wait for its keys
	pause    int64 // mono: the views disagree on its owner; ask again then
	decided  bool
	allowed  bool
	src      Source
	by       Peer              // the peer that decided it
	at       int64             // when the call that peer decided was sent (Unix ns): its units given back come out of that window
	seq      uint64            // the take item that asked it
	fallback []limiter.Request // the limits fallback decided it with
	// fallbackMark is the last extraction of fallback counters before
	// fallback decided it: its units are in the fallback engine until an
	// extraction of their key after it (see fallback.here).
	fallbackMark uint64
}

// Decision returns what the op decided; valid once Step returned ActDone.
func (op *TakeOp) Decision() Decision { return op.decision }

// Take decides reqs for client (0 for none), filling res. When this node
// owns every key and may count them, it decides at once and reports true;
// else it starts op, which the driver advances with Step, and reports
// false. now is used only where this node decides: owners decide by their
// own clocks.
func (c *Core) Take(now time.Time, op *TakeOp, kind Op, client limiter.Key, reqs []limiter.Request, res []limiter.Result) (Decision, bool) {
	if len(reqs) == 0 {
		return Decision{Allowed: true, Source: SourceOwner, Score: limiter.FullScore}, true
	}
	v := c.view.Load()
	if c.reputation.Load() == nil {
		client = 0
	}
	if v.standalone || c.countsAll(v, c.mono(now), reqs, client) {
		c.foldKept(now, v, reqs, client)
		if kind == OpPeek {
			for i := range reqs {
				res[i] = c.engine.Peek(now, reqs[i])
			}
			return Decision{Allowed: true, Source: SourceOwner, Score: limiter.FullScore}, true
		}
		ok, score := c.engine.TakeFor(now, client, reqs, res)
		c.noteChanged(v, reqs, client)
		return Decision{Allowed: ok, Source: SourceOwner, Score: score, ScoreKnown: true}, true
	}
	c.startTake(now, v, op, kind, client, reqs, res)
	return Decision{}, false
}

// countsAll reports whether this node counts every key of reqs, and the
// client's, now.
func (c *Core) countsAll(v *view, m int64, reqs []limiter.Request, client limiter.Key) bool {
	for i := range reqs {
		if !c.counting(v, reqs[i].Key, m) {
			return false
		}
	}
	return client == 0 || c.counting(v, client, m)
}

// counting reports whether this node may count key k as its owner at m.
func (c *Core) counting(v *view, k limiter.Key, m int64) bool {
	st, _ := c.keyState(v, m, k)
	return st == keyCounting
}

// keyState says what this node can do with a key now.
type keyState uint8

const (
	keyCounting   keyState = iota // this node owns it and counts it
	keyElsewhere                  // another node owns it
	keyLent                       // this node owns it by its ring, but gave it to a node that owns it by a newer one
	keyWaiting                    // its counts may still be on their way here, its successor's lease ran out, or its majority waits for peers' first word
	keyNoQuorum                   // this node owns it, but its ring lacks a majority: fallback decides
	keyOutOfReach                 // this node owns it, but its counter is out of reach (see outOfReach): fallback decides
	keyStood                      // this node counts it, but stood still: a request waits for the others' counts if it can (see standstill)
)

// mine reports whether this node counts the key, at once or after the
// wait that follows a pause: its reputation and penalties are kept here.
func (st keyState) mine() bool { return st == keyCounting || st == keyStood }

// keyState returns what this node can do with k at m, and for keyWaiting
// the index of the successor whose lease ran out (-1 if that is not why).
func (c *Core) keyState(v *view, m int64, k limiter.Key) (keyState, int) {
	if v.standalone {
		return keyCounting, -1
	}
	own, second := v.ring.top2(k.Route())
	if own < 0 || own != v.self {
		return keyElsewhere, -1
	}
	if !c.majority(v) {
		if v.quorum && c.unheard.Load() {
			return keyWaiting, -1 // for the first word of peers it just learned of
		}
		return keyNoQuorum, -1
	}
	if c.lacksCounter(k, m) {
		return keyOutOfReach, -1
	}
	if c.lent.count() > 0 {
		if _, lent := c.lent.get(k); lent {
			return keyLent, -1
		}
	}
	if second >= 0 && !v.peers[second].leased(m) {
		return keyWaiting, second
	}
	if v.ho != nil && c.handoff.incoming(v, c.self.Name, k) {
		return keyWaiting, -1
	}
	if c.out.holds(k) {
		return keyWaiting, -1 // its counter is on its way to another node, or back
	}
	if c.stood.holds(m) {
		return keyStood, -1 // what others admitted meanwhile comes first
	}
	return keyCounting, -1
}

// noteChanged notes keys counted here for their successors.
func (c *Core) noteChanged(v *view, reqs []limiter.Request, client limiter.Key) {
	if v.ring.Len() > 1 {
		c.dirty.note(reqs, client)
	}
}

// placeName names the node that counts k by v (placeOf), or "" if none
// does yet.
func (c *Core) placeName(v *view, k limiter.Key) string {
	to, _, ok := c.placeOf(v, k)
	if !ok {
		return ""
	}
	return to.Name
}

// startTake sets op up: its zones grouped by the node that counts them,
// the client's owner first.
func (c *Core) startTake(now time.Time, v *view, op *TakeOp, kind Op, client limiter.Key, reqs []limiter.Request, res []limiter.Result) {
	*op = TakeOp{op: kind, client: client, reqs: reqs, res: res, deadline: c.mono(now) + int64(c.patience())}
	op.decision.Score = limiter.FullScore
	target := func(k limiter.Key) string { return c.placeName(v, k) }
	first := target(reqs[0].Key)
	same := true
	for i := 1; i < len(reqs) && same; i++ {
		same = target(reqs[i].Key) == first
	}
	if same {
		op.groups = op.gbuf[:1]
		op.groups[0] = takeGroup{owner: first, reqs: reqs, res: res}
	} else {
		for i := range reqs {
			t := target(reqs[i].Key)
			j := slices.IndexFunc(op.groups, func(g takeGroup) bool { return g.owner == t })
			if j < 0 {
				op.groups = append(op.groups, takeGroup{owner: t})
				j = len(op.groups) - 1
			}
			g := &op.groups[j]
			g.idx = append(g.idx, i)
			g.reqs = append(g.reqs, reqs[i])
			g.res = append(g.res, limiter.Result{})
		}
	}
	if client == 0 {
		return
	}
	op.clientOwner = target(client)
	if j := slices.IndexFunc(op.groups, func(g takeGroup) bool { return g.owner == op.clientOwner }); j >= 0 {
		op.groups[0], op.groups[j] = op.groups[j], op.groups[0]
		op.groups[0].client = client
		return
	}
	// No zone lives with the client's reputation: its score comes from
	// here, from what its owner said lately, or from its owner.
	switch st, _ := c.keyState(v, c.mono(now), client); {
	case st.mine():
		op.decision.Score, op.decision.ScoreKnown = c.engine.Reputation(now, client), true
	default:
		if s, ok := c.scores.get(client, now.UnixNano()); ok {
			op.decision.Score = s
		} else if p := c.peers.get(op.clientOwner); p != nil && p.calls() {
			op.scoreStep = true
		}
	}
}

// Step advances op as far as the core can on its own, and returns what it
// needs next.
func (c *Core) Step(now time.Time, op *TakeOp) Action {
	if op.done {
		return Action{Kind: ActDone}
	}
	v := c.view.Load()
	m := c.mono(now)
	if op.scoreStep {
		p := c.peers.get(op.clientOwner)
		if p == nil {
			op.scoreStep = false
		} else {
			op.to = p.peer
			return Action{Kind: ActCall, To: p.peer, Msg: ScoreQuery{Client: op.client}}
		}
	}
	for op.cur < len(op.groups) {
		g := &op.groups[op.cur]
		if !g.scaled {
			g.scaled = true
			if op.client != 0 && g.client == 0 {
				g.reqs = c.scaleFor(op.decision.Score, g.reqs)
			}
		}
		if g.decided {
			if !c.next(now, op) {
				break
			}
			continue
		}
		if g.pause > m {
			return Action{Kind: ActWait, Until: c.epoch.Add(time.Duration(g.pause))}
		}
		if g.pause != 0 {
			g.pause = 0 // ask again, by the view as it is now
			if t, _, ok := c.placeOf(v, g.reqs[0].Key); ok {
				g.owner = t.Name
			}
		}
		if g.owner == c.self.Name {
			if a, ok := c.stepOwn(now, v, m, op, g); ok {
				return a
			}
			continue
		}
		if g.owner == "" {
			// No ring names an owner yet (the node is joining): wait for one.
			c.redirect(now, v, m, op, g, "")
			continue
		}
		if op.op == OpTake && c.blockedAnswer(now, g.reqs, g.res) {
			g.decided, g.allowed, g.src = true, false, SourceBlockedCache
			c.penalize(now, op)
			continue
		}
		p := c.peers.get(g.owner)
		if p == nil {
			// A node this one has not heard of yet (a peer named it): wait
			// for the view to catch up.
			c.redirect(now, v, m, op, g, "")
			continue
		}
		if !p.calls() {
			if _, member := v.ring.index(g.owner); !member {
				// A node a peer named that this one knows only by an
				// earlier run, gone: wait for the view to catch up.
				c.redirect(now, v, m, op, g, "")
				continue
			}
			if p.reachState() == recovering && m < op.deadline {
				// The owner answers again, and what this node admitted
				// for its keys in fallback is on its way to it: the
				// request waits for that (a round trip, a call timeout at
				// most) and is decided by the owner, rather than by a
				// share of the limit beside the owner's decisions.
				if !g.waited {
					g.waited = true
					g.until = min(m+int64(c.cfg.CallTimeout), op.deadline)
				}
				if m < g.until {
					return Action{Kind: ActWait, Until: c.epoch.Add(time.Duration(g.until))}
				}
			}
			c.decideByFallback(now, v, op, g)
			continue
		}
		op.to = p.peer
		op.call = TakeItem{Seq: c.takeSeq.Add(1), Op: op.op, Client: g.client, Reqs: g.reqs}
		g.seq = op.call.Seq
		op.callAt = now.UnixNano()
		op.calling = true
		c.calling.Add(1)
		return Action{Kind: ActCall, To: p.peer, Msg: op.call}
	}
	c.finish(now, op)
	return Action{Kind: ActDone}
}

// stepOwn decides a group whose keys this node owns by its ring, if it
// can; it returns an action when the op must wait.
func (c *Core) stepOwn(now time.Time, v *view, m int64, op *TakeOp, g *takeGroup) (Action, bool) {
	st, succ := c.groupState(v, m, g)
	switch st {
	case keyStood:
		if until := c.stood.waitUntil(m); m < op.deadline {
			// This node stood still: the request waits for what the
			// others admitted meanwhile, as long as that wait lasts
			// (standstillHold), and the key is counted here then.
			g.until = min(until, op.deadline)
			return Action{Kind: ActWait, Until: c.epoch.Add(time.Duration(g.until))}, true
		}
		fallthrough
	case keyCounting:
		c.foldKept(now, v, g.reqs, g.client)
		if op.op == OpPeek {
			for i := range g.reqs {
				g.res[i] = c.engine.Peek(now, g.reqs[i])
			}
			g.decided, g.allowed, g.src = true, true, SourceOwner
			return Action{}, false
		}
		ok, score := c.engine.TakeFor(now, g.client, g.reqs, g.res)
		c.noteChanged(v, g.reqs, g.client)
		g.decided, g.allowed, g.src = true, ok, SourceOwner
		if g.client != 0 {
			op.decision.Score, op.decision.ScoreKnown = score, true
		} else if !ok {
			c.penalize(now, op)
		}
		return Action{}, false
	case keyElsewhere, keyLent:
		to := ""
		if t, _, ok := c.placeOf(v, g.reqs[0].Key); ok {
			to = t.Name
		}
		c.redirect(now, v, m, op, g, to)
		return Action{}, false
	case keyNoQuorum, keyOutOfReach:
		c.decideByFallback(now, v, op, g)
		return Action{}, false
	}
	// Waiting: for keys on their way here, or for a lease.
	if !g.waited {
		g.waited = true
		g.until = m + int64(c.cfg.CallTimeout)
		c.wake(now, v, m, g, succ)
	}
	if m < g.until {
		return Action{Kind: ActWait, Until: c.epoch.Add(time.Duration(g.until))}, true
	}
	if m+int64(c.cfg.CallTimeout) <= op.deadline && c.waitAnswers(v, succ) {
		// A hand-off whose sources all answer ends within a seal query or
		// two (a source may see the new ring a little after this node),
		// and a successor that answers gives its lease with its answer to
		// a ping (one that just joined has not been pinged yet): the
		// request waits for them, within its patience, rather than be
		// decided by a share of the limit during a graceful change.
		g.until = m + int64(c.cfg.CallTimeout)
		c.wake(now, v, m, g, succ)
		return Action{Kind: ActWait, Until: c.epoch.Add(time.Duration(g.until))}, true
	}
	c.decideByFallback(now, v, op, g)
	return Action{}, false
}

// foldKept counts, before this node counts keys as their owner (reqs' and
// the client's), what it kept of them with its fallback counts: what it
// admitted in fallback, and what was added to them while it had no
// majority (a standalone node keeps none). Those
// join its engine at its next tick once its majority is back; the
// majority comes back as soon as a peer answers, and a request counted
// here before that tick would not count them.
func (c *Core) foldKept(now time.Time, v *view, reqs []limiter.Request, client limiter.Key) {
	if v.standalone || c.fallback.empty() {
		return
	}
	var keys []limiter.Key
	for i := range reqs {
		if c.fallback.engine.Has(now, reqs[i].Key) {
			keys = append(keys, reqs[i].Key)
		}
	}
	if client != 0 && c.fallback.engine.Has(now, client) {
		keys = append(keys, client)
	}
	if len(keys) > 0 {
		c.foldFallback(now, v, keys)
	}
}

// waitAnswers reports whether every node a waiting key waits for answers
// calls: the successor whose lease it lacks (succ, -1 if none) and, while
// a hand-off is under way, the hand-off's sources (handoffAnswering). The
// wait for either ends within a round trip or two while they answer, and
// a call that fails makes its node not answer.
func (c *Core) waitAnswers(v *view, succ int) bool {
	if succ < 0 {
		return c.handoffAnswering(v)
	}
	if p := v.peers[succ]; p == nil || !p.calls() {
		return false
	}
	return v.ho == nil || c.handoffAnswering(v)
}

// handoffAnswering reports whether a hand-off is under way with no dead
// member in it and every source that has not sealed answering calls.
func (c *Core) handoffAnswering(v *view) bool {
	plan := v.ho
	if plan == nil || len(plan.dead) > 0 {
		return false
	}
	return c.handoff.unsealedAll(plan, func(src string) bool {
		p := c.peers.get(src)
		return p != nil && p.calls()
	})
}

// groupState returns what this node can do with a group's keys now: the
// least of its keys' states, and a successor whose lease ran out.
func (c *Core) groupState(v *view, m int64, g *takeGroup) (keyState, int) {
	worst, succ := keyCounting, -1
	check := func(k limiter.Key) bool {
		st, s := c.keyState(v, m, k)
		if st == keyElsewhere || st == keyLent || st == keyNoQuorum || st == keyOutOfReach {
			worst = st
			return false
		}
		if st == keyWaiting {
			worst = keyWaiting
			if s >= 0 {
				succ = s
			}
		}
		if st == keyStood && worst == keyCounting {
			worst = keyStood
		}
		return true
	}
	for i := range g.reqs {
		if !check(g.reqs[i].Key) {
			return worst, -1
		}
	}
	if g.client != 0 && !check(g.client) {
		return worst, -1
	}
	return worst, succ
}

// wake starts what a waiting group needs: pulls of its keys moving here,
// a ping of the successor whose lease ran out.
func (c *Core) wake(now time.Time, v *view, m int64, g *takeGroup, succ int) {
	if succ >= 0 && v.peers[succ] != nil {
		c.pingNow(v.peers[succ], m)
	}
	for i := range g.reqs {
		if st, s := c.keyState(v, m, g.reqs[i].Key); st == keyWaiting && s >= 0 && v.peers[s] != nil {
			c.pingNow(v.peers[s], m)
		}
	}
	if v.ho == nil {
		return
	}
	var keys []limiter.Key
	for i := range g.reqs {
		if c.handoff.incoming(v, c.self.Name, g.reqs[i].Key) {
			keys = append(keys, g.reqs[i].Key)
		}
	}
	if g.client != 0 && c.handoff.incoming(v, c.self.Name, g.client) {
		keys = append(keys, g.client)
	}
	if len(keys) > 0 {
		c.requestKeys(now, v, keys)
	}
}

// redirect sends a group on to the node to, named by a peer's MovedTo or
// by this node's own view. A group that has gone round more than maxHops
// nodes is on a node whose view disagrees with the others': it waits a call
// timeout for the views to agree, and asks again by this node's view, until
// the op's patience is spent; then fallback decides, unless this node
// sealed to the owner its view gives the keys: that owner is asked.
func (c *Core) redirect(now time.Time, v *view, m int64, op *TakeOp, g *takeGroup, to string) {
	if c.splitByView(now, v, op) {
		return
	}
	g.hops++
	if g.hops <= maxHops && to != "" {
		g.owner = to
		return
	}
	if m+int64(c.cfg.CallTimeout) > op.deadline {
		if o, ok := c.sealedOwner(v, g); ok && m < op.deadline && g.resealed < maxResealWaits {
			// This node told the owner of the keys by its view that it
			// holds nothing more for them: what it admitted in fallback
			// now would reach the owner only after it started counting
			// them. A redirect elsewhere (to a node that view has no
			// more) came from a view older than the one the owner asked
			// the seal by: the owner is asked, with what patience is
			// left, as after its NotYetMine.
			g.resealed++
			g.hops = 0
			g.owner = o
			return
		}
		c.decideByFallback(now, v, op, g)
		return
	}
	g.hops = 0
	g.pause = m + int64(c.cfg.CallTimeout)
	g.owner = ""
	if t, _, ok := c.placeOf(v, g.reqs[0].Key); ok {
		g.owner = t.Name
	}
}

// splitByView splits the op's current group when the view now places its
// keys with different owners: the group was formed by an earlier view (the
// node joined, or the ring changed, since), and each owner would send it
// on to the other. Each owner is then asked for its own keys, the owner of
// the client's reputation first. It reports whether it split the group.
func (c *Core) splitByView(now time.Time, v *view, op *TakeOp) bool {
	g := op.groups[op.cur]
	target := func(k limiter.Key) string { return c.placeName(v, k) }
	first := target(g.reqs[0].Key)
	if !slices.ContainsFunc(g.reqs[1:], func(r limiter.Request) bool { return target(r.Key) != first }) {
		return false
	}
	var parts []takeGroup
	for j := range g.reqs {
		t := target(g.reqs[j].Key)
		at := j
		if g.idx != nil {
			at = g.idx[j]
		}
		k := slices.IndexFunc(parts, func(p takeGroup) bool { return p.owner == t })
		if k < 0 {
			parts = append(parts, takeGroup{owner: t, scaled: g.scaled, hops: g.hops + 1, resealed: g.resealed})
			k = len(parts) - 1
		}
		p := &parts[k]
		p.idx = append(p.idx, at)
		p.reqs = append(p.reqs, g.reqs[j])
		p.res = append(p.res, g.res[j])
	}
	if g.client != 0 {
		// The group asked the client's owner to scale its zones by the
		// reputation it keeps: the part that owner decides still does; the
		// others are scaled here, by the score known now.
		owner := target(g.client)
		for i := range parts {
			if parts[i].owner == owner {
				parts[i].client = g.client
				parts[0], parts[i] = parts[i], parts[0]
			} else {
				parts[i].scaled = false
			}
		}
		if parts[0].client == 0 {
			if s, ok := c.scores.get(g.client, now.UnixNano()); ok {
				op.decision.Score = s
			}
		}
	}
	op.groups = slices.Replace(op.groups, op.cur, op.cur+1, parts...)
	return true
}

// patience bounds how long a request may wait, in all, for the owner of
// its keys: ten call timeouts.
func (c *Core) patience() time.Duration { return 10 * c.cfg.CallTimeout }

// decideByFallback decides a group by the fallback mode.
func (c *Core) decideByFallback(now time.Time, v *view, op *TakeOp, g *takeGroup) {
	var buf [8]limiter.Request
	scaled, none := c.fallbackLimits(now, v, op.client, g.reqs, buf[:])
	ok, mark := c.decideFallback(now, op.op, g.reqs, scaled, none, g.res)
	if c.fallback.mode() == FallbackLocal {
		for i := range scaled { // the limit these were counted against, for the client's headers
			if scaled[i].Limit.Algorithm != limiter.Concurrency {
				g.res[i].Quota = scaled[i].Limit.Quota
			}
		}
	}
	g.fallback, g.fallbackMark = slices.Clone(scaled), mark
	g.decided, g.allowed, g.src = true, ok, SourceFallback
}

// next moves op past its decided group; false if the op is over (a zone
// denied).
func (c *Core) next(now time.Time, op *TakeOp) bool {
	g := &op.groups[op.cur]
	if !g.allowed && op.op == OpTake {
		return false
	}
	op.cur++
	return true
}

// Replied takes the answer to the call op made. The answer to a take item
// may come as an *ItemReply, read only during the call: a driver passes
// the reply where it decoded it, without boxing a copy.
func (c *Core) Replied(now time.Time, op *TakeOp, reply Message) {
	c.answered(op)
	c.noteHeard(op.to, now)
	if op.scoreStep {
		op.scoreStep = false
		if r, ok := reply.(ScoreReply); ok {
			op.decision.Score, op.decision.ScoreKnown = r.Score, true
			c.scores.set(op.client, r.Score, now.Add(scoreTTL).UnixNano())
		}
		return
	}
	r, ok := reply.(ItemReply)
	if p, isPtr := reply.(*ItemReply); isPtr && p != nil {
		r, ok = *p, true
	}
	if !ok || op.cur >= len(op.groups) {
		return
	}
	g := &op.groups[op.cur]
	switch r.Outcome {
	case Decided:
		if len(r.Results) > 0 && &r.Results[0] != &g.res[0] {
			copy(g.res, r.Results)
		}
		g.decided, g.allowed, g.src, g.by, g.at = true, r.Allowed, SourcePeer, op.to, op.callAt
		if op.op != OpTake {
			return
		}
		ns := now.UnixNano()
		c.rememberTold(g.reqs, g.res, ns)
		if g.client != 0 {
			op.decision.Score, op.decision.ScoreKnown = r.Score, true
			c.scores.set(g.client, r.Score, now.Add(scoreTTL).UnixNano())
		}
		if !r.Allowed {
			c.rememberBlocked(now, g.reqs, g.res)
			if g.client == 0 {
				c.penalize(now, op)
			}
		}
	case MovedTo:
		c.redirect(now, c.view.Load(), c.mono(now), op, g, r.Owner)
	default: // NotYetMine: the owner is alive but cannot count these keys yet
		v, m := c.view.Load(), c.mono(now)
		if c.sealedToOwner(v, op.to, g) {
			if g.resealed < maxResealWaits && m+int64(c.cfg.CallTimeout) <= op.deadline {
				// This node told the owner it holds nothing more for its
				// keys, and the owner may start counting them as soon as
				// the others told it so too: what this node admitted in
				// fallback now would reach it only after. The owner is
				// asked again a call timeout later instead, by this
				// node's view then.
				g.resealed++
				g.pause = m + int64(c.cfg.CallTimeout)
				return
			}
			c.stats.SealedFallbacks.Add(1)
		}
		c.decideByFallback(now, v, op, g)
	}
}

// sealedToOwner reports whether this node sealed, by view v, to the node
// that answered g's call (to) or to the node its own ring gives g's keys:
// a peer with an older view may have sent the group on to a node that
// cannot count the keys yet, while the owner this node sealed to is about
// to start counting them. See sealedFor. It also reports a seal, by an
// earlier ring, to a node that ring gave the keys to and that may still
// count them by it (sealsGiven.mayCount): this node's view moved on (the
// dead owner came back under a new run), but the node sealed to may not
// have heard of that yet and still waits for the hand-off the seal ends.
func (c *Core) sealedToOwner(v *view, to Peer, g *takeGroup) bool {
	k := g.reqs[0].Key
	if c.sealsGiven.gave(to.Name, v.ring.Fingerprint()) {
		return true
	}
	if o, _, ok := c.placeOf(v, k); ok && (o.Name != to.Name || o.Inc == to.Inc) && c.sealedFor(v, o, k) {
		return true
	}
	return c.sealsGiven.mayCount(v.ring, k)
}

// sealedOwner returns the node view v gives g's keys, if this node sealed
// to it (see sealedFor) and calls it.
func (c *Core) sealedOwner(v *view, g *takeGroup) (string, bool) {
	o, self, ok := c.placeOf(v, g.reqs[0].Key)
	if !ok || self || !c.sealedFor(v, o, g.reqs[0].Key) {
		return "", false
	}
	p := c.peers.get(o.Name)
	return o.Name, p != nil && p.calls()
}

// sealedFor reports whether this node's seal to o, which view v gives k,
// holds for k: it sealed to o by v, or by an earlier ring that gave k to o
// too. A ring change since (another node joined, or came back under a new
// run) left k with o, whose hand-off of the ring this node sealed by may
// still be under way, o not having seen the change yet: what this node
// admits for k in fallback now would reach o only after it started
// counting k.
func (c *Core) sealedFor(v *view, o Member, k limiter.Key) bool {
	if c.sealsGiven.gave(o.Name, v.ring.Fingerprint()) {
		return true
	}
	if !c.sealsGiven.gaveFor(o, k) {
		return false
	}
	if c.debugOn() {
		c.log.Debug("seal held across a ring change", "node", c.self.Name, "owner", o.Name, "key", uint64(k.Route()), "ring", v.ring.Fingerprint())
	}
	return true
}

// maxResealWaits bounds how often one zone group waits for, or asks again,
// an owner this node sealed to, before fallback decides it: an owner whose hand-off
// waits for another node may not count for a while.
const maxResealWaits = 2

// CallFailed reports that op's call got no answer. busy: it was never sent
// (the peer's queue was full), which says nothing of the peer's health.
// An item that may have reached its owner is cancelled there: the request
// is decided elsewhere and must not count twice. If the ring gave the
// keys to another node while the call was out (the owner was declared
// dead), or to a new run of the node called (it came back), that owner
// decides them, as a MovedTo would have said: the call never reached it,
// and admitted here in fallback, after this node sealed to it or to the
// node a ring between gave the keys, they would reach that node only once
// it counted past them. Else fallback decides.
func (c *Core) CallFailed(now time.Time, op *TakeOp, busy bool) {
	c.answered(op)
	p := c.peers.get(op.to.Name)
	if !busy && p != nil && p.peer.Inc == op.to.Inc {
		c.peerFailed(p)
	}
	if op.scoreStep {
		op.scoreStep = false
		return
	}
	if op.cur >= len(op.groups) {
		return
	}
	g := &op.groups[op.cur]
	if op.op == OpTake && !busy {
		c.sendTransfer(now, op.to, Transfer{Mode: ModeCancel, At: op.callAt, Reqs: slices.Clone(g.reqs), Take: op.call.Seq}, purposeCancel)
	}
	v, m := c.view.Load(), c.mono(now)
	if to, _, ok := c.placeOf(v, g.reqs[0].Key); ok && (to.Name != op.to.Name || c.anotherRun(op.to)) {
		c.redirect(now, v, m, op, g, to.Name)
		return
	}
	c.decideByFallback(now, v, op, g)
}

// answered notes that op's take item, if one was under way, has its
// answer, or was given up on.
func (c *Core) answered(op *TakeOp) {
	if op.calling {
		op.calling = false
		c.calling.Add(-1)
	}
}

// anotherRun reports whether a call to called's name would go to another
// run of it now: the run called is gone, and a new one is listed.
func (c *Core) anotherRun(called Peer) bool {
	p := c.peers.get(called.Name)
	return p != nil && p.peer.Inc != called.Inc
}

// finish settles op: its results in place and, if a zone was denied, the
// units the earlier zones granted given back.
func (c *Core) finish(now time.Time, op *TakeOp) {
	op.done = true
	allowed := true
	src := SourceOwner
	for i := range op.groups {
		g := &op.groups[i]
		if g.decided {
			src = max(src, g.src)
			allowed = allowed && g.allowed
		}
	}
	if op.op == OpTake && !allowed {
		for i := range op.groups {
			g := &op.groups[i]
			if g.decided && g.allowed {
				c.giveBack(now, g)
			}
			if !g.decided { // never asked: unknown
				for j := range g.res {
					g.res[j] = limiter.Result{Allowed: true, Remaining: -1}
				}
			}
		}
	}
	if op.groups[0].idx != nil {
		for i := range op.groups {
			g := &op.groups[i]
			for j, at := range g.idx {
				op.res[at] = g.res[j]
			}
		}
	}
	op.decision.Allowed = allowed
	op.decision.Source = src
}

// giveBack returns the units a group was granted, where they were counted.
func (c *Core) giveBack(now time.Time, g *takeGroup) {
	switch g.src {
	case SourceOwner:
		c.refund(now, g.reqs)
	case SourcePeer:
		// Stamped with the instant they were asked: given back once a
		// later zone's answer came in the next window, or arriving late,
		// they still come out of the window they were counted in.
		c.sendTransfer(now, g.by, Transfer{Mode: ModeRefund, At: g.at, Reqs: slices.Clone(g.reqs)}, purposeRefund)
	case SourceFallback:
		// Where the fallback counter that counted them is: here, or, if
		// it was sent on to the key's owner (or joined this node's own
		// counter) meanwhile, there. A counter of the key here begun
		// after holds what was admitted since only: given back from it,
		// the units would come off others' (and a counter holding
		// nothing goes no lower), and stay counted where they went.
		// Sent on, they are counted at the limit's own rate, not the
		// share's (see rate): given back there at the share's, a
		// token bucket's unit took more of the owner's off.
		var sent []limiter.Request
		for i, r := range g.fallback {
			if r.Limit.Algorithm == limiter.Concurrency {
				c.fallback.engine.Refund(now, r)
				c.fallback.wrote()
			} else if !c.fallback.refundIfHere(now, r, g.fallbackMark) {
				if len(g.reqs) == len(g.fallback) {
					r.Limit = g.reqs[i].Limit
				}
				sent = append(sent, r)
			}
		}
		if len(sent) > 0 {
			c.refund(now, sent)
		}
	}
}

// penalize records a violation of op's client decided by an owner that does
// not keep its reputation (or by a known denial): at the client's owner,
// without waiting.
func (c *Core) penalize(now time.Time, op *TakeOp) {
	p := c.reputation.Load()
	if p == nil || op.client == 0 {
		return
	}
	v := c.view.Load()
	if st, _ := c.keyState(v, c.mono(now), op.client); st.mine() {
		op.decision.Score, op.decision.ScoreKnown = c.engine.Penalize(now, op.client), true
		c.noteChanged(v, nil, op.client)
		return
	}
	if peer := c.peers.get(op.clientOwner); peer != nil && peer.calls() {
		c.out.send(peer.peer, TakeItem{Seq: c.takeSeq.Add(1), Op: OpPenalize, Client: op.client})
		c.notifyOutbox()
	}
	op.decision.Score = max(0, op.decision.Score-p.Penalty)
	c.scores.set(op.client, op.decision.Score, now.Add(scoreTTL).UnixNano())
}

// scaleFor returns reqs with their rate limits scaled to score, in a copy;
// reqs itself when the score costs nothing.
func (c *Core) scaleFor(score float64, reqs []limiter.Request) []limiter.Request {
	p := c.reputation.Load()
	if p == nil {
		return reqs
	}
	factor := p.Factor(score)
	if factor == 1 {
		return reqs
	}
	scaled := slices.Clone(reqs)
	for i := range scaled {
		if scaled[i].Limit.Algorithm != limiter.Concurrency {
			scaled[i].Limit = scaled[i].Limit.Scale(factor)
		}
	}
	return scaled
}

// Serve decides a take item for the node from, if this node counts its
// keys, filling res. When their counts are still on their way here and
// hold has not passed, it reports wait: the driver holds the item, waits
// for keys to settle (Hooks.Settled) or for hold, and serves it again.
func (c *Core) Serve(now time.Time, from Peer, item *TakeItem, res []limiter.Result, hold time.Time) (reply ItemReply, wait bool) {
	c.noteHeard(from, now)
	v := c.view.Load()
	m := c.mono(now)
	if item.Op == OpPenalize {
		switch st, succ := c.keyState(v, m, item.Client); st {
		case keyCounting, keyStood:
			c.engine.Penalize(now, item.Client)
			c.noteChanged(v, nil, item.Client)
		case keyWaiting:
			if m < c.mono(hold) { // held like a take: the score is counted once it is here
				c.wake(now, v, m, &takeGroup{client: item.Client}, succ)
				return ItemReply{}, true
			}
		}
		return ItemReply{Outcome: Decided}, false
	}
	client := item.Client
	if client != 0 {
		if st, _ := c.keyState(v, m, client); st == keyElsewhere || st == keyLent {
			client = 0 // not this node's to keep
		}
	}
	g := takeGroup{reqs: item.Reqs, res: res, client: client}
	switch st, succ := c.groupState(v, m, &g); st {
	case keyElsewhere, keyLent:
		to, _, ok := c.placeOf(v, item.Reqs[0].Key)
		for i := 1; i < len(item.Reqs) && ok; i++ {
			if t, self, _ := c.placeOf(v, item.Reqs[i].Key); !self && t.Name != c.self.Name {
				to = t
				break
			}
		}
		if !ok || to.Name == c.self.Name {
			return c.undecided(now, from, item, res, client, ItemReply{Outcome: NotYetMine}), false
		}
		return c.undecided(now, from, item, res, client, ItemReply{Outcome: MovedTo, Owner: to.Name}), false
	case keyWaiting:
		if m < c.mono(hold) {
			c.wake(now, v, m, &g, succ)
			return ItemReply{}, true
		}
		return c.undecided(now, from, item, res, client, ItemReply{Outcome: NotYetMine}), false
	case keyNoQuorum, keyOutOfReach:
		return c.undecided(now, from, item, res, client, ItemReply{Outcome: NotYetMine}), false
	case keyStood:
		if m < c.mono(hold) {
			return ItemReply{}, true // held while the others' counts come (see standstill)
		}
	}
	c.foldKept(now, v, item.Reqs, client)
	if item.Op == OpPeek {
		for i := range item.Reqs {
			res[i] = c.engine.Peek(now, item.Reqs[i])
		}
		return ItemReply{Outcome: Decided, Allowed: true, Score: limiter.FullScore, Results: res}, false
	}
	var allowed bool
	score := limiter.FullScore
	how, ok := c.takes.decide(from, item.Seq, func() bool {
		allowed, score = c.engine.TakeFor(now, client, item.Reqs, res)
		return allowed
	})
	switch how {
	case servedCancelled:
		return ItemReply{Outcome: NotYetMine}, false // its caller decided it elsewhere
	case servedBefore:
		return c.decidedBefore(now, item, res, client, ok), false
	}
	if allowed && item.Op == OpTake {
		c.noteAdmittedFor(from, m)
	}
	c.noteChanged(v, item.Reqs, client)
	return ItemReply{Outcome: Decided, Allowed: allowed, Score: score, Results: res}, false
}

// decidedBefore answers a take item that came again with the decision its
// first copy got: nothing is spent twice.
func (c *Core) decidedBefore(now time.Time, item *TakeItem, res []limiter.Result, client limiter.Key, allowed bool) ItemReply {
	for i := range item.Reqs {
		res[i] = c.engine.Peek(now, item.Reqs[i])
		res[i].Allowed = res[i].Allowed || allowed
	}
	return ItemReply{Outcome: Decided, Allowed: allowed, Score: c.engine.Reputation(now, client), Results: res}
}

// undecided returns reply, an answer that decides nothing (NotYetMine,
// MovedTo), for a take item from from, and records it: the caller decides
// the request elsewhere, and a later copy of the item (the network may
// deliver one twice) must not be counted here too. A copy of an item
// decided before gets that decision instead: answered NotYetMine, its
// caller would decide it by fallback beside the admission that stands
// here. Every copy of an item gets the answer the first one got.
func (c *Core) undecided(now time.Time, from Peer, item *TakeItem, res []limiter.Result, client limiter.Key, reply ItemReply) ItemReply {
	if item.Op != OpTake {
		return reply
	}
	if how, ok := c.takes.undecided(from, item.Seq); how == servedBefore {
		return c.decidedBefore(now, item, res, client, ok)
	}
	return reply
}

// blockedAnswer fills res and reports true if one of reqs' keys is known to
// be denied until later than now.
func (c *Core) blockedAnswer(now time.Time, reqs []limiter.Request, res []limiter.Result) bool {
	ns, gen := now.UnixNano(), c.blockGn.Load()
	for i := range reqs {
		e, ok := c.blocked.get(reqs[i].Key, ns)
		if !ok || e.until <= ns || e.gen != gen {
			continue
		}
		for j := range res {
			res[j] = limiter.Result{Allowed: true, Remaining: -1}
		}
		wait := time.Duration(e.until - ns)
		res[i] = limiter.Result{Reset: wait, RetryAfter: wait}
		return true
	}
	return false
}

// rememberBlocked keeps the denied keys of an owner's answer until they
// may pass. A full concurrency zone is not remembered: a slot may free at
// any moment, and a holder of a lease is let in even at the cap.
func (c *Core) rememberBlocked(now time.Time, reqs []limiter.Request, res []limiter.Result) {
	gen := c.blockGn.Load()
	for i := range res {
		if !res[i].Allowed && res[i].RetryAfter > 0 && reqs[i].Limit.Algorithm != limiter.Concurrency {
			until := now.Add(res[i].RetryAfter).UnixNano()
			c.blocked.set(reqs[i].Key, blockedEntry{until: until, gen: gen}, until)
		}
	}
}

// rememberTold keeps what an owner reported remained of keys, until the
// key's window resets: where this node's fallback starts from.
func (c *Core) rememberTold(reqs []limiter.Request, res []limiter.Result, ns int64) {
	for i := range res {
		if r := res[i]; r.Remaining >= 0 && r.Reset > 0 && reqs[i].Limit.Algorithm != limiter.Concurrency {
			c.told.set(reqs[i].Key, r.Remaining, ns+int64(r.Reset))
		}
	}
}

// Forget drops keys from this node's caches of what owners said.
func (c *Core) Forget(keys ...limiter.Key) {
	for _, k := range keys {
		c.blocked.forget(k)
		c.scores.forget(k)
		c.told.forget(k)
	}
}

// ForgetAllDenials voids every denial this node remembers: they were
// decided under shared values that just changed.
func (c *Core) ForgetAllDenials() { c.blockGn.Add(1) }

// ResetLocal drops keys everywhere on this node: its counters, fallback
// counters and shares, replicas, and what it heard of them.
func (c *Core) ResetLocal(keys ...limiter.Key) {
	c.engine.Reset(keys...)
	c.fallback.forget(keys)
	c.replicas.drop(keys)
	c.Forget(keys...)
}
