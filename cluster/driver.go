package cluster

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/cluster/core"
	"github.com/tollgate/tollgate/limiter"
)

// The driver: what makes the core run in a process. The loop ticks it and
// gives it the membership and the held items; the pump sends what it
// queued and reports each outcome once; the take driver walks a request's
// calls on the request's own goroutine; the joiner joins the seeds and
// tells the core when one answered. These are the same steps the core's
// simulator takes (core/sim_test.go), on the real clock and network.

// tickEvery is how often the loop ticks the core: its replication
// interval, so changed counters reach their successors that often.
const tickEvery = core.DefaultReplicateEvery

// ReplicateEvery is how often an owner sends the counters it changed to
// their successors.
const ReplicateEvery = core.DefaultReplicateEvery

// JoinWait is how long a node configured with seeds waits for one to
// answer before it counts alone.
const JoinWait = 5 * time.Second

// patience is how long a caller waits for the answer to a call: an owner
// may hold a take item for a call timeout while its keys' counts come to
// it, and the answer then has to travel back.
func (n *Node) patience() time.Duration { return 2 * n.cfg.CallTimeout }

// loop ticks the core, gives it the membership gossip believes, and serves
// again the items held for keys that settled or whose hold time passed.
func (n *Node) loop() {
	defer n.wg.Done()
	labelGoroutine(n.Name(), "loop")
	tick := time.NewTicker(tickEvery)
	defer tick.Stop()
	refresh := time.NewTicker(time.Second) // forgets the long dead
	defer refresh.Stop()
	for {
		select {
		case now := <-tick.C:
			n.coreMu.RLock()
			n.core().Tick(now)
			n.coreMu.RUnlock()
			if n.held.due(now) {
				n.serveHeld(now)
			}
		case now := <-refresh.C:
			n.updateMembership(now)
			n.rejoinSeeds()
		case <-n.memberCh:
			n.updateMembership(time.Now())
			n.notePeak()
			if !n.core().Member() {
				signal(n.joinWake)
			}
		case <-n.settledCh:
			if n.held.len() > 0 {
				n.serveHeld(time.Now())
			}
		case <-n.stop:
			return
		}
	}
}

// pump sends the messages the core queued.
func (n *Node) pump() {
	defer n.wg.Done()
	labelGoroutine(n.Name(), "pump")
	for {
		select {
		case <-n.outboxCh:
		case <-n.stop:
			return
		}
		for _, o := range n.core().Outbox() {
			n.send(o)
		}
	}
}

// send sends one message of the core and, for those that expect a reply,
// reports exactly one outcome: Answered or Failed.
func (n *Node) send(o core.Outgoing) {
	c := n.core()
	now := time.Now()
	kind, err := kindOf(o.Msg)
	expects := kind != msgAck && kind != msgTake // an Ack and a penalty get no reply
	p := n.peers.get(o.To.Name)
	if err != nil || p == nil {
		if expects {
			n.coreMu.RLock()
			c.Failed(now, o.ID)
			n.coreMu.RUnlock()
		}
		return
	}
	var cl *call
	if it, ok := o.Msg.(core.TakeItem); ok {
		cl = newTakeCall(&it, nil)
	} else {
		e := &encoder{}
		encodeMessage(e, o.Msg)
		if t, ok := o.Msg.(core.Transfer); ok && t.Mode == core.ModeReplica {
			n.replicaBytes.Add(uint64(len(e.b)))
		}
		id := o.ID
		var done func(*call)
		if expects {
			done = func(cl *call) { n.outcome(kind, id, cl) }
		}
		cl = newCall(kind, done)
		cl.body = e.b
	}
	p.send(cl, now.Add(n.patience()))
}

// outcome reports the outcome of the core's message id, of kind, to the
// core.
func (n *Node) outcome(kind byte, id uint64, cl *call) {
	c := n.core()
	now := time.Now()
	n.coreMu.RLock()
	defer n.coreMu.RUnlock()
	if cl.err != nil {
		c.Failed(now, id)
		return
	}
	reply, err := decodeReply(kind, &decoder{b: cl.repl})
	if err != nil {
		n.log.Warn("malformed reply from a peer", "kind", kind, "error", err.Error())
		c.Failed(now, id)
		return
	}
	c.Answered(now, id, reply)
}

