package core

import (
	"testing"
	"time"
)

// As in TestAKeyTakenOverByASuccessorThatDiedBeforeItsHandoffCompletedIsOutOfReach,
// but the third node does seal to the successor after its own hand-off
// completed: it answers the successor's seal query, and the answer is lost.
// The successor's hand-off is still under way (it never learnt of the
// seal), it counted nothing of the key, and it crashes: its replica, the
// only copy of the key's counter beside the owner's, dies with it. The
// third node took the seal it gave for the successor counting the dead
// owner's keys, forgot the successor as an heir, and leaves no gap when it
// takes the successor over: the new run of the successor counts the key
// from nothing while the owner's counter lives on.
func TestAKeyTakenOverByASuccessorWhoseSealAnswerWasLostIsOutOfReach(t *testing.T) {
	h, k, load := successorWaitsForASealOfItsStandingOwner(t)
	// n0 declares n1 dead too and completes its hand-off (n2 seals to it).
	// n0 then answers n2's seal queries, sealed, but every answer is lost.
	sealed := 0
	h.unanswered = func(from string, o Outgoing) bool {
		if _, ok := o.Msg.(SealQuery); ok && from == "n2" && o.To.Name == "n0" {
			sealed++
			return true
		}
		return false
	}
	h.setMembership("n0", []string{"n1"})
	h.advance(time.Second, "n0")
	if h.cores["n0"].HandoffUnderway() {
		t.Fatal("n0 did not complete its hand-off from n1")
	}
	h.advance(300*time.Millisecond, "n0", "n2")
	if sealed == 0 {
		t.Fatal("n2 did not ask n0 to seal after n0 completed its hand-off")
	}
	if !h.cores["n2"].HandoffUnderway() {
		t.Fatal("n2 completed its hand-off from n1: the seal's answer reached it")
	}
	if h.cores["n0"].sealsGiven.gave("n2", h.cores["n0"].Ring().Fingerprint()) == false {
		t.Fatal("n0 did not seal to n2")
	}
	h.unanswered = nil

	successorRestartsThenItsOwnerComesBack(t, h, k, load)
}
