package core

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Transfers. Counts that cross between nodes always travel in a Transfer:
// numbered by its sender, kept by it (and none of their keys counted as its
// own) until the receiver acknowledges it, sent again with the same number
// until then, and applied once by the receiver, which remembers the numbers
// it applied from each sender run above the sender's floor. A receiver that
// does not apply it (it is leaving, or is another run of the node, or holds
// no lease from the sender) says so, and remembers that too: every copy of
// a number gets the answer its first one got, so a copy the network
// delivered late, or twice, is never applied beside the counts the sender
// placed anew on the refusal. The sender places them elsewhere, or sends
// them again to the same receiver under a new number. A receiver that dies
// before it acknowledges may have applied it or not: the sender then sends
// the counts on as copies (ModeNewer), which the new owner keeps only where
// they are newer than what it holds, so they are neither lost nor counted
// twice.

// purpose says why a transfer was made, for what its outcome changes.
type purpose uint8

const (
	purposeHandoff   purpose = iota + 1 // counters this node no longer owns
	purposeForward                      // counts received for keys another node owns, passed on
	purposePull                         // given in answer to a pull
	purposeReconcile                    // what this node admitted in fallback
	purposeHeld                         // older copies, delivered before (re)joining
	purposeReplica                      // an owner's counters for their successor
	purposeRefund                       // units given back
	purposeCancel                       // a take item given up on
)

// pendingTransfer is a transfer not yet acknowledged.
type pendingTransfer struct {
	t        Transfer
	to       Peer
	purpose  purpose
	inFlight bool  // sent; its outcome is not known yet
	refused  bool  // the receiver said it did not apply it (last attempt)
	retryAt  int64 // mono: when to send it again, if not in flight
	// spent: the receiver refused the transfer's number, and refuses every
	// copy of it: the transfer goes again under a new one (see
	// renumberLocked). first is the number it was made with.
	spent bool
	first uint64
	// limbo: the receiver is gone, but may still apply the transfer until
	// its lease from this node has run out (mono); then the counts go to
	// their owners now.
	limbo int64
	// ring, for a replica: the ring its receiver succeeds this node by.
	ring *Ring
	// given: the transfer was given again in a pull's reply, and until
	// then (mono) the puller may still apply it and answer. A refusal of
	// an earlier send that comes meanwhile does not speak for that copy.
	given int64
	// heldIfRefused: counters this node was handing over when it was
	// declared dead, in flight then. Refused after, they were never
	// applied: they are counters it holds, sent as a node declared dead
	// sends them (see sendEvicted), never again as they were.
	heldIfRefused bool
}

// pendingRequest is a message sent that awaits its answer.
type pendingRequest struct {
	to   Peer
	sent int64 // mono
	msg  Message
	seq  uint64 // a Transfer's number
}

// outbox holds what a core sends: the queue the driver drains, the
// transfers not acknowledged, and the requests awaiting an answer. An
// outbox is safe for concurrent use.
type outbox struct {
	epoch     func() uint64 // the sender's join epoch now
	held      atomic.Int64  // len(holding), read without the lock
	cancels   atomic.Int64  // the cancels among transfers, read without the lock
	refusals  atomic.Int64  // the transfers whose last send was refused, read without the lock
	mu        sync.Mutex
	seq       uint64 // the last transfer number used
	id        uint64 // the last message ID used
	queue     []Outgoing
	transfers map[uint64]*pendingTransfer // by number
	requests  map[uint64]*pendingRequest  // by message ID
	holding   map[limiter.Key][]uint64    // key → the hand-off, pull or forward transfers carrying its counts
	// adding: key → the transfers carrying what this node admitted of it
	// in fallback to the node that counts it (see carries).
	adding map[limiter.Key][]uint64
	added  atomic.Int64 // len(adding), read without the lock
}

func newOutbox() *outbox {
	return &outbox{
		transfers: make(map[uint64]*pendingTransfer),
		requests:  make(map[uint64]*pendingRequest),
		holding:   make(map[limiter.Key][]uint64),
		adding:    make(map[limiter.Key][]uint64),
	}
}

// drain returns the queued messages and empties the queue.
func (o *outbox) drain() []Outgoing {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.queue
	o.queue = nil
	return q
}

// request queues msg for to, to be answered; it returns the message ID.
func (o *outbox) request(to Peer, msg Message, m int64, _ any) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.requestLocked(to, msg, m, 0)
}

func (o *outbox) requestLocked(to Peer, msg Message, m int64, seq uint64) uint64 {
	o.id++
	o.requests[o.id] = &pendingRequest{to: to, sent: m, msg: msg, seq: seq}
	o.queue = append(o.queue, Outgoing{ID: o.id, To: to, Msg: msg})
	return o.id
}

// send queues msg for to, expecting no answer.
func (o *outbox) send(to Peer, msg Message) {
	o.mu.Lock()
	o.id++
	o.queue = append(o.queue, Outgoing{ID: o.id, To: to, Msg: msg})
	o.mu.Unlock()
}

// answered removes and returns the request with message ID id, if it
// awaits an answer.
func (o *outbox) answered(id uint64) *pendingRequest {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.requests[id]
	delete(o.requests, id)
	return r
}

// transfer numbers a new transfer of mode to to and, unless held back
// (given in a pull's reply), queues it. It returns the transfer.
func (o *outbox) transfer(to Peer, t Transfer, p purpose, m int64, queue bool) Transfer {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seq++
	t.Seq, t.To, t.Epoch = o.seq, to.Inc, o.epoch()
	states := t.States
	pt := &pendingTransfer{t: t, to: to, purpose: p, first: t.Seq}
	o.transfers[t.Seq] = pt
	if t.Mode == ModeCancel {
		o.cancels.Add(1)
	}
	if p == purposeHandoff || p == purposeForward || p == purposePull || p == purposeHeld {
		for _, s := range states {
			o.holding[s.Key] = append(o.holding[s.Key], t.Seq)
		}
		o.held.Store(int64(len(o.holding)))
	}
	if p == purposeReconcile {
		for _, s := range states {
			o.adding[s.Key] = append(o.adding[s.Key], t.Seq)
		}
		o.added.Store(int64(len(o.adding)))
	}
	if queue {
		o.sendLocked(pt, m)
	} else {
		pt.t.Floor = o.floorLocked(to.Name)
		pt.retryAt = m
	}
	return pt.t
}

// sendLocked queues pt, with the receiver's floor as of now, under a new
// number if its receiver refused the one it had.
func (o *outbox) sendLocked(pt *pendingTransfer, m int64) {
	o.renumberLocked(pt)
	pt.t.Floor = o.floorLocked(pt.to.Name)
	pt.inFlight = true
	o.refusedLocked(pt, false)
	o.requestLocked(pt.to, pt.t, m, pt.t.Seq)
}

// spend marks transfer seq as refused by by, its receiver, which refuses
// every copy of that number from then on (see inbox.refuse): whenever it
// goes again, it goes under a new one. A refusal by another run of the
// receiver (the transfer was meant for it, and went to the run after it
// since: see holdingFor) speaks for none of the copies the run after gets.
func (o *outbox) spend(seq uint64, by Peer) {
	o.mu.Lock()
	if pt, ok := o.transfers[seq]; ok && pt.to == by {
		pt.spent = true
	}
	o.mu.Unlock()
}

// renumberLocked gives pt, if spent, the next number. Answers to its old
// number find nothing from then on: all of them are refusals, or say it
// was settled (the floor passed it).
func (o *outbox) renumberLocked(pt *pendingTransfer) {
	if !pt.spent {
		return
	}
	old := pt.t.Seq
	o.seq++
	pt.t.Seq, pt.spent = o.seq, false
	delete(o.transfers, old)
	o.transfers[pt.t.Seq] = pt
	for _, byKey := range []map[limiter.Key][]uint64{o.holding, o.adding} {
		for _, s := range pt.t.States {
			if i := slices.Index(byKey[s.Key], old); i >= 0 {
				byKey[s.Key][i] = pt.t.Seq
			}
		}
	}
}

// floorLocked returns the lowest number of a transfer to name not settled.
func (o *outbox) floorLocked(name string) uint64 {
	floor := o.seq + 1
	for seq, pt := range o.transfers {
		if pt.to.Name == name && seq < floor {
			floor = seq
		}
	}
	return floor
}

// attachApplied gives replica transfer seq the applied transfers it
// reports, and queues it.
func (o *outbox) attachApplied(seq uint64, list []Applied, m int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	pt := o.transfers[seq]
	pt.t.Applied = list
	o.sendLocked(pt, m)
}

// retargeted marks transfer seq as replacing transfer was to wasTo, and
// queues it.
func (o *outbox) retargeted(seq uint64, t Transfer, m int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	pt := o.transfers[seq]
	pt.t.Was, pt.t.WasFrom, pt.t.WasTo, pt.t.Earlier = t.Was, t.WasFrom, t.WasTo, t.Earlier
	o.sendLocked(pt, m)
}

// settle forgets an acknowledged transfer and returns it.
func (o *outbox) settle(seq uint64) (*pendingTransfer, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	pt, ok := o.transfers[seq]
	if !ok {
		return nil, false
	}
	o.forgetLocked(seq, pt)
	return pt, true
}

// tagRing records the ring replica transfer seq was made by.
func (o *outbox) tagRing(seq uint64, ring *Ring) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if pt, ok := o.transfers[seq]; ok {
		pt.ring = ring
	}
}

// forgetLocked drops transfer seq and what it holds.
func (o *outbox) forgetLocked(seq uint64, pt *pendingTransfer) {
	delete(o.transfers, seq)
	if pt.t.Mode == ModeCancel {
		o.cancels.Add(-1)
	}
	o.refusedLocked(pt, false)
	dropSeq(o.holding, pt.t.States, seq)
	o.held.Store(int64(len(o.holding)))
	if pt.purpose == purposeReconcile {
		dropSeq(o.adding, pt.t.States, seq)
		o.added.Store(int64(len(o.adding)))
	}
}

// dropSeq removes transfer seq from the lists of the keys of states in
// byKey, and the lists it leaves empty.
func dropSeq(byKey map[limiter.Key][]uint64, states []limiter.State, seq uint64) {
	for _, s := range states {
		if seqs := slices.DeleteFunc(byKey[s.Key], func(x uint64) bool { return x == seq }); len(seqs) > 0 {
			byKey[s.Key] = seqs
		} else {
			delete(byKey, s.Key)
		}
	}
}

// retag gives every unsettled transfer the epoch now: a node declared dead
// sends again what it had not delivered, as a later run of itself would.
func (o *outbox) retag() {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.epoch()
	for _, pt := range o.transfers {
		pt.t.Epoch = e
	}
}