// announcer gossips this node's metadata when the core enters or leaves
// its ring (see announceChanges).
func (n *Node) announcer() {
	defer n.wg.Done()
	state := func() (member, evicted bool) {
		member = n.core().Member()
		return member, !member && !n.leaving.Load()
	}
	announceChanges(n.announceCh, n.stop, n.cfg.Gossip.ProbeInterval, state, n.toldMember.Load, func() { n.announce(time.Second) })
}

// announceChanges announces the node's state each time changed says it
// may have changed, unless the others were told it already (told: the
// metadata gossiped last says the node is in its ring). A node declared
// dead leaves its ring and, once what it held is acknowledged, enters it
// again, usually within a round trip. The others list it again as a
// member as soon as it refutes its death, from the metadata it gossiped
// last; announced at once, its leaving and its return would reach them a
// gossip round apart, and each of them would take its keys over and give
// them back, deciding them by fallback meanwhile. So leaving the ring
// without leaving the cluster (evicted) is announced only if it lasts
// grace: a node back in its ring by then announces nothing. state reports
// whether the core is in its ring, and whether it is out of it without
// leaving.
func announceChanges(changed, stop <-chan struct{}, grace time.Duration, state func() (member, evicted bool), told func() bool, announce func()) {
	for {
		select {
		case <-changed:
		case <-stop:
			return
		}
		if _, evicted := state(); evicted && told() {
			t := time.NewTimer(grace)
			select {
			case <-t.C:
			case <-stop:
				t.Stop()
				return
			}
			select {
			case <-changed: // a change meanwhile: the state now says it
			default:
			}
		}
		if member, _ := state(); member == told() {
			continue // nothing the others were not told
		}
		announce()
	}
}

