package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner applies a transfer of what another node admitted in
// fallback, keeps a snapshot holding it, and crashes before the
// acknowledgement reaches the sender. The sender gives the transfer up
// and sends its counts again, naming the one they replace; the node it
// sends them to refuses them, and by then the owner's next run, which
// read the snapshot back, owns the key again: the counts go there, still
// naming the transfer they replace, and the next run, whose snapshot
// holds them, skips them (seed 1795775987659025543 of the simulator: the
// counts placed anew named nothing, and were added again).
func TestATransferAnEarlierRunAppliedIsSkippedByTheRunThatReadItsSnapshotBack(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n1", "n2", 5)
	h.advance(20 * time.Millisecond) // replicated to n2
	n0, n1 := h.cores["n0"], h.cores["n1"]

	one := n1.engine.StatesOf(h.now, []limiter.Key{k})[0]
	one.Cur = 1
	n0.sendTransfer(h.now, n1.self, Transfer{Mode: ModeAdd, States: []limiter.State{one}}, purposeReconcile)
	var sent Transfer
	for _, o := range n0.Outbox() {
		sent = o.Msg.(Transfer)
		n1.Handle(h.now, n0.Self(), o.Msg)
		n0.Failed(h.now, o.ID)
	}
	load.admitted++
	snapshot := n1.Keep(h.now, n1.engine.StatesOf(h.now, []limiter.Key{k}))
	earlier := n1.self
	h.down["n1"] = true

	// The next run reads the snapshot back and joins.
	n1 = restartN1FromSnapshot(t, h, snapshot)

	// The counts come again, placed anew after a refusal, naming the
	// transfer they replace.
	n1.handleTransfer(h.now, n0.self, Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeAdd, States: []limiter.State{one}, Was: sent.Seq, WasTo: earlier}, true)
	h.pump()
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "")
}

// A key's owner takes a unit for a request another node forwarded; the
// request is denied by another of its limits and the caller gives the unit
// back. The owner applies the refund, keeps a snapshot holding it, and
// crashes before the acknowledgement reaches the caller, which gives the
// refund up and sends it again, in place of the first, to the owner's next
// run once that run read the snapshot back and owns the key again: the
// unit comes off once (seed 1795779649768421450 of the simulator: a
// snapshot listed no refund it applied, the unit came off twice, and the
// key admitted one more than its limit).
func TestARefundAnEarlierRunAppliedIsSkippedByTheRunThatReadItsSnapshotBack(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n1", "n2", 5)
	h.advance(20 * time.Millisecond) // replicated to n2
	n0, n1 := h.cores["n0"], h.cores["n1"]

	// One more unit, taken for n0's request, given back by n0.
	load.spend("n1")
	unit := limiter.Request{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: load.quota, Window: time.Hour}}
	load.admitted--
	n0.sendTransfer(h.now, n1.self, Transfer{Mode: ModeRefund, Reqs: []limiter.Request{unit}}, purposeRefund)
	var sent Transfer
	for _, o := range n0.Outbox() {
		sent = o.Msg.(Transfer)
		n1.Handle(h.now, n0.Self(), o.Msg)
		n0.Failed(h.now, o.ID)
	}
	if got := h.count("n1", k); got != int64(load.admitted) {
		t.Fatalf("n1 counts %d after the refund; %d were admitted", got, load.admitted)
	}
	snapshot := n1.Keep(h.now, n1.engine.StatesOf(h.now, []limiter.Key{k}))
	earlier := n1.self
	h.down["n1"] = true

	// The next run reads the snapshot back and joins.
	n1 = restartN1FromSnapshot(t, h, snapshot)

	// The refund comes again, naming the one it replaces.
	n1.handleTransfer(h.now, n0.self, Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeRefund, Reqs: []limiter.Request{unit}, Was: sent.Seq, WasTo: earlier}, true)
	h.pump()
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "")
}

// A key's owner applies a transfer of what another node admitted in
// fallback, and is cut off before the acknowledgement reaches the sender
// and before it replicates the count to its successor. Declared dead, its
// keys go to the successor, which starts them from its replica; the
// sender gives the transfer up and sends its counts there, naming the one
// they replace, and the successor adds them: its replica did not hold
// them. The split heals, and the owner, told it was declared dead, sends
// its counter to the successor (ModeEvicted), which adds what the counter
// holds beyond the replica: the transfer's counts among it, added once
// already (seed 1795778134734374776 of the simulator: 30 held, 29
// admitted). The evicted counters name the transfers their run applied,
// as a snapshot read back does, and the record of the run's counts that
// the successor's counter holds grows by the counts sent in place of one
// of them: every copy of the run's counter, the evicted one and one that
// comes another way, then adds only what it holds beyond.
func TestEvictedCountersDoNotAddATransferSentAgainInPlaceOfOneTheirRunApplied(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n1", "n2", 5)
	h.advance(20 * time.Millisecond) // replicated to n2
	n0, n1 := h.cores["n0"], h.cores["n1"]

	h.cut["n1"] = true
	one := n1.engine.StatesOf(h.now, []limiter.Key{k})[0]
	one.Cur = 1
	n0.sendTransfer(h.now, n1.self, Transfer{Mode: ModeAdd, States: []limiter.State{one}}, purposeReconcile)
	for _, o := range n0.Outbox() {
		n1.Handle(h.now, n0.Self(), o.Msg) // applied; the acknowledgement is lost
		n0.Failed(h.now, o.ID)
	}
	load.admitted++
	h.advance(50 * time.Millisecond) // replicas to n2 lost

	h.setMembership("n0", []string{"n1"})
	h.setMembership("n2", []string{"n1"})
	h.advance(2 * time.Second)
	if got := h.count("n2", k); got != int64(load.admitted) {
		t.Fatalf("n2, which took n1's key over, counts %d; %d were admitted", got, load.admitted)
	}

	counter := n1.engine.StatesOf(h.now, []limiter.Key{k})
	h.cut["n1"] = false
	h.advance(2 * time.Second)
	// A copy of n1's counter comes another way too (a replica of it a
	// node passed on): it holds the transfer's counts like the counter.
	h.cores["n2"].handleTransfer(h.now, n0.self, Transfer{Seq: 1000, To: h.incs["n2"], Mode: ModeAdd, CountersOf: n1.self, States: counter}, true)
	h.pump()
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "")
}

// restartN1FromSnapshot starts n1's next run in a handNet of n0, n1 and
// n2, reads snapshot back, and joins it: the others hear of it as
// joining, then as a member, and its hand-off completes.
func restartN1FromSnapshot(t *testing.T, h *handNet, snapshot Kept) *Core {
	t.Helper()
	n1 := h.start("n1", true)
	n1.RestoreCounters(h.now, snapshot)
	n1.Joined(h.now)
	for _, pair := range [][2]string{{"n0", "n2"}, {"n2", "n0"}} {
		h.cores[pair[0]].SetMembership(h.now, Membership{Members: []Member{h.member(pair[1])}, Joining: []Member{h.member("n1")}})
		h.pump()
	}
	h.setMembership("n1", nil)
	h.advance(100 * time.Millisecond)
	h.setMembership("n0", nil)
	h.setMembership("n2", nil)
	h.advance(time.Second)
	if !n1.Member() || n1.HandoffUnderway() {
		t.Fatalf("the new run of n1: member %v, hand-off under way %v", n1.Member(), n1.HandoffUnderway())
	}
	return n1
}
