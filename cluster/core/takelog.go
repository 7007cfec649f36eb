package core

import (
	"slices"
	"strings"
	"sync"

	"github.com/tollgate/tollgate/limiter"
)

// takeLogSize is how many of a caller's most recent take items an owner
// remembers the outcome of: enough for every item a caller can still be
// waiting on (it gives up within ten peer timeouts) at hundreds of
// thousands of items a second. Two bits an item: 64 KiB per caller.
const takeLogSize = 1 << 18

// Item outcomes in a take log.
const (
	itemUnseen uint64 = iota
	itemAdmitted
	itemDenied
	itemCancelled
)

// takeLog remembers, per caller run, what this node decided for the take
// items it served, so that a caller that gave up on an item (and decided
// it by fallback) can cancel it: an admitted item gives its units back, an
// item not seen yet is never counted. A takeLog is safe for concurrent use.
type takeLog struct {
	mu      sync.Mutex
	callers map[Peer]*callerLog
	// adopted holds, by the leaving run that admitted them and their
	// caller run, the take items whose admissions came here in that run's
	// counters (Transfer.Taken): a cancel of one, meant for the run and
	// sent here once it left, gives the units back here.
	adopted map[adoptedOf]*adoptedItems
}

// adoptedItems are the lists of the items one run admitted for one
// caller that came here, and when the last came (mono). cancelled are
// the items whose cancels came here for the run and whose units were
// given back here, once: a list of its items that comes later (another
// copy, or one still on its way when the run gave an item's units back
// itself) names them no more. waiting are the cancels that came before
// any list named their item, each with the units its item asked for and
// the instant the item was sent (they come out of its window): the
// run's counter, which holds the admission, may still be on its way
// (held up across a split, or passed on by another node), and a list
// that comes with a counter of one of the item's keys gives the units
// back then. A hand-off or pass-on of the counts of their keys takes the
// waiting cancels on (Taken.Waiting): the run's counter goes where the
// keys are counted, and they wait there.
type adoptedItems struct {
	lists     []adoptedList
	cancelled map[uint64]struct{}
	waiting   map[uint64]Cancel
	at        int64
}

// adoptedList is one list of items (Transfer.Taken) and the keys whose
// counters came with it. A list goes with every part of a hand-off, but
// holds the admissions of an item only where a counter of one of the
// item's keys came with it: a copy that came with other keys' counters
// gives nothing back.
type adoptedList struct {
	seqs map[uint64]struct{}
	keys map[limiter.Key]struct{}
}

// covers reports whether a counter of one of keys came with the list.
func (x adoptedList) covers(keys []limiter.Key) bool {
	return slices.ContainsFunc(keys, func(k limiter.Key) bool { _, ok := x.keys[k]; return ok })
}

// adoptedOf names the items one run admitted for one caller run.
type adoptedOf struct{ by, caller Peer }

// callerLog is one caller's recent items: a ring of two-bit outcomes
// indexed by item number, holding the numbers above hi − takeLogSize.
type callerLog struct {
	mu   sync.Mutex
	hi   uint64 // the highest item number recorded
	bits []uint64
}

func newTakeLog() *takeLog {
	return &takeLog{callers: make(map[Peer]*callerLog), adopted: make(map[adoptedOf]*adoptedItems)}
}

func (l *takeLog) caller(p Peer) *callerLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.callers[p]
	if c == nil {
		c = &callerLog{bits: make([]uint64, takeLogSize/32)}
		l.callers[p] = c
		// Older runs of the same node will not call again.
		for q := range l.callers {
			if q.Name == p.Name && q.Inc < p.Inc {
				delete(l.callers, q)
			}
		}
		for a := range l.adopted {
			if a.caller.Name == p.Name && a.caller.Inc < p.Inc {
				delete(l.adopted, a)
			}
		}
	}
	return c
}

func (c *callerLog) get(seq uint64) uint64 {
	i := seq % takeLogSize
	return c.bits[i/32] >> (2 * (i % 32)) & 3
}

func (c *callerLog) set(seq, v uint64) {
	if seq > c.hi {
		// Clear the slots between the last number and this one: they
		// belonged to numbers takeLogSize below.
		from := c.hi + 1
		if seq-c.hi > takeLogSize {
			from = seq - takeLogSize + 1
		}
		for s := from; s < seq; s++ {
			c.put(s, itemUnseen)
		}
		c.hi = seq
	}
	c.put(seq, v)
}

func (c *callerLog) put(seq, v uint64) {
	i := seq % takeLogSize
	shift := 2 * (i % 32)
	c.bits[i/32] = c.bits[i/32]&^(3<<shift) | v<<shift
}

// forgotten reports whether seq is too old to be known.
func (c *callerLog) forgotten(seq uint64) bool { return seq+takeLogSize <= c.hi }

