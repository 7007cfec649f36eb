package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner, without a majority, applies a transfer of what another
// node admitted in fallback and keeps its counts in fallback; the
// acknowledgement is lost. Its majority back, the counts join its
// counter (its replicas of it are lost: the successor's replica does not
// hold them). It keeps a snapshot and crashes; the sender gives the transfer
// up and sends the counts to the node that took the key over, in place of
// the transfer; the owner's next run sends the snapshot there. The
// snapshot lists the transfer, and its counts count once (seed
// 1795821816227085284 of the simulator: the snapshot listed only the
// transfers whose counts joined the counters at once, and the counts
// were added twice).
func TestASnapshotListsATransferWhoseCountsJoinedItsCounterLater(t *testing.T) {
	h, k, load, one, sent := appliedOnTheSmallSide(t)
	n1 := h.cores["n1"]
	h.cut["n0"], h.cut["n1"] = false, false
	h.drops = func(from string, o Outgoing) bool { // n1's replicas are lost
		t, ok := o.Msg.(Transfer)
		return ok && from == "n1" && t.Mode == ModeReplica
	}
	h.advance(2 * time.Second)
	if got := h.count("n1", k); got != 6 {
		t.Fatalf("n1 counts %d of the key; want the 5 it had and the 1 it applied", got)
	}

	snapshot := n1.Keep(h.now, n1.engine.StatesOf(h.now, []limiter.Key{k}))
	if len(snapshot.Applied) != 1 || snapshot.Applied[0].Seq != sent.Seq {
		t.Errorf("the snapshot lists %+v; want transfer %d", snapshot.Applied, sent.Seq)
	}
	h.down["n1"], h.drops = true, nil
	for _, name := range []string{"n0", "n2", "n3", "n4"} {
		h.setMembership(name, []string{"n1"})
	}
	h.advance(2*time.Second, "n0", "n2", "n3", "n4")
	h.resendInPlace(one, sent)
	h.pump()

	n1 = h.start("n1", true)
	n1.RestoreCounters(h.now, snapshot)
	n1.Joined(h.now)
	for _, name := range h.names {
		h.setMembership(name, nil)
	}
	h.advance(3 * time.Second)
	h.holdsAdmitted(k, load.admitted, "")
}