// holds reports whether a counter of k is in a transfer not acknowledged.
func (o *outbox) holds(k limiter.Key) bool {
	if o.held.Load() == 0 {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.holding[k]
	return ok
}

// carries reports whether a transfer not acknowledged carries counts of
// k: its counter (see holds), or what this node admitted of it in
// fallback, on its way to the node that counts it. Units of k given back
// or spent here wait for such a transfer: they must not overtake the
// counts they settle, or they come off a count that lacks them (which
// then admits them again) and the counts, arriving, still hold them.
func (o *outbox) carries(k limiter.Key) bool {
	if o.holds(k) {
		return true
	}
	if o.added.Load() == 0 {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.adding[k]
	return ok
}

// markHeldIfRefused marks the transfers in flight that pick reports.
func (o *outbox) markHeldIfRefused(pick func(*pendingTransfer) bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, pt := range o.transfers {
		if pt.inFlight && pick(pt) {
			pt.heldIfRefused = true
		}
	}
}

// takeIfHeld removes and returns transfer seq if it is marked
// heldIfRefused.
func (o *outbox) takeIfHeld(seq uint64) (*pendingTransfer, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	pt, ok := o.transfers[seq]
	if !ok || !pt.heldIfRefused {
		return nil, false
	}
	o.forgetLocked(seq, pt)
	return pt, true
}

// refusedNotFor removes and returns, sorted by number, the transfers the
// receiver refused whose counts belong elsewhere now (misplaced reports
// it).
func (o *outbox) refusedNotFor(misplaced func(*pendingTransfer) bool) []*pendingTransfer {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*pendingTransfer
	for seq, pt := range o.transfers {
		if pt.refused && !pt.inFlight && misplaced(pt) {
			out = append(out, pt)
			o.forgetLocked(seq, pt)
		}
	}
	slices.SortFunc(out, func(a, b *pendingTransfer) int { return cmpUint(a.t.Seq, b.t.Seq) })
	return out
}

// refusedLocked records whether pt's last send was refused. o.mu is held.
func (o *outbox) refusedLocked(pt *pendingTransfer, refused bool) {
	switch {
	case refused && !pt.refused:
		o.refusals.Add(1)
	case !refused && pt.refused:
		o.refusals.Add(-1)
	}
	pt.refused = refused
}

// refusedDue makes the transfers to the run to that it refused go again
// at m, and reports whether there are any.
func (o *outbox) refusedDue(to Peer, m int64) bool {
	if o.refusals.Load() == 0 {
		return false // most pings: nothing refused, no walk of the outbox
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	any := false
	for _, pt := range o.transfers {
		if pt.to == to && pt.refused && !pt.inFlight && pt.retryAt > m {
			pt.retryAt, any = m, true
		}
	}
	return any
}

// failed marks a transfer whose sending failed (refused: its receiver
// said it did not apply it): it goes again at retryAt.
func (o *outbox) failed(seq uint64, retryAt int64, refused bool) {
	o.mu.Lock()
	if pt, ok := o.transfers[seq]; ok {
		pt.inFlight = false
		o.refusedLocked(pt, refused)
		pt.retryAt = retryAt
	}
	o.mu.Unlock()
}

// due queues the transfers not in flight whose time has come, to the peers
// reach allows, and shows each to sent (if not nil) as it goes.
func (o *outbox) due(m int64, allow func(Peer) bool, sent func(*pendingTransfer)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var seqs []uint64
	for seq, pt := range o.transfers {
		if !pt.inFlight && pt.limbo == 0 && m >= pt.retryAt && allow(pt.to) {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	for _, seq := range seqs {
		pt := o.transfers[seq]
		o.sendLocked(pt, m) // under a new number if it was refused
		if sent != nil {
			sent(pt)
		}
	}
}

// pendingFor counts the unsettled transfers to the node called name made
// for one of purposes (any, if none given).
func (o *outbox) pendingFor(name string, purposes ...purpose) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, pt := range o.transfers {
		if (name == "" || pt.to.Name == name) && (len(purposes) == 0 || slices.Contains(purposes, pt.purpose)) {
			n++
		}
	}
	return n
}

// cancelsFor returns the cancels not acknowledged yet that this node made
// for take items of a key of states, for a transfer to the run to: those
// of items it sent to, and those of items it sent to a run it takes for
// dead (died), naming that run (Cancel.To). A cancel for a run that left
// is not carried: the run's counters went with the items it admitted, and
// the cancel follows them where they went (retargetCancel).
func (o *outbox) cancelsFor(to Peer, states []limiter.State, died func(Peer) bool) []Cancel {
	if o.cancels.Load() == 0 {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var seqs []uint64
	for seq, pt := range o.transfers {
		if pt.t.Mode == ModeCancel && pt.t.WasTo.Name == "" && pt.t.Caller.Name == "" && (pt.to == to || died(pt.to)) && slices.ContainsFunc(pt.t.Reqs, func(r limiter.Request) bool {
			return slices.ContainsFunc(states, func(s limiter.State) bool { return s.Key == r.Key })
		}) {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	out := make([]Cancel, 0, len(seqs))
	for _, seq := range seqs {
		pt := o.transfers[seq]
		x := Cancel{Take: pt.t.Take, Reqs: pt.t.Reqs, At: pt.t.At}
		if pt.to != to {
			x.To = pt.to
		}
		out = append(out, x)
	}
	return out
}

// settleCancels forgets the cancels to the run to of the take items
// cancels names: a transfer that repeated them was acknowledged. Those
// of items sent to another run (Cancel.To) stay: the receiver sends them
// on, and this node does too, while it can.
func (o *outbox) settleCancels(to Peer, cancels []Cancel) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for seq, pt := range o.transfers {
		if pt.t.Mode == ModeCancel && pt.to == to && pt.t.WasTo.Name == "" && pt.t.Caller.Name == "" && slices.ContainsFunc(cancels, func(x Cancel) bool { return x.To.Name == "" && x.Take == pt.t.Take }) {
			o.forgetLocked(seq, pt)
		}
	}
}

// moving counts the unsettled transfers to the node called name (any, if
// empty) that move counts: all but replicas.
func (o *outbox) moving(name string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, pt := range o.transfers {
		if (name == "" || pt.to.Name == name) && pt.purpose != purposeReplica {
			n++
		}
	}
	return n
}

// sendingAway reports whether a transfer not acknowledged carries, to a
// node other than the one called name, the counter of a key ring gives to
// that node: where the counter ends up is not known yet (its receiver may
// apply it, or this node sends it on), so that node cannot count the key
// from what it holds.
func (o *outbox) sendingAway(ring *Ring, name string) bool {
	if o.held.Load() == 0 {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, seqs := range o.holding {
		if owner, ok := ring.Owner(k.Route()); !ok || owner.Name != name {
			continue
		}
		for _, seq := range seqs {
			if pt := o.transfers[seq]; pt != nil && pt.to.Name != name {
				return true
			}
		}
	}
	return false
}

// holdingFor returns the unsettled transfers carrying the counters of keys,
// sorted by number, and the keys they carry to nodes other than to. Those
// it returns are given again, in a pull's reply to to, whose outcome is
// known by until (mono): they wait for it, not for an earlier send's.
func (o *outbox) holdingFor(keys []limiter.Key, to Peer, until int64) (mine []Transfer, elsewhere []limiter.Key) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var seqs []uint64
	for _, k := range keys {
		told := false
		for _, seq := range o.holding[k] {
			pt := o.transfers[seq]
			if pt.to.Name != to.Name {
				if !told {
					elsewhere = append(elsewhere, k)
					told = true
				}
				continue
			}
			if pt.to.Inc < to.Inc {
				// Meant for an earlier run of the puller, which died without
				// acknowledging it: the puller's run it is now.
				pt.t.Was, pt.t.WasTo = seq, pt.to
				pt.to, pt.t.To, pt.limbo = to, to.Inc, 0
			}
			if !slices.Contains(seqs, seq) {
				seqs = append(seqs, seq)
			}
		}
	}
	slices.Sort(seqs)
	for _, seq := range seqs {
		pt := o.transfers[seq]
		o.renumberLocked(pt)
		pt.t.Floor = o.floorLocked(to.Name)
		o.refusedLocked(pt, false)
		pt.given = until
		if !pt.inFlight {
			pt.retryAt = max(pt.retryAt, until)
		}
		mine = append(mine, pt.t)
	}
	return mine, elsewhere
}

// refusedBeforeGiven reports whether a refusal of transfer seq's send
// may be of a send before the transfer was given again in a pull's
// reply whose outcome is not known yet (see holdingFor): if so, the
// transfer is marked not in flight, to go again once that outcome is due.
// A pull's answer (pulled) ends the wait.
func (o *outbox) refusedBeforeGiven(seq uint64, m int64, pulled bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	pt, ok := o.transfers[seq]
	if !ok || pt.given == 0 {
		return false
	}
	if pulled || m >= pt.given {
		pt.given = 0
		return false
	}
	pt.inFlight, pt.retryAt = false, max(pt.retryAt, pt.given)
	o.refusedLocked(pt, false)
	return true
}

// toLimbo puts the unsettled transfers to runs that are gone (gone
// reports them, with until when they might still apply them) in limbo,
// and takes those whose receiver is back out of it.
func (o *outbox) toLimbo(gone func(*pendingTransfer) (int64, bool)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, pt := range o.transfers {
		until, isGone := gone(pt)
		switch {
		case isGone && pt.limbo == 0:
			pt.limbo, pt.inFlight = max(until, 1), false
		case !isGone && pt.limbo != 0:
			pt.limbo = 0
		}
	}
}

// outOfLimbo removes and returns, sorted by number, the transfers in limbo
// whose receiver cannot apply them any more at m.
func (o *outbox) outOfLimbo(m int64) []*pendingTransfer {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*pendingTransfer
	for seq, pt := range o.transfers {
		if pt.limbo == 0 || m < pt.limbo {
			continue
		}
		out = append(out, pt)
		o.forgetLocked(seq, pt)
	}
	slices.SortFunc(out, func(a, b *pendingTransfer) int { return cmpUint(a.t.Seq, b.t.Seq) })
	return out
}

// cmpPeer orders runs by name, then incarnation.
func cmpPeer(a, b Peer) int {
	return cmp.Or(strings.Compare(a.Name, b.Name), cmp.Compare(a.Inc, b.Inc))
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// inbox remembers, for every sender run, the transfers it applied: the
// sender's floor (every number below it settled) and the numbers above it,
// whose acknowledgements the sender may not have received; and the numbers
// above the floor it refused, so that every copy of a transfer gets the
// answer its first one got. An inbox is safe for concurrent use.
type inbox struct {
	mu   sync.Mutex
	from map[Peer]*applied
}

type applied struct {
	mu    sync.Mutex
	floor uint64
	// seqs are the numbers applied above floor, each with the keys of the
	// counts it added if every one of them joined this run's counters
	// (see Core.Keep), else nil.
	seqs map[uint64][]limiter.Key
	// additions are the numbers of seqs that carried bare additions or
	// units given back.
	additions map[uint64]struct{}
	// past are the numbers of additions (and give-backs) applied that the
	// floor passed since, each with the mono it did: a transfer the
	// sender gave up on may have been applied here, and its counts, or its
	// units, sent again in its place (see Transfer.Was), may come here
	// later by another node. Kept for appliedKeep. Only these are sent
	// again so: replicas, which go every ReplicateEvery, stay out of the
	// record.
	past map[uint64]int64
	// copies: the keys of counts sent again in place of a transfer of the
	// sender's to this run that this run added (see firstCopies), each
	// with the mono it did. Kept for appliedKeep.
	copies map[copyOf]int64
	// later are the numbers of seqs that carried bare additions whose
	// counts did not all join this run's counters at once (kept in
	// fallback for want of a majority, waiting for their keys), each with
	// the keys of its counts: counts that join the counters later go on
	// naming the transfer (Core.carried), and a snapshot lists it once the
	// counters it keeps hold the counts of every one of those keys (see
	// Core.Keep).
	later map[uint64][]limiter.Key
	// refused are the numbers above floor refused here (see refuse).
	refused map[uint64]struct{}
	used    int64 // mono of the last transfer from it
}

// copyOf names the counts of one key in one transfer.
type copyOf struct {
	seq uint64
	key limiter.Key
}

func newInbox() *inbox { return &inbox{from: make(map[Peer]*applied)} }

// sender returns the record of from, made if need be.
func (in *inbox) sender(from Peer) *applied {
	in.mu.Lock()
	defer in.mu.Unlock()
	a := in.from[from]
	if a == nil {
		a = &applied{seqs: make(map[uint64][]limiter.Key), additions: make(map[uint64]struct{}), past: make(map[uint64]int64)}
		in.from[from] = a
	}
	return a
}

// counted returns, sorted by sender and number, the transfers applied here
// whose senders may not have had them acknowledged, and whose counts all
// joined this run's counters, with the keys of those counts: at once, or
// later (see later), where joined, if set, says so of the transfer.
func (in *inbox) counted(joined func(KeptApplied) bool) []KeptApplied {
	in.mu.Lock()
	froms := make([]Peer, 0, len(in.from))
	recs := make(map[Peer]*applied, len(in.from))
	for p, a := range in.from {
		froms = append(froms, p)
		recs[p] = a
	}
	in.mu.Unlock()
	slices.SortFunc(froms, func(a, b Peer) int {
		if a.Name != b.Name {
			return strings.Compare(a.Name, b.Name)
		}
		return cmpUint(a.Inc, b.Inc)
	})
	var out []KeptApplied
	for _, p := range froms {
		a := recs[p]
		a.mu.Lock()
		start := len(out)
		for seq, keys := range a.seqs {
			if keys != nil {
				out = append(out, KeptApplied{From: p, Seq: seq, Keys: slices.Clone(keys)})
			} else if keys := a.later[seq]; keys != nil && joined != nil && joined(KeptApplied{From: p, Seq: seq, Keys: keys}) {
				out = append(out, KeptApplied{From: p, Seq: seq, Keys: slices.Clone(keys)})
			}
		}
		a.mu.Unlock()
		slices.SortFunc(out[start:], func(x, y KeptApplied) int { return cmpUint(x.Seq, y.Seq) })
	}
	return out
}

// knows reports what asked says of the record of from's transfers, read
// under its lock: false if nothing of from came here.
func (in *inbox) knows(from Peer, asked func(a *applied) bool) bool {
	in.mu.Lock()
	a := in.from[from]
	in.mu.Unlock()
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return asked(a)
}

// has reports whether transfer seq of from was applied here.
func (in *inbox) has(from Peer, seq uint64) bool {
	return in.knows(from, func(a *applied) bool {
		_, ok := a.seqs[seq]
		return ok
	})
}

// refuse records that transfer seq of from, whose sender's floor was
// floor, is refused here, and reports whether it is: a number applied here
// already is not (a copy of it came meanwhile, and was applied), and every
// copy of a number refused is refused (see once). Applied, a copy that the
// network delivered late, or twice, would count the transfer's counts
// beside those its sender placed anew when it learnt of the refusal.
func (in *inbox) refuse(from Peer, seq, floor uint64, m int64) bool {
	a := in.sender(from)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.used = m
	a.raiseFloorLocked(floor, m)
	if _, ok := a.seqs[seq]; ok {
		return false
	}
	if seq >= a.floor {
		if a.refused == nil {
			a.refused = map[uint64]struct{}{}
		}
		a.refused[seq] = struct{}{}
	}
	return true
}

// refusedHere reports whether transfer seq of from was refused here.
func (in *inbox) refusedHere(from Peer, seq uint64) bool {
	return in.knows(from, func(a *applied) bool {
		_, ok := a.refused[seq]
		return ok
	})
}

// firstCopies returns the states of states, counts sent again in place
// of transfer x to this run (see Transfer.Was), that this run holds no
// count of yet, and records them as held: none if it applied x, else
// those of keys no other copy of x's counts brought. x's counts may come
// again split by key, by several paths. A number below the sender's
// floor that is not in the record was given up on, or applied longer
// than appliedKeep ago.
func (in *inbox) firstCopies(x Applied, states []limiter.State, m int64) []limiter.State {
	first := in.firstCopyKeys(x, keysOf(states), m)
	return slices.DeleteFunc(slices.Clone(states), func(s limiter.State) bool { return !slices.Contains(first, s.Key) })
}

// firstCopyKeys returns, of keys, the keys of counts (or units given
// back) sent again in place of transfer x to this run that this run holds
// no copy of yet, and records them as held (see firstCopies).
func (in *inbox) firstCopyKeys(x Applied, keys []limiter.Key, m int64) []limiter.Key {
	a := in.sender(x.From)
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.seqs[x.Seq]; ok {
		return nil
	}
	if _, ok := a.past[x.Seq]; ok {
		return nil
	}
	var first []limiter.Key
	for _, k := range keys {
		ck := copyOf{seq: x.Seq, key: k}
		if _, ok := a.copies[ck]; ok {
			continue
		}
		if a.copies == nil {
			a.copies = map[copyOf]int64{}
		}
		a.copies[ck] = m
		first = append(first, k)
	}
	return first
}

// appliedOnce reports whether transfer x was applied here: above its
// sender's floor, or, passed since, within appliedKeep (see past).
func (in *inbox) appliedOnce(x Applied) bool {
	return in.knows(x.From, func(a *applied) bool {
		if _, ok := a.seqs[x.Seq]; ok {
			return true
		}
		_, ok := a.past[x.Seq]
		return ok
	})
}

// forget drops the numbers the floor passed before mono before.
func (in *inbox) forget(before int64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, a := range in.from {
		a.mu.Lock()
		for s, m := range a.past {
			if m < before {
				delete(a.past, s)
			}
		}
		for ck, m := range a.copies {
			if m < before {
				delete(a.copies, ck)
			}
		}
		a.mu.Unlock()
	}
}

// once runs apply for transfer seq of from unless it ran already, and
// reports whether it ran. apply is told which keys copies of the
// transfer's counts (or units given back) sent again in its place brought
// here first (see firstCopyKeys): it is the same count, late. apply runs under the sender's record lock: a
// transfer delivered twice at once is applied once. It returns the keys of
// the counts the transfer added if every one of them joined this run's
// counters (counted, see counted), else nil and, for bare additions whose
// counts join them later, the keys of those (later, see applied.later):
// both are recorded under the same lock, so that a snapshot read meanwhile
// (Core.Keep) sees the transfer as it is recorded. additions tells whether
// the transfer carries bare additions or units given back, whose number is
// remembered past the floor (see past).
func (in *inbox) once(from Peer, seq, floor uint64, m int64, additions, pulled bool, apply func(copied func(limiter.Key) bool) (counted, later []limiter.Key)) bool {
	a := in.sender(from)
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.takesLocked(seq, floor, m, pulled) {
		return false
	}
	delete(a.refused, seq) // a copy given in a pull's reply: see takes
	counted, later := apply(func(k limiter.Key) bool {
		_, ok := a.copies[copyOf{seq: seq, key: k}]
		return ok
	})
	a.seqs[seq] = counted
	if counted == nil && len(later) > 0 {
		if a.later == nil {
			a.later = map[uint64][]limiter.Key{}
		}
		a.later[seq] = slices.Clone(later)
	}
	if additions {
		a.additions[seq] = struct{}{}
	}
	return true
}

// takes reports whether transfer seq of from, whose sender's floor is
// floor, is still to be applied here: not settled at its sender (below
// its floor), not applied here, and not refused here, unless pulled. What
// is not to be applied leaves no trace either (see firstCopies): a
// delayed copy of a number refused and passed by the floor would
// otherwise have its counts taken as held, and the transfer sent again in
// its place under a new number add none of them. A copy given in the
// reply to this node's pull overrides a refusal of its number: its
// sender gives it under the old number only while it has not acted on
// that refusal (holdingFor renumbers a spent transfer first), and a
// refusal that comes while a copy given in a pull is awaited spends the
// number only if that copy was refused too (see Core.acked), so the
// number stays the transfer's, and every later copy of it is applied
// before.
func (in *inbox) takes(from Peer, seq, floor uint64, m int64, pulled bool) bool {
	a := in.sender(from)
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.takesLocked(seq, floor, m, pulled)
}

// takesLocked is takes with a.mu held.
func (a *applied) takesLocked(seq, floor uint64, m int64, pulled bool) bool {
	a.used = m
	a.raiseFloorLocked(floor, m)
	if seq < a.floor {
		return false // settled at the sender: applied before
	}
	if _, ok := a.seqs[seq]; ok {
		return false
	}
	if _, ok := a.refused[seq]; ok && !pulled {
		return false // a copy of it was refused meanwhile: so is this one
	}
	return true
}

// raiseFloorLocked takes floor, the sender's lowest number not settled,
// as of mono m: the numbers below it are forgotten but for the additions
// (see past). a.mu is held.
func (a *applied) raiseFloorLocked(floor uint64, m int64) {
	if floor <= a.floor {
		return
	}
	for s := range a.seqs {
		if s < floor {
			delete(a.seqs, s)
			delete(a.later, s)
			if _, ok := a.additions[s]; ok {
				delete(a.additions, s)
				a.past[s] = m
			}
		}
	}
	for s := range a.refused {
		if s < floor {
			delete(a.refused, s)
		}
	}
	a.floor = floor
}

// sweep forgets senders that are no longer peers and sent nothing for a
// minute.
func (in *inbox) sweep(m int64, peers *peerTable) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for p, a := range in.from {
		a.mu.Lock()
		idle := m-a.used > int64(time.Minute)
		a.mu.Unlock()
		if cur := peers.get(p.Name); idle && (cur == nil || cur.peer.Inc != p.Inc) {
			delete(in.from, p)
		}
	}
}

// sendTransfer numbers t, a transfer to to, and queues it.
func (c *Core) sendTransfer(now time.Time, to Peer, t Transfer, p purpose) {
	t = c.out.transfer(to, t, p, c.mono(now), true)
	c.debugTransfer("transfer sent", to, t, p)
	c.notifyOutbox()
}

// tickTransfers sends again the transfers whose last attempt failed, to
// peers that answer.
func (c *Core) tickTransfers(now time.Time, m int64) {
	c.tickGone(now, m)
	c.viewMu.Lock()
	c.deadReceivers(now, c.peers.heardOf) // transfers made after the receiver died
	c.viewMu.Unlock()
	var again func(*pendingTransfer)
	if c.debugOn() {
		again = func(pt *pendingTransfer) { c.debugTransfer("transfer sent again", pt.to, pt.t, pt.purpose) }
	}
	c.out.due(m, func(to Peer) bool {
		p := c.peers.get(to.Name)
		return p != nil && p.peer.Inc == to.Inc && p.reachState() != down
	}, again)
}

// handleTransfer applies t from from, once, and acknowledges it. pulled:
// from gave t in answer to this node's pull, so it does not count this
// node dead, and no lease is needed.
func (c *Core) handleTransfer(now time.Time, from Peer, t Transfer, pulled bool) Ack {
	if t.To != c.self.Inc {
		c.debugTransfer("transfer refused: meant for another run", from, t, 0)
		return c.refuse(now, from, t)
	}
	if c.in.has(from, t.Seq) {
		// Applied already, and its acknowledgement lost: whatever this
		// node would answer a new transfer now, this one is applied, and
		// a refusal would have its sender place it again elsewhere.
		c.stats.Duplicates.Add(1)
		c.debugTransfer("transfer received again: applied before", from, t, 0)
		return Ack{Seq: t.Seq}
	}
	if !pulled && c.in.refusedHere(from, t.Seq) {
		// Refused already: whatever this node would answer a new transfer
		// now, this one is refused, and its sender may have placed its
		// counts anew on the refusal. A copy given in a pull's reply is
		// taken (see inbox.takes).
		c.stats.Duplicates.Add(1)
		c.debugTransfer("transfer received again: refused before", from, t, 0)
		return Ack{Seq: t.Seq, Refused: true}
	}
	if c.gate.isLeaving() && (t.Mode.carriesCounts() && t.Mode != ModeEvicted || t.Mode == ModeReplica) {
		// A node leaving has handed its counters over, and counts nothing
		// more. A run declared dead sends its counters to the node that
		// kept its replicas, though, which alone knows which of them the
		// cluster holds (it started keys from them): leaving, it weighs
		// them all the same and sends on what they hold beyond, and waits
		// for that to be acknowledged before it goes (Drained). Refused,
		// they would go to a node that knows nothing of those replicas,
		// and be added whole.
		c.debugTransfer("transfer refused: leaving", from, t, 0)
		return c.refuse(now, from, t)
	}
	if (t.Mode == ModeAdd || t.Mode == ModeCopy) && t.carriesCounter() && !pulled && !c.Member() {
		// Outside its ring (declared dead, joining again) this node counts
		// nothing: a key's counter handed to it (or passed on, naming its
		// run), or a copy of one, could only be sent on to whoever it takes
		// for the owner, who may be the sender, and back and forth (a copy
		// an owner without a majority refused, and took once it had one,
		// went back and forth so). Refused, it stays with the
		// sender until this node is a member again. Other adds (what nodes
		// admitted in fallback) are taken as before: refusing them too lost
		// counts in the simulator.
		c.debugTransfer("transfer refused: not a member", from, t, 0)
		return c.refuse(now, from, t)
	}
	if t.namesRuns() && t.countersOf(from) != from && !pulled && c.Member() {
		if v := c.view.Load(); !c.majority(v) && v.self >= 0 {
			if r, ok := c.known.Load().run(from); !ok || !r.leaving {
				// Without a majority this node counts nothing as an owner:
				// what it takes in waits with its fallback counts, as bare
				// additions. A counter of another run (passed on, or a
				// snapshot read back) would lose there the names of the
				// runs whose counts it holds, and another copy of the same
				// counter (a replica of it sent on, the snapshot's run's
				// own hand-off) would be added again wherever the two
				// meet. Refused, it stays whole with its sender until this
				// node has a majority again, or goes where the key's owner
				// is then. The sender's own counter, and what a leaving
				// sender hands over, are taken as before: the sender has
				// nowhere else to keep them.
				c.debugTransfer("transfer refused: another run's counter, and no majority", from, t, 0)
				return c.refuse(now, from, t)
			}
		}
	}
	if t.Mode.carriesCounts() || t.Mode.settles() {
		// Counts come only from a sender this node holds a lease from: one
		// that has declared this node dead sends them elsewhere once that
		// lease ran out (deadReceivers), and must not find them applied
		// here too. Nor from a sender whose keys this node took over, as
		// of the epoch it sent them in: its counts were started from their
		// replicas here, and it sends them again once it learnt, as the
		// counters it held then (ModeEvicted, weighed against those
		// replicas, so taken whatever epoch they name) or as copies.
		if p := c.peers.get(from.Name); p == nil || p.peer.Inc != from.Inc || !pulled && !p.leased(c.mono(now)) || t.Mode != ModeEvicted && c.gate.tookOverAt(from, t.Epoch) {
			if p != nil && p.peer.Inc == from.Inc && !c.gate.tookOverAt(from, t.Epoch) {
				// A live sender this node holds no lease from yet (it just
				// started): it sends them again once it does. The keys
				// moving here that they carry wait for them.
				c.handoff.expect(c.view.Load(), c.self.Name, from, t.States)
				c.pingNow(p, c.mono(now))
			}
			if c.debugOn() {
				c.debugTransfer("transfer refused: no lease from the sender, or its keys taken over", from, t, 0, "pulled", pulled)
			}
			return c.refuse(now, from, t)
		}
	}
	// Counts sent again in place of a transfer to this run, which came
	// back, maybe passed on by a node that did not take it over, or sent
	// again once more: skipped if this run applied that transfer, else
	// applied once, whichever of their copies comes first.
	came := t.States
	ran := false
	if c.in.takes(from, t.Seq, t.Floor, c.mono(now), pulled) {
		ran = c.applyOnce(now, from, t, pulled)
	}
	if !ran {
		c.stats.Duplicates.Add(1)
		if c.in.refusedHere(from, t.Seq) {
			c.debugTransfer("transfer received again: refused before", from, t, 0)
			return Ack{Seq: t.Seq, Refused: true}
		}
		c.debugTransfer("transfer received again: applied before", from, t, 0)
	}
	if again := c.handoff.arrivedFrom(from, came); len(again) > 0 {
		c.requestKeys(now, c.view.Load(), again)
	}
	c.notifyOutbox()
	return Ack{Seq: t.Seq}
}

// applyOnce applies t, from from, once (see inbox.once), and reports
// whether it ran: handleTransfer found it still to be applied (see
// inbox.takes), so that the copies it records as held (firstCopies,
// resentHeldHere) are of a transfer taken here.
func (c *Core) applyOnce(now time.Time, from Peer, t Transfer, pulled bool) bool {
	mine := false
	marks := t.marks(from)
	if t.givenBackAgain() && slices.ContainsFunc(marks, func(m Replaced) bool { return m.To == c.self }) {
		// Units given back sent again, as counts sent again are: skipped
		// if this run applied the give-back they replace (else they came
		// off its counter twice), else given back once.
		reqs := t.Reqs
		for _, m := range marks {
			if m.To == c.self && len(reqs) > 0 {
				first := c.in.firstCopyKeys(Applied{From: m.From, Seq: m.Seq}, reqKeys(reqs), c.mono(now))
				reqs = slices.DeleteFunc(slices.Clone(reqs), func(r limiter.Request) bool { return !slices.Contains(first, r.Key) })
			}
		}
		mine = len(reqs) == 0
		if !mine && len(reqs) < len(t.Reqs) {
			c.debugGivenBack("units given back sent again that this run gave back already: not given back again", slices.DeleteFunc(slices.Clone(t.Reqs), func(r limiter.Request) bool {
				return slices.ContainsFunc(reqs, func(x limiter.Request) bool { return x.Key == r.Key })
			}))
			t.Reqs = reqs
		}
	} else if slices.ContainsFunc(marks, func(m Replaced) bool { return m.To == c.self }) {
		states := t.States
		for _, m := range marks {
			if m.To == c.self && len(states) > 0 {
				states = c.in.firstCopies(Applied{From: m.From, Seq: m.Seq}, states, c.mono(now))
			}
		}
		mine = len(states) == 0
		if !mine && len(states) < len(t.States) {
			if c.debugOn() {
				held := slices.DeleteFunc(slices.Clone(t.States), func(s limiter.State) bool {
					return slices.ContainsFunc(states, func(x limiter.State) bool { return x.Key == s.Key })
				})
				c.debugCounts("counts sent again that this run holds already: not added", held, "was", t.Was)
			}
			t.States = states
		}
	}
	if len(t.Resent) > 0 && (t.carriesCounter() || t.Mode == ModeAdd) {
		// Counts the counters (or fallback counts: see
		// fallback.keepResent) hold that were sent again in place of a
		// transfer to this run: not added again if it holds them.
		t.States, t.Holds, t.Resent = c.resentHeldHere(now, t.Resent, t.States, t.Holds)
		if t.Mode == ModeAdd {
			// Counts sent again in place of a transfer to this run that
			// it has not applied, held by counters of keys counted here:
			// this run holds them now, as it does counts sent again that
			// come bare, and the transfer, if it comes late, adds them
			// no more for those keys. Added by it too, they were counted
			// twice
			// (TestCountsKeptInPlaceOfATransferTheOwnerNeverAppliedAreAddedOnce).
			here := c.placedHere(c.view.Load(), t.States)
			for _, x := range t.Resent {
				if !heldIn(here, x.key()) {
					continue
				}
				for _, m := range x.Marks {
					if m.To == c.self {
						c.in.firstCopyKeys(Applied{From: m.From, Seq: m.Seq}, []limiter.Key{x.key()}, c.mono(now))
					}
				}
			}
		}
	}
	return c.in.once(from, t.Seq, t.Floor, c.mono(now), t.Mode == ModeAdd && !t.carriesCounter() || t.Mode == ModeRefund, pulled, func(copied func(limiter.Key) bool) (counted, later []limiter.Key) {
		if mine {
			c.debugTransfer("transfer skipped: this run applied the one it replaces", from, t, 0)
			return nil, nil
		}
		if t.Mode == ModeAdd && !t.carriesCounter() || t.Mode == ModeRefund {
			// Counts (or units given back) that came here before, sent
			// again in place of this transfer (it was held up, and its
			// sender took this run for dead): those keys' are applied.
			n := len(t.States) + len(t.Reqs)
			t.States = slices.DeleteFunc(slices.Clone(t.States), func(s limiter.State) bool { return copied(s.Key) })
			t.Reqs = slices.DeleteFunc(slices.Clone(t.Reqs), func(r limiter.Request) bool { return copied(r.Key) })
			if late := n - len(t.States) - len(t.Reqs); late > 0 {
				if c.debugOn() {
					c.debugTransfer("transfer late: what it carries of keys a copy sent in its place brought is not applied again", from, t, 0, "late", late)
				}
				if len(t.States) == 0 && len(t.Reqs) == 0 {
					return nil, nil
				}
			}
		}
		if t.Was != 0 && c.replicas.applied(t.WasTo, t.was(from)) || slices.ContainsFunc(t.Earlier, func(m Replaced) bool {
			return c.replicas.applied(m.To, Applied{From: m.From, Seq: m.Seq})
		}) {
			// The dead receiver applied it (or one it replaced), and its
			// replicas here, or its counters read back from a snapshot,
			// hold it.
			c.debugTransfer("transfer skipped: its dead receiver applied it", from, t, 0)
			return nil, nil
		}
		if c.debugOn() {
			c.debugTransfer("transfer applied", from, t, 0, "pulled", pulled)
		}
		if t.Was != 0 && t.Mode == ModeAdd && !t.carriesCounter() {
			// Counts the dead receiver may have applied: a snapshot of its
			// that comes later, and holds them, adds them no more. Only
			// those placed here are added here: those passed on go naming
			// the transfer, and are recorded where they are added. Recorded
			// here as well, they came off the key's counter again when it
			// came back here with its record of the transfers the run
			// applied, weighed against them where it was counted
			// (TestCountsSentAgainPassedOnAreNotTakenOutOfTheCounterThatComesBack).
			here := c.placedHere(c.view.Load(), t.States)
			for _, m := range marks {
				c.replicas.noteResent(c.mono(now), m.To, Applied{From: m.From, Seq: m.Seq}, here)
			}
		}
		if t.givenBackAgain() {
			if t.Reqs = c.passGivenBackAgain(now, from, t); len(t.Reqs) == 0 {
				return nil, nil
			}
			// Units the dead receiver may have given back: its counter,
			// if it comes saying so, lacks them as the counter here does.
			// So may every run the give-backs they replace went to (a
			// chain names them all, as the given-up-on path records them):
			// recorded for the last alone, the counter of a run that
			// applied an earlier one came lacking them, and they came off
			// twice
			// (TestUnitsGivenBackAgainNamingAChainArePutBackForTheRunThatAppliedTheFirst).
			at := t.At
			if at == 0 {
				at = now.UnixNano()
			}
			for _, m := range marks {
				c.replicas.noteGivenBack(c.mono(now), m.To, Applied{From: m.From, Seq: m.Seq}, t.Reqs, at)
			}
			// The counter they come off carries the record wherever it
			// goes (Resent.Given).
			c.replicas.holdResent(c.mono(now), givenAgain(marks, t.Reqs, at))
		}
		counted = c.countedHere(now, t)
		if counted == nil && t.Mode == ModeAdd && !t.carriesCounter() && len(t.States) > 0 {
			// Counts that do not join this run's counters at once (kept
			// in fallback, passed on, waiting for their keys) go on
			// naming this transfer as applied here: the inbox lists it
			// with the counters only for counts that joined them.
			t.Applied = withApplied(t.Applied, []Applied{{From: from, Seq: t.Seq, By: c.self}})
			later = keysOf(t.States)
		}
		c.apply(now, from, t)
		return counted, later
	})
}

// refusedRetry is when a transfer to the run to, refused at m, goes
// again: a call timeout later, or at once if to pinged this node since
// its last refusal. A receiver that refuses counts for want of a lease
// pings their sender as it refuses them, and its ping may come before
// the refusal; it holds the lease once the answer reaches it. Each ping
// lets one refusal go again at once: one that refuses again for another
// reason waits a call timeout.
func (c *Core) refusedRetry(to Peer, m int64) int64 {
	if p := c.peers.get(to.Name); p != nil && p.peer.Inc == to.Inc {
		if at := p.pinged.Swap(0); at != 0 && m-at < int64(c.cfg.CallTimeout) {
			return m
		}
	}
	return m + int64(c.cfg.CallTimeout)
}

// refuse answers t, from from, refused, and records the refusal: every copy
// of it is refused from then on (see inbox.refuse). A copy of it applied
// meanwhile has it acknowledged instead.
func (c *Core) refuse(now time.Time, from Peer, t Transfer) Ack {
	if !c.in.refuse(from, t.Seq, t.Floor, c.mono(now)) {
		c.stats.Duplicates.Add(1)
		c.debugTransfer("transfer received again: applied before", from, t, 0)
		return Ack{Seq: t.Seq}
	}
	return Ack{Seq: t.Seq, Refused: true}
}

// passGivenBackAgain passes on, still naming the give-back they replace,
// the units of t, from from, given back again in place of a give-back to
// a run taken for dead, whose keys this node neither counts nor owns nor
// waits for: their counters are at another node, maybe that run itself,
// alive to this node. It returns the units it did not pass on: they come
// off here, or wait here, as any units given back. Passed on as a bare
// give-back, they came off twice the counter of the run that had applied
// the give-back they replace; and recorded here as given back in that
// run's place, they were put back into its counter if it came here.
func (c *Core) passGivenBackAgain(now time.Time, from Peer, t Transfer) (kept []limiter.Request) {
	v := c.view.Load()
	var away map[string][]limiter.Request
	owners := map[string]Member{}
	for _, r := range t.Reqs {
		to, self, ok := c.placeOf(v, r.Key)
		if !ok || self || r.Limit.Algorithm == limiter.Concurrency || ownedBy(v, c.self.Name, r.Key) ||
			c.engine.Has(now, r.Key) || c.fallback.engine.Has(now, r.Key) || c.out.carries(r.Key) {
			kept = append(kept, r)
			continue
		}
		if away == nil {
			away = map[string][]limiter.Request{}
		}
		away[to.Name] = append(away[to.Name], r)
		owners[to.Name] = to
	}
	for _, name := range sortedKeys(away) {
		like := Transfer{Mode: ModeRefund, Reqs: away[name], At: t.At}
		like.markWith(t.marks(from), c.self)
		c.debugGivenBack("units given back again passed on, naming the give-back they replace", away[name])
		c.sendTransfer(now, owners[name].Peer(), like, purposeRefund)
	}
	return kept
}

// countedHere returns, for a transfer about to be applied that adds what
// other nodes admitted (ModeAdd, carrying no counter) or gives units back
// (ModeRefund), the keys of its counts if every one of them joins this
// run's counters at once: keys this node owns and counts now (not still
// moving here, not kept in fallback for want of a majority; for a refund,
// a counter this run holds). Else it returns nil. A snapshot of the
// counters lists such transfers (see Keep): the counts of any other may not
// be in it. A refund sent again in place of one the snapshot lists comes
// off the counter once.
func (c *Core) countedHere(now time.Time, t Transfer) []limiter.Key {
	var keys []limiter.Key
	switch {
	case t.Mode == ModeAdd && !t.carriesCounter():
		for _, s := range t.States {
			keys = append(keys, s.Key)
		}
	case t.Mode == ModeRefund:
		// Units given back come off this run's counters only where they
		// are counted here already: else they wait, or go on.
		for _, r := range t.Reqs {
			if r.Limit.Algorithm == limiter.Concurrency || !c.engine.Has(now, r.Key) {
				return nil
			}
			keys = append(keys, r.Key)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	v := c.view.Load()
	if v.self < 0 || !c.majority(v) {
		return nil
	}
	for _, k := range keys {
		if _, self, ok := c.placeOf(v, k); !ok || !self {
			return nil
		}
		if v.ho != nil && c.handoff.incoming(v, c.self.Name, k) {
			return nil
		}
	}
	return keys
}

// apply applies a transfer from from.
func (c *Core) apply(now time.Time, from Peer, t Transfer) {
	if t.Mode.carriesCounts() || t.Mode.settles() {
		c.noteApplied(from, t)
	}
	if t.carriesCounter() {
		// A key's counter back from the node it was lent to: the loan is
		// over, and the key is placed by the ring again. Lent still, its
		// counter would go back to the borrower, which may be leaving, or
		// gone without ever being in this node's ring.
		c.lent.endFrom(from, t.States)
		of := t.countersOf(from)
		switch {
		case t.Mode == ModeEvicted:
			of = t.Evicted
		case t.ReplicaOf.Name != "":
			of = t.ReplicaOf
		}
		defer c.reachedCounters(now, t.States, of, t.Holds) // once they are counted
	}
	switch t.Mode {
	case ModeAdd:
		for _, x := range t.Cancels {
			if x.To.Name == "" || x.To == c.self {
				c.cancel(now, from, x)
			} else if x.To.Name != c.self.Name {
				c.passCancel(now, from, x)
			}
		}
		c.stats.Received.Add(uint64(len(t.States)))
		// A run's own counters, handed over by it: the replica this node
		// keeps of them is stale. Passed on by others, they may be a
		// replica of the run sent on once it was taken for dead, and the
		// replica here a newer copy of the same counter (a snapshot of the
		// run read back and sent here): the newer of the two goes on;
		// unless they are the run's last word on them (Last: handed over
		// by it, or sent as it stopped counting), which a copy holds
		// nothing beyond. Where they are counted, they are weighed against
		// what is held there of the run and of the runs they hold counts
		// of (see placeHere); passed on, they go as they came, the run's
		// last word still if they were.
		of := t.countersOf(from)
		last := of.Name != "" && t.lastWord()
		states, holds := t.States, t.Holds
		switch {
		case t.Own || t.Last:
			for _, s := range t.States {
				c.replicas.dropOf(s.Key, of)
			}
		case of.Name != "":
			states, holds = c.replicas.takeNewerOf(of, t.States, t.Holds, last)
		}
		// What the runs whose counts they hold applied: counts sent again
		// in place of one of those transfers are skipped here, and
		// wherever the counts go on (bare additions name each run, By).
		c.replicas.noteApplied(c.mono(now), of, t.Applied)
		var given []Cancel
		if len(t.Taken) > 0 {
			given = c.takes.adopt(c.mono(now), of, t.Taken, keysOf(t.States))
		}
		like := Transfer{Mode: ModeAdd, CountersOf: of, Holds: holds, Last: last}
		like.Applied = t.Applied
		if t.carriesCounter() {
			like.Applied = foreignApplied(t.Applied, of, t.Holds)
			states = c.countersLessResent(now, of, last, t.Applied, t.Holds, states)
			states, like.Resent = c.weighResent(now, t.Resent, states)
		} else if len(t.Applied) > 0 {
			// Bare additions holding the counts of transfers their runs
			// applied (kept in fallback, passed on): counts their senders
			// sent here in place of those transfers, added here before,
			// come off them, and they name those transfers no more
			// wherever they go. Counts sent again that come after them
			// are skipped by the record (see noteApplied).
			var less []limiter.State
			states, less, like.Applied = c.replicas.lessResentBy(now, t.Applied, states)
			c.debugCounts("counts sent here in place of transfers their runs applied are not added again", less)
		}
		if !t.carriesCounter() && len(t.Resent) > 0 {
			// Fallback counts that hold counts sent again in place of
			// transfers (see fallback.keepResent): weighed as a
			// counter's are, and the record goes on with them. Added
			// whole, the counts were counted twice where the run that
			// applied the transfer held them
			// (TestFallbackCountsGoToTheOwnerWithTheRecordOfTheCountsSentAgainTheyHold).
			states, like.Resent = c.weighResent(now, t.Resent, states)
		}
		if t.resent() {
			// Counts sent again in place of a transfer to a run this node
			// may not have taken over: wherever they go, they name that
			// transfer, which the run may have applied, and those it
			// replaced.
			like.markWith(t.marks(from), c.self)
		}
		c.placeAs(now, like, purposeForward, states)
		if len(given) > 0 {
			// Cancels for the run that came before its counters: the
			// counters, placed, hold the items' admissions.
			if c.debugOn() {
				for _, x := range given {
					c.log.Debug("take item cancelled before its run's counters came: units given back", "node", c.self.Name, "peer", from.Name, "counters_of", of.Name, "take", x.Take, "reqs", debugReqs(x.Reqs))
				}
			}
			for _, x := range given {
				c.refundAt(now, x.At, x.Reqs)
			}
		}
	case ModeEvicted:
		c.stats.Received.Add(uint64(len(t.States)))
		c.placeEvicted(now, from, t)
	case ModeCopy:
		// A snapshot read back holds what an earlier run of its node
		// counted (the run CountersOf names, or one before the sender):
		// where this node keeps that run's replica, not yet counted, both
		// are copies of one counter, and the newer stands in the replica,
		// which moves with the run's other replicas. Elsewhere a copy that
		// names its run is weighed where the key is counted, like any
		// counter naming its run.
		//
		// The transfers the run applied (Applied) are in the copy: one of
		// them sent here later in place of the one to the dead run is
		// skipped, and the counts of one sent here before are taken out of
		// the copy, so that each counts once, whichever comes first.
		states := t.States
		if t.CountersOf.Name != "" && len(t.Applied) > 0 {
			c.replicas.noteApplied(c.mono(now), t.CountersOf, t.Applied)
			var less []limiter.State
			states, less = c.replicas.lessResent(now, t.CountersOf, t.Applied, states)
			c.debugCounts("copy: counts sent here in place of transfers its run applied are not added again", less, "counters_of", t.CountersOf.Name)
			if t.Last {
				// The run's last word lacks the units given back here in
				// place of give-backs it applied, as the counter here
				// does: they are put back once, as for the run's evicted
				// counters (see evictedApplied). Weighed against the
				// record of the run's counter without them, the last word
				// was taken for below it by units given back since, and
				// they came off a second time
				// (TestARunsLastWordSentAsACopyBelowItsRecordByUnitsGivenBackAgainHereTakesThemOffOnce).
				_, given := c.replicas.takeResent(t.CountersOf, t.Applied, nil, states)
				states = c.givenBackInRun(now, t.CountersOf, t.Holds, given, states)
			}
		}
		// A copy that is its run's last word (Last: the run's counter as
		// it stopped counting, sent on after a copy naming no run, see
		// placeEvicted) is no snapshot: as for the run's counter itself,
		// a replica of the run not taken yet never will be.
		rest := states
		if t.Last && t.CountersOf.Name != "" {
			for _, s := range states {
				c.replicas.dropOf(s.Key, t.CountersOf)
			}
		} else {
			rest = c.replicas.absorbCopy(from, t.CountersOf, states, t.Holds)
		}
		c.placeAs(now, Transfer{Mode: t.Mode, CountersOf: t.CountersOf, Last: t.Last, Holds: holdsOf(t.Holds, rest), Applied: t.Applied, Resent: resentOf(t.Resent, rest)}, purposeForward, rest)
	case ModeNewer:
		// A replica of a dead run sent on, of a key whose counter here holds
		// that run's counts (this node started it from the run's replica,
		// or a counter that held them came): only what this copy counted
		// beyond them is new, and is added.
		states, adds := t.States, []limiter.State(nil)
		if t.ReplicaOf == c.self {
			// Copies of this run's own counters: it holds their counts, or
			// handed them over in transfers that were acknowledged.
			c.debugTransfer("transfer dropped: replicas of this run's own counters", from, t, 0)
			return
		}
		if t.ReplicaOf.Name != "" {
			states = nil
			for _, s := range t.States {
				if d, more, ok, _, _ := c.replicas.beyondPromoted(now, c.mono(now), c.self, s.Key, t.ReplicaOf, genIn(t.Holds, s.Key, t.ReplicaOf), s, t.Holds, false); ok {
					if more {
						adds = append(adds, d)
					}
					continue
				}
				states = append(states, s)
			}
		}
		c.placeAs(now, Transfer{Mode: t.Mode, ReplicaOf: t.ReplicaOf, Holds: holdsOf(t.Holds, states)}, purposeForward, states)
		c.place(now, ModeAdd, purposeForward, adds)
	case ModeReplica:
		if t.ReplicaOf.Name != "" {
			// Replicas a leaving node kept for their owner, passed on to the
			// owner's successor without it: kept where this node keeps
			// none of the key newer, unless the owner left too.
			if !c.runLeft(t.ReplicaOf) {
				c.replicas.putPassed(c.mono(now), t.ReplicaOf, t.States, t.Holds, t.Resent)
			}
			return
		}
		if r, ok := c.known.Load().run(from); ok && r.leaving {
			return // it hands its counters over instead: a replica now is stale
		}
		c.sendDisplaced(now, from, c.replicas.put(now, c.mono(now), from, t.States, t.Holds, t.Resent, c.view.Load().ring, c.self.Name))
		c.replicas.noteApplied(c.mono(now), from, t.Applied)
	case ModeRefund, ModeCharge:
		c.applySettle(now, t, t.Reqs, t.marks(from))
	case ModeCancel:
		caller := from
		if t.Caller.Name != "" {
			caller = t.Caller
		}
		if t.WasTo.Name != "" {
			c.cancelFor(now, t.WasTo, caller, Cancel{Take: t.Take, Reqs: t.Reqs, At: t.At}, t.WasTo == from)
			return
		}
		c.cancel(now, caller, Cancel{Take: t.Take, Reqs: t.Reqs, At: t.At})
	}
}

// placeEvicted places the counters t carries, which the run t.Evicted sent
// as it stopped counting, declared dead (ModeEvicted), from from: applied
// here, or given up on by this node on their way to a receiver that went,
// their keys counted here now (see retarget).
func (c *Core) placeEvicted(now time.Time, from Peer, t Transfer) {
	// Counters of keys whose counters here hold the run's counts (this
	// node started them from the run's replicas) are copies of those
	// counts: what the run counted beyond them is added, wherever the
	// keys are counted now. A replica of the run's not taken yet never
	// will be: the counters themselves came. The others go on naming
	// their run: where their keys are counted, the counters there hold
	// the records of the run's counts they hold (see Transfer.Holds).
	//
	// The run chose this node by the rings it replicated under, which
	// may not be the ring the others took its keys over by (it may
	// have replicated to a node it alone still saw). A key this node
	// did not start from the run's replica, sent by the run itself,
	// goes on, once, to the node that counts it where the run does not,
	// to be weighed against the replica that node may have started it
	// from. Added here, it would count twice what that replica held.
	run := t.Evicted
	v := c.view.Load()
	states, resent := c.weighResent(now, t.Resent, t.States)
	// Meant for an earlier run of this node, which kept the run's
	// replicas and may have started keys from them: where this run
	// restored that earlier run's counter of a key (and sent it as a
	// copy to the key's owner) and that counter's snapshot names no
	// run, it may hold the run's counts with no record of them, and
	// this one raises the count as a copy, never adds, but where the
	// key's counter holds a record of the run's counter (it was started
	// from a replica taken after the snapshot): weighed against that,
	// it adds what it holds beyond (see Transfer.Last). A restored
	// counter whose snapshot names the runs whose counts it holds
	// went with that record (Transfer.Holds) wherever it went: the
	// run's counter goes on as the run's, and where the key is
	// counted it adds only what it holds beyond the record (nothing,
	// if the restored counter holds all of it; all of it, if the
	// restored counter holds none of the run's). Taken as a copy once
	// the key was counted elsewhere, it raised a count that units had
	// come off since, or that held only part of the restored counter
	// (the rest kept apart, in fallback), and counts were doubled or
	// lost.
	earlier := t.WasTo.Name == c.self.Name && t.WasTo.Inc < c.self.Inc
	if len(t.Applied) > 0 {
		// Counts sent again in place of what the run applied are
		// weighed where its counters are counted, as for any counter
		// passed on (countersLessResent): here for those whose counts
		// a counter here holds or will hold; the others go on with
		// the record (Applied), and are weighed where they arrive,
		// against the counts sent again that arrived there (this
		// node passed those it took on, naming the transfer).
		// Weighed here as well, counts sent again that this node
		// passed on came off the counter here and again there
		// (lost); and without the record, counts sent again to the
		// node they go to were added there beside the counter that
		// holds them (doubled). Units given back here are weighed
		// here still: the counter they came off went on without a
		// record of them.
		var weighed, onward []limiter.State
		for _, s := range states {
			if c.evictedGoesOn(v, from, run, s.Key, t.Holds, earlier) {
				onward = append(onward, s)
			} else {
				weighed = append(weighed, s)
			}
		}
		states = c.evictedApplied(now, run, t.Applied, t.Holds, weighed, onward, slices.Concat(weighed, onward))
	}
	var adds, counters, copies []limiter.State
	onward := map[string][]limiter.State{}
	for _, s := range states {
		d, more, ok, less, lowered := c.replicas.beyondPromoted(now, c.mono(now), c.self, s.Key, run, genIn(t.Holds, s.Key, run), s, t.Holds, true)
		if lowered {
			// The copy of the run's counter counted here (its
			// replica) held units the run gave back since.
			c.debugCounts("evicted counters: a copy counted here held units given back since: they come off", []limiter.State{less}, "evicted", run.Name)
			c.engine.Lower(now, []limiter.State{less})
			c.heldBelow(now, s.Key)
			c.dirty.noteKey(s.Key)
		}
		if ok {
			if more {
				adds = append(adds, d)
			}
			continue
		}
		c.replicas.dropOf(s.Key, run)
		if earlier && c.replicas.restoredUnnamed(s.Key) {
			copies = append(copies, s)
			continue
		}
		if from == run {
			if o, ok := v.ring.OwnerWithout(s.Key.Route(), run.Name); ok && o.Name != c.self.Name {
				onward[o.Name] = append(onward[o.Name], s)
				continue
			}
		}
		counters = append(counters, s)
	}
	for _, name := range sortedKeys(onward) {
		i, _ := v.ring.index(name)
		t := c.out.transfer(v.ring.member(i).Peer(), Transfer{Mode: ModeEvicted, Evicted: run, States: onward[name], Holds: holdsOf(t.Holds, onward[name]), Applied: t.Applied, Resent: resentOf(resent, onward[name])}, purposeForward, c.mono(now), false)
		c.debugTransfer("transfer made: evicted counters sent on", v.ring.member(i).Peer(), t, purposeForward)
	}
	// Counts sent again in place of transfers that the run's counters
	// hold: those of the counters sent on, placed, or sent as copies
	// go with them; the others are held here, where the keys'
	// counters are (started from the run's replicas). Those of keys
	// counted elsewhere now are no counts of a counter here: kept,
	// they would go with a later hand-off of it, and its receiver
	// would take out counts it never held.
	carried := map[limiter.Key]bool{}
	for _, s := range counters {
		carried[s.Key] = true
	}
	for _, list := range onward {
		for _, s := range list {
			carried[s.Key] = true
		}
	}
	c.keepResent(now, slices.DeleteFunc(slices.Clone(resent), func(x Resent) bool {
		_, self, ok := c.placeOf(v, x.key())
		return carried[x.key()] || ok && !self
	}))
	c.place(now, ModeAdd, purposeForward, adds)
	// The run's counters that this node holds no record of go on as
	// the run's, and as its last word on them: where they are
	// counted, they are weighed against what is held there of the run
	// (a replica of it, inside another counter that was started from
	// it), and what that held beyond them comes off.
	c.placeAs(now, Transfer{Mode: ModeAdd, CountersOf: run, Last: true, Holds: holdsOf(t.Holds, counters), Resent: resentOf(resent, counters)}, purposeForward, counters)
	// Those of keys this run restored from a snapshot naming no run go
	// as copies, the copy of the snapshot having gone ahead of them
	// holding perhaps the run's counts with no record of them; but
	// naming their run and its counter (Holds), as its last word: where
	// the key is counted from a counter holding a record of the run's
	// counter (a replica taken after the snapshot), they are weighed
	// against it, and add what they hold beyond; elsewhere the newer
	// stands. Sent as copies naming nothing, they were taken for copies
	// there too, the newer counter holding the record stood, and what
	// the run counted beyond its replica was lost.
	c.placeAs(now, Transfer{Mode: ModeCopy, CountersOf: run, Last: true, Holds: holdsOf(t.Holds, copies), Applied: t.Applied, Resent: resentOf(resent, copies)}, purposeForward, copies)
}

// passCancel sends on the cancel x of the caller from, carried by the
// caller's fallback count of its keys, to the run x.To the item was sent
// to: the item's admission is there, and the caller, which took that run
// for dead, may never reach it (see Transfer.Cancels).
func (c *Core) passCancel(now time.Time, from Peer, x Cancel) {
	if len(x.Reqs) == 0 {
		return
	}
	c.sendTransfer(now, x.To, Transfer{Mode: ModeCancel, At: x.At, Reqs: x.Reqs, Take: x.Take, Caller: from}, purposeCancel)
}

// cancelFor applies the cancel of take item x of the caller from, meant
// for the run by, which left before it got it: if by admitted the item
// (its counters, handed over, named it: Transfer.Taken), its units are
// given back where they are counted now. admitted: by itself sends it,
// leaving, and admitted the item (see cancelAsListed).
func (c *Core) cancelFor(now time.Time, by, from Peer, x Cancel, admitted bool) {
	c.stats.Cancelled.Add(1)
	refund := c.takes.cancelAdopted(c.mono(now), by, from, x, admitted)
	if c.debugOn() {
		c.log.Debug("take item cancelled by its caller, for the run that left", "node", c.self.Name, "peer", from.Name, "for", by.Name, "take", x.Take, "refund", refund, "reqs", debugReqs(x.Reqs))
	}
	if refund {
		c.refundAt(now, x.At, x.Reqs)
	}
}

// handedTaken returns the take items a hand-off of this node's own
// counters of states names (Transfer.Taken): those that runs which left
// admitted and whose counters of those keys came here, and, if this node
// is leaving, those it admitted itself. The counters hold their
// admissions: a cancel of one that comes once the run that admitted it is
// gone goes to the keys' owner, and is applied there, wherever the
// counters went since.
func (c *Core) handedTaken(states []limiter.State) []Taken {
	var taken []Taken
	if c.gate.isLeaving() {
		taken = c.cancellable()
	}
	return append(taken, c.takes.adoptedTaken(keysOf(states))...)
}

// cancellable returns the take items this node admitted whose callers may
// still cancel them: those that have not told it since that they owe it
// no cancel (see callersSettled).
func (c *Core) cancellable() []Taken {
	var out []Taken
	for _, p := range c.peers.all() {
		if p.owesNothing.Load() >= p.mayCancel.Load() {
			continue
		}
		if seqs := c.takes.admitted(p.peer); len(seqs) > 0 {
			out = append(out, Taken{Caller: p.peer, Seqs: seqs})
		}
	}
	slices.SortFunc(out, func(a, b Taken) int { return strings.Compare(a.Caller.Name, b.Caller.Name) })
	return out
}

// countersLessResent weighs the transfers whose counts states hold,
// counters of the run of (Applied: each naming the run that applied it,
// By, or else of), against the counts added here that were sent in place
// of them, as evictedApplied does for each of those runs: the counters,
// handed over or passed on, came after those counts, and hold them too. Only counters of
// keys counted here are weighed: elsewhere the counts sent again went on
// to the key's owner, as the counters do, and are weighed there. holds
// names the generation of each run's counter. It returns states, less
// what was taken out.
func (c *Core) countersLessResent(now time.Time, of Peer, last bool, applied []Applied, holds []Held, states []limiter.State) []limiter.State {
	if len(applied) == 0 || !c.replicas.anyResent() {
		return states
	}
	v := c.view.Load()
	var here, elsewhere []limiter.State
	for _, s := range states {
		if _, self, ok := c.placeOf(v, s.Key); ok && self && v.self >= 0 && c.majority(v) {
			here = append(here, s)
		} else {
			elsewhere = append(elsewhere, s)
		}
	}
	if len(here) == 0 {
		return states
	}
	byRun := map[Peer][]Applied{}
	var runs []Peer
	for _, a := range applied {
		run := a.By
		if run.Name == "" {
			run = of
		}
		if run.Name == "" || run == c.self {
			continue
		}
		if _, ok := byRun[run]; !ok {
			runs = append(runs, run)
		}
		byRun[run] = append(byRun[run], a.key())
	}
	for _, run := range runs {
		here = c.evictedApplied(now, run, byRun[run], holds, here, nil, lastWordsOf(run, of, last, holds, here))
	}
	return sortStates(append(here, elsewhere...))
}

// lastWordsOf returns, of states, counters of the run of (its last word
// on them: last), those that are run's counter as run let it go, or hold
// it (Held.Last in holds). A counter that holds a copy of run's counter
// that is not its last word (a replica sent on, taken perhaps before run
// applied a give-back) may hold units run's counter lacks: the record of
// units given back in place of that give-back is no record of this copy
// (see evictedApplied). Taken by it, it lowered the record of run's
// counter here, which the copy, weighed next, raised again; run's own
// counter, coming later, then took the units off a second time
// (TestUnitsGivenBackAgainPulledByAJoinerAreNotTakenByACopyOfTheirRunsCounter).
func lastWordsOf(run, of Peer, last bool, holds []Held, states []limiter.State) []limiter.State {
	if run == of && last {
		return states
	}
	var out []limiter.State
	for _, s := range states {
		if slices.ContainsFunc(holds, func(h Held) bool { return h.Last && h.Run == run && h.State.Key == s.Key }) {
			out = append(out, s)
		}
	}
	return out
}

// weighResent weighs list, what counters states hold of counts sent again
// in place of transfers (Transfer.Resent), here: where this node knows
// that another run named applied its transfer (by that run's replicas, or
// its counter, come here), the run's counter holds the counts too, and
// they come out of these counters. It returns states less those, and the
// records that go on with them. (The run named itself weighs them as the
// transfer arrives: see resentHeldHere.)
func (c *Core) weighResent(now time.Time, list []Resent, states []limiter.State) ([]limiter.State, []Resent) {
	return c.lessResentHeld(now, list, states, c.appliedResent)
}

// lessResentHeld returns states less the counts of the records of list
// that held reports are held already, with the units of those that held
// reports are lacked already put back (see Resent.Given), and the other
// records.
func (c *Core) lessResentHeld(now time.Time, list []Resent, states []limiter.State, held func(Resent) bool) ([]limiter.State, []Resent) {
	if len(list) == 0 {
		return states, nil
	}
	states = slices.Clone(states)
	drop := make([]bool, len(states))
	var keep []Resent
	for _, x := range list {
		i := slices.IndexFunc(states, func(s limiter.State) bool { return s.Key == x.key() && s.Kind < limiter.KindGrant })
		if i < 0 || drop[i] {
			continue
		}
		if !held(x) {
			keep = append(keep, x)
			continue
		}
		if x.Given != nil {
			// The counter lacks units the counter they would meet lacks
			// too: they are put back, once.
			if c.debugOn() {
				c.log.Debug("counter: units given back in place of a give-back its receiver applied are put back", "node", c.self.Name, "reqs", debugReqs([]limiter.Request{x.Given.Req}))
			}
			states[i] = withUnitsBack(now, states[i], *x.Given)
			continue
		}
		c.debugCounts("counter: counts sent in place of a transfer its receiver applied are not added again", []limiter.State{x.State})
		if d, ok := limiter.SubState(now, states[i], x.State); ok {
			states[i] = d
		} else {
			drop[i] = true
		}
	}
	out := states[:0]
	for i, s := range states {
		if !drop[i] {
			out = append(out, s)
		}
	}
	return out, keep
}

// appliedResent reports whether counts x, sent again in place of
// transfers, are held by the counter of another run that applied one of
// those transfers, by what this node knows of it (see weighResent).
func (c *Core) appliedResent(x Resent) bool {
	// Units given back go on with the counter, on record: a counter of
	// the run that comes to it later lacks them too (see evictedApplied).
	return x.Given == nil && slices.ContainsFunc(x.Marks, func(m Replaced) bool {
		return m.To != c.self && c.replicas.applied(m.To, Applied{From: m.From, Seq: m.Seq})
	})
}

// resentHeldHere returns counters states less the counts they hold (list,
// see Transfer.Resent) that were sent again in place of a transfer to
// this run that it applied, holds (the copies of other counters they
// hold) with the units given back again in place of a give-back this run
// applied taken off the copy of this run's counter, and the other
// records. Weighed before the transfer that carries them is applied: the
// inbox's record of a sender is locked then. A counter that comes here
// holding counts sent again in place of a transfer this run did not
// apply is no copy held here: it may go on (passed on, refused), and come
// back.
//
// A counter that lacks units given back again in place of a give-back
// this run applied was started from a copy of this run's counter taken
// before it (a stale replica), which holds them: this run's counter, as
// it let it go, lacks them too. So the copy the counter holds lacks them
// from now on, as evictedApplied lowers the record of it, and this run's
// counter, weighed against it, holds no less. Put back into the counter
// instead, they were to come off again as this run's counter came
// holding less than the copy: nothing came off a token bucket then, and it
// counted them twice
// (TestUnitsGivenBackAgainComingToTheRunThatAppliedTheGiveBackAreOffTheCopyOfItsCounter).
// A counter holding no copy of this run's counter, or holding its last
// word (which lacks them: they came off the counter as it joined), gets
// them back.
func (c *Core) resentHeldHere(now time.Time, list []Resent, states []limiter.State, holds []Held) ([]limiter.State, []Held, []Resent) {
	applied := func(x Resent) bool {
		return slices.ContainsFunc(x.Marks, func(m Replaced) bool {
			return m.To == c.self && c.in.appliedOnce(Applied{From: m.From, Seq: m.Seq})
		})
	}
	rest := list[:0:0]
	for _, x := range list {
		if x.Given == nil || !applied(x) || !heldIn(states, x.key()) {
			rest = append(rest, x)
			continue
		}
		i := -1
		for j, h := range holds {
			if h.Run == c.self && h.State.Key == x.key() && h.State.Kind < limiter.KindGrant && (i < 0 || h.Gen > holds[i].Gen) {
				i = j
			}
		}
		if i < 0 || holds[i].Last {
			rest = append(rest, x)
			continue
		}
		if c.debugOn() {
			c.log.Debug("counter: units given back in place of a give-back this run applied come off the copy of its counter the counter holds", "node", c.self.Name, "reqs", debugReqs([]limiter.Request{x.Given.Req}))
		}
		holds = slices.Clone(holds)
		holds[i].State = limiter.RefundState(now, time.Unix(0, x.Given.At), holds[i].State, x.Given.Req)
	}
	states, keep := c.lessResentHeld(now, rest, states, applied)
	return states, holds, keep
}

// keepResent records that this node's counters hold the counts of list,
// sent again in place of transfers: they go with the counters (see
// holdResent), and a counter of a run that applied one of those
// transfers comes in less them (see noteResent).
func (c *Core) keepResent(now time.Time, list []Resent) {
	for _, x := range list {
		for _, m := range x.Marks {
			if x.Given != nil {
				c.replicas.noteGivenBack(c.mono(now), m.To, Applied{From: m.From, Seq: m.Seq}, []limiter.Request{x.Given.Req}, x.Given.At)
			} else {
				c.replicas.noteResent(c.mono(now), m.To, Applied{From: m.From, Seq: m.Seq}, []limiter.State{x.State})
			}
		}
	}
	c.replicas.holdResent(c.mono(now), list)
}

// evictedGoesOn reports whether the counter of k that run sent as it
// stopped counting (ModeEvicted, from from) goes on from here as it came,
// weighed nowhere here: no counter here holds run's counts of k (a
// replica of run's it was started from), it is no copy of a counter an
// earlier run of this node restored from a snapshot naming no run
// (earlier: the transfer was meant for that run; see placeEvicted), and
// the key is counted at another node (sent by run itself, the key's owner
// without run). A restored counter whose snapshot names the runs whose
// counts it holds went with that record to where the key is counted: the
// run's counter goes on there as the run's, with the record of what the
// run applied, and is weighed there. Weighed here as well, counts sent
// again that this node passed on came off it here and again there
// (TestAnEvictedCounterForAnEarlierRunIsWeighedOnceAgainstCountsSentAgain).
func (c *Core) evictedGoesOn(v *view, from, run Peer, k limiter.Key, holds []Held, earlier bool) bool {
	if c.replicas.promotes(k, run, genIn(holds, k, run)) || earlier && c.replicas.restoredUnnamed(k) {
		return false
	}
	if from == run {
		if o, ok := v.ring.OwnerWithout(k.Route(), run.Name); ok && o.Name != c.self.Name {
			return true
		}
	}
	_, self, ok := c.placeOf(v, k)
	return ok && !self
}

// evictedApplied weighs the transfers the evicted run applied (Applied)
// against states, its counters: one sent here later in place of the one
// to the run is skipped; the counts of one sent here before were added to
// this node's counter of their key where the run's replica did not hold
// them, and are the run's counts too. The record of the run's counts that
// counter holds grows by them (where the counter is here, counted or
// kept until its key settles), so that every copy of the run's counter,
// this one and those that come another way (its replica sent on), adds
// only what it holds beyond; where the counter is not here, they are
// taken out of this copy. Units given back here in place of such a
// transfer lower that record likewise; where the counter is not here,
// they are put back into this copy (see givenBackInCopy). holds names the
// generation of each of the run's counters. It returns states, less what
// was taken out and with what was put back.
//
// onward are more of the run's counters, which go on from here unweighed
// (see evictedGoesOn): counts sent again that this node took in for
// their keys went on, naming the transfer they replace, to where the
// counters go, and are weighed there (the record goes with the
// counters); units given back here are weighed here, as for states.
//
// Units given back are weighed only for the keys of lacking: those
// whose counters are, or hold, the run's counter as the run let it go
// (see lastWordsOf), which lacks them. A copy of the run's counter taken
// before it applied the give-back holds them: the record waits for the
// run's counter itself.
func (c *Core) evictedApplied(now time.Time, run Peer, applied []Applied, holds []Held, states, onward, lacking []limiter.State) []limiter.State {
	c.replicas.noteApplied(c.mono(now), run, applied)
	var less []limiter.State
	adds, given := c.replicas.takeResent(run, applied, states, lacking)
	states = sortStates(slices.Concat(states, onward))
	for _, r := range adds {
		x := r.State
		if x.Kind >= limiter.KindGrant {
			continue
		}
		raise := func(s limiter.State) limiter.State { return limiter.AddState(now, s, x) }
		if gen := genIn(holds, x.Key, run); c.replicas.reweighPromoted(run, gen, x.Key, raise) || c.handoff.reweighHeld(run, gen, x.Key, raise) {
			c.debugCounts("evicted counters: counts sent here in place of a transfer their run applied are its counts", []limiter.State{x}, "evicted", run.Name)
			continue
		}
		less = append(less, x)
		// They come out of this copy of the run's counter: the counts
		// sent again stand for them from now on, wherever they go. Still
		// waiting here for their key, they name the transfer they replace
		// no more: gone on naming it, the run, which applied it, skipped
		// them, and the count was lost
		// (TestCountsSentAgainTakenOutOfAnEvictedCounterNameTheirTransferNoMore).
		c.handoff.unmark(x.Key, r.Marks[0])
	}
	// Units given back here in place of a transfer the run applied: the
	// run's counter lacks them too, so the record of the run's counts
	// that the counter here holds lacks them as well. Weighed against the
	// record as it was, the give-back in the run's counter would come off
	// a second time.
	states = c.givenBackInRun(now, run, holds, given, states)
	if len(less) == 0 {
		return states
	}
	c.debugCounts("evicted counters: counts sent here in place of transfers their run applied are not added again", less, "evicted", run.Name)
	out := slices.Clone(states)
	drop := make([]bool, len(out))
	for _, x := range less {
		for i := range out {
			if drop[i] || out[i].Key != x.Key || out[i].Kind >= limiter.KindGrant {
				continue
			}
			if d, ok := limiter.SubState(now, out[i], x); ok {
				out[i] = d
			} else {
				drop[i] = true
			}
			break
		}
	}
	kept := out[:0]
	for i, s := range out {
		if !drop[i] {
			kept = append(kept, s)
		}
	}
	return kept
}

// cancel applies the cancel of take item x of the caller from: if this
// node admitted it, its units are given back.
func (c *Core) cancel(now time.Time, from Peer, x Cancel) {
	c.stats.Cancelled.Add(1)
	refund := c.takes.cancel(from, x.Take)
	if c.debugOn() {
		c.log.Debug("take item cancelled by its caller", "node", c.self.Name, "peer", from.Name, "take", x.Take, "refund", refund, "reqs", debugReqs(x.Reqs))
	}
	if refund && !(c.gate.isLeaving() && c.cancelAsListed(now, from, x)) {
		c.refundAt(now, x.At, x.Reqs)
	}
}

// cancelAsListed gives back the units of take item x of the caller from,
// which this leaving node admitted, as a cancel meant for this run sent
// to the keys' owners (WasTo naming this run: it admitted the item), and
// reports whether it could (the keys have owners). This node's hand-off
// may have named the item among those it admitted (Transfer.Taken), and
// the caller, whose cancel may not have had its acknowledgement, sends it
// again to the keys' owner once this node is gone (retargetCancel): given
// back here by a refund of its own, the units would be given back there
// a second time by the list, or not at all if the refund was lost while
// the list forgot the item. The owner gives them back once, and its list
// names the item no more.
func (c *Core) cancelAsListed(now time.Time, from Peer, x Cancel) bool {
	v := c.view.Load()
	byOwner := map[string][]limiter.Request{}
	owners := map[string]Member{}
	for _, r := range x.Reqs {
		to, self, ok := c.placeOf(v, r.Key)
		if !ok || self {
			return false
		}
		byOwner[to.Name] = append(byOwner[to.Name], r)
		owners[to.Name] = to
	}
	names := make([]string, 0, len(byOwner))
	for name := range byOwner {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		c.sendTransfer(now, owners[name].Peer(), Transfer{Mode: ModeCancel, At: x.At, Reqs: byOwner[name], Take: x.Take, Caller: from, WasTo: c.self}, purposeCancel)
	}
	return len(names) > 0
}

// notePromotedHere records that replicas of the dead run owner are
// counted here: the cluster holds their counts from now on. holds name
// the generations of owner's counters (see Held.Gen).
func (c *Core) notePromotedHere(now time.Time, owner Peer, states []limiter.State, holds []Held) {
	if owner.Name == "" || len(states) == 0 {
		return
	}
	if c.promoting != nil {
		c.promoting(owner, states)
	}
	here := make([]takenReplica, len(states))
	for i, s := range states {
		here[i] = takenReplica{owner: owner, state: s, holds: holdsOf(holds, []limiter.State{s})}
	}
	c.replicas.notePromoted(c.mono(now), here)
}

// placeOf returns where the counters of k belong by view v: this node
// (self true) or the member named.
func (c *Core) placeOf(v *view, k limiter.Key) (to Member, self, ok bool) {
	if p, lent := c.lent.get(k); lent {
		return Member{Name: p.Name, Inc: p.Inc}, false, true
	}
	owner, ok := v.ring.Owner(k.Route())
	if !ok {
		return Member{}, false, false
	}
	return owner, owner.Name == c.self.Name, true
}

// placedHere returns, of states, those placeAs keeps here by view v: of
// keys this node owns, or that nobody owns yet.
func (c *Core) placedHere(v *view, states []limiter.State) []limiter.State {
	var here []limiter.State
	for _, s := range states {
		if _, self, ok := c.placeOf(v, s.Key); self || !ok {
			here = append(here, s)
		}
	}
	return here
}

// place puts states where they belong by the current view: those of keys
// this node owns into its engine (or, while they may still be moving here,
// beside it until they are settled), the others to their owners in
// transfers of mode. Counters of keys nobody owns (no ring yet) stay here.
func (c *Core) place(now time.Time, mode Mode, p purpose, states []limiter.State) {
	c.placeAs(now, Transfer{Mode: mode}, p, states)
}

// placeAs is place for transfers made after like: its mode, and for
// ModeEvicted the run whose counters they are.
func (c *Core) placeAs(now time.Time, like Transfer, p purpose, states []limiter.State) {
	if len(states) == 0 {
		return
	}
	v := c.view.Load()
	var local []limiter.State
	byOwner := map[string][]limiter.State{}
	owners := map[string]Member{}
	for _, s := range states {
		to, self, ok := c.placeOf(v, s.Key)
		if self || !ok {
			local = append(local, s)
			continue
		}
		byOwner[to.Name] = append(byOwner[to.Name], s)
		owners[to.Name] = to
	}
	c.notePromotedHere(now, like.ReplicaOf, local, like.Holds)
	c.placeHere(now, v, like, local)
	names := make([]string, 0, len(byOwner))
	for name := range byOwner {
		names = append(names, name)
	}
	slices.Sort(names)
	handing := like.Mode == ModeAdd && like.Own && p == purposeHandoff
	for _, name := range names {
		for _, part := range SplitStates(byOwner[name], TransferBytes) {
			t := like
			t.States, t.Holds = part, holdsOf(like.Holds, part)
			switch {
			case handing || t.Mode == ModeAdd && t.Own:
				t.Taken = c.handedTaken(part)
			case t.Mode == ModeAdd && t.carriesCounter():
				// Counters passed on (at once, or after they waited here
				// for their keys, or refused and placed anew) take with
				// them the lists of the items their runs admitted that
				// came here with counters of their keys, less those
				// whose units were given back here: a cancel of one that
				// reaches the keys' owner gives the units back there.
				t.Taken = c.takes.adoptedTaken(keysOf(part))
			}
			if t.Mode == ModeAdd && (t.carriesCounter() || len(t.Holds) > 0) {
				t.Applied = withApplied(c.appliedHeld(part, t.Own, t.CountersOf, t.Holds), like.Applied)
			}
			t.Resent = resentOf(like.Resent, part)
			if t.Mode == ModeAdd && t.Own {
				// This node's own counters: the counts sent again in place
				// of transfers that joined them go with them.
				t.Resent = append(t.Resent, c.replicas.takeResentHeld(keysOf(part))...)
			}
			if p == purposeReconcile {
				t.Cancels = c.out.cancelsFor(owners[name].Peer(), part, c.runDied)
			}
			c.sendTransfer(now, owners[name].Peer(), t, p)
		}
	}
}

// appliedHeld returns, for counters states about to be handed over or
// passed on (own: this run's; of: the run whose counters they are; holds:
// the other runs' counts they hold), the transfers those runs applied
// whose senders may not have had them acknowledged, each naming the run
// that applied it (see Transfer.Applied): this run's by its inbox, the
// others' as they came here with counters. The record goes where the
// counts those transfers added go, so that counts sent again in place of
// one of them are skipped there.
func (c *Core) appliedHeld(states []limiter.State, own bool, of Peer, holds []Held) []Applied {
	var out []Applied
	if own {
		for _, a := range appliedTo(c.in.counted(nil), states) {
			a.By = c.self
			out = append(out, a)
		}
		// The transfers of bare additions the counters hold that joined
		// them later, or came with them.
		out = append(out, c.carried.held.of(keysOf(states))...)
	}
	var runs []Peer
	if of.Name != "" && of != c.self {
		runs = append(runs, of)
	}
	for _, h := range holds {
		if h.Run != c.self && !slices.Contains(runs, h.Run) {
			runs = append(runs, h.Run)
		}
	}
	for _, r := range runs {
		out = append(out, c.replicas.appliedOf(r)...)
	}
	return out
}

// cameBack returns the counts held by s, this run's own counter of its key
// handed over and come back unapplied (given up on, or placed anew here),
// given holds, those its transfer names. The run counts the key in a new
// counter since it gave s away (see gaveAway): s is another counter of
// the run's, weighed like any (see weighHere), so that what is held here
// of it from now on goes with the key's counter wherever it goes, and a
// copy of s (its replica, a counter started from that) is not added on
// top of it. A later counter names itself among the counts it holds; the
// first names none, so it is named here. Added as plain counts, it went
// on with the run's next counter under that counter's name, and was
// added again where its replica had been counted.
//
// s is the run's last word on that counter (Held.Last), as it is where
// it arrives handed over, or sent as the run stopped counting: an
// earlier copy of it (the replica a counter was started from) may hold
// units given back since, which come off where that copy comes. Weighed
// as a copy, the larger stood, and those units were counted again
// (TestAnEvictedCounterKeptByANodeThatKnowsNoMemberIsItsLastWord).
func (c *Core) cameBack(s limiter.State, holds []Held) []Held {
	if s.Kind >= limiter.KindGrant || c.replicas.genOf(s.Key) == 0 {
		return holds
	}
	out := slices.Clone(holds)
	if !slices.ContainsFunc(out, func(h Held) bool { return h.Run == c.self && h.State.Key == s.Key }) {
		return append(out, Held{Run: c.self, State: s, Last: true}) // the first names none
	}
	gen := genIn(out, s.Key, c.self) // it names itself: the latest of the run's it holds
	for i, h := range out {
		if h.Run == c.self && h.State.Key == s.Key && h.Gen == gen {
			out[i].State, out[i].Last = s, true
		}
	}
	return out
}

// placeHere keeps states of keys this node owns (or that nobody owns yet),
// as transfers like carry them. Own adds are this node's own counters,
// handed over and come back (and so are those it sent as it was declared
// dead, ModeEvicted naming it); while their keys wait to settle here they
// are kept apart from what others sent, so that if they move on first
// they go as this node's hand-off.
func (c *Core) placeHere(now time.Time, v *view, like Transfer, states []limiter.State) {
	if like.Mode == ModeEvicted && like.Evicted == c.self {
		// This run's own counters, sent as it stopped counting (declared
		// dead), kept here because it knows no node to send them to, or
		// given up on with their keys counted here now: they came back,
		// as a hand-off of them that came back does, and are placed as
		// one. The run counts their keys in new counters since (see
		// gaveAway): merged as plain counts, they joined the next
		// counter with no record of the counter they were, and a counter
		// started from its replica that came here later added them again
		// (TestAnEvictedCounterKeptByANodeThatKnowsNoMemberIsWeighedAsItsCounter).
		like = Transfer{Mode: ModeAdd, Own: true, Holds: like.Holds, Resent: like.Resent}
	}
	mode, own := like.Mode, like.Mode == ModeAdd && like.Own
	// A copy that names its run (a snapshot read back) is weighed like a
	// counter handed over: what it holds beyond the counts of its runs
	// held here is added, to whatever else is counted.
	namedCopy := mode == ModeCopy && like.CountersOf.Name != ""
	for _, s := range states {
		if s.Kind >= limiter.KindGrant {
			c.engine.Merge(now, []limiter.State{s}) // grants and leases are not counted twice by merging
			continue
		}
		holds := holdsOf(like.Holds, []limiter.State{s})
		if own {
			holds = c.cameBack(s, holds)
		}
		named := mode == ModeAdd && (!own && like.CountersOf.Name != "" || len(holds) > 0) || namedCopy
		if !named && len(holds) > 0 {
			c.replicas.noteHeld(now, c.mono(now), holds) // a copy: the newer stands
		}
		a := arrival{state: s, copy: namedCopy}
		if namedCopy {
			a.applied = like.Applied
		}
		if like.resent() {
			a.was, a.wasTo, a.earlier = like.was(c.self), like.WasTo, like.Earlier
		}
		a.resent = resentOf(like.Resent, []limiter.State{s})
		if named {
			a.holds = holds
			if !own {
				a.of, a.last = like.CountersOf, like.Last
			}
		}
		if mode == ModeAdd && len(like.Applied) > 0 && (c.majority(v) || v.self < 0) {
			// The counts join this run's counters (at once, or once
			// their key settles here): the record goes with them.
			c.carried.held.keep(c.mono(now), []limiter.Key{s.Key}, like.Applied)
		}
		if v.ho != nil && c.handoff.arrive(v, c.self.Name, mode, own, own || like.carriesCounter(), a, now) {
			if c.debugOn() {
				c.debugCounts("counts kept until their key settles here", []limiter.State{s}, "mode", mode.String())
			}
			continue // moving here: settled with the rest of its counts
		}
		if a.lastCopy() && !c.replicas.promotes(s.Key, a.of, genIn(a.holds, s.Key, a.of)) {
			// The run's last word, sent on after a copy naming no run
			// that may hold its counts (see placeEvicted), where no
			// record of the run's counter is held: a copy, the newer
			// stands, as that copy did. Where it is the newer, the key's
			// counter holds it from now on (see keepLastCopy).
			c.debugCounts("a run's last word sent after a copy naming no run, no record of its counter here: the newer stands", []limiter.State{s}, "counters_of", a.of.Name)
			c.engine.MergeNewer(now, []limiter.State{s})
			if after := c.engine.StatesOf(now, []limiter.Key{s.Key}); len(after) == 1 {
				c.keepLastCopy(now, a, after[0])
			}
			c.dirty.noteKey(s.Key)
			continue
		}
		if namedCopy && len(a.resent) > 0 {
			// Weighed as a counter handed over is (see apply), and as it
			// is where its key is moving here (settleLocked): what it
			// holds of counts sent again in place of a transfer that
			// another run is known here to have applied is in that
			// run's counter too, and comes out of it. Weighed only
			// against the records of the runs' counters, it added them
			// again where its key was counted
			// (TestACopyNamingItsRunIsWeighedAgainstTheCountsSentAgainItHolds).
			var rest []limiter.State
			if rest, a.resent = c.weighResent(now, a.resent, []limiter.State{s}); len(rest) == 0 {
				continue
			}
			s = rest[0]
		}
		var part []Held // the counter that joins this run's, as it named its run
		if named {
			if a.of.Name != "" {
				part = []Held{{Run: a.of, Gen: genIn(a.holds, s.Key, a.of), State: s}}
			} else if own {
				part = []Held{{Run: c.self, Gen: genIn(a.holds, s.Key, c.self), State: s}}
			}
		}
		waits := (mode == ModeAdd || namedCopy) && !c.majority(v) && v.self >= 0
		var had []Held // the records of the counter here, before s is weighed
		if named {
			if waits {
				had = c.replicas.heldOf([]limiter.Key{s.Key})
			}
			// What this node holds of the runs the counter names is not
			// added again.
			d, ok, less, lowered := c.replicas.weighHere(now, c.mono(now), c.self, a.of, s, a.holds, a.last)
			if lowered {
				// An earlier copy of the run's counter, counted here,
				// held units the run gave back since: they come off.
				c.debugCounts("a run's counter handed over holds less than its copy counted here: the difference comes off", []limiter.State{less}, "counters_of", a.of.Name)
				c.engine.Lower(now, []limiter.State{less})
				c.heldBelow(now, s.Key)
				c.dirty.noteKey(s.Key)
			}
			if !ok {
				c.debugCounts("counts held here already: nothing added", []limiter.State{s}, "counters_of", a.of.Name, "holds", len(a.holds))
				continue
			}
			s = d
		}
		if waits {
			if named {
				// The records of the runs' counters they hold go with
				// the fallback counts, wherever those go. Those of the
				// counter here stay with it: the counts it holds stay
				// in the engine, and the fallback counts, weighed against
				// them, hold what it does not; naming its runs' counters,
				// they would be weighed as holding it where they join it.
				c.fallback.keepHeld(c.replicas.takeHeldBut(s.Key, had), now.UnixNano())
			}
			// Without a majority this node counts nothing as an owner: what
			// is added here waits with its fallback counts for the key's
			// owner on the larger side, and is sent there as an addition.
			if c.debugOn() {
				c.debugCounts("counts kept in fallback: no majority", []limiter.State{s})
			}
			// So do the records of the counts sent again they hold.
			kept := a.resent
			if marks := a.marks(); len(marks) > 0 && mode == ModeAdd {
				kept = append(slices.Clip(kept), Resent{Marks: marks, State: s})
			}
			c.fallback.keepResent(kept, now.UnixNano())
			c.fallback.merge(now, s)
			if mode == ModeAdd {
				c.carried.fallback.keep(c.mono(now), []limiter.Key{s.Key}, like.Applied)
			}
			continue
		}
		if c.debugOn() {
			c.debugCounts("counts join the engine", []limiter.State{s}, "mode", mode.String())
		}
		if mode == ModeAdd || namedCopy {
			// Counts sent again in place of transfers join this run's
			// counter: it names them wherever it goes (Transfer.Resent);
			// so do those a copy read back from a snapshot holds.
			if marks := a.marks(); len(marks) > 0 {
				c.replicas.holdResent(c.mono(now), []Resent{{Marks: marks, State: s}})
			}
			c.keepResent(now, a.resent)
		}
		if mode == ModeNewer && like.ReplicaOf.Name != "" && (c.replicas.takeCounterless(s.Key) || c.lacksCounter(s.Key, c.mono(now))) {
			// The key settled here without its counter, or its counter was
			// out of reach: this replica of its dead owner's holds counts
			// nothing here does.
			c.engine.Merge(now, []limiter.State{s})
		} else if mode == ModeNewer || mode == ModeCopy && !namedCopy {
			c.engine.MergeNewer(now, []limiter.State{s})
		} else if len(part) > 0 && mode != ModeCopy {
			// This run's counter is what it was and the counter that
			// joined it, nothing else: a record says so (see unionRecord).
			before := c.engine.StatesOf(now, []limiter.Key{s.Key})
			c.engine.Merge(now, []limiter.State{s})
			if after := c.engine.StatesOf(now, []limiter.Key{s.Key}); len(after) == 1 {
				var prefix *limiter.State
				if len(before) == 1 {
					prefix = &before[0]
				}
				c.replicas.noteUnion(c.mono(now), s.Key, prefix, part, after[0])
			}
		} else {
			c.engine.Merge(now, []limiter.State{s})
		}
		c.dirty.noteKey(s.Key)
	}
}

// pushKeys sends on the counters of keys this node holds but does not
// count: they arrived after their owner changed.
func (c *Core) pushKeys(now time.Time, keys []limiter.Key) {
	v := c.view.Load()
	var away []limiter.Key
	for _, k := range keys {
		if _, self, ok := c.placeOf(v, k); ok && !self {
			away = append(away, k)
		}
	}
	if len(away) > 0 {
		states := sortStates(c.engine.ExtractKeys(now, away))
		named := c.replicas.gaveAway(c.mono(now), c.self, states)
		c.placeAs(now, Transfer{Mode: ModeAdd, Own: true, Holds: sortHolds(append(c.replicas.takeHeld(keysOf(states)), named...))}, purposeHandoff, states)
	}
}

// refund gives back the units of reqs, counted now, where their counters
// are: here, or passed on to the node they moved to.
func (c *Core) refund(now time.Time, reqs []limiter.Request) { c.refundAt(now, now.UnixNano(), reqs) }

// refundAt gives back the units of reqs, counted at the instant at (Unix
// ns; 0, from a peer that sent none: now), where their counters are. They
// come out of the window that counted them, wherever they wait and
// however long: units that wait (for a counter on its way, out of reach,
// or for this node to know where its keys are counted) keep the instant,
// and units sent on carry it (Transfer.At). Given back when they are let
// go, or when they arrive after a delay, from the count of that later
// window, they would lend it units it never counted.
func (c *Core) refundAt(now time.Time, at int64, reqs []limiter.Request) {
	c.refundMarked(now, at, reqs, nil)
}

// refundMarked is refundAt for units given back again in place of the
// give-backs marks names (see Transfer.Was), to runs taken for dead that
// may have applied them: units that wait here for a counter on its way,
// then go on to the node that counts their keys, still name them, and a
// run among them that applied its give-back skips them. Sent on bare,
// they came off that run's counter a second time.
func (c *Core) refundMarked(now time.Time, at int64, reqs []limiter.Request, marks []Replaced) {
	if len(reqs) == 0 {
		return
	}
	at = stamped(at, now)
	v := c.view.Load()
	reqs = c.refundAfterCounter(now, at, reqs, marks)
	reqs, waiting := c.handoff.refundLater(v, c.self.Name, at, reqs, marks) // keys not settled here wait for their counter
	c.debugGivenBack("units given back wait for their key to settle here", waiting)
	var away map[string][]limiter.Request
	owners := map[string]Member{}
	m := c.mono(now)
	unsure := c.unsureOfItsKeys(v, m)
	if !unsure {
		c.foldKept(now, v, c.countingHere(v, m, reqs), 0)
	}
	for _, r := range reqs {
		to, self, ok := c.placeOf(v, r.Key)
		if self && r.Limit.Algorithm != limiter.Concurrency && c.lacksCounter(r.Key, m) {
			c.refundOutOfReach(givenBack{at: at, req: r, marks: marks})
			continue
		}
		if !ok && r.Limit.Algorithm != limiter.Concurrency && (len(marks) > 0 || !c.engine.Has(now, r.Key) && !c.fallback.engine.Has(now, r.Key)) {
			// No ring names where the key is counted (this node is in
			// none: declared dead, it counts nothing until it joins
			// again), and nothing here holds it. Given back here, the
			// units would come off nothing and be lost, while the
			// counter that holds them stands elsewhere: they wait until
			// a ring names the key's owner (see tickRefunds). Units that
			// replace give-backs wait so whatever this node holds of the
			// key: they come off no fallback count (see holdRefund), and
			// given back here they came off an engine that holds nothing
			// of the key, or a count that lacks them where the run the
			// replaced give-back went to applied it.
			c.holdRefund(givenBack{at: at, req: r, marks: marks})
			continue
		}
		if self || !ok || c.engine.Has(now, r.Key) || r.Limit.Algorithm == limiter.Concurrency {
			if len(marks) == 0 && r.Limit.Algorithm != limiter.Concurrency && !c.engine.Has(now, r.Key) && c.fallback.engine.Has(now, r.Key) {
				// The key's counter waits in the fallback counts (it came
				// while this node had no majority): they join the engine,
				// or go to the key's owner, as additions.
				if c.debugOn() {
					c.log.Debug("units given back from the fallback counts", "node", c.self.Name, "reqs", debugReqs([]limiter.Request{r}))
				}
				settleIn(c.fallback.engine, now, at, false, r)
				c.fallback.wrote()
				continue
			}
			if unsure && r.Limit.Algorithm != limiter.Concurrency && (self || c.engine.Has(now, r.Key) || len(marks) > 0) {
				c.holdRefund(givenBack{at: at, req: r, marks: marks})
				continue
			}
			if c.debugOn() {
				c.log.Debug("units given back here", "node", c.self.Name, "reqs", debugReqs([]limiter.Request{r}))
			}
			if len(marks) > 0 && r.Limit.Algorithm != limiter.Concurrency {
				c.refundMarkedHere(now, at, r, marks)
				c.dirty.noteKey(r.Key)
				continue
			}
			settleIn(c.engine, now, at, false, r)
			c.heldBelow(now, r.Key)
			c.dirty.noteKey(r.Key) // its successor's replica must not keep the units
			continue
		}
		if away == nil {
			away = map[string][]limiter.Request{}
		}
		away[to.Name] = append(away[to.Name], r)
		owners[to.Name] = to
	}
	for _, name := range sortedKeys(away) {
		t := Transfer{Mode: ModeRefund, At: at, Reqs: away[name]}
		t.markWith(marks, c.self)
		// They come off no counter here: the record that they did (see
		// noteGivenBack) goes.
		for _, m := range marks {
			c.replicas.forgetGivenBack(m.To, Applied{From: m.From, Seq: m.Seq}, away[name], at)
		}
		c.sendTransfer(now, owners[name].Peer(), t, purposeRefund)
	}
}

// refundMarkedHere gives back the units of r, counted at the instant at
// and given back again in place of the give-backs marks names, from the
// engine, and leaves the record that they did (see noteGivenBack) as
// what came off: the counter of a run that applied a give-back they
// replace lacks them, and gets back, where it meets the record, what the
// counter here lacks of them. Units that come off no counter here (this
// node holds none of the key: it took the key over with no replica of
// it), or off a counter holding fewer (at nothing: units of its own given
// back), did not all come off: put back whole where the run's counter
// came, they were counted more than admitted
// (TestUnitsGivenBackAgainWhereNoCounterHeldThemArePutBackNowhere,
// TestUnitsGivenBackAgainToACounterAtNothingArePutBackNowhere,
// TestUnitsGivenBackAgainOfWhichTheCounterHereHeldFewerArePutBackAsFarAsTheyCameOff).
// So where they waited for their key to settle here and come off the
// counter it gathered (see countSettled;
// TestUnitsGivenBackAgainWhileTheKeyMovesArePutBackAsFarAsTheyCameOffTheCounterItGathered).
func (c *Core) refundMarkedHere(now time.Time, at int64, r limiter.Request, marks []Replaced) {
	var off int64
	if before := c.engine.StatesOf(now, []limiter.Key{r.Key}); len(before) == 1 && c.engine.Has(now, r.Key) {
		off = limiter.UnitsOff(r, before[0], limiter.RefundState(now, time.Unix(0, at), before[0], r))
	}
	settleIn(c.engine, now, at, false, r)
	c.heldBelow(now, r.Key)
	if off < max(r.Cost, 1) {
		for _, m := range marks {
			c.replicas.givenBackOnly(m.To, Applied{From: m.From, Seq: m.Seq}, r.Key, at, off)
		}
	}
}

// refundEach gives back the units of held as refundMarked does, each out
// of the window it was counted in and naming the give-backs it replaces:
// in the order they came, those counted at one instant and naming the
// same give-backs together.
func (c *Core) refundEach(now time.Time, held []givenBack) {
	for i := 0; i < len(held); {
		j := i + 1
		for j < len(held) && held[j].at == held[i].at && slices.Equal(held[j].marks, held[i].marks) {
			j++
		}
		reqs := make([]limiter.Request, 0, j-i)
		for _, g := range held[i:j] {
			reqs = append(reqs, g.req)
		}
		c.refundMarked(now, held[i].at, reqs, held[i].marks)
		i = j
	}
}

// stamped returns at, the instant units given back were counted, or now
// if they carry none.
func stamped(at int64, now time.Time) int64 {
	if at != 0 {
		return at
	}
	return now.UnixNano()
}

// refundOutOfReach keeps g's units, given back for a key this node owns
// whose counter is out of reach (see outOfReach): the key's owner and
// successor died together, and its counter may live on, on the far side
// of a split, holding the units. What this node holds of the key is what
// the others and it admitted in fallback, not those units: given back
// from it, they would come off a count that lacks them (a count goes no
// lower than nothing, so they are lost), and the counter, once it comes,
// would still hold them. They wait, with the settlements of keys on their
// way here (see tickSettles), until a counter of the key came (they come
// off the count it joined), or the key counts from what it has (the
// hand-off window passed, or both runs that held it are gone, and their
// counts with them), or it moved on (they follow it). They keep the
// instant they were counted at (at): let go in a later window, they come
// out of theirs, not the one they are let go in; and the give-backs they
// replace (g.marks), which they name wherever they go.
func (c *Core) refundOutOfReach(g givenBack) {
	if c.debugOn() {
		c.log.Debug("units given back wait for their key's counter, out of reach", "node", c.self.Name, "reqs", debugReqs([]limiter.Request{g.req}))
	}
	c.settling.hold(heldSettle{refund: true, at: g.at, req: g.req, marks: g.marks})
}

// countingHere returns the requests of reqs whose keys this node counts
// at m. Units given back for them come off the key's whole count here:
// what the node kept of the key with its fallback counts (what callers
// admitted in fallback and sent it while it had no majority, which a
// refund may follow) joins its engine first (see foldKept), as it does
// before a request is counted. Given back from the engine's count alone,
// a unit the kept counts hold would come off a count that lacks it,
// which goes no lower than nothing, and be counted again when they
// joined.
func (c *Core) countingHere(v *view, m int64, reqs []limiter.Request) []limiter.Request {
	var counted []limiter.Request
	for _, r := range reqs {
		if r.Limit.Algorithm != limiter.Concurrency && c.counting(v, r.Key, m) {
			counted = append(counted, r)
		}
	}
	return counted
}

// refundAfterCounter keeps the units of reqs whose keys' counters, or
// what this node admitted of them in fallback, are in transfers of this
// node's not acknowledged yet (see carries), and returns the others.
// Such a counter may come back here (refused, and placed anew) or stay
// where it went: the units wait for it, and follow it once it is placed
// (see tickSettles). Given back from the count here now, which lacks
// them, they would be lost, and the counter, back, would still hold them.
// at is the instant they were counted at (0: now), which they keep.
func (c *Core) refundAfterCounter(now time.Time, at int64, reqs []limiter.Request, marks []Replaced) (rest []limiter.Request) {
	for _, r := range reqs {
		if r.Limit.Algorithm == limiter.Concurrency || !c.out.carries(r.Key) {
			rest = append(rest, r)
			continue
		}
		if c.debugOn() {
			c.log.Debug("units given back wait for their counter on its way", "node", c.self.Name, "reqs", debugReqs([]limiter.Request{r}))
		}
		c.settling.hold(heldSettle{refund: true, at: stamped(at, now), req: r, marks: marks})
	}
	return rest
}

// unsureOfItsKeys reports whether this member cannot know at m that no
// other node took its keys over from their replicas: it has no majority
// (the larger side may have), or it stood still or regained its majority
// and has not heard from its peers since (they may have declared it dead
// meanwhile; see standstill and majorityRegained).
func (c *Core) unsureOfItsKeys(v *view, m int64) bool {
	return v.self >= 0 && (!c.majority(v) || c.lacked.Load() || c.stood.holds(m))
}

// holdRefund keeps r's units, given back while this node's engine counts
// the key (or nothing holds it here) but the node cannot know that no
// other node took its keys over (see unsureOfItsKeys), until it knows:
// it has a majority and heard from its peers after a pause, or it is out
// of its ring (see tickRefunds). The larger side, or the others while it
// stood still, may have taken its keys over from their replicas, which
// hold the units: given back from this node's counter, they would be lost
// where the two meet, weighed as copies of one count (the larger stands,
// so a copy that went down adds nothing and takes nothing off). Nor may
// they come off its fallback counts, which hold only what it admitted in
// fallback (and what arrived meanwhile), not the units its engine
// admitted: a count cannot go below nothing, and the rest would be kept.
// Given back once the node knows where the key is counted, they come off
// that counter: here (once what the node kept in fallback meanwhile
// joined it: see countingHere), or in a refund to the node that counts it.
// They keep the instant they were counted at (g.at) and the give-backs
// they replace (g.marks). Units that replace give-backs wait so whatever
// this node holds of the key: the run the replaced give-back went to may
// have applied it, and its counts, not this node's fallback counts, held
// the units.
func (c *Core) holdRefund(g givenBack) {
	if c.debugOn() {
		c.log.Debug("units given back wait until this node knows where its keys are counted", "node", c.self.Name, "reqs", debugReqs([]limiter.Request{g.req}))
	}
	c.unrefunded.hold(g)
}

// tickRefunds gives back the units that waited (see holdRefund), once this
// node knows where its keys are counted: it has a majority and heard from
// its peers after a pause, or it is out of its ring, and a ring names the
// keys' owners.
func (c *Core) tickRefunds(now time.Time) {
	if !c.unrefunded.waiting() {
		return
	}
	if v := c.view.Load(); c.unsureOfItsKeys(v, c.mono(now)) || v.ring.Len() == 0 {
		return // a node in no ring knows no place for them yet
	}
	c.refundEach(now, c.unrefunded.take())
}

// heldRefunds are units given back that wait for this node to know where
// its keys are counted (see holdRefund), in the order they came. It is
// safe for concurrent use.
type heldRefunds struct {
	mu   sync.Mutex
	n    atomic.Int64
	list []givenBack
}

func (h *heldRefunds) hold(g givenBack) {
	h.mu.Lock()
	h.list = append(h.list, g)
	h.n.Store(int64(len(h.list)))
	h.mu.Unlock()
}

func (h *heldRefunds) waiting() bool { return h.n.Load() > 0 }

func (h *heldRefunds) take() []givenBack {
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.list
	h.list = nil
	h.n.Store(0)
	return list
}

// acked records the answer to a transfer. A transfer the receiver refused
// (it is leaving, or another run, or does not hold a lease from this node
// now) stays here and goes again a call timeout later, under a new number
// (the receiver refuses every copy of the one it refused: see spend):
// until this node's view of the receiver changes (see deadReceivers), it
// is still the receiver's.
func (c *Core) acked(now time.Time, r *pendingRequest, a Ack) {
	if a.Refused {
		if c.debugOn() {
			if t, ok := r.msg.(Transfer); ok {
				c.debugTransfer("transfer refused by its receiver", r.to, t, 0)
			} else {
				c.log.Debug("transfer given in a pull refused by its receiver", "node", c.self.Name, "seq", r.seq)
			}
		}
		_, sent := r.msg.(Transfer)
		if c.out.refusedBeforeGiven(r.seq, c.mono(now), !sent) {
			// The puller may have applied the copy given in its pull's
			// reply since (a copy given in a pull overrides a refusal of
			// its number: see inbox.takes): its answer to that copy tells,
			// and the number stays the transfer's until then.
			if c.debugOn() {
				c.log.Debug("refusal of a transfer given again in a pull's reply: its answer to that is awaited", "node", c.self.Name, "peer", r.to.Name, "seq", r.seq)
			}
			return
		}
		c.out.spend(r.seq, r.to)
		if pt, ok := c.out.takeIfHeld(r.seq); ok {
			c.debugTransfer("refused transfer: its counters go as a node declared dead sends them", pt.to, pt.t, pt.purpose)
			c.viewMu.Lock()
			c.sendEvicted(now, pt.t.States, pt.t.Holds)
			c.viewMu.Unlock()
			c.notifySettled()
			return
		}
		c.out.failed(r.seq, c.refusedRetry(r.to, c.mono(now)), true)
		c.viewMu.Lock()
		c.replaceRefusedLocked(now)
		c.viewMu.Unlock()
		return
	}
	if pt, ok := c.out.settle(r.seq); ok {
		c.debugTransfer("transfer acknowledged", pt.to, pt.t, pt.purpose)
		if pt.purpose == purposeReplica && pt.ring != nil {
			c.noteReplicaRing(pt.ring)
		}
		switch pt.purpose {
		case purposeHandoff, purposeForward, purposePull, purposeHeld:
			if pt.t.carriesCounter() {
				c.handed.set(pt.t.States, pt.to)
			}
		}
		if (pt.purpose == purposeHandoff || pt.purpose == purposePull) && pt.t.Mode == ModeAdd && pt.t.Own {
			c.keepGiven(now, pt.to, pt.t)
		}
		if len(pt.t.Cancels) > 0 {
			c.out.settleCancels(pt.to, pt.t.Cancels) // applied with it
		}
		if len(pt.t.Taken) > 0 {
			c.takes.wentOn(pt.t.Taken) // the cancels waiting for the keys' counts wait there
		}
		c.notifySettled()
	}
}

// replaceRefusedLocked places anew the counts of refused transfers that
// belong elsewhere than their receiver by the view now (the view changed
// while they waited): none was applied, so none is counted twice.
//
// A key lent to a run that is leaving or gone is no longer lent once the
// borrower refused the key's counter: the borrower never had it and will
// count nothing, and this node, whose ring gives it the key, counts it
// again. The borrower may be one this node never listed as a member (it
// joined and left between two of this node's membership updates): this
// node's ring does not change, and nothing else ends the loan. A refusal
// of a transfer that does not carry the key's counter (counts this node
// decided by fallback for the borrower, to add) ends nothing: the
// borrower may hold the counter still, leaving, and hand it over later
// (TestARefusalByALeavingBorrowerThatHoldsTheCounterKeepsTheLoan); such
// counts wait for the loan to end, as the counter comes back or the
// borrower is gone.
//
// viewMu is held: what is known of the receivers, the view and the loans
// are read once, as one, for each refused transfer, and the loans a
// refusal ends are those it was placed anew for.
func (c *Core) replaceRefusedLocked(now time.Time) {
	v := c.view.Load()
	ends := map[*pendingTransfer]bool{}
	gone := c.out.refusedNotFor(func(pt *pendingTransfer) bool {
		if !pt.t.Mode.carriesCounts() || pt.t.Mode == ModeEvicted {
			return false // evicted counters go to the node that kept their replicas, not to an owner
		}
		endsLoan := pt.t.carriesCounter() && c.quittingLocked(pt.to)
		for _, s := range pt.t.States {
			if to, lent := c.lent.get(s.Key); lent && to == pt.to && endsLoan {
				ends[pt] = true
				return true
			}
			if to, self, ok := c.placeOf(v, s.Key); !ok || self || to.Name != pt.to.Name {
				return true
			}
		}
		return false
	})
	for _, pt := range gone {
		if ends[pt] {
			c.lent.endFrom(pt.to, pt.t.States)
		}
		// A counter handed over and refused goes as it came: it names its
		// run (this node's own, or the run it passes on) and the other runs'
		// counts it holds, so wherever it is counted now it is weighed
		// against what is held there of them. As a copy (the newer of it
		// and the receiver's count), it would lose whichever admissions
		// the receiver counted on its own meanwhile.
		if c.debugOn() {
			c.debugTransfer("refused transfer placed anew: its keys belong elsewhere now", pt.to, pt.t, pt.purpose)
		}
		c.placeAs(now, Transfer{Mode: pt.t.Mode, Own: pt.t.Own, ReplicaOf: pt.t.ReplicaOf, CountersOf: pt.t.CountersOf, Last: pt.t.Last, Holds: pt.t.Holds, Applied: copyApplied(pt.t), Was: pt.t.Was, WasFrom: pt.t.WasFrom, WasTo: pt.t.WasTo, Earlier: pt.t.Earlier, Taken: pt.t.Taken, Resent: pt.t.Resent}, pt.purpose, pt.t.States)
	}
	if len(gone) > 0 {
		c.notifySettled()
	}
}

// deadReceivers gives up on the transfers to runs that are gone, once they
// cannot apply them any more: a receiver applies counts only from a sender
// it holds a lease from, and its lease from this node runs out at most
// LeaseTime after this node last heard from it (heard), an eighth more for
// the clocks' drift. Their counts then go to the keys' owners now, as
// transfers that name the one they replace: the new owner, which took the
// dead receiver's keys over, skips those the dead receiver applied and
// replicated before it died, so a count is neither lost nor counted twice
// (counts to add for a key a later run of the receiver owns again go to
// the node that took the dead run's keys over instead: see retarget).
// Refunds go the same way. Replicas are dropped: the successor gets a
// fresh replica.
//
// A cancel can only be applied by the run that may have counted the item,
// which alone knows whether it did: it waits for that run for as long as
// the run may come back (declared dead across a split, it answers again
// once the split heals), and is dropped only once a later run of the node
// is seen or the node is forgotten. A dead owner's count of a cancelled
// item died with it, but for its replica, which the cancel cannot reach:
// one count a crash may double. The other is the caller's: one that
// crashes before its cancel is acknowledged leaves the item's admission
// at the owner, one more than was admitted unless the caller's fallback
// admitted the request (its fallback count, which carries the cancel to
// the owner, died with it: see Transfer.Cancels).
//
// A node without a majority gives up on nothing: it takes no dead
// member's keys over, and the node that does, on the larger side, alone
// knows by its replicas whether the receiver applied what it was sent.
// Given up on here, the counts would wait here, for keys this node owns
// by its smaller ring, and reach the receiver again as counts it never
// had if it was alive all along (a split): counted twice. Kept, the
// transfer goes to the receiver again once it answers, and is applied
// once; or, if the larger side took the receiver's keys over, it is given
// up on once this node has a majority again, and goes where they went. A
// leaving node cannot wait for a majority: what it kept would leave with
// it when its leave times out, a whole count lost. It gives up as a node
// with a majority does, and the counts go to the keys' owners by its ring
// (counted twice only if the receiver was alive across a split all along
// and applied them: a bounded excess, where keeping them lost them
// whenever the receiver had died).
func (c *Core) deadReceivers(now time.Time, heard func(Peer) (int64, bool)) {
	m := c.mono(now)
	v := c.view.Load()
	majority := c.majority(v) || c.gate.isLeaving()
	c.out.toLimbo(func(pt *pendingTransfer) (int64, bool) {
		to := pt.to
		if !majority || c.aliveLocked(v.ring, to) || !c.goneLocked(to) {
			return 0, false
		}
		if pt.t.Mode == ModeCancel && !c.replacedLocked(to) {
			return 0, false
		}
		if h, ok := heard(to); ok {
			return h + int64(c.cfg.LeaseTime)*9/8, true
		}
		return m, true
	})
	c.retargetDue(now)
}

// aliveLocked reports whether the run to is a member of ring, leaving or
// joining: it may still apply what is sent to it. viewMu is held.
func (c *Core) aliveLocked(ring *Ring, to Peer) bool {
	known := c.known.Load()
	if i, ok := ring.index(to.Name); ok {
		return ring.member(i).Inc == to.Inc
	}
	for _, list := range [][]Member{known.leaving, known.joining} {
		for _, m := range list {
			if m.Name == to.Name && m.Inc == to.Inc {
				return true
			}
		}
	}
	return to.Name == c.self.Name
}

// goneLocked reports whether the run to is gone: it died, a later run of
// its node was seen, or it was seen and is no longer listed (it left). A
// run never seen is not gone: this node has not heard of it yet; nor is
// one listed joining or leaving: it may hold counters still (a joiner
// that pulled keys it owns by a ring this node has not seen yet).
// viewMu is held.
func (c *Core) goneLocked(to Peer) bool {
	if c.runDied(to) {
		return true
	}
	known := c.known.Load()
	r, ok := known.latest(to.Name)
	if !ok || r.inc < to.Inc {
		return false
	}
	if r.inc > to.Inc {
		return true
	}
	for _, list := range [][]Member{known.members, known.leaving, known.joining} {
		if slices.ContainsFunc(list, func(m Member) bool { return m.Name == to.Name && m.Inc == to.Inc }) {
			return false
		}
	}
	return true
}

// quittingLocked reports whether the run to counts nothing any more: it
// announced it is leaving, or it is gone. viewMu is held.
func (c *Core) quittingLocked(to Peer) bool {
	if slices.ContainsFunc(c.known.Load().leaving, func(m Member) bool { return m.Name == to.Name && m.Inc == to.Inc }) {
		return true
	}
	return c.goneLocked(to)
}

// replacedLocked reports whether the run to will never answer again: a
// later run of the node is known, or the node is listed nowhere (the
// driver forgot it). viewMu is held.
func (c *Core) replacedLocked(to Peer) bool {
	known := c.known.Load()
	listed := false
	for _, lists := range [][]Member{known.members, known.leaving, known.joining} {
		for _, x := range lists {
			if x.Name == to.Name {
				if x.Inc > to.Inc {
					return true
				}
				listed = true
			}
		}
	}
	for _, d := range known.dead {
		if d.Name == to.Name {
			if d.Inc > to.Inc {
				return true
			}
			listed = true
		}
	}
	return !listed
}

// retargetDue sends on the transfers whose receiver can no longer apply
// them.
func (c *Core) retargetDue(now time.Time) {
	for _, pt := range c.out.outOfLimbo(c.mono(now)) {
		switch pt.t.Mode {
		case ModeAdd, ModeNewer, ModeCopy, ModeEvicted:
			c.retarget(now, pt, pt.t.States, nil)
		case ModeRefund, ModeCharge:
			c.retarget(now, pt, nil, pt.t.Reqs)
		case ModeCancel:
			c.retargetCancel(now, pt)
		}
	}
}

// retargetCancel sends a cancel whose receiver left before it got it to
// the owner of its keys now, naming the run it was meant for: the run's
// counters, handed over as it left, went there with the items it
// admitted (Transfer.Taken, passed on with the counters by every
// hand-off since), and the owner gives back the units of the item if the
// run admitted it. A receiver this node takes for dead, or whose node
// runs again, is no exception: across a split, it may have left
// gracefully meanwhile, handing its counters on. One that died took its
// count of the item with it, but for its replica, which no cancel
// reaches (see deadReceivers): no list names the item, and the owner
// gives nothing back.
func (c *Core) retargetCancel(now time.Time, pt *pendingTransfer) {
	if pt.t.WasTo.Name != "" || len(pt.t.Reqs) == 0 {
		return
	}
	v := c.view.Load()
	to, self, ok := c.placeOf(v, pt.t.Reqs[0].Key)
	if !ok {
		return
	}
	x := Cancel{Take: pt.t.Take, Reqs: pt.t.Reqs, At: pt.t.At}
	if self {
		caller := c.self
		if pt.t.Caller.Name != "" {
			caller = pt.t.Caller
		}
		c.cancelFor(now, pt.to, caller, x, false)
		return
	}
	t := c.out.transfer(to.Peer(), Transfer{Mode: ModeCancel, At: x.At, Reqs: x.Reqs, Take: x.Take, Caller: pt.t.Caller}, purposeCancel, c.mono(now), false)
	t.Was, t.WasTo = pt.t.Seq, pt.to
	c.out.retargeted(t.Seq, t, c.mono(now))
	c.debugTransfer("cancel sent to the owner in place of the run that left", to.Peer(), t, purposeCancel)
	c.notifyOutbox()
}

// retarget sends the states (or refunds) of an abandoned transfer to where
// they belong now, each part naming the transfer it replaces.
//
// Counts to add go to the node that took the dead receiver's keys over,
// which alone knows, by the replicas, whether the dead receiver applied
// them: the key's owner now, or, where a later run of the receiver owns
// the key again, the key's owner without it (the later run took nothing
// over: it got the key from the replicas of the dead run, which hold what
// that run applied). That node skips what the dead run applied, and
// places the rest where the key is counted.
func (c *Core) retarget(now time.Time, pt *pendingTransfer, states []limiter.State, reqs []limiter.Request) {
	v := c.view.Load()
	was := Applied{From: c.self, Seq: pt.t.Seq}
	// mark names the transfer whose counts the parts carry again: this
	// one, or, for counts (or units given back) it carried again itself
	// to the same receiver,
	// the one they replace (that receiver, if it applied either, holds
	// them: see firstCopies). Counts this one carried again in place of
	// transfers to other runs name those transfers too (Earlier): any of
	// their receivers may have applied them.
	mark := Transfer{Was: was.Seq, WasTo: pt.to}
	again := pt.t.resent() || pt.t.givenBackAgain()
	if again && pt.t.WasTo == pt.to {
		mark.Was, mark.WasFrom, mark.Earlier = pt.t.Was, pt.t.WasFrom, pt.t.Earlier
	} else if again {
		mark.Earlier = pt.t.marks(c.self)
	}
	type part struct {
		to     Member
		states []limiter.State
		reqs   []limiter.Request
	}
	parts := map[string]*part{}
	var here, kept []limiter.State
	var hereReqs []limiter.Request
	add := func(k limiter.Key, s *limiter.State, r *limiter.Request) {
		to, self, ok := c.placeOf(v, k)
		if s != nil && pt.t.Mode == ModeAdd && ok && !self && to.Name == pt.to.Name && to.Inc > pt.to.Inc {
			if o, in := v.ring.OwnerWithout(k.Route(), pt.to.Name); in {
				if o.Name == c.self.Name {
					kept = append(kept, *s) // weighed here, counted at the owner
					return
				}
				to = o
			}
		}
		if self || !ok {
			if s != nil {
				here = append(here, *s)
			} else {
				hereReqs = append(hereReqs, *r)
			}
			return
		}
		p := parts[to.Name]
		if p == nil {
			p = &part{to: to}
			parts[to.Name] = p
		}
		if s != nil {
			p.states = append(p.states, *s)
		} else {
			p.reqs = append(p.reqs, *r)
		}
	}
	for i := range states {
		add(states[i].Key, &states[i], nil)
	}
	for i := range reqs {
		add(reqs[i].Key, nil, &reqs[i])
	}
	if c.debugOn() {
		c.debugTransfer("transfer given up on: its receiver is gone", pt.to, pt.t, pt.purpose, "here", len(here)+len(hereReqs), "applied_there", c.replicas.applied(pt.to, was))
	}
	if pt.t.Mode == ModeEvicted && pt.t.Evicted == c.self {
		c.evictedOutOfReach(now, pt.to, states)
	}
	if !c.replicas.applied(pt.to, was) && !c.replicas.applied(pt.to, mark.was(c.self)) && !slices.ContainsFunc(mark.Earlier, func(m Replaced) bool {
		return c.replicas.applied(m.To, Applied{From: m.From, Seq: m.Seq})
	}) {
		like := pt.t
		if pt.t.Mode == ModeAdd && !pt.t.carriesCounter() {
			c.replicas.noteResent(c.mono(now), pt.to, mark.was(c.self), here) // see handleTransfer
			for _, m := range mark.Earlier {
				c.replicas.noteResent(c.mono(now), m.To, Applied{From: m.From, Seq: m.Seq}, here)
			}
			// Kept here until their keys settle, they may go to the
			// receiver after all, if it comes back: naming the transfer.
			like.Was, like.WasFrom, like.WasTo, like.Earlier = mark.Was, mark.WasFrom, mark.WasTo, mark.Earlier
		}
		if pt.t.Mode == ModeRefund && len(hereReqs) > 0 {
			// Units the dead receiver may have given back: its counter,
			// if it comes saying so, lacks them as the counter here does
			// (see handleTransfer, for a give-back another node sends in
			// place of this one).
			at := pt.t.At
			if at == 0 {
				at = now.UnixNano()
			}
			c.replicas.noteGivenBack(c.mono(now), mark.WasTo, mark.was(c.self), hereReqs, at)
			for _, m := range mark.Earlier {
				c.replicas.noteGivenBack(c.mono(now), m.To, Applied{From: m.From, Seq: m.Seq}, hereReqs, at)
			}
			was := mark.was(c.self)
			c.replicas.holdResent(c.mono(now), givenAgain(append(slices.Clip(mark.Earlier), Replaced{From: was.From, Seq: was.Seq, To: mark.WasTo}), hereReqs, at))
		}
		c.notePromotedHere(now, pt.t.ReplicaOf, here, pt.t.Holds)
		if pt.t.Mode == ModeEvicted && pt.t.Evicted != c.self {
			// Another run's evicted counters this node sent on, their keys
			// counted here now: placed as their receiver would have, named
			// as that run's last word and weighed against what is held
			// here of it. Placed as they came, they were bare additions,
			// and counted beside the replica of the run's counts a counter
			// here was started from (45 held of 33 admitted).
			c.placeEvicted(now, c.self, Transfer{Mode: ModeEvicted, Evicted: pt.t.Evicted, States: here, Holds: holdsOf(pt.t.Holds, here), Applied: pt.t.Applied, Resent: resentOf(pt.t.Resent, here)})
		} else {
			c.placeHere(now, v, like, here)
		}
		// Units that wait here for a counter on its way, then go on,
		// name the give-back they replace, as the parts sent now do.
		c.applySettle(now, pt.t, hereReqs, append(slices.Clip(mark.Earlier), Replaced{From: mark.was(c.self).From, Seq: mark.Was, To: mark.WasTo}))
		c.placeAs(now, Transfer{Mode: pt.t.Mode, CountersOf: pt.t.countersOf(c.self), Last: pt.t.lastWord(), Holds: holdsOf(pt.t.Holds, kept), Resent: resentOf(pt.t.Resent, kept)}, purposeForward, kept)
	}
	for _, name := range sortedKeys(parts) {
		p := parts[name]
		t := c.out.transfer(p.to.Peer(), Transfer{Mode: pt.t.Mode, States: p.states, Reqs: p.reqs, At: pt.t.At, Evicted: pt.t.Evicted, ReplicaOf: pt.t.ReplicaOf, CountersOf: pt.t.countersOf(c.self), Last: pt.t.lastWord(), Holds: holdsOf(pt.t.Holds, p.states), Applied: copyApplied(pt.t), Taken: pt.t.Taken, Resent: resentOf(pt.t.Resent, p.states)}, pt.purpose, c.mono(now), false)
		t.Was, t.WasFrom, t.WasTo, t.Earlier = mark.Was, mark.WasFrom, mark.WasTo, mark.Earlier
		c.out.retargeted(t.Seq, t, c.mono(now))
		c.debugTransfer("transfer sent in place of one to a gone receiver", p.to.Peer(), t, pt.purpose)
	}
	c.notifyOutbox()
}

// copyApplied returns, for a copy (ModeCopy) placed anew, the transfers
// its run applied, for the counters of a run declared dead (ModeEvicted)
// sent again to another receiver, those the run applied to them (see
// sendEvicted), and for bare additions (ModeAdd carrying no counter) the
// transfers whose counts they hold (see keyApplied): they go with them.
// Nil for other transfers, whose lists are made anew. An evicted run's
// list is made by the run alone, as it stops counting: sent again
// without it, its counters met no record of what was sent in place of
// the transfers it applied where their keys are counted, and the units
// given back again in place of a give-back it applied came off the key's
// counter a second time
// (TestUnitsGivenBackAgainArePutBackForTheRunsCountersSentAgainInPlaceOfThoseToAGoneNode).
func copyApplied(t Transfer) []Applied {
	if t.Mode != ModeCopy && t.Mode != ModeEvicted && (t.Mode != ModeAdd || t.carriesCounter()) {
		return nil
	}
	return t.Applied
}

// sortStates sorts states by key, so what is sent does not depend on the
// order of a map walk.
func sortStates(states []limiter.State) []limiter.State {
	slices.SortFunc(states, func(a, b limiter.State) int {
		if c := cmpUint(uint64(a.Key), uint64(b.Key)); c != 0 {
			return c
		}
		return int(a.Kind) - int(b.Kind)
	})
	return states
}

// sortedKeys returns the keys of m, sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Bounds of one transfer, well under the peer protocol's frame limit:
// lease lists make a state's size vary.
const (
	TransferBytes     = 1 << 20
	TransferMaxStates = 8192
)

// SplitStates cuts states into runs whose encoding takes at most budget
// bytes (a state larger than budget goes alone) and that hold at most
// TransferMaxStates states each.
func SplitStates(states []limiter.State, budget int) [][]limiter.State {
	var out [][]limiter.State
	var scratch []byte
	start, size := 0, 4
	for i := range states {
		scratch = limiter.AppendStates(scratch[:0], states[i:i+1])
		one := len(scratch) - 4
		if i > start && (size+one > budget || i-start >= TransferMaxStates) {
			out = append(out, states[start:i])
			start, size = i, 4
		}
		size += one
	}
	if start < len(states) {
		out = append(out, states[start:])
	}
	return out
}

// foreignApplied returns the transfers of list (what counters carried
// applied) that runs other than of and those of holds applied: records of
// bare additions the counters hold, which came with them (see keyApplied).
// The others are on record by their runs (see appliedHeld).
func foreignApplied(list []Applied, of Peer, holds []Held) []Applied {
	var out []Applied
	for _, a := range list {
		if a.By.Name == "" || a.By == of || slices.ContainsFunc(holds, func(h Held) bool { return h.Run == a.By }) {
			continue
		}
		out = append(out, a)
	}
	return out
}

// withUnitsBack returns s with the units of g put back, in the window
// they were counted in: they came off another counter (the one they were
// given back again to), not off s, so s need hold none of them. Put back
// as far as s held them, a counter at nothing (its run gave back all it
// held) got none back, and the units that came off the other counter
// were lost
// (TestUnitsGivenBackAgainInPlaceOfAllTheDeadOwnerHeldArePutBackWhereItsCountersCome).
func withUnitsBack(now time.Time, s limiter.State, g GivenAgain) limiter.State {
	return limiter.ChargeState(now, time.Unix(0, g.At), s, g.Req)
}

// givenBackInRun weighs given, units given back here in place of
// give-backs run applied, against states, run's counters as it let them
// go, which lack them as the counter here does: they are put back once,
// into the record of run's counts the counter here holds (where it is
// here, counted or waiting for its key), or else into this copy of the
// counter (see givenBackInCopy). holds names the generation of each of
// run's counters. It returns states with what was put back.
func (c *Core) givenBackInRun(now time.Time, run Peer, holds []Held, given []givenBack, states []limiter.State) []limiter.State {
	var back []givenBack
	for _, g := range given {
		k := g.req.Key
		lower := func(s limiter.State) limiter.State { return limiter.RefundState(now, time.Unix(0, g.at), s, g.req) }
		if gen := genIn(holds, k, run); c.replicas.reweighPromoted(run, gen, k, lower) || c.handoff.reweighHeld(run, gen, k, lower) {
			if c.debugOn() {
				c.log.Debug("evicted counters: units given back here in place of a transfer their run applied are given back in its counts", "node", c.self.Name, "evicted", run.Name, "reqs", debugReqs([]limiter.Request{g.req}))
			}
			continue
		}
		back = append(back, g)
	}
	return c.givenBackInCopy(now, run, back, states)
}

// givenBackInCopy returns states, copies of run's counters, with the
// units of given put back in: units given back here in place of a
// transfer the run applied, where no counter here holds a record of the
// run's counts to lower (the key's counter went on, or never held the
// run's counts). The counter they came off lacks them, as the run's does:
// where the two meet, they would come off twice. As evictedApplied takes
// counts added here in place of such a transfer out of the copy, it puts
// units given back here into it.
func (c *Core) givenBackInCopy(now time.Time, run Peer, given []givenBack, states []limiter.State) []limiter.State {
	if len(given) == 0 {
		return states
	}
	out := slices.Clone(states)
	for _, g := range given {
		for i := range out {
			if out[i].Key != g.req.Key || out[i].Kind >= limiter.KindGrant {
				continue
			}
			out[i] = withUnitsBack(now, out[i], GivenAgain{Req: g.req, At: g.at})
			if c.debugOn() {
				c.log.Debug("evicted counters: units given back here in place of a transfer their run applied, off a counter not here, are put back in its copy", "node", c.self.Name, "evicted", run.Name, "reqs", debugReqs([]limiter.Request{g.req}))
			}
			break
		}
	}
	return out
}
