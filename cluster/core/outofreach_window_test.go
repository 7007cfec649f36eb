package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// As in TestAUnitGivenBackForAKeyOutOfReachWaitsForItsCounter, a key's
// owner n0 crashes and its successor n1 is cut off; the three others take
// both over, and at the key's new owner n2 the key is out of reach,
// decided by fallback. n3 gives back one unit (another zone of its
// request denied it), counted in the key's first window: it waits at n2
// for the key's counter. No counter comes; the key's window rolls over,
// the key is decided by fallback in the second window, and then the
// hand-off window passes: the key counts from what n2 has, and the unit
// that waited is given back. docs/cluster.md: a refund "carries the
// instant its units were counted, so it comes out of that window". It
// comes out of the second window instead (refund sends no instant, and
// the hold keeps none): the second window is lent a unit, and admits 11
// of 10.
func TestAUnitGivenBackForAKeyOutOfReachComesOutOfItsOwnWindow(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	const quota = 10
	const win = 5 * time.Second
	k := h.keyOwnedBy("n0", "n1")
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: quota, Window: win}
	unit := []limiter.Request{{Key: k, Zone: 1, Limit: lim}}
	take := func(node string) bool {
		tk := &handTake{node: node, res: make([]limiter.Result, 1)}
		tk.reqs = []limiter.Request{{Key: k, Zone: 1, Limit: lim}}
		d, done := h.cores[node].Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res)
		if done {
			return d.Allowed
		}
		h.drive(tk)
		h.finish(tk)
		return tk.d.Allowed
	}
	// Start at the beginning of a window.
	h.advance(h.now.Truncate(win).Add(win).Sub(h.now) + 10*time.Millisecond)
	w0 := 0
	for range 6 {
		if take("n3") {
			w0++
		}
	}
	h.advance(20 * time.Millisecond) // replicated to n1
	if st, _, ok := h.cores["n1"].replicas.get(k); w0 != 6 || !ok || windowCount([]limiter.State{st}) != 6 {
		t.Fatalf("admitted %d, replica at n1 %v; want 6 by the owner and a replica of 6", w0, ok)
	}

	// n0 crashes; n1 is cut off. The others take both over.
	h.down["n0"], h.down["n1"] = true, true
	h.advance(100 * time.Millisecond)
	for _, name := range []string{"n2", "n3", "n4"} {
		h.setMembership(name, []string{"n0", "n1"})
	}
	h.advance(time.Second, "n2", "n3", "n4")
	taker, _ := h.cores["n2"].Ring().Owner(k.Route())
	if !h.cores[taker.Name].lacksCounter(k, h.cores[taker.Name].mono(h.now)) {
		t.Fatalf("the key is not out of reach at its new owner %s", taker.Name)
	}

	// n3 gives one of its units (counted in this window) back.
	h.cores["n3"].refund(h.now, unit)
	h.advance(200*time.Millisecond, "n2", "n3", "n4")

	// The next window: the key, still out of reach, is decided by fallback.
	h.advance(h.now.Truncate(win).Add(win).Sub(h.now)+10*time.Millisecond, "n2", "n3", "n4")
	second := h.now.Truncate(win)
	if !h.cores[taker.Name].lacksCounter(k, h.cores[taker.Name].mono(h.now)) {
		t.Fatalf("the key is no longer out of reach at %s in the second window", taker.Name)
	}
	w1 := 0
	for range 3 {
		for _, node := range []string{"n3", taker.Name} {
			if take(node) {
				w1++
			}
		}
	}
	// The hand-off window passes: the key counts from what it has.
	h.advance(2*time.Second, "n2", "n3", "n4")
	if h.cores[taker.Name].lacksCounter(k, h.cores[taker.Name].mono(h.now)) {
		t.Fatalf("the key is still out of reach at %s", taker.Name)
	}
	if h.now.Truncate(win) != second {
		t.Fatalf("the test left the second window")
	}
	if got := h.count(taker.Name, k); got != int64(w1) {
		t.Errorf("in the second window %d were admitted, and the key's owner %s holds %d of it: the unit given back in the first came out of the second", w1, taker.Name, got)
	}
	// What the second window admits from here: at most quota in all.
	more := 0
	for range quota {
		if take(taker.Name) {
			more++
		}
	}
	if h.now.Truncate(win) != second {
		t.Fatalf("the test left the second window")
	}
	if w1+more > quota {
		t.Errorf("the second window admitted %d+%d = %d of %d", w1, more, w1+more, quota)
	}
}

