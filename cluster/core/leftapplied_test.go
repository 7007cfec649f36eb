package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner applies a transfer of what another node admitted in
// fallback; the acknowledgement is lost, and the owner leaves, handing its
// counter (which holds the transfer's counts) to its successor. Its node
// starts again and takes the key back. The sender, whose receiver is gone,
// sends the counts again naming the transfer they replace: to the
// successor, which passes them on, or straight to the new run. Neither
// may add them: the leaving run applied them. Its hand-off names the
// transfers it applied to the counters handed over, and that record goes
// on with the counters wherever they go (seed 1795791153234347508 of the
// simulator: the hand-off named nothing, the successor passed the counts
// on, and the new run added them again: 15 held of 14 admitted).
func TestCountsSentAgainInPlaceOfATransferALeaverAppliedAreSkippedWhereItsCounterWent(t *testing.T) {
	for _, direct := range []bool{false, true} {
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
			n1.Handle(h.now, n0.Self(), o.Msg) // applied; the ack is lost
			n0.Failed(h.now, o.ID)
		}
		if direct {
			n0.out.settle(sent.Seq) // given up on; sent again below
		}
		load.admitted++
		earlier := n1.self

		// n1 leaves at once, handing its counter to n2.
		n1.Leave(h.now)
		n2.SetMembership(h.now, Membership{Members: []Member{h.member("n0")}, Leaving: []Member{h.member("n1")}})
		n0.SetMembership(h.now, Membership{Members: []Member{h.member("n2")}, Leaving: []Member{h.member("n1")}})
		h.pump()
		for i := 0; i < 300 && !n1.Drained(); i++ {
			h.advance(10 * time.Millisecond)
		}
		if !n1.Drained() {
			t.Fatal("the leaving owner is not drained")
		}
		h.down["n1"] = true

		// n1 runs again and takes the key back from n2.
		n1 = h.start("n1", true)
		n1.Joined(h.now)
		h.list("n1", []Member{h.member("n0"), h.member("n2")}, nil)
		h.list("n2", []Member{h.member("n0"), h.member("n1")}, nil)
		h.list("n0", []Member{h.member("n1"), h.member("n2")}, nil)
		h.advance(time.Second)

		// n0 gives the transfer up, its receiver gone, and sends its counts
		// again in its place (by itself, or here straight to the new run).
		if direct {
			n1.handleTransfer(h.now, n0.self, Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeAdd, States: []limiter.State{one}, Was: sent.Seq, WasTo: earlier}, true)
			h.pump()
		}
		h.advance(time.Second)
		var held int64
		by := map[string]int64{}
		for _, name := range h.names {
			by[name] = h.count(name, k) + windowCount(h.cores[name].fallback.engine.StatesOf(h.now, []limiter.Key{k}))
			held += by[name]
		}
		if held != int64(load.admitted) {
			t.Errorf("sent again straight to the new run %v: the cluster holds %d of the key (%v); %d were admitted", direct, held, by, load.admitted)
		}
	}
}
