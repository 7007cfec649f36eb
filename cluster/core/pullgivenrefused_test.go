package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// n0 sends n2 3 units of one of n2's keys; n2, holding no lease from n0
// at that moment (it stood still, or just joined: seed
// 1795882396863096849 of the simulator, a rolling restart), refuses the
// transfer and remembers the refusal. Before the refusal reaches n0, n2
// pulls the key, and n0 gives the same transfer in the pull's reply. A
// pulled copy needs no lease, and n0, the refusal of the earlier send
// coming while the given copy's answer is awaited, places nothing anew
// (see refusedBeforeGiven): n2 applies it, and counts the key at once.
// Refused as a copy of the number refused before, the key waits another
// pull, decided meanwhile by fallback in a schedule of graceful changes
// only.
func TestACopyGivenInAPullAfterItsSendWasRefusedIsApplied(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOwnedBy("n2", "n1")
	n0, n2 := h.cores["n0"], h.cores["n2"]
	reqs := []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 30, Window: time.Hour}}}
	for range 3 {
		if !n0.engine.Take(h.now, reqs, make([]limiter.Result, 1)) {
			t.Fatal("n0 denied a take under its limit")
		}
	}
	states := n0.engine.ExtractKeys(h.now, []limiter.Key{k})
	tr := n0.out.transfer(n2.Self(), Transfer{Mode: ModeAdd, States: states}, purposeForward, n0.mono(h.now), true)
	var sent Outgoing
	for _, o := range n0.Outbox() {
		if x, ok := o.Msg.(Transfer); ok && x.Seq == tr.Seq {
			sent = o
			continue
		}
		h.deliver("n0", o)
	}
	h.pump()
	// n0 stands still long enough for n2's lease from it to run out.
	h.down["n0"] = true
	h.advance(time.Second, "n1", "n2")
	h.down["n0"] = false
	ack, _ := n2.Handle(h.now, n0.Self(), sent.Msg).(Ack)
	if !ack.Refused {
		t.Fatalf("n2 answered %+v; want the transfer refused (no lease from n0)", ack)
	}
	// n2 pulls the key: the transfer on its way is given in the reply.
	pull := Pull{To: n0.Self().Inc, Keys: []limiter.Key{k}}
	reply, ok := n0.Handle(h.now, n2.Self(), pull).(PullReply)
	if !ok || len(reply.Given) != 1 || reply.Given[0].Seq != tr.Seq {
		t.Fatalf("the pull's reply: %+v; want the transfer on its way given in it", reply)
	}
	// The earlier send's refusal comes back; then n2 takes the reply.
	n0.Answered(h.now, sent.ID, ack)
	h.pump()
	n2.pulled(h.now, &pendingRequest{to: n0.Self(), msg: pull}, reply)
	h.pump()
	if got := h.count("n2", k); got != 3 {
		t.Errorf("n2 counts %d of its key after the pull's reply; want the 3 it gave", got)
	}
	h.advance(2 * time.Second)
	if total := h.clusterCount(k); total != 3 {
		t.Errorf("the cluster holds %d of the key (%v); 3 were admitted", total, h.counts(k))
	}
}

// As above, but n2's answer to the copy given in the pull's reply is
// lost. n0, the refusal of the earlier send having come while that copy's
// outcome was awaited, sends the transfer again under the same number,
// which n2 applied: applied before, not counted again. Had the refusal
// spent the number, the transfer would go again under a new one, and n2
// would count its units twice.
func TestACopyGivenInAPullOverARefusalCountsOnceWhenItsAnswerIsLost(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOwnedBy("n2", "n1")
	n0, n2 := h.cores["n0"], h.cores["n2"]
	reqs := []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 30, Window: time.Hour}}}
	for range 3 {
		if !n0.engine.Take(h.now, reqs, make([]limiter.Result, 1)) {
			t.Fatal("n0 denied a take under its limit")
		}
	}
	states := n0.engine.ExtractKeys(h.now, []limiter.Key{k})
	tr := n0.out.transfer(n2.Self(), Transfer{Mode: ModeAdd, States: states}, purposeForward, n0.mono(h.now), true)
	var sent Outgoing
	for _, o := range n0.Outbox() {
		if x, ok := o.Msg.(Transfer); ok && x.Seq == tr.Seq {
			sent = o
			continue
		}
		h.deliver("n0", o)
	}
	h.pump()
	// n0 stands still long enough for n2's lease from it to run out.
	h.down["n0"] = true
	h.advance(time.Second, "n1", "n2")
	h.down["n0"] = false
	ack, _ := n2.Handle(h.now, n0.Self(), sent.Msg).(Ack)
	if !ack.Refused {
		t.Fatalf("n2 answered %+v; want the transfer refused (no lease from n0)", ack)
	}
	// n2 pulls the key: the transfer on its way is given in the reply.
	pull := Pull{To: n0.Self().Inc, Keys: []limiter.Key{k}}
	reply, ok := n0.Handle(h.now, n2.Self(), pull).(PullReply)
	if !ok || len(reply.Given) != 1 || reply.Given[0].Seq != tr.Seq {
		t.Fatalf("the pull's reply: %+v; want the transfer on its way given in it", reply)
	}
	// The earlier send's refusal comes back; then n2 takes the reply.
	n0.Answered(h.now, sent.ID, ack)
	h.pump()
	// n2's answer to the given copy is lost: n0 sends the transfer
	// again once the copy's outcome is due.
	h.drops = func(from string, o Outgoing) bool {
		_, ok := o.Msg.(Ack)
		return ok && from == "n2" && o.To.Name == "n0"
	}
	n2.pulled(h.now, &pendingRequest{to: n0.Self(), msg: pull}, reply)
	h.pump()
	h.drops = nil
	if got := h.count("n2", k); got != 3 {
		t.Errorf("n2 counts %d of its key after the pull's reply; want the 3 it gave", got)
	}
	h.advance(2 * time.Second)
	if total := h.clusterCount(k); total != 3 {
		t.Errorf("the cluster holds %d of the key (%v); 3 were admitted", total, h.counts(k))
	}
}
