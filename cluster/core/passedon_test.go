package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner applies a transfer of what another node admitted in
// fallback, and stands still before the acknowledgement leaves it. The
// sender takes it for dead and sends the counts again to a third node,
// naming the transfer they replace; the third node still sees the owner
// alive and passes the counts on to it. The owner, running again, applied
// them already: it skips them (seeds 1795786019196970080 and
// 1795787698449812539 of the simulator: the counts passed on named
// nothing, and were added twice).
func TestCountsSentAgainAndPassedOnToTheReceiverThatAppliedThemAreSkipped(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n1", "n2", 5)
	h.advance(20 * time.Millisecond)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]

	one := n1.engine.StatesOf(h.now, []limiter.Key{k})[0]
	one.Cur = 1
	n0.sendTransfer(h.now, n1.self, Transfer{Mode: ModeAdd, States: []limiter.State{one}}, purposeReconcile)
	var sent Transfer
	for _, o := range n0.Outbox() {
		sent = o.Msg.(Transfer)
		n1.Handle(h.now, n0.Self(), o.Msg)
		n0.Failed(h.now, o.ID)
	}
	n0.out.settle(sent.Seq) // given up on
	load.admitted++

	// n0 gave the transfer up and sent its counts to n2 in its place; n2
	// takes n1 for alive, and passes them on.
	n2.handleTransfer(h.now, n0.self, Transfer{Seq: 1000, To: n2.self.Inc, Mode: ModeAdd, States: []limiter.State{one}, Was: sent.Seq, WasTo: n1.self}, true)
	h.pump()
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "")
}

// A transfer of what a node admitted in fallback, for two keys of one
// owner, is lost on its way; the sender takes the owner for dead and
// sends the counts again, and they come to the owner split by key, one
// part passed on by a third node and one sent again by that node later:
// the owner applied neither copy's transfer, and adds both parts, each
// once (seed 589 of the simulator, with a record of the replaced transfer
// by transfer, not by key: the second part was skipped, and lost).
func TestCountsSentAgainSplitByKeyAreAddedOnceEach(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k1, load1 := h.spentKey("n1", "n2", 5)
	k2 := h.keyOwnedBy("n1", "n2", k1)
	load2 := newHandLoad(h, k2, 30)
	for range 3 {
		load2.spend("n1")
	}
	h.advance(20 * time.Millisecond)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]

	ones := n1.engine.StatesOf(h.now, []limiter.Key{k1, k2})
	for i := range ones {
		ones[i].Cur = 1
	}
	n0.sendTransfer(h.now, n1.self, Transfer{Mode: ModeAdd, States: ones}, purposeReconcile)
	var sent Transfer
	for _, o := range n0.Outbox() {
		sent = o.Msg.(Transfer)
		n0.Failed(h.now, o.ID) // lost: n1 never applies it
	}
	n0.out.settle(sent.Seq) // given up on
	load1.admitted++
	load2.admitted++

	for i, one := range ones {
		n2.handleTransfer(h.now, n0.self, Transfer{Seq: 1000 + uint64(i), To: n2.self.Inc, Mode: ModeAdd, States: []limiter.State{one}, Was: sent.Seq, WasTo: n1.self}, true)
		h.pump()
		// The same part again, by another path: added once.
		n1.handleTransfer(h.now, n2.self, Transfer{Seq: 2000 + uint64(i), To: n1.self.Inc, Mode: ModeAdd, States: []limiter.State{one}, Was: sent.Seq, WasFrom: n0.self, WasTo: n1.self}, true)
		h.pump()
	}
	h.advance(time.Second)
	for _, l := range []*handLoad{load1, load2} {
		var held int64
		by := map[string]int64{}
		for _, name := range h.names {
			by[name] = h.count(name, l.k) + windowCount(h.cores[name].fallback.engine.StatesOf(h.now, []limiter.Key{l.k}))
			held += by[name]
		}
		if held != int64(l.admitted) {
			t.Errorf("the cluster holds %d of key %v (%v); %d were admitted", held, l.k, by, l.admitted)
		}
	}
}

// A key's owner applies a transfer of what another node admitted in
// fallback, and its acknowledgement is lost. The sender sends the counts
// again to a third node in its place, and gives that transfer up too (the
// third node is cut off): the counts it sends in place of the second
// transfer come to the owner, which applied the first. They are one count
// with both transfers: the owner skips them (seed 1795804671983715026 of
// the simulator: the counts named only the second transfer, and the
// owner added them twice).
func TestCountsSentAgainInPlaceOfCountsSentAgainNameTheFirstTransfer(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	k, load := h.spentKey("n1", "n2", 5)
	h.advance(20 * time.Millisecond)
	n0, n1 := h.cores["n0"], h.cores["n1"]

	one := n1.engine.StatesOf(h.now, []limiter.Key{k})[0]
	one.Cur = 1
	n0.sendTransfer(h.now, n1.self, Transfer{Mode: ModeAdd, States: []limiter.State{one}}, purposeReconcile)
	var first Transfer
	for _, o := range n0.Outbox() {
		first = o.Msg.(Transfer)
		n1.Handle(h.now, n0.Self(), o.Msg) // applied, the acknowledgement lost
		n0.Failed(h.now, o.ID)
	}
	n0.out.settle(first.Seq) // given up on
	load.admitted++

	// Sent again to n3 in place of the first, and lost there.
	again := n0.out.transfer(h.cores["n3"].self, Transfer{Mode: ModeAdd, States: []limiter.State{one}}, purposeReconcile, n0.mono(h.now), false)
	again.Was, again.WasTo = first.Seq, n1.self
	n0.out.retargeted(again.Seq, again, n0.mono(h.now))
	for _, o := range n0.Outbox() {
		n0.Failed(h.now, o.ID)
	}
	pt, ok := n0.out.settle(again.Seq)
	if !ok {
		t.Fatal("the transfer sent again is not pending")
	}
	// Given up on as well: its counts go where the key is counted, n1.
	n0.retarget(h.now, pt, pt.t.States, nil)
	h.pump()
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "")
}
