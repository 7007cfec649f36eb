package core

import (
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// The protocol's vocabulary: what one core asks of another and what it is
// told back. Every message that moves counts is a Transfer, numbered by its
// sender and applied once by its receiver, which says so with an Ack; every
// answer says what happened as a type of its own, never as a sentinel value.

// Message is anything a core sends to another core or receives from one.
type Message interface{ message() }

// Op is what a take item asks of the owner of its keys.
type Op uint8

const (
	// OpTake spends the item's units if every zone can grant them.
	OpTake Op = iota + 1
	// OpPeek answers what OpTake would, spending nothing.
	OpPeek
	// OpPenalize records a violation of the item's client that another
	// node decided (it answered a known-denied key itself); it has no zones
	// and gets no answer.
	OpPenalize
)

// TakeItem is one request's zones, sent to the owner of their keys. The
// transport carries many in one frame.
type TakeItem struct {
	// Seq numbers the item among those of its caller's run, so that a
	// caller that gave up on it can name it in a Cancel.
	Seq    uint64
	Op     Op
	Client limiter.Key // the client whose reputation the owner keeps, or 0
	Reqs   []limiter.Request
}

// Outcome says what the node asked did with a take item.
type Outcome uint8

const (
	// Decided: the owner counted the item; Allowed, Score and Results hold
	// its decision.
	Decided Outcome = iota + 1
	// MovedTo: another node counts these keys now; Owner names it.
	MovedTo
	// NotYetMine: this node owns the keys but cannot count them yet (their
	// counts are still on their way to it, or it may have been declared
	// dead); the caller decides by its fallback. It is not a denial.
	NotYetMine
)

// ItemReply is the answer to a TakeItem.
type ItemReply struct {
	Outcome Outcome
	Allowed bool
	Score   float64          // the client's reputation after the decision
	Owner   string           // for MovedTo
	Results []limiter.Result // for Decided, one per zone
}

// Mode says how a Transfer's receiver applies it.
type Mode uint8

const (
	// ModeAdd carries counts the receiver adds to its own: a hand-off, a
	// pull, what a node admitted in fallback.
	ModeAdd Mode = iota + 1
	// ModeNewer carries copies that may be older than the receiver's own
	// counts of the same admissions (what a node held before it was
	// declared dead, a transfer whose receiver died before it acknowledged
	// it): the receiver keeps the newer, never the sum.
	ModeNewer
	// ModeReplica carries an owner's current counters to the node that
	// takes its keys over if it dies (their successor), which keeps them
	// apart, the newer replacing the older.
	ModeReplica
	// ModeRefund gives back units the receiver granted to requests that
	// another zone of the same request then denied.
	ModeRefund
	// ModeCancel names a take item its sender gave up on (and decided by
	// fallback): if the receiver admitted it, it gives the units back; if
	// it has not seen it yet, it never will count it.
	ModeCancel
	// ModeCopy carries a copy, possibly older, of a run's counters of keys
	// (a snapshot read back by a later run of its node). Naming the run
	// (CountersOf), it is weighed where its keys are counted like any
	// counter naming its run: counted once against what the receiver holds
	// of that run (a replica of it, that run's counter come another way)
	// and of the runs it holds counts of (Holds), and added to other
	// counts (what others admitted in fallback meanwhile); a replica of
	// the run that the receiver keeps, not yet counted, takes the newer of
	// the two instead, and is not stale for it. Naming none (a snapshot of
	// an earlier format), it may include additions the receiver also got
	// another way, so it never adds; it only raises the receiver's count,
	// once that count is settled, where it shows more.
	ModeCopy
	// ModeEvicted carries the counters of a node declared dead, sent as it
	// stops counting to the node that kept their replicas: if the
	// receiver's counter of a key holds a replica's counts (it started the
	// key from it), it adds what the counter holds beyond it; if not (the
	// key's counter went on elsewhere, or its takeover had not completed
	// when the sender came back), it drops the replica and passes the
	// counter on naming its run, to be weighed where the key is counted.
	ModeEvicted
	// ModeCharge spends the units of Reqs once more at the receiver: a
	// request's cost settled after it was served (see Core.Settle).
	ModeCharge
)

var modeNames = [...]string{ModeAdd: "add", ModeNewer: "newer", ModeReplica: "replica", ModeRefund: "refund", ModeCancel: "cancel", ModeCopy: "copy", ModeEvicted: "evicted", ModeCharge: "charge"}

// carriesCounts reports whether transfers of mode m carry counts that the
// receiver counts as their owner.
func (m Mode) carriesCounts() bool {
	switch m {
	case ModeAdd, ModeNewer, ModeCopy, ModeEvicted:
		return true
	}
	return false
}

// String names the mode, for logs.
func (m Mode) String() string {
	if int(m) < len(modeNames) && modeNames[m] != "" {
		return modeNames[m]
	}
	return "mode?"
}

// Transfer moves counts from its sender to its receiver. Its sender keeps
// it, and counts none of its keys as its own, until the receiver
// acknowledges it; it sends it again, with the same number, until then. The
// receiver applies each number once.
type Transfer struct {
	// Seq numbers the transfer among those of its sender's run.
	Seq uint64
	// Floor: every transfer of the sender to this receiver numbered below
	// Floor is settled (acknowledged, or given up on because the receiver
	// refused it), so the receiver need not remember them.
	Floor uint64
	// To is the incarnation of the receiver it is meant for: another run
	// of the same name refuses it.
	To uint64
	// Epoch is the sender's join epoch when it made the transfer: a
	// receiver that took the sender's keys over, as of that epoch, refuses
	// it (see Pong.Dead).
	Epoch  uint64
	Mode   Mode
	States []limiter.State   // ModeAdd, ModeNewer, ModeReplica, ModeCopy, ModeEvicted
	Reqs   []limiter.Request // ModeRefund, ModeCancel: the units to give back; ModeCharge: to spend
	// At (ModeRefund, ModeCharge) is when the units given back were
	// counted, or the units charged were charged, in Unix ns: they come
	// out of (are spent in) that instant's window, however late they
	// arrive. Zero (a refund from a peer that sends none): when applied.
	At   int64
	Take uint64 // ModeCancel: the Seq of the take item given up on
	// Caller (ModeCancel) is the run that gave the take item up, when not
	// the sender: a cancel carried on by the node that run's fallback
	// count went to (see Cancel.To).
	Caller Peer
	// Was and WasTo: this transfer carries counts of the sender's transfer
	// Was to WasTo, which died before it acknowledged it. The receiver,
	// which took WasTo's keys over, skips it if WasTo applied it and
	// replicated that (see Applied). A cancel naming them was meant for
	// WasTo, which left before it got it: the receiver, where WasTo's
	// counters went, applies it as WasTo would have, by what WasTo said
	// it admitted (Taken). A cancel naming its sender as WasTo is one the
	// sender, leaving, applied itself to an item it admitted: the receiver
	// gives the units back, and no list of the sender's items names the
	// item from then on.
	Was   uint64
	WasTo Peer
	// WasFrom (ModeAdd, ModeRefund) is the run that sent transfer Was to
	// WasTo, when not the sender: counts sent again in place of a transfer
	// are one count with the transfer's, wherever they go. A node that
	// passes them on (it did not take WasTo over, or the keys are counted
	// elsewhere), at once or after they waited for their keys to settle,
	// names the transfer still, and WasTo, if it applied that transfer,
	// skips them. Passed on as bare additions, they were added again there.
	// Units given back sent again are passed on so, at once, by a node that
	// neither counts nor owns their keys (see Core.passGivenBackAgain):
	// passed on as a bare give-back, they came off WasTo's counter twice.
	WasFrom Peer
	// Earlier (with Was, bare additions sent again) lists the transfers
	// that transfer Was itself carried again, first sent first: counts
	// sent again in place of a transfer that carried them again are one
	// count with every transfer of the line, wherever they go. A run
	// named To in it that applied its transfer skips them, as WasTo
	// does for Was. Naming the last transfer alone, counts sent again
	// twice came to the run that applied the first, and were added twice.
	Earlier []Replaced
	// Own (ModeAdd): these are the sender's own counters of the keys,
	// handed over; a replica of them the receiver keeps for the sender is
	// stale from now on. They are the run's last word on them (as are its
	// counters sent as it stops counting, ModeEvicted): a counter comes
	// down as well as up (units given back), so where the keys are
	// counted (by the receiver, or by a node it passes them on to, see
	// Last), what an earlier copy of them counted there (a replica sent
	// on by a node that took the run for dead) held beyond them comes off,
	// and a later copy adds nothing.
	Own bool
	// CountersOf (ModeAdd, ModeCopy): these are that run's own counters,
	// handed over by it (Own), kept by it and read back by a later run of
	// its node (ModeCopy), or kept as its replicas by its successor and
	// sent on once it died, and passed on by the nodes they reached on the
	// way. A replica of the run's counter is a copy of the same
	// counts: where both arrive, the later adds only what it holds beyond
	// the earlier, unless one is the run's last word on the counter (Own,
	// Last).
	CountersOf Peer
	// Holds (ModeAdd, ModeNewer, ModeCopy, ModeReplica, ModeEvicted): the
	// counters carried hold other runs' counts, each run's up to its State
	// (a replica of its counter the sender started the key from, or its
	// counter handed over to the sender, or the counts such a counter
	// held). Where the counters are counted, the receiver keeps that
	// record with them: a copy of the same run's counter that arrives too
	// adds only what it holds beyond, and counters that are added add only
	// what the receiver does not hold of the run already. A replica keeps
	// it for the keys it starts from the replica.
	Holds []Held
	// ReplicaOf (ModeNewer): these are replicas of that dead run's
	// counters, which the receiver starts the keys from: if the run comes
	// back (ModeEvicted), the receiver knows the cluster holds them.
	ReplicaOf Peer
	// Evicted (ModeEvicted) is the run declared dead whose counters these
	// are: the sender, or the node it forwards them for.
	Evicted Peer
	// Applied (ModeReplica) lists the transfers the owner applied since its
	// last replica to this successor: if the owner dies, the successor
	// knows which of them its replicas hold already. With ModeCopy naming
	// its run (a snapshot read back), it lists the transfers of what other
	// nodes admitted that the run had applied to the counters it kept, and
	// whose senders may not have had them acknowledged: the receiver skips
	// a transfer sent to it later in place of one of them (Was, WasTo), and
	// takes the counts of one it added before out of the copy, so that the
	// counts count once whichever arrives first. With ModeEvicted, it lists
	// the same of the transfers the evicted run applied to the counters
	// carried, weighed the same way. With ModeAdd carrying counters (handed
	// over, passed on), it lists, each naming the run that applied it (By),
	// the transfers the runs whose counts they hold (the sender, the run
	// named, the runs of Holds) applied, and whose senders may not have had
	// them acknowledged: a transfer sent later in place of one of them
	// (Was, WasTo) is skipped by the receiver, and by every node the
	// counters go on to, which lists them again. Without the record, the
	// counts a leaving run applied came again to wherever its counter went,
	// and were added a second time. With ModeAdd carrying bare additions,
	// it lists the same of the transfers whose counts they hold that did
	// not join the counters of the runs that applied them at once (kept in
	// fallback for want of a majority, passed on): the record goes with
	// the counts, and with the counters they join (see keyApplied).
	Applied []Applied
	// Cancels (ModeAdd, what the sender admitted in fallback) repeats the
	// cancels the sender made for take items of the keys of States and
	// has not had acknowledged: the requests those items asked for were
	// decided by fallback, and may be counted in States. The receiver
	// applies those of items sent to it first, as it applies a ModeCancel
	// (once per item), so the counts never arrive without them: a sender
	// that crashes while a cancel is on its way leaves the receiver holding
	// the item's admission alone, or the cancel and the fallback count.
	// Those of items sent to another run (Cancel.To: an owner the sender
	// took for dead, whose keys it counts elsewhere now) it sends on to
	// that run, naming the sender as their caller (Transfer.Caller): the
	// counts went elsewhere, and the item's admission is with that run,
	// which may be alive across a split and count the keys again.
	Cancels []Cancel
	// Taken (ModeAdd, a leaving node's own counters handed over, and the
	// same counters passed on) lists the take items the leaving run
	// admitted whose callers may still cancel them: a cancel of one that
	// reaches the node counting the keys after the run is gone (naming it
	// as WasTo) gives the item's units back there, as the run would have.
	// Any later hand-off of those keys' counters lists them again, naming
	// the run (Taken.By): the admissions go where the counters go. Any
	// hand-off or pass-on of counters names too, for their keys, the
	// cancels for such runs that wait at the sender for a list naming
	// their items (Taken.Waiting): they go where the counts go.
	Taken []Taken
	// Resent (ModeAdd, ModeEvicted carrying counters, ModeReplica) names
	// counts the counters carried hold that were sent again in place of
	// transfers to runs taken for dead, which may have applied them (see
	// Was): counts that joined a counter once their key settled, or at
	// once. The record goes with the counter wherever it goes, and with
	// its replicas. A run named in it
	// that applied its transfer takes the counts out of the counter, as
	// does a node that knows it did (its replicas, or its counter, came
	// there); elsewhere the record stays with the counts, and a counter of
	// that run that meets them comes in less them (see noteResent).
	// Without it, the counts joined the counter naming nothing, and where
	// it met the counter of the run that had applied the transfer they
	// were added twice. It names too the units the counters lack that
	// were given back again in place of give-backs to runs taken for dead
	// (Resent.Given): a counter of such a run that comes saying it
	// applied one lacks them as well, and they are put back once where it
	// meets the record (see evictedApplied). Left at the node the units
	// came off, the record met no such counter where the key went, and
	// the key counted them once too few.
	Resent []Resent
	// Last (ModeAdd, counters naming their run, CountersOf): they are
	// that run's last word on them, as a counter it handed over itself
	// (Own) is, or its counters sent as it stopped counting, declared
	// dead (ModeEvicted): set where such counters are passed on by a node
	// that does not count their keys, or placed anew. Where they are
	// counted they are weighed as the run's own hand-over is: what an
	// earlier copy of them counted there held beyond them comes off, and
	// a later copy adds nothing. Passed on as the run's counters like
	// any, they were weighed as a copy, the larger standing, and a unit
	// the run gave back before it let them go counted again.
	//
	// With ModeCopy naming its run: counters the run sent as it stopped
	// counting, meant for an earlier run of the sender that took its
	// keys over, sent on as copies because the sender restored their
	// keys from a snapshot too old to name its run, whose copy went to
	// the keys' owners ahead of them and may hold the run's counts with
	// no record of them (see Core.placeEvicted). Where the key's counter
	// holds a record of the run's counter (of the generation Holds
	// names), they are weighed against it as the run's last word, and
	// add what they hold beyond; elsewhere they are copies, the newer
	// standing. Sent as copies naming no run, they were taken for copies
	// where the record was held too, and what the run counted beyond its
	// last replica was lost.
	Last bool
}

// Resent is a record a counter carries of a transfer sent again in place
// of transfers to runs taken for dead (Marks, first sent first: Earlier,
// then Was): counts the counter holds, one count with each of theirs
// (State), or, where the transfer gave units back (Given, State unset),
// units it lacks, as the counter of a run that applied one of those
// give-backs does.
type Resent struct {
	Marks []Replaced
	State limiter.State
	Given *GivenAgain
}

// GivenAgain is units given back again in place of a give-back to a run
// taken for dead: the request, and the instant it was counted at (Unix
// ns).
type GivenAgain struct {
	Req limiter.Request
	At  int64
}

// key returns the key of the counter x is a record of.
func (x Resent) key() limiter.Key {
	if x.Given != nil {
		return x.Given.Req.Key
	}
	return x.State.Key
}

// expires returns when x is of no more use (Unix ns): when the counts'
// window is over, or, for units given back, when the window they were
// counted in and the one after it are.
func (x Resent) expires() int64 {
	if x.Given != nil {
		return x.Given.At + 2*int64(x.Given.Req.Limit.Window)
	}
	return x.State.Expires
}

// same reports whether x and y are the same record: of the same key and
// transfers, and, for units given back, of the same instant.
func (x Resent) same(y Resent) bool {
	if x.key() != y.key() || (x.Given == nil) != (y.Given == nil) || !slices.Equal(x.Marks, y.Marks) {
		return false
	}
	return x.Given == nil || x.Given.At == y.Given.At
}

// givenAgain returns the records of reqs, units counted at the instant
// at and given back again in place of the give-backs marks, that the
// counters they came off carry.
func givenAgain(marks []Replaced, reqs []limiter.Request, at int64) []Resent {
	var out []Resent
	for _, q := range reqs {
		if q.Limit.Algorithm != limiter.Concurrency {
			out = append(out, Resent{Marks: slices.Clone(marks), Given: &GivenAgain{Req: q, At: at}})
		}
	}
	return out
}

// resentOf returns, of list, the records of the keys of states.
func resentOf(list []Resent, states []limiter.State) []Resent {
	return ofKeysOf(list, states, Resent.key)
}

// ofKeysOf returns the items of list whose key is among the keys of
// states (nil if none).
func ofKeysOf[T any](list []T, states []limiter.State, key func(T) limiter.Key) []T {
	var out []T
	for _, x := range list {
		if heldIn(states, key(x)) {
			out = append(out, x)
		}
	}
	return out
}

// Taken lists take items of one caller run that a node admitted.
type Taken struct {
	Caller Peer
	Seqs   []uint64
	// By is the run that admitted the items, when not the run whose
	// counters the transfer carries: an earlier run that left, whose
	// counters, with this list, came to the sender before. The list goes
	// on with the counters that hold the items' admissions, wherever the
	// keys are counted next: a cancel meant for that run is sent to the
	// keys' owner, which gives the units back only by this list.
	By Peer
	// Waiting are the cancels of the caller's items meant for that run
	// that came to the sender before any list naming their items (see
	// Seqs), with the units the items asked for: they wait for the run's
	// counter, which may still be on its way. They go where the counts of
	// their keys go, and wait there, or give the units back there once a
	// list naming their item came with a counter of its keys. Left behind,
	// they waited where the keys were counted no more, and the run's
	// counter, reaching the keys' new owner, held the admission of an item
	// its caller had also decided by fallback.
	Waiting []Cancel
}

// Cancel names a take item its sender gave up on, and the units it asked
// for.
type Cancel struct {
	Take uint64
	Reqs []limiter.Request
	// At is when the item was sent (Unix ns), as near as its caller
	// knows the instant its owner counted it at: its units come out of
	// that instant's window. Zero: when applied.
	At int64
	// To is the run the item was sent to, when not the receiver of the
	// transfer that carries the cancel.
	To Peer
}

// countersOf returns the run whose own counters t carries, sent by sender:
// the sender's for its own, the run named for those passed on, or none.
func (t Transfer) countersOf(sender Peer) Peer {
	if t.Own {
		return sender
	}
	return t.CountersOf
}

// carriesCounter reports whether t carries a key's counter (a hand-off, a
// copy), not only counts others admitted in fallback.
func (t Transfer) carriesCounter() bool {
	return t.Mode.carriesCounts() && (t.Mode != ModeAdd || t.Own || t.CountersOf.Name != "")
}

// was returns the transfer whose counts t, from from, carries again (see
// Was, WasFrom).
func (t Transfer) was(from Peer) Applied {
	if t.WasFrom.Name != "" {
		return Applied{From: t.WasFrom, Seq: t.Was}
	}
	return Applied{From: from, Seq: t.Was}
}

// marks returns, for counts or units given back sent again (resent,
// givenBackAgain), every transfer whose counts t, from from, carries
// again: Earlier, then Was.
func (t Transfer) marks(from Peer) []Replaced {
	if !t.resent() && !t.givenBackAgain() {
		return nil
	}
	was := t.was(from)
	return append(slices.Clip(t.Earlier), Replaced{From: was.From, Seq: was.Seq, To: t.WasTo})
}

// markWith sets on t, as the transfers its counts carry again, marks
// but those naming self as their receiver (which applied its copy of
// the counts already, or does now): the last of them is Was.
func (t *Transfer) markWith(marks []Replaced, self Peer) {
	var rest []Replaced
	for _, m := range marks {
		if m.To != self {
			rest = append(rest, m)
		}
	}
	if len(rest) == 0 {
		return
	}
	last := rest[len(rest)-1]
	t.Was, t.WasFrom, t.WasTo = last.Seq, last.From, last.To
	t.Earlier = rest[: len(rest)-1 : len(rest)-1]
	if len(t.Earlier) == 0 {
		t.Earlier = nil
	}
}

// givenBackAgain reports whether t gives back units sent again in place of
// a give-back to a run that was taken for dead (see Was).
func (t Transfer) givenBackAgain() bool { return t.Was != 0 && t.Mode == ModeRefund }

// lastWord reports whether t carries counters that are their run's last
// word on them: handed over by the run itself (Own), or marked so (Last).
// Sent on in its place (its receiver gone), such a counter names its run
// and says so still (Last): sent on as a plain copy of the run's, an older
// copy met where its key is counted stood as the larger, and a unit the
// run gave back counted again
// (TestAHandedOverCounterSentOnByItsRunLowersTheOlderCopyWhereTheKeyIsCounted).
func (t Transfer) lastWord() bool { return t.Last || t.Own && t.Mode == ModeAdd }

// resent reports whether t carries bare additions sent again in place of
// a transfer to a run that was taken for dead (see Was).
func (t Transfer) resent() bool {
	return t.Was != 0 && t.Mode == ModeAdd && !t.carriesCounter()
}

// namesRuns reports whether t carries counters weighed by the runs they
// name (placeHere): a counter passed on naming its run, one that names
// the other runs' counts it holds, or a copy read back that names its
// run.
func (t Transfer) namesRuns() bool {
	switch t.Mode {
	case ModeAdd:
		return !t.Own && t.CountersOf.Name != "" || len(t.Holds) > 0
	case ModeCopy:
		return t.CountersOf.Name != ""
	}
	return false
}

// Held says that a counter holds counts of a run: that run's counter of
// the key (State.Key) as it was when the counter took its counts in.
type Held struct {
	Run Peer
	// Gen numbers the run's counters of the key: a run that gave its
	// counter of a key away (handed over, pulled, sent as a node declared
	// dead) and counts the key again later counts it in a new counter,
	// numbered one more. Two counters of one run are different counts,
	// both added where they meet; two copies of one counter (the counter,
	// a replica of it) are the same counts, the newer standing. A run's
	// counter of a later generation names itself among the counts it
	// holds (Run its run, Gen its number, State itself as sent): the
	// counter that names no generation of its run is its first.
	Gen   uint32
	State limiter.State
	// Last: State is that counter as its run let it go, handed over or
	// sent as it stopped counting (declared dead): the run's last word on
	// it, which the record of it goes on saying wherever the counter
	// that holds it goes. A counter comes down as well as up (units given
	// back), and the run counts the key in a new counter (a generation
	// later) once it let this one go, so a copy of the counter holds
	// nothing beyond its last word: what a copy holds more was given back
	// since. Said only where the counter was let go, never lost on the
	// way: a record that lost it weighed an older copy as the newer, and
	// the unit given back counted again.
	Last bool
	// In, where set, is what the counter that carries the record holds of
	// State, less than State: units given back to that counter took it
	// below the copy it holds (the zero State, of no kind: it holds all
	// of State). The record
	// stays State, so a copy of the run's counter that comes later adds
	// nothing the counter gave back; but where that counter, or one that
	// went on from it, comes to a node holding the same record, the two
	// share no more of the run's counts than In: the rest is what the
	// counter admitted itself after the give-back, and is added
	// (TestACounterBelowTheCopyItHoldsAddsWhatItAdmittedBeyondItsReplica).
	In limiter.State
}

// newerHeld returns, of two records of one run's counter (run and
// generation) that a counter holds, the one that stands: the run's last
// word on it where one is (a copy holds nothing beyond it), else the
// newer, with what the counter that carries it holds of it (Held.In) as
// the newer says. Two last words of one counter are the same word.
func newerHeld(a, b Held) Held {
	switch {
	case a.Last && !b.Last:
		return a
	case b.Last && !a.Last:
		return b
	}
	newer := limiter.NewerState(a.State, b.State)
	switch {
	case sameCounts(newer, b.State):
		a.In = b.In
	case !sameCounts(newer, a.State):
		a.In = limiter.State{} // each newer in part: the counter may hold all of both
	}
	a.State = newer
	return a
}

// sameCounts reports whether two counters of a key count the same.
func sameCounts(x, y limiter.State) bool {
	return x.Kind == y.Kind && x.Stamp == y.Stamp && x.Expires == y.Expires && x.Cur == y.Cur && x.Prev == y.Prev
}

// genIn returns the generation of run's counter of k that holds, the
// counts held by a counter of run's (or by a copy of one), names: the
// latest it holds of run's; 0, the first, if none.
func genIn(holds []Held, k limiter.Key, run Peer) uint32 {
	var gen uint32
	for _, h := range holds {
		if h.Run == run && h.State.Key == k {
			gen = max(gen, h.Gen)
		}
	}
	return gen
}

// sortHolds sorts holds by key, run and generation.
func sortHolds(holds []Held) []Held {
	slices.SortFunc(holds, func(a, b Held) int {
		if c := cmpUint(uint64(a.State.Key), uint64(b.State.Key)); c != 0 {
			return c
		}
		if a.Run.Name != b.Run.Name {
			return strings.Compare(a.Run.Name, b.Run.Name)
		}
		if c := cmpUint(a.Run.Inc, b.Run.Inc); c != 0 {
			return c
		}
		return cmpUint(uint64(a.Gen), uint64(b.Gen))
	})
	return holds
}

// holdsOf returns, of holds, those of the keys of states.
func holdsOf(holds []Held, states []limiter.State) []Held {
	return ofKeysOf(holds, states, func(h Held) limiter.Key { return h.State.Key })
}

// Applied names a transfer a node applied: its sender's run and number.
type Applied struct {
	From Peer
	Seq  uint64
	// By is the run that applied it, when not the run the transfer that
	// lists it names (ModeAdd: a counter handed over or passed on lists
	// what the runs whose counts it holds applied to them).
	By Peer
}

// Replaced is a transfer whose counts were sent again in its place: the
// run that sent it, its number, and the run it went to.
type Replaced struct {
	From Peer
	Seq  uint64
	To   Peer
}

// Ack answers a Transfer.
type Ack struct {
	Seq uint64
	// Refused: the receiver did not apply it and never will (it is leaving,
	// or is another run of the node): the sender sends its counts
	// elsewhere.
	Refused bool
}

// Pull asks the node that may hold keys which moved to the asker for
// their counts: the asker owns them now.
type Pull struct {
	// To is the incarnation of the run asked: another run of the same name
	// (the node restarted) never held what that run did, and refuses it.
	To   uint64
	Keys []limiter.Key
}

// PullReply answers a Pull. Keys in neither list were held by nobody here:
// the asker counts them from nothing.
type PullReply struct {
	// Given holds the counts of the keys this node held, as transfers the
	// asker applies once and acknowledges.
	Given []Transfer
	// Moved lists keys this node gave to another node, where the asker
	// finds them.
	Moved []KeyOwner
	// Refused: this node counts the asker dead (it may send what it holds
	// elsewhere), or is not the run asked, so it gives it nothing now; the
	// asker asks again later, where its membership then says.
	Refused bool
	// Unreached are the keys whose counters are out of this node's reach
	// (see Unreached): the asker decides those it owns by fallback too.
	Unreached []Unreached
	// Sending lists keys whose counts this node sent to another node in
	// transfers not yet acknowledged: where they end up is not known yet
	// (the receiver may never apply them, and has nothing to give until
	// it does), so the asker neither counts them from what it holds nor
	// looks for them there, but asks this node again. Once the receiver
	// acknowledged them, this node names it (Moved).
	Sending []limiter.Key
	// Earlier lists keys this node holds no counter of (nothing, or only
	// what others admitted in fallback: additions, given here), where it
	// knew an earlier run of the asker as a member that did not leave:
	// that run crashed, and what it counted of them lives in its replicas,
	// which may be with nodes that have not heard of the asker yet (a node
	// that became the keys' successor while the run lay crashed, this one
	// among them, never got their counters afresh). "Nothing here", or
	// fallback units, say nothing of those: a joining asker counts the
	// keys only once every node its hand-off waits for has sealed (each
	// sent it what it keeps of the run first).
	Earlier []limiter.Key
}

// Unreached names keys that a node took over from dead members without a
// counter: those whose owner and successor, in the ring of Ring's runs,
// were both among Dead (or, from an owner declared dead itself, the keys
// whose counters it sent to a successor it took for dead: Dead names its
// own run and that successor's). One of those runs may come back with the counter;
// until one comes, or for Within from the reply, the node that owns such
// a key decides it by fallback, and a node it passes the key to through a
// hand-off does the same (see outOfReach).
type Unreached struct {
	Ring   []Peer
	Dead   []Peer
	Within time.Duration
}

// KeyOwner says which node holds a key.
type KeyOwner struct {
	Key   limiter.Key
	Owner string
}

// SealQuery asks a node whether it holds nothing more, under the ring
// named by its fingerprint, for the keys the asker owns: no transfer to the
// asker unacknowledged, no fallback count for its keys unsent.
type SealQuery struct {
	Ring string
	// To is the incarnation of the run asked: another run of the same name
	// (the node restarted, at the same address) never held what that run
	// did, and does not answer for it. Taken for the asked run's seal, the
	// answer of a new run would complete the leave of a run that crashed
	// while it left, and its replica would be dropped.
	To uint64
}

// SealReply answers a SealQuery.
type SealReply struct {
	Sealed bool
	// Unreached are the keys whose counters are out of this node's reach,
	// as in PullReply.
	Unreached []Unreached
	// Moved lists keys the asker owns whose counters this node handed to
	// another node (by a ring the asker's hand-off did not follow): the
	// asker pulls them there before it counts them.
	Moved []KeyOwner
}

// Ping asks whether the node is there, and renews the asker's lease on the
// keys the node would take over if the asker died.
type Ping struct {
	// Epoch is the asker's join epoch: it grows every time the asker joins
	// again after it was declared dead.
	Epoch uint64
	// Counting: the asker is a member of its ring under Epoch. A node
	// declared dead and joining again is not: the run the receiver took
	// over counted under an earlier epoch.
	Counting bool
}

// Pong answers a Ping.
type Pong struct {
	// Dead: this node has declared the asker dead, and may have started
	// its keys from their replicas: the asker must not count them.
	Dead bool
	// Owed are the transfers this node has sent the asker and not seen
	// acknowledged, that carry what it admitted for the asker's keys in
	// fallback (its fallback counts, and the counts it passes on), refunds
	// and cancels: a node that stood still waits for them before it counts
	// its keys (see standstill).
	Owed []uint64
	// Recovering: this node's calls do not reach the asker yet, and what
	// it holds for the asker's keys goes to it once they do: a node that
	// stood still asks again.
	Recovering bool
	// Run is the answering node's incarnation. A ping goes to a node's
	// address, where a later run may answer in place of the one the asker
	// pinged: that is no answer of the pinged run, which is gone.
	Run uint64
}

// ScoreQuery asks the owner of a client's reputation for its score.
type ScoreQuery struct{ Client limiter.Key }

// ScoreReply answers a ScoreQuery.
type ScoreReply struct{ Score float64 }

func (TakeItem) message()   {}
func (ItemReply) message()  {}
func (Transfer) message()   {}
func (Ack) message()        {}
func (Pull) message()       {}
func (PullReply) message()  {}
func (SealQuery) message()  {}
func (SealReply) message()  {}
func (Ping) message()       {}
func (Pong) message()       {}
func (ScoreQuery) message() {}
func (ScoreReply) message() {}

// Outgoing is a message a core asks its driver to send. The driver reports
// exactly one outcome of each that expects a reply (Transfer, Pull,
// SealQuery, Ping): the reply (Core.Answered) or its failure (Core.Failed).
// An Ack or a TakeItem with OpPenalize expects none.
type Outgoing struct {
	ID  uint64
	To  Peer
	Msg Message
}

// expectsReply reports whether the driver reports back on o.
func (o Outgoing) expectsReply() bool {
	switch o.Msg.(type) {
	case Ack, TakeItem:
		return false
	}
	return true
}