// As above, but n3 spends one more unit of a request the key's first
// window admitted (Settle with charge: its response cost more than the
// take counted). The charge, for a key out of reach at its new owner n2,
// waits there for the key's counter, and the key's window rolls over
// meanwhile. Spent when the key counts from what it has, it came out of
// the second window, which never admitted it: that window held one more
// than it admitted, and refused a request under its limit.
func TestAUnitChargedForAKeyOutOfReachIsSpentInItsOwnWindow(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	const quota = 10
	const win = 5 * time.Second
	k := h.keyOwnedBy("n0", "n1")
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: quota, Window: win}
	unit := []limiter.Request{{Key: k, Zone: 1, Limit: lim}}
	take := func(node string) (bool, Source) {
		tk := &handTake{node: node, res: make([]limiter.Result, 1)}
		tk.reqs = []limiter.Request{{Key: k, Zone: 1, Limit: lim}}
		d, done := h.cores[node].Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res)
		if done {
			return d.Allowed, d.Source
		}
		h.drive(tk)
		h.finish(tk)
		return tk.d.Allowed, tk.d.Source
	}
	// Start at the beginning of a window.
	h.advance(h.now.Truncate(win).Add(win).Sub(h.now) + 10*time.Millisecond)
	first := h.now.Truncate(win)
	w0 := 0
	var at time.Time
	var src Source
	for range 6 {
		at = h.now
		if ok, s := take("n3"); ok {
			w0++
			src = s
		}
	}
	h.advance(20 * time.Millisecond) // replicated to n1
	if st, _, ok := h.cores["n1"].replicas.get(k); w0 != 6 || src != SourcePeer || !ok || windowCount([]limiter.State{st}) != 6 {
		t.Fatalf("admitted %d (last by %v), replica at n1 %v; want 6 by the owner and a replica of 6", w0, src, ok)
	}

	// n0 crashes; n1 is cut off. The others take both over.
	h.down["n0"], h.down["n1"] = true, true
	h.advance(100 * time.Millisecond)
	for _, name := range []string{"n2", "n3", "n4"} {
		h.setMembership(name, []string{"n0", "n1"})
	}
	h.advance(time.Second, "n2", "n3", "n4")
	taker, _ := h.cores["n2"].Ring().Owner(k.Route())
	if !h.cores[taker.Name].lacksCounter(k, h.cores[taker.Name].mono(h.now)) {
		t.Fatalf("the key is not out of reach at its new owner %s", taker.Name)
	}
	if h.now.Truncate(win) != first {
		t.Fatalf("the test left the first window")
	}

	// n3 spends one more unit of its last request, admitted in this window.
	h.cores["n3"].Settle(h.now, at, src, true, unit)
	h.advance(200*time.Millisecond, "n2", "n3", "n4")

	// The next window: the key, still out of reach, is decided by fallback.
	h.advance(h.now.Truncate(win).Add(win).Sub(h.now)+10*time.Millisecond, "n2", "n3", "n4")
	second := h.now.Truncate(win)
	if !h.cores[taker.Name].lacksCounter(k, h.cores[taker.Name].mono(h.now)) {
		t.Fatalf("the key is no longer out of reach at %s in the second window", taker.Name)
	}
	w1 := 0
	for range 3 {
		for _, node := range []string{"n3", taker.Name} {
			if ok, _ := take(node); ok {
				w1++
			}
		}
	}
	// The hand-off window passes: the key counts from what it has.
	h.advance(2*time.Second, "n2", "n3", "n4")
	if h.cores[taker.Name].lacksCounter(k, h.cores[taker.Name].mono(h.now)) {
		t.Fatalf("the key is still out of reach at %s", taker.Name)
	}
	if h.now.Truncate(win) != second {
		t.Fatalf("the test left the second window")
	}
	if got := h.count(taker.Name, k); got != int64(w1) {
		t.Errorf("in the second window %d were admitted, and the key's owner %s holds %d of it: the unit charged in the first was spent in the second", w1, taker.Name, got)
	}
	// What the second window admits from here: its whole quota in all.
	more := 0
	for range quota {
		if ok, _ := take(taker.Name); ok {
			more++
		}
	}
	if h.now.Truncate(win) != second {
		t.Fatalf("the test left the second window")
	}
	if w1+more != quota {
		t.Errorf("the second window admitted %d+%d = %d of %d", w1, more, w1+more, quota)
	}
}