// outcome returns what was recorded for seq: nothing for a number above
// the highest recorded, whose slot still holds the item takeLogSize below
// it until set clears it.
func (c *callerLog) outcome(seq uint64) uint64 {
	if seq > c.hi {
		return itemUnseen
	}
	return c.get(seq)
}

// served says how decide went.
type served uint8

const (
	servedNow       served = iota // take ran
	servedBefore                  // the item was decided before (it came twice): take did not run again
	servedCancelled               // its caller gave up on it: take did not run
)

// decide runs take for item seq of caller, unless the caller cancelled it
// or it ran before, and records what it decided. take runs under the
// caller's log lock, so a cancel is either before it (take does not run)
// or after it (and sees its outcome). For an item decided before, it
// returns whether that admitted it.
func (l *takeLog) decide(caller Peer, seq uint64, take func() bool) (served, bool) {
	c := l.caller(caller)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.forgotten(seq) {
		switch c.outcome(seq) {
		case itemCancelled:
			return servedCancelled, false
		case itemAdmitted:
			return servedBefore, true
		case itemDenied:
			return servedBefore, false
		}
	}
	outcome := itemDenied
	ok := take()
	if ok {
		outcome = itemAdmitted
	}
	c.set(seq, outcome)
	return servedNow, ok
}

// undecided records that item seq of caller was answered without a
// decision (NotYetMine, MovedTo): its caller decides it elsewhere, so no
// later copy of it is counted here (see Core.Serve). An item decided
// before keeps its decision: undecided reports servedBefore and whether it
// was admitted, and the copy is answered with that decision; else
// servedCancelled.
func (l *takeLog) undecided(caller Peer, seq uint64) (served, bool) {
	c := l.caller(caller)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.forgotten(seq) {
		return servedCancelled, false
	}
	switch c.outcome(seq) {
	case itemAdmitted:
		return servedBefore, true
	case itemDenied:
		return servedBefore, false
	}
	c.set(seq, itemCancelled)
	return servedCancelled, false
}

// cancel records that the caller gave up on item seq and reports whether
// its units must be given back: it was admitted, or it is too old to tell
// (most items are admitted; a refund too many lets one request more pass,
// where one too few would refuse one).
func (l *takeLog) cancel(caller Peer, seq uint64) (refund bool) {
	c := l.caller(caller)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.forgotten(seq) {
		return true
	}
	prev := c.outcome(seq)
	c.set(seq, itemCancelled)
	return prev == itemAdmitted
}

// TakenMaxSeqs bounds the items of one caller a hand-off names as
// admitted (Transfer.Taken): the latest ones, those whose cancels may
// still be to come.
const TakenMaxSeqs = 8192

// admitted returns the numbers of caller's items this node admitted that
// it still knows of (not cancelled since), in order: the latest
// TakenMaxSeqs.
func (l *takeLog) admitted(caller Peer) []uint64 {
	l.mu.Lock()
	c := l.callers[caller]
	l.mu.Unlock()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []uint64
	for s := c.hi; s > 0 && !c.forgotten(s) && len(out) < TakenMaxSeqs; s-- {
		if c.get(s) == itemAdmitted {
			out = append(out, s)
		}
	}
	slices.Reverse(out)
	return out
}

// adopt records, at m, that the counters of keys, of the run by, which
// admitted the items of taken (of the run an entry names, if it names
// one: see Taken.By), are here (or passed on from here). It returns the
// cancels of the items that came here before (waiting) and whose
// admissions these counters hold: their units are to be given back now,
// once, from the windows their items were sent in.
func (l *takeLog) adopt(m int64, by Peer, taken []Taken, keys []limiter.Key) (refund []Cancel) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range taken {
		a := adoptedOf{by: by, caller: t.Caller}
		if t.By.Name != "" {
			a.by = t.By
		}
		items := l.adoptedLocked(a, m)
		x := adoptedList{seqs: make(map[uint64]struct{}, len(t.Seqs)), keys: make(map[limiter.Key]struct{}, len(keys))}
		for _, k := range keys {
			x.keys[k] = struct{}{}
		}
		for _, s := range t.Seqs {
			if _, gone := items.cancelled[s]; gone {
				continue
			}
			if w, ok := items.waiting[s]; ok {
				// The item's cancel came first; it goes on waiting if
				// this list came with no counter of the item's keys.
				if x.covers(reqKeys(w.Reqs)) {
					refund = append(refund, w)
					delete(items.waiting, s)
					items.cancelled[s] = struct{}{}
				}
				continue
			}
			x.seqs[s] = struct{}{}
		}
		if len(x.seqs) > 0 {
			items.lists = append(items.lists, x)
		}
		// Cancels that waited where the counts came from wait here, or
		// give their units back by a list that came here.
		for _, w := range t.Waiting {
			if items.cancelLocked(w, false) {
				refund = append(refund, w)
			}
		}
	}
	return refund
}

