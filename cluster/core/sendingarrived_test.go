package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A joiner pulls a key from the node that counted it, and that node's
// counter of the key is on its way to a third node (a hand-off not yet
// acknowledged): the answer says so (PullReply.Sending), and the joiner
// asks again later. The third node refuses the counter; its sender, once
// it sees the joiner, places it anew at the joiner. That arrival is the
// answer the joiner waited for: it pulls the key again at once, and the
// key settles, rather than a call timeout later while requests for it
// wait (simulator seed 1795816649627803583: a join beside a
// leave-restart; the new owner's pull retry came 10 ms after the hold of
// a peer's request ran out, and the request was decided by fallback
// during graceful changes only).
func TestACounterArrivingFromASourceThatSaidSendingSettlesTheKeyAtOnce(t *testing.T) {
	h := newHandNet(t, "n0", "n1")
	h.names = append(h.names, "n2")
	h.start("n2", true)
	k := h.keyMovingTo("n0", "n1", "n2")
	load := newHandLoad(h, k, 10)
	for range 3 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]

	// n0 hands the key's counter to n1; the transfer is not answered yet.
	states := n0.engine.ExtractKeys(h.now, []limiter.Key{k})
	n0.sendTransfer(h.now, n1.self, Transfer{Mode: ModeAdd, Own: true, States: states}, purposeHandoff)
	var held *Outgoing
	for _, o := range n0.Outbox() {
		if tr, ok := o.Msg.(Transfer); ok && o.To.Name == "n1" && slices.ContainsFunc(tr.States, func(s limiter.State) bool { return s.Key == k }) {
			held = &o
		}
	}
	if held == nil {
		t.Fatal("n0 sent no transfer of the key to n1")
	}

	// n2 joins. Its pull of the key from n0 is answered: on its way
	// elsewhere.
	n2.Joined(h.now)
	h.list("n2", []Member{h.member("n0"), h.member("n1")}, nil)
	h.advance(10*time.Millisecond, "n2")
	h.list("n1", []Member{h.member("n0"), h.member("n2")}, nil)
	h.list("n0", []Member{h.member("n1"), h.member("n2")}, nil)
	if !n2.Member() {
		t.Fatal("n2 did not join")
	}
	tk := h.take("n2", k, 10)
	if tk.done {
		t.Fatalf("decided at once (%+v): want it to wait for the key", tk.d)
	}
	h.pump()

	// n1 refuses the counter; n0 places it anew at n2, the key's owner.
	n0.Answered(h.now, held.ID, Ack{Seq: held.Msg.(Transfer).Seq, Refused: true})
	h.pump()
	h.drive(tk)
	if !tk.done || !tk.d.Allowed || tk.d.Source != SourceOwner {
		t.Fatalf("decided %+v (done %v) as the counter arrived: want admitted by n2 as the key's owner at once", tk.d, tk.done)
	}
	if got := h.count("n2", k); got != 4 {
		t.Errorf("n2 counts the key at %d; want 4", got)
	}
}