// A key's owner n0 crashes near the end of a window in which it admitted
// 6 of 10; its successor n1 takes the key over, and waits for the others'
// seals before it counts it (n4 does not answer: until the hand-off
// window passes). n3 gives one of its units back meanwhile: it waits at
// n1 for the key to settle. The window rolls over; the others decide the
// key by fallback, and their counts join n1's as the key settles, before
// the unit that waited is given back. It came out of the second window
// (given back as of the instant the key settled), which never counted it:
// that window was lent a unit, and admitted 11 of 10.
func TestAUnitGivenBackWhileItsKeyIsTakenOverComesOutOfItsOwnWindow(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	const quota = 10
	const win = 5 * time.Second
	k := h.keyOwnedBy("n0", "n1")
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: quota, Window: win}
	unit := []limiter.Request{{Key: k, Zone: 1, Limit: lim}}
	take := func(node string) bool {
		tk := &handTake{node: node, res: make([]limiter.Result, 1)}
		tk.reqs = []limiter.Request{{Key: k, Zone: 1, Limit: lim}}
		d, done := h.cores[node].Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res)
		if done {
			return d.Allowed
		}
		h.drive(tk)
		h.finish(tk)
		return tk.d.Allowed
	}
	// Start at the beginning of a window.
	h.advance(h.now.Truncate(win).Add(win).Sub(h.now) + 10*time.Millisecond)
	first := h.now.Truncate(win)
	w0 := 0
	for range 6 {
		if take("n3") {
			w0++
		}
	}
	// Near the window's end: n0 crashes, and the others take it for dead.
	h.advance(first.Add(win - 250*time.Millisecond).Sub(h.now))
	if st, _, ok := h.cores["n1"].replicas.get(k); w0 != 6 || !ok || windowCount([]limiter.State{st}) != 6 {
		t.Fatalf("admitted %d, replica at n1 %v; want 6 by the owner and a replica of 6", w0, ok)
	}
	h.down["n0"], h.down["n4"] = true, true // n4 does not answer: the hand-off waits for its seal
	for _, name := range []string{"n1", "n2", "n3"} {
		h.setMembership(name, []string{"n0"})
	}
	if owner, _ := h.cores["n1"].Ring().Owner(k.Route()); owner.Name != "n1" || !h.cores["n1"].HandoffUnderway() {
		t.Fatalf("the key's owner is %s, hand-off under way at n1: %v; want n1 taking it over", owner.Name, h.cores["n1"].HandoffUnderway())
	}

	// n3 gives one of its units (counted in this window) back.
	h.cores["n3"].refund(h.now, unit)
	h.pump()
	if got := h.count("n1", k); got != 0 || h.now.Truncate(win) != first {
		t.Fatalf("n1 counts %d before the key settled; want 0 (in the first window: %v)", got, h.now.Truncate(win) == first)
	}

	// The next window: the key, still taken over, is decided by fallback.
	h.advance(first.Add(win + 10*time.Millisecond).Sub(h.now))
	second := h.now.Truncate(win)
	if !h.cores["n1"].HandoffUnderway() {
		t.Fatalf("the key settled at n1 in the first window")
	}
	w1 := 0
	for range 3 {
		for _, node := range []string{"n3", "n2"} {
			if take(node) {
				w1++
			}
		}
	}
	// The hand-off window passes: the key settles at n1 without n4's seal.
	for h.cores["n1"].HandoffUnderway() && h.now.Truncate(win) == second {
		h.advance(50 * time.Millisecond)
	}
	if h.cores["n1"].HandoffUnderway() {
		t.Fatalf("the key has not settled at n1")
	}
	if h.now.Truncate(win) != second {
		t.Fatalf("the test left the second window")
	}
	if got := h.count("n1", k); got != int64(w1) {
		t.Errorf("in the second window %d were admitted, and the key's owner n1 holds %d of it: the unit given back in the first came out of the second", w1, got)
	}
	more := 0
	for range quota {
		if take("n1") {
			more++
		}
	}
	if h.now.Truncate(win) != second {
		t.Fatalf("the test left the second window")
	}
	if w1+more > quota {
		t.Errorf("the second window admitted %d+%d = %d of %d", w1, more, w1+more, quota)
	}
}