// wentOn forgets the waiting cancels of taken (Taken.Waiting), which a
// transfer of the counts of their keys took on: they wait where the
// counts went.
func (l *takeLog) wentOn(taken []Taken) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range taken {
		if items := l.adopted[adoptedOf{by: t.By, caller: t.Caller}]; items != nil {
			for _, w := range t.Waiting {
				delete(items.waiting, w.Take)
			}
		}
	}
}

// adoptedTaken returns the items of other runs this node adopted and
// still knows of, each list naming the run that admitted them (Taken.By),
// for a hand-off of this node's counters of keys: those lists that came
// with counters of one of keys. The counters hold those admissions, and a
// cancel of one goes to where the keys are counted. Each names too the
// cancels for its run that wait here for a list, of items of one of keys
// (Taken.Waiting): they go with the keys' counts.
func (l *takeLog) adoptedTaken(keys []limiter.Key) []Taken {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Taken
	for a, items := range l.adopted {
		var seqs []uint64
		for _, x := range items.lists {
			if !x.covers(keys) {
				continue
			}
			for s := range x.seqs {
				seqs = append(seqs, s)
			}
		}
		var waiting []Cancel
		for _, w := range items.waiting {
			if slices.ContainsFunc(reqKeys(w.Reqs), func(k limiter.Key) bool { return slices.Contains(keys, k) }) {
				waiting = append(waiting, w)
			}
		}
		if len(seqs) == 0 && len(waiting) == 0 {
			continue
		}
		slices.Sort(seqs)
		slices.SortFunc(waiting, func(a, b Cancel) int { return cmpUint(a.Take, b.Take) })
		out = append(out, Taken{Caller: a.caller, Seqs: slices.Compact(seqs), By: a.by, Waiting: waiting})
	}
	slices.SortFunc(out, func(a, b Taken) int {
		if c := strings.Compare(a.By.Name, b.By.Name); c != 0 {
			return c
		}
		if c := cmpUint(a.By.Inc, b.By.Inc); c != 0 {
			return c
		}
		if c := strings.Compare(a.Caller.Name, b.Caller.Name); c != 0 {
			return c
		}
		return cmpUint(a.Caller.Inc, b.Caller.Inc)
	})
	return out
}

// adoptedLocked returns the items of a, made if there are none, as of m.
// l.mu is held.
func (l *takeLog) adoptedLocked(a adoptedOf, m int64) *adoptedItems {
	items := l.adopted[a]
	if items == nil {
		items = &adoptedItems{cancelled: make(map[uint64]struct{}), waiting: make(map[uint64]Cancel)}
		l.adopted[a] = items
	}
	items.at = m
	return items
}

// cancelAdopted applies, at m, the cancel x of an item of caller's,
// meant for the run by, whose counters came here or are on
// their way: it reports whether its units are to be given back here now,
// once. They are if a list of by's items that came with a counter of one
// of the item's keys names it, or if by itself sends the cancel, leaving,
// and admitted the item (admitted), unless they were given back here
// before: copies of one cancel come two ways (the caller's, sent here in
// by's stead, and by's own, once it applied it) and give back one item.
// No list names the item from then on, nor one that comes later. If none
// does yet, and by did not say it admitted the item, the cancel waits
// for one: by's counter, which holds the admission, may come later (see
// adopt).
func (l *takeLog) cancelAdopted(m int64, by, caller Peer, x Cancel, admitted bool) (refund bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.adoptedLocked(adoptedOf{by: by, caller: caller}, m).cancelLocked(x, admitted)
}

// cancelLocked is cancelAdopted for the items of one run and caller. The
// take log's lock is held.
func (items *adoptedItems) cancelLocked(x Cancel, admitted bool) (refund bool) {
	seq := x.Take
	if _, done := items.cancelled[seq]; done {
		return false
	}
	keys := reqKeys(x.Reqs)
	refund = admitted
	for _, x := range items.lists {
		if _, ok := x.seqs[seq]; ok {
			refund = refund || x.covers(keys)
			delete(x.seqs, seq)
		}
	}
	if !refund {
		x.To = Peer{}
		items.waiting[seq] = x
		return false
	}
	items.cancelled[seq] = struct{}{}
	delete(items.waiting, seq)
	return true
}

// forgetAdopted drops the items of runs whose counters came before
// cutoff (mono): their callers' cancels came long before.
func (l *takeLog) forgetAdopted(cutoff int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for a, items := range l.adopted {
		if items.at < cutoff {
			delete(l.adopted, a)
		}
	}
}

// reqKeys returns the keys of reqs.
func reqKeys(reqs []limiter.Request) []limiter.Key {
	out := make([]limiter.Key, len(reqs))
	for i, r := range reqs {
		out[i] = r.Key
	}
	return out
}
