package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner, on the smaller side of a split, applies a transfer of
// what another node admitted in fallback, and keeps its counts in fallback
// for want of a majority; the acknowledgement is lost. The owner leaves,
// and its counts go to the key's next owner. The sender, its transfer
// unacknowledged and its receiver gone, sends the counts again to that
// node in place of the transfer: they are there already, and are skipped
// (seed 1795798213455094389 of the simulator: the counts went on as bare
// additions naming nothing, and were added twice).
func TestCountsAppliedWithoutAMajorityGoOnNamingTheirTransfer(t *testing.T) {
	h, k, load, one, sent := appliedOnTheSmallSide(t)
	n1 := h.cores["n1"]
	if got := windowCount(n1.fallback.engine.StatesOf(h.now, []limiter.Key{k})); got != 1 {
		t.Fatalf("n1 keeps %d of the key in fallback; want the 1 it applied", got)
	}

	// n1 leaves while still cut off; once the split heals it hands over
	// what it holds and goes.
	n1.Leave(h.now)
	h.pump()
	h.othersSeeLeaving("n1")
	h.pump()
	h.cut["n0"], h.cut["n1"] = false, false
	h.advance(2 * time.Second)
	if !n1.Drained() {
		t.Fatal("n1 has not handed everything over")
	}
	h.down["n1"] = true

	// n0 sends the counts again to the key's owner now, in place of the
	// transfer to n1.
	h.resendInPlace(one, sent)
	h.pump()
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "n1")
}

// As above, but the sender's counts sent again in place of the transfer
// reach the key's next owner before the leaving owner's hand-off, which
// still names the transfer as applied: the counts are added once, where
// they came first, and come off what the hand-off brings.
func TestCountsSentAgainBeforeTheHandOffNamingTheirTransferCountOnce(t *testing.T) {
	h, k, load, one, sent := appliedOnTheSmallSide(t)
	n1 := h.cores["n1"]
	if got := windowCount(n1.fallback.engine.StatesOf(h.now, []limiter.Key{k})); got != 1 {
		t.Fatalf("n1 keeps %d of the key in fallback; want the 1 it applied", got)
	}

	// n1 leaves while still cut off.
	n1.Leave(h.now)
	h.pump()
	h.othersSeeLeaving("n1")
	h.pump()

	// n0 comes back first and sends the counts again to the key's next
	// owner, in place of the transfer to n1, which is still cut off.
	h.cut["n0"] = false
	h.advance(time.Second)
	h.resendInPlace(one, sent)
	h.pump()

	// Then n1's links heal: it hands over what it holds, naming the
	// transfer it applied, and goes.
	h.cut["n1"] = false
	h.advance(2 * time.Second)
	if !n1.Drained() {
		t.Fatal("n1 has not handed everything over")
	}
	h.down["n1"] = true
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "n1")
}

// A key's owner applies another node's transfer of what it admitted in
// fallback, and the counts join its counter; the acknowledgement is lost.
// The owner leaves, cut off, and the sender sends the counts again to the
// key's next owner in place of the transfer, before the leaving owner's
// counter, which names the transfer as applied, gets there: the counter
// holds them, and they are counted once.
func TestCountsSentAgainBeforeTheCounterNamingTheirTransferCountOnce(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k, load := h.spentKey("n1", "n2", 5)
	h.advance(20 * time.Millisecond)
	n1 := h.cores["n1"]
	one, sent := h.appliedUnacknowledged(k)
	load.admitted++
	if got := h.count("n1", k); got != 6 {
		t.Fatalf("n1 counts %d of the key; want the 5 it had and the 1 it applied", got)
	}

	// n1 leaves, cut off before it could hand its counter over.
	h.cut["n1"] = true
	n1.Leave(h.now)
	h.pump()
	h.othersSeeLeaving("n1")
	h.pump()

	// n0 sends the counts again to the key's next owner, in place of the
	// transfer to n1; then n1's links heal and its counter, naming the
	// transfer, comes.
	h.advance(100 * time.Millisecond)
	h.resendInPlace(one, sent)
	h.pump()
	h.cut["n1"] = false
	h.advance(2 * time.Second)
	if !n1.Drained() {
		t.Fatal("n1 has not handed everything over")
	}
	h.down["n1"] = true
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "n1")
}