// A give-back to a key's owner is lost on its way, near the end of the
// window that counted its unit, and sent again: it arrives in the next
// window, after the owner admitted there. Sent without the instant its
// unit was counted at, it was given back out of the window it arrived in:
// that window was lent a unit, and admitted 11 of 10.
func TestAUnitGivenBackThatArrivesInTheNextWindowComesOutOfItsOwn(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	const quota = 10
	const win = 5 * time.Second
	k := h.keyOwnedBy("n0", "n1")
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: quota, Window: win}
	unit := []limiter.Request{{Key: k, Zone: 1, Limit: lim}}
	take := func(node string) bool {
		tk := &handTake{node: node, res: make([]limiter.Result, 1)}
		tk.reqs = []limiter.Request{{Key: k, Zone: 1, Limit: lim}}
		d, done := h.cores[node].Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res)
		if done {
			return d.Allowed
		}
		h.drive(tk)
		h.finish(tk)
		return tk.d.Allowed
	}
	h.advance(h.now.Truncate(win).Add(win).Sub(h.now) + 10*time.Millisecond)
	first := h.now.Truncate(win)
	w0 := 0
	for range 6 {
		if take("n2") {
			w0++
		}
	}
	if w0 != 6 {
		t.Fatalf("admitted %d of 6 in the first window", w0)
	}
	second := first.Add(win)
	h.advance(second.Add(-50 * time.Millisecond).Sub(h.now))

	// n2 gives a unit back; the give-back is lost until the next window.
	h.drops = func(from string, o Outgoing) bool {
		x, ok := o.Msg.(Transfer)
		return ok && x.Mode == ModeRefund && h.now.Before(second.Add(100*time.Millisecond))
	}
	h.cores["n2"].refund(h.now, unit)
	h.advance(second.Add(20 * time.Millisecond).Sub(h.now))
	if h.now.Truncate(win) != second || !h.cores["n2"].pendingGiveBack() {
		t.Fatalf("the give-back arrived in the first window")
	}
	w1 := 0
	for range 6 {
		if take("n0") {
			w1++
		}
	}
	h.advance(300 * time.Millisecond) // the give-back arrives
	if h.cores["n2"].pendingGiveBack() || h.now.Truncate(win) != second {
		t.Fatalf("the give-back has not arrived in the second window")
	}
	if got := h.count("n0", k); got != int64(w1) {
		t.Errorf("in the second window %d were admitted, and the key's owner n0 holds %d of it: the unit given back in the first came out of the second", w1, got)
	}
	more := 0
	for range quota {
		if take("n0") {
			more++
		}
	}
	if w1+more > quota {
		t.Errorf("the second window admitted %d+%d = %d of %d", w1, more, w1+more, quota)
	}
}

// pendingGiveBack reports whether a give-back of c's is still on its way.
func (c *Core) pendingGiveBack() bool {
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	for _, pt := range c.out.transfers {
		if pt.t.Mode == ModeRefund {
			return true
		}
	}
	return false
}

// As above, for the units of a request's zone its owner admitted, given
// back by the caller as another zone of the request denied it (near the
// end of the window), in a give-back to the owner that is lost on its way
// and arrives in the next window.
func TestAUnitOfAZoneGivenBackThatArrivesInTheNextWindowComesOutOfItsOwn(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	const quota = 10
	const win = 5 * time.Second
	k := h.keyOwnedBy("n0", "n1")
	other := h.keyOwnedBy("n2", "n0", k)
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: quota, Window: win}
	strict := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 1, Window: win}
	one := limiter.Request{Key: k, Zone: 1, Limit: lim}
	h.advance(h.now.Truncate(win).Add(win).Sub(h.now) + 10*time.Millisecond)
	first := h.now.Truncate(win)
	second := first.Add(win)
	if !h.takeZones("n2", limiter.Request{Key: other, Zone: 2, Limit: strict}) {
		t.Fatalf("the other zone's first request refused")
	}
	h.advance(second.Add(-50 * time.Millisecond).Sub(h.now))

	// n2's request: n0 admits its zone 1, the other zone denies it, and
	// n2 gives zone 1's unit back; the give-back is lost until the next
	// window.
	h.drops = func(from string, o Outgoing) bool {
		x, ok := o.Msg.(Transfer)
		return ok && x.Mode == ModeRefund && h.now.Before(second.Add(100*time.Millisecond))
	}
	if h.takeZones("n2", one, limiter.Request{Key: other, Zone: 2, Limit: strict}) {
		t.Fatalf("a request the other zone denies admitted")
	}
	h.advance(second.Add(20 * time.Millisecond).Sub(h.now))
	if h.now.Truncate(win) != second || !h.cores["n2"].pendingGiveBack() {
		t.Fatalf("the give-back arrived in the first window, or was never sent")
	}
	w1 := 0
	for range 6 {
		if h.takeZones("n0", one) {
			w1++
		}
	}
	h.advance(300 * time.Millisecond) // the give-back arrives
	if h.cores["n2"].pendingGiveBack() || h.now.Truncate(win) != second {
		t.Fatalf("the give-back has not arrived in the second window")
	}
	if got := h.count("n0", k); got != int64(w1) {
		t.Errorf("in the second window %d were admitted, and the key's owner n0 holds %d of it: the unit given back in the first came out of the second", w1, got)
	}
	more := 0
	for range quota {
		if h.takeZones("n0", one) {
			more++
		}
	}
	if w1+more > quota {
		t.Errorf("the second window admitted %d+%d = %d of %d", w1, more, w1+more, quota)
	}
}

