package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
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
	cfg := handTiming
	cfg.FallbackRatio = 0.1
	h := newHandNetWith(t, cfg, "n0", "n1", "n2")
	const quota = 10
	k := h.keyOwnedBy("n1", "n2")
	load := newHandLoad(h, k, quota)
	for range 6 {
		load.spend("n1")
	}
	h.advance(20 * time.Millisecond) // replicated to n2
	if st, _, ok := h.cores["n2"].replicas.get(k); load.admitted != 6 || !ok || windowCount([]limiter.State{st}) != 6 {
		t.Fatalf("admitted %d, replica at n2 %v; want 6 and 6", load.admitted, ok)
	}

	// n1 stands still. n2 declares it dead: its hand-off waits for n0's
	// seal, which n0, still listing n1, cannot give.
	h.down["n1"] = true
	h.advance(100*time.Millisecond, "n0", "n2")
	h.setMembership("n2", []string{"n1"})
	h.advance(50*time.Millisecond, "n0", "n2")
	if !h.cores["n2"].HandoffUnderway() {
		t.Fatal("n2 took n1's keys over at once")
	}
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

	// n2 crashes; n0 declares it dead. A new run of n2 joins n0 and owns
	// the key again.
	h.down["n2"] = true
	h.list("n0", nil, []Peer{{Name: "n1", Inc: h.incs["n1"]}, {Name: "n2", Inc: h.incs["n2"]}})
	h.advance(time.Second, "n0")
	n2 := h.start("n2", true)
	n2.Joined(h.now)
	h.list("n2", []Member{h.member("n0")}, []Peer{{Name: "n1", Inc: h.incs["n1"]}})
	h.list("n0", []Member{h.member("n2")}, []Peer{{Name: "n1", Inc: h.incs["n1"]}})
	h.advance(500*time.Millisecond, "n0", "n2")
	if !n2.Member() || n2.HandoffUnderway() || h.cores["n0"].HandoffUnderway() {
		t.Fatalf("the new run of n2 did not join: member %v, hand-offs under way at n2 %v, at n0 %v", n2.Member(), n2.HandoffUnderway(), h.cores["n0"].HandoffUnderway())
	}
	if owner, _ := n2.Ring().Owner(k.Route()); owner.Name != "n2" {
		t.Fatalf("the key's owner is %s; want n2", owner.Name)
	}
	for range 2 * quota {
		load.spend("n2")
		load.spend("n0")
	}
	h.advance(200*time.Millisecond, "n0", "n2")
	load.resume()
	t.Logf("with n2's new run as the key's owner: admitted %d (%v)", load.admitted, load.by)
	if byOwners := load.admitted - load.by[SourceFallback]; byOwners > quota {
		t.Errorf("%d admitted by owners of limit %d (%v): the new run of n2 counted the key from nothing while its counter lived on at n1", byOwners, quota, load.by)
	}

	// n1 moves again: it hears it was declared dead, joins again, and
	// sends the counters it held on; the key counts on from them.
	h.down["n1"] = false
	h.setMembership("n1", nil)
	h.advance(2 * time.Second)
	for _, name := range []string{"n0", "n1", "n2"} {
		h.setMembership(name, nil)
	}
	h.advance(time.Second)
	load.resume()
	owner, _ := h.cores["n0"].Ring().Owner(k.Route())
	if got := h.count(owner.Name, k); got != int64(load.admitted) {
		t.Errorf("after n1 moved again, the key's owner %s holds %d; %d were admitted (%v)", owner.Name, got, load.admitted, load.by)
	}
}
