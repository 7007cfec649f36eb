package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// n0 sends n2, the owner of a key, 3 units of it that it sends again in
// place of an earlier transfer to n2 (a copy of counts n2 may not have
// applied: see Transfer.Was). n2, holding no lease from n0 at that
// moment, refuses it, and remembers the refusal; n0 sends it again under
// a new number. Before that one comes, another transfer of n0's arrives
// whose floor is past the refused number: n2 forgets the refusal. Then a
// duplicate of the refused copy, delayed by the network, arrives: n2
// records its counts as the first copy of what was sent again in place
// of the earlier transfer, and drops it as settled (below the floor).
// The renumbered transfer, with the same counts, then finds them held
// already and adds nothing: 3 admitted units are lost.
func TestADelayedCopyOfARefusedTransferPastTheFloorLosesNothing(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOwnedBy("n2", "n1")
	k2 := h.keyOwnedBy("n2", "n1", k)
	n0, n2 := h.cores["n0"], h.cores["n2"]
	limit := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 30, Window: time.Hour}
	take := func(k limiter.Key, n int) []limiter.State {
		reqs := []limiter.Request{{Key: k, Zone: 1, Limit: limit}}
		for range n {
			if !n0.engine.Take(h.now, reqs, make([]limiter.Result, 1)) {
				t.Fatal("n0 denied a take under its limit")
			}
		}
		return n0.engine.ExtractKeys(h.now, []limiter.Key{k})
	}
	states := take(k, 3)
	tr := n0.out.transfer(n2.Self(), Transfer{Mode: ModeAdd, States: states, Was: 1000, WasTo: n2.Self()}, purposeForward, n0.mono(h.now), true)
	var sent Outgoing
	for _, o := range n0.Outbox() {
		if x, ok := o.Msg.(Transfer); ok && x.Seq == tr.Seq {
			sent = o
			continue
		}
		h.deliver("n0", o)
	}
	h.pump()

	// n0 stands still long enough for n2's lease from it to run out; n2
	// refuses the transfer as it comes.
	h.down["n0"] = true
	h.advance(time.Second, "n1", "n2")
	h.down["n0"] = false
	ack, _ := n2.Handle(h.now, n0.Self(), sent.Msg).(Ack)
	if !ack.Refused {
		t.Fatalf("n2 answered %+v; want the transfer refused (no lease from n0)", ack)
	}
	n0.Answered(h.now, sent.ID, ack)

	// The leases come back; what n0 sends n2 meanwhile is held back.
	var held []Outgoing
	h.drops = func(from string, o Outgoing) bool {
		if _, ok := o.Msg.(Transfer); ok && from == "n0" && o.To.Name == "n2" {
			held = append(held, o)
			return true
		}
		return false
	}
	h.advance(300 * time.Millisecond)
	h.drops = nil
	var again Transfer
	for _, o := range held {
		if x := o.Msg.(Transfer); x.Seq != tr.Seq && x.Was == 1000 {
			again = x
		}
	}
	if again.Seq == 0 {
		t.Fatalf("n0 did not send the refused transfer again under a new number (held %d)", len(held))
	}
	// Another transfer of n0's, its floor past the refused number, comes
	// first; then the delayed duplicate of the refused copy; then the
	// renumbered transfer.
	tr2 := n0.out.transfer(n2.Self(), Transfer{Mode: ModeAdd, States: take(k2, 1)}, purposeForward, n0.mono(h.now), false)
	if tr2.Floor <= tr.Seq {
		t.Fatalf("the other transfer's floor is %d; want past %d", tr2.Floor, tr.Seq)
	}
	n2.Handle(h.now, n0.Self(), tr2)
	dup, _ := n2.Handle(h.now, n0.Self(), sent.Msg).(Ack)
	got, _ := n2.Handle(h.now, n0.Self(), again).(Ack)
	t.Logf("the duplicate answered %+v, the renumbered transfer %+v", dup, got)
	h.advance(2 * time.Second)
	if c := h.count("n2", k); c != 3 {
		t.Errorf("n2 counts %d of the key (n0 %d, n1 %d); 3 were admitted", c, h.count("n0", k), h.count("n1", k))
	}
	if c := h.count("n2", k2); c != 1 {
		t.Errorf("n2 counts %d of the other key; 1 was admitted", c)
	}
}
