package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner dies with 4 counted, replicated to its successor; a third
// node's count of the key (1, admitted in fallback) is on its way to the
// dead owner. The successor takes the key over: it starts from the dead
// run's replica as its hand-off completes. The third node's count comes
// to it meanwhile, given in a pull's reply: settled on that alone, the
// key was counted without the replica, which came too late to join it (4
// units lost; seed 1795886972609284828 of the simulator).
func TestADeadOwnersKeyPulledFromAnotherNodeWaitsForItsReplica(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOrdered("n2", "n1", "n0")
	load := newHandLoad(h, k, 30)
	for range 4 {
		load.spend("n2")
	}
	load.resume()
	h.advance(50 * time.Millisecond)
	n0, n1 := h.cores["n0"], h.cores["n1"]
	if st, _, ok := n1.replicas.get(k); !ok || st.Cur != 4 {
		t.Fatalf("n1's replica of the key: %v %v; want 4", st, ok)
	}

	// n2 dies; n0's fallback count of the key is on its way to it.
	h.down["n2"] = true
	n0.sendTransfer(h.now, h.member("n2").Peer(), Transfer{Mode: ModeAdd, States: []limiter.State{counterOf(h.now, k, 1)}}, purposeReconcile)
	h.pump()
	load.admitted++
	dead := []Peer{h.member("n2").Peer()}
	n0.SetMembership(h.now, Membership{Members: h.othersThan("n0", "n2"), Dead: dead})
	h.pump()
	// n1 takes n2 over; n0's answer to its seal says the key's counts are
	// at n0 (as a node that counted the key by a ring n1 did not follow
	// says where it handed the counter): n1 pulls them there.
	answered := false
	h.drops = func(from string, o Outgoing) bool {
		if _, ok := o.Msg.(SealQuery); ok && from == "n1" && o.To.Name == "n0" && !answered {
			answered = true
			n1.Answered(h.now, o.ID, SealReply{Sealed: true, Moved: []KeyOwner{{Key: k, Owner: "n0"}}})
			return true
		}
		return false
	}
	n1.SetMembership(h.now, Membership{Members: h.othersThan("n1", "n2"), Dead: dead})
	h.pump()
	h.advance(3*time.Second, "n0", "n1")
	if !answered {
		t.Fatal("n1 asked n0 for no seal")
	}
	if n1.HandoffUnderway() {
		t.Fatal("n1's hand-off did not complete")
	}
	if got := h.count("n1", k) + h.count("n0", k); got != 5 {
		t.Errorf("the key's new owner counts %d (n0 %d); 5 were admitted (4 by the dead owner, its replica at n1, and 1 in fallback)", h.count("n1", k), h.count("n0", k))
	}
}
