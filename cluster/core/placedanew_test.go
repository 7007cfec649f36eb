package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node joining applies another node's transfer of what it admitted in
// fallback for a key moving to it, and keeps the counts until the key
// settles; the acknowledgement is lost. Before the key settles, the
// joiner's ring changes (it leaves) and the key belongs to its old owner
// again: the counts are placed anew, and go there as additions. The
// sender, its transfer unacknowledged and its receiver gone, sends the
// counts again to the owner in place of the transfer, and they get there
// first: what the joiner sends on holds them, and adds nothing (seed
// 1795873206313038629 of the simulator, where a partition cut the
// acknowledgement: placed anew, the counts went on naming nothing, and
// were added twice). Also when the joiner, cut off first and taking the
// others for dead, has placed the counts here again without a majority
// (the key still moving here by its ring of itself alone): the record
// stays with them.
func TestCountsWaitingForTheirKeyPlacedAnewGoOnNamingTheirTransfer(t *testing.T) {
	for _, alone := range []bool{false, true} {
		t.Run(map[bool]string{false: "at once", true: "after a ring of itself alone"}[alone], func(t *testing.T) {
			countsWaitingForTheirKeyPlacedAnew(t, alone)
		})
	}
}

func countsWaitingForTheirKeyPlacedAnew(t *testing.T, alone bool) {
	h := newHandNet(t, "n0", "n1")
	h.names = append(h.names, "n2")
	h.start("n2", true)
	k := h.keyMovingTo("n0", "n1", "n2")
	load := newHandLoad(h, k, 30)
	for range 5 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond)

	// n2 joins; n0 and n1 hear of it as joining, so neither seals to it
	// by its ring, and the key waits to settle there.
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	n2.Joined(h.now)
	h.list("n2", []Member{h.member("n0"), h.member("n1")}, nil)
	for _, name := range []string{"n0", "n1"} {
		other := map[string]string{"n0": "n1", "n1": "n0"}[name]
		h.cores[name].SetMembership(h.now, Membership{Members: []Member{h.member(other)}, Joining: []Member{h.member("n2")}})
	}
	h.pump()
	h.advance(100 * time.Millisecond)
	if !n2.Member() {
		t.Fatal("n2 did not join")
	}
	if v := n2.view.Load(); v.ho == nil || !n2.majority(v) {
		t.Fatalf("n2: hand-off %v, majority %v; want a hand-off under way, with a majority", v.ho != nil, n2.majority(v))
	}

	// n1 sends n2 one count of the key; n2 applies it, keeps it until the
	// key settles, and the acknowledgement is lost. n1 gives the transfer
	// up (as to a receiver gone).
	one := n0.engine.StatesOf(h.now, []limiter.Key{k})[0]
	one.Cur = 1
	h.unacked[[2]string{"n1", "n2"}] = true
	n1.sendTransfer(h.now, n2.self, Transfer{Mode: ModeAdd, States: []limiter.State{one}}, purposeReconcile)
	var sent Transfer
	for _, o := range n1.Outbox() {
		sent = o.Msg.(Transfer)
		h.deliver("n1", o)
	}
	n1.out.settle(sent.Seq)
	load.admitted++
	if got := h.count("n2", k); got != 0 {
		t.Fatalf("n2 counts %d of the key; want it kept until the key settles", got)
	}

	// n2 leaves, cut off from the others for now: the key is n0's by its
	// ring, and the count goes there once the split heals. n1 sends the
	// count again to n0 in place of its transfer to n2, and it gets there
	// first.
	h.cut["n2"] = true
	if alone {
		h.list("n2", nil, []Peer{h.member("n0").Peer(), h.member("n1").Peer()})
		if v := n2.view.Load(); v.ho == nil || n2.majority(v) {
			t.Fatalf("n2 alone: hand-off %v, majority %v; want a hand-off under way, without a majority", v.ho != nil, n2.majority(v))
		}
		h.list("n2", []Member{h.member("n0"), h.member("n1")}, nil)
	}
	n2.Leave(h.now)
	h.pump()
	n0.handleTransfer(h.now, n1.self, Transfer{Seq: 1000, To: n0.self.Inc, Mode: ModeAdd, States: []limiter.State{one}, Was: sent.Seq, WasTo: n2.self}, true)
	h.pump()
	h.othersSeeLeaving("n2")
	h.cut["n2"] = false
	h.advance(2 * time.Second)
	if !n2.Drained() {
		t.Fatal("n2 has not handed everything over")
	}
	h.down["n2"] = true
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "n2")
}
