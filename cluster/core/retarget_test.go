package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner applies a transfer of counts, replicates that to its
// successor, and crashes before its acknowledgement reaches the sender;
// its next run starts at once and gets the key back from the replica. The sender gives the transfer up, its
// receiver gone, and sends its counts on in a transfer that names the one
// it replaces: to the node that took the dead run's keys over, which
// alone knows (by the replicas) that the dead run applied it. Sent to the
// key's owner now, the dead run's next run, which took nothing over, it
// was added beside the replica that held it already (seed 6099 of the
// simulator).
func TestACountsTransferGivenUpOnGoesWhereItsDeadReceiversReplicasWent(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n1", "n2", 5)
	n0, n1 := h.cores["n0"], h.cores["n1"]

	// n0 sends 1 it admitted in fallback; n1 applies it, and the
	// acknowledgement is lost.
	one := n1.engine.StatesOf(h.now, []limiter.Key{k})[0]
	one.Cur = 1
	n0.sendTransfer(h.now, n1.self, Transfer{Mode: ModeAdd, States: []limiter.State{one}}, purposeReconcile)
	for _, o := range n0.Outbox() {
		n1.Handle(h.now, n0.Self(), o.Msg)
		n0.Failed(h.now, o.ID)
	}
	load.admitted++
	h.advance(20*time.Millisecond, "n1", "n2") // replicated to n2
	if st, ok := h.cores["n2"].ReplicaOf(k); !ok || windowCount([]limiter.State{st}) != 6 {
		t.Fatalf("n2's replica of the key: %v %v; want 6", st, ok)
	}

	// n1 crashes, and its next run starts at once and joins, before its
	// death was noticed: it gets the key back from n2's replica. n0 holds
	// on to its transfer while the dead run may still apply it (its
	// lease), then gives it up.
	h.down["n1"] = true
	n1 = h.start("n1", true)
	n1.Joined(h.now)
	h.pump()
	for _, name := range []string{"n1", "n0", "n2"} {
		h.setMembership(name, nil)
	}
	h.advance(3 * time.Second)
	h.holdsAdmitted(k, load.admitted, "")
}
