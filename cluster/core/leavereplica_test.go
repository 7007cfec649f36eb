package core

import (
	"testing"
	"time"
)

// An owner dies; its successor, which keeps the key's replica, takes it
// for dead and owns the key, but its hand-off waits for the others, which
// have not taken the owner for dead yet. Then it leaves: the replica, not
// yet its counter, is the dead run's counter. Passed on as a replica for
// the dead owner, the key's next owner (which takes the owner for dead
// since before it came) kept it as such and counted the key from nothing
// (seed 1795786019196972538 of the simulator: 70 admitted of a limit of
// 40). A leaving node with a majority sends the replicas of runs that died
// on as their counters, as any node does once it takes their runs for
// dead.
func TestALeavingSuccessorSendsTheDeadOwnersReplicaOnAsItsCounter(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	k, load := h.spentKey("n0", "n1", 6)
	h.advance(50 * time.Millisecond) // replicated to n1
	if _, owner, ok := h.cores["n1"].replicas.get(k); !ok || owner.Name != "n0" {
		t.Fatalf("n1 keeps no replica of the key")
	}

	h.down["n0"] = true
	h.setMembership("n1", []string{"n0"}) // n1 owns the key; its hand-off waits
	h.setMembership("n2", []string{"n0"})
	h.setMembership("n3", []string{"n0"})
	h.advance(time.Second, "n2", "n3") // their hand-offs complete; n1's waits

	n1 := h.cores["n1"]
	if !n1.HandoffUnderway() {
		t.Fatalf("n1's hand-off completed before it left")
	}
	n1.Leave(h.now)
	leaving := []Member{h.member("n1")}
	dead := []Peer{{Name: "n0", Inc: h.incs["n0"]}}
	for _, name := range []string{"n2", "n3"} {
		if h.cores[name].HandoffUnderway() {
			t.Fatalf("%s's hand-off is under way", name)
		}
	}
	h.cores["n2"].SetMembership(h.now, Membership{Members: []Member{h.member("n3")}, Leaving: leaving, Dead: dead})
	h.cores["n3"].SetMembership(h.now, Membership{Members: []Member{h.member("n2")}, Leaving: leaving, Dead: dead})
	h.pump()
	h.advance(2*time.Second, "n1", "n2", "n3")

	owner, _ := h.cores["n2"].Ring().Owner(k.Route())
	if got := h.count(owner.Name, k); got != int64(load.admitted) {
		t.Errorf("the key's owner %s counts %d; %d were admitted", owner.Name, got, load.admitted)
	}
}