// As above, for a zone its owner admitted near the end of a window, given
// back by the caller once another zone of the request, its call answered
// only in the next window, denied it: the give-back is sent in the next
// window, and the unit must come out of the window it was counted in.
func TestAUnitOfAZoneGivenBackInTheNextWindowComesOutOfItsOwn(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	const quota = 10
	const win = 5 * time.Second
	k := h.keyOwnedBy("n0", "n1")
	other := h.keyOwnedBy("n1", "n0", k)
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: quota, Window: win}
	strict := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 1, Window: time.Hour}
	one := limiter.Request{Key: k, Zone: 1, Limit: lim}
	h.advance(h.now.Truncate(win).Add(win).Sub(h.now) + 10*time.Millisecond)
	second := h.now.Truncate(win).Add(win)
	if !h.takeZones("n2", limiter.Request{Key: other, Zone: 2, Limit: strict}) {
		t.Fatalf("the other zone's first request refused")
	}
	h.advance(second.Add(-20 * time.Millisecond).Sub(h.now))

	// n2's request: n0 admits zone 1 in the first window; the call for
	// zone 2 is answered by n1, denying it, in the second.
	// The give-back is lost until the owner counted more of the second.
	h.drops = func(from string, o Outgoing) bool {
		x, ok := o.Msg.(Transfer)
		return ok && x.Mode == ModeRefund && h.now.Before(second.Add(100*time.Millisecond))
	}
	c := h.cores["n2"]
	tk := &handTake{node: "n2", res: make([]limiter.Result, 2)}
	tk.reqs = []limiter.Request{one, {Key: other, Zone: 2, Limit: strict}}
	if _, done := c.Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res); done {
		t.Fatalf("n2 decided a request for keys of n0 and n1 itself")
	}
	calls := 0
	var held TakeItem
	for !tk.done {
		a := c.Step(h.now, &tk.op)
		if a.Kind == ActDone {
			tk.done, tk.d = true, tk.op.Decision()
			break
		}
		item, ok := a.Msg.(TakeItem)
		if a.Kind != ActCall || !ok {
			t.Fatalf("n2's step: %+v; want a take item", a)
		}
		calls++
		if a.To.Name == "n1" {
			held = item
			h.advance(second.Add(20 * time.Millisecond).Sub(h.now))
			if h.now.Truncate(win) != second {
				t.Fatalf("zone 2 answered in the first window")
			}
		}
		reply, _ := h.cores[a.To.Name].Serve(h.now, c.Self(), &item, make([]limiter.Result, len(item.Reqs)), h.now)
		c.Replied(h.now, &tk.op, reply)
		h.pump()
	}
	if calls != 2 || held.Seq == 0 {
		t.Fatalf("n2 made %d calls, zone 2's to n1: %v; want one to each owner", calls, held.Seq != 0)
	}
	if tk.d.Allowed {
		t.Fatalf("a request the other zone denies admitted")
	}
	if !c.pendingGiveBack() {
		t.Fatalf("n2 gave nothing back")
	}
	admitted := 0
	for range 6 {
		if h.takeZones("n0", one) {
			admitted++
		}
	}
	h.advance(300 * time.Millisecond) // the give-back arrives
	if c.pendingGiveBack() || h.now.Truncate(win) != second {
		t.Fatalf("the give-back has not arrived in the second window")
	}
	if got := h.count("n0", k); got != int64(admitted) {
		t.Errorf("in the second window %d were admitted, and the key's owner n0 holds %d of it: the unit given back in the first came out of the second", admitted, got)
	}
	for range quota {
		if h.takeZones("n0", one) {
			admitted++
		}
	}
	if admitted != quota {
		t.Errorf("the second window admitted %d of %d", admitted, quota)
	}
}

// takeZones decides through node one request for the zones of reqs,
// driven to its end, and reports whether it was admitted.
func (h *handNet) takeZones(node string, reqs ...limiter.Request) bool {
	tk := &handTake{node: node, reqs: reqs, res: make([]limiter.Result, len(reqs))}
	d, done := h.cores[node].Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res)
	if done {
		return d.Allowed
	}
	h.drive(tk)
	h.finish(tk)
	return tk.d.Allowed
}