// join joins the seeds, retrying with backoff until one answers, and tells
// the core once one has (or once JoinWait has passed with none answering:
// it then counts alone until one does). A seed that is this node itself
// does not count.
func (n *Node) join() {
	defer n.wg.Done()
	if len(n.cfg.Join) == 0 {
		return
	}
	backoff := 200 * time.Millisecond
	started := time.Now()
	alone := false
	for {
		joined, err := n.ml.Join(n.cfg.Join)
		if joined > 0 && n.ml.NumMembers() > 1 {
			n.log.Info("joined cluster", "seeds", strings.Join(n.cfg.Join, ","), "members", n.ml.NumMembers())
			// memberlist told the delegate of every member it learnt in the
			// join: the core hears of them before it is told it joined.
			n.updateMembership(time.Now())
			n.joined()
			return
		}
		if !alone && time.Since(started) >= JoinWait {
			alone = true
			n.joined()
			n.log.Warn("no seed answered within the join wait; counting alone until one does", "join_wait", JoinWait.String())
		}
		n.log.Warn("joining cluster: no seed answered; retrying", "seeds", strings.Join(n.cfg.Join, ","), "retry_in", backoff.String(), "error", fmt.Sprint(err))
		wait := backoff
		if !alone {
			wait = min(wait, max(time.Until(started.Add(JoinWait)), 0)+time.Millisecond)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-n.joinWake:
			t.Stop()
		case <-n.stop:
			t.Stop()
			return
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// joined tells the core a seed answered, or that it waited long enough.
func (n *Node) joined() {
	n.coreMu.RLock()
	defer n.coreMu.RUnlock()
	n.core().Joined(time.Now())
}

// takeState is what a request the core cannot decide at once needs: the
// core's op, and the call the driver makes for it, used again for each of
// its take items (and, through takeStates, by later requests).
type takeState struct {
	op   core.TakeOp
	call call
}

// takeStates recycles the state of requests the core cannot decide at once.
var takeStates = sync.Pool{New: func() any { return new(takeState) }}

// decide decides reqs for client: at once when this node owns every key
// (no allocation, no call), else by driving the core's take op through
// its calls and waits, on the caller's goroutine.
func (n *Node) decide(now time.Time, kind core.Op, client limiter.Key, reqs []limiter.Request, res []limiter.Result) Decision {
	c := n.core()
	st := takeStates.Get().(*takeState)
	op := &st.op
	n.coreMu.RLock() // a membership change is applied whole before a key is counted by it
	d, done := c.Take(now, op, kind, client, reqs, res)
	if done {
		n.coreMu.RUnlock()
	} else {
		settled := n.settled.channel() // before the step: a wake-up after it is not missed
		a := c.Step(now, op)           // under the lock Take took
		n.coreMu.RUnlock()
		d = n.drive(c, st, a, settled)
	}
	*op = core.TakeOp{}
	takeStates.Put(st)
	return d
}

// drive advances op from its next action a until it is decided: each call
// is made and its answer (or its failure) reported, each wait waited,
// until the core says it is done. settled is the channel of wake-ups
// taken before the step that returned a. The answer to a call and the
// step after it are taken under one hold of the core's lock.
func (n *Node) drive(c *core.Core, st *takeState, a core.Action, settled <-chan struct{}) Decision {
	op := &st.op
	for {
		var now time.Time
		switch a.Kind {
		case core.ActDone:
			return op.Decision()
		case core.ActCall:
			reply, at, busy, err := n.call(&st.call, a.To, a.Msg)
			now = at // the clock read as the answer came serves the next step
			settled = n.settled.channel()
			n.coreMu.RLock()
			if err != nil {
				c.CallFailed(now, op, busy)
			} else {
				c.Replied(now, op, reply)
			}
		default: // core.ActWait
			if d := time.Until(a.Until); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-settled:
				case <-t.C:
				}
				t.Stop()
			}
			now = time.Now()
			settled = n.settled.channel()
			n.coreMu.RLock()
		}
		a = c.Step(now, op)
		n.coreMu.RUnlock()
	}
}

// call makes a take op's call to a peer and waits for its answer; at is
// when the answer (or the failure) came. busy: the call was never sent
// (the peer's queue was full). A take item goes out as cl's next use; the
// answer is read from cl until its next use.
func (n *Node) call(cl *call, to core.Peer, msg core.Message) (reply core.Message, at time.Time, busy bool, err error) {
	p := n.peers.get(to.Name)
	if p == nil {
		return nil, time.Now(), false, fmt.Errorf("%w: %s", ErrUnreachable, to.Name)
	}
	switch m := msg.(type) {
	case core.TakeItem:
		cl.takeAgain(&m)
		sent := time.Now()
		p.sendAt(cl, sent, sent.Add(n.patience()))
		err := cl.wait()
		at := time.Now()
		n.cfg.Observer.PeerCall(at.Sub(sent), err == nil)
		if err != nil {
			return nil, at, err == errBusy, err
		}
		return &cl.item, at, false, nil // the core reads it where it was decoded
	case core.ScoreQuery:
		e := &encoder{}
		encodeMessage(e, m)
		repl, err := n.roundTrip(p, msgScore, e.b, n.patience())
		if err != nil {
			return nil, time.Now(), false, err
		}
		reply, err := decodeReply(msgScore, &decoder{b: repl})
		return reply, time.Now(), false, err
	}
	return nil, time.Now(), false, fmt.Errorf("a take op cannot send %T", msg)
}

// settleSignal wakes the requests waiting for keys to settle. A waiter
// takes the channel before it steps; a wake-up closes it. Every step of a
// forwarded check takes the channel: taking it is an atomic load, not a
// lock that callers on every core would share.
type settleSignal struct {
	ch atomic.Pointer[chan struct{}]
}

// channel returns the channel the next wake-up closes.
func (s *settleSignal) channel() <-chan struct{} {
	for {
		if ch := s.ch.Load(); ch != nil {
			return *ch
		}
		ch := make(chan struct{})
		if s.ch.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// wake wakes every waiter.
func (s *settleSignal) wake() {
	if ch := s.ch.Swap(nil); ch != nil {
		close(*ch)
	}
}
