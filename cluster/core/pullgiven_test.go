package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node's transfer of a key's counts is on its way to a receiver that
// refuses it (it holds no lease from the node at that moment); before the
// refusal comes back, the receiver pulls the key, and the node gives the
// same transfer in the pull's reply, which the receiver applies. The
// refusal that comes after speaks of the earlier send only: taken as the
// transfer's outcome, the counts were placed anew by the node's view as
// well, and counted twice (seed 1795784061977578841 of the simulator: the
// cluster held 44 of 39 admitted).
func TestARefusalOfATransferGivenAgainInAPullDoesNotPlaceItAnew(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOwnedBy("n1", "n2")
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

	// n2 pulls the key: the transfer on its way is given in the reply.
	pull := Pull{To: n0.Self().Inc, Keys: []limiter.Key{k}}
	reply, ok := n0.Handle(h.now, n2.Self(), pull).(PullReply)
	if !ok || len(reply.Given) != 1 {
		t.Fatalf("the pull's reply: %+v; want the transfer on its way given in it", reply)
	}
	// The earlier send's refusal comes back first.
	n0.Answered(h.now, sent.ID, Ack{Seq: tr.Seq, Refused: true})
	h.pump()
	// Then n2 applies what the reply gave.
	n2.pulled(h.now, &pendingRequest{to: n0.Self(), msg: pull}, reply)
	h.pump()
	h.advance(2 * time.Second)
	total := h.count("n0", k) + h.count("n1", k) + h.count("n2", k)
	if total != 3 {
		t.Errorf("the cluster holds %d of the key (n0 %d, n1 %d, n2 %d); 3 were admitted", total, h.count("n0", k), h.count("n1", k), h.count("n2", k))
	}
}