// appliedOnTheSmallSide starts five nodes, spends 5 of a key n1 owns
// (n2 its successor), cuts n0 and n1 off from the others and has n1,
// without a majority, apply n0's transfer of one count with its
// acknowledgement lost (see appliedUnacknowledged).
func appliedOnTheSmallSide(t *testing.T) (*handNet, limiter.Key, *handLoad, limiter.State, Transfer) {
	t.Helper()
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k, load := h.spentKey("n1", "n2", 5)
	h.advance(20 * time.Millisecond)
	n1 := h.cores["n1"]
	h.cut["n0"], h.cut["n1"] = true, true
	h.advance(time.Second)
	if n1.majority(n1.view.Load()) {
		t.Fatal("n1 has a majority while cut off")
	}
	one, sent := h.appliedUnacknowledged(k)
	load.admitted++
	return h, k, load, one, sent
}

// appliedUnacknowledged has n0 send n1 one count of k, as if admitted in
// fallback, and n1 apply it with its acknowledgement lost; n0 gives the
// transfer up (as to a receiver gone). It returns the count and the
// transfer.
func (h *handNet) appliedUnacknowledged(k limiter.Key) (limiter.State, Transfer) {
	n0, n1 := h.cores["n0"], h.cores["n1"]
	one := n1.engine.StatesOf(h.now, []limiter.Key{k})[0]
	one.Cur = 1
	h.unacked[[2]string{"n0", "n1"}] = true
	n0.sendTransfer(h.now, n1.self, Transfer{Mode: ModeAdd, States: []limiter.State{one}}, purposeReconcile)
	var sent Transfer
	for _, o := range n0.Outbox() {
		sent = o.Msg.(Transfer)
		h.deliver("n0", o)
	}
	n0.out.settle(sent.Seq)
	return one, sent
}

// othersSeeLeaving gives every node but leaver a view of the others as
// members and of leaver as leaving.
func (h *handNet) othersSeeLeaving(leaver string) {
	var others []Member
	for _, name := range h.names {
		if name != leaver {
			others = append(others, h.member(name))
		}
	}
	for _, o := range others {
		var m Membership
		for _, p := range others {
			if p.Name != o.Name {
				m.Members = append(m.Members, p)
			}
		}
		m.Leaving = []Member{h.member(leaver)}
		h.cores[o.Name].SetMembership(h.now, m)
	}
}

// resendInPlace has n2 receive from n0 the count one again, sent in place
// of the transfer sent to n1.
func (h *handNet) resendInPlace(one limiter.State, sent Transfer) {
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	n2.handleTransfer(h.now, n0.self, Transfer{Seq: 1000, To: n2.self.Inc, Mode: ModeAdd, States: []limiter.State{one}, Was: sent.Seq, WasTo: n1.self}, true)
}

// holdsAdmitted checks that the nodes but gone ("" for none) hold,
// counted and in fallback, admitted of k: nothing lost, nothing counted
// twice.
func (h *handNet) holdsAdmitted(k limiter.Key, admitted int, gone string) {
	h.t.Helper()
	var held int64
	by := map[string]int64{}
	for _, name := range h.names {
		if name == gone {
			continue
		}
		by[name] = h.count(name, k) + windowCount(h.cores[name].fallback.engine.StatesOf(h.now, []limiter.Key{k}))
		held += by[name]
	}
	if held != int64(admitted) {
		h.t.Errorf("the cluster holds %d of the key (%v); %d were admitted", held, by, admitted)
	}
}
