package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// As TestAnEvictedCounterForAnEarlierRunThatRestoredTheKeyIsACopy, but
// the node that took the key over stays down for longer than
// keptNamedWithin before its next run restores the snapshot, and its
// successor crashed meanwhile with the replica it kept. The snapshot names
// its run and the dead owner's counts it holds, but, kept that long ago,
// it goes to the key's owner as a copy that names no run (deliverHeld):
// no record of the dead owner's counts goes with it. The dead owner's
// counter, sent to the earlier run, then reaches the later run, which took
// its snapshot for one that names the run (noteRestored reads Kept.Run,
// not its age): the counter goes on as the run's, is weighed against no
// record, and is added beside the copy that holds it (15 held of 8
// admitted). Taken as a copy, as before 6d0ceaf, it changed nothing.
func TestAnEvictedCounterForAnEarlierRunThatRestoredTheKeyLateIsACopy(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n1", 7)
	h.advance(20 * time.Millisecond) // replicated to n1
	evicted := h.cores["n0"].engine.StatesOf(h.now, []limiter.Key{k})

	h.n1TakesN0sKeyOver(k, load)

	// n1 crashes, stays down past keptNamedWithin, and its next run
	// restores its counters.
	snapshot := h.cores["n1"].Keep(h.now, h.cores["n1"].engine.StatesOf(h.now, []limiter.Key{k}))
	earlier := h.cores["n1"].self
	h.advance(20*time.Millisecond, "n1", "n2") // replicated to n2

	h.down["n1"] = true
	// n2 crashes too, with the replica it kept; its next run starts
	// alone, n0 and both earlier runs dead.
	oldN1, oldN2 := h.cores["n1"].self, h.cores["n2"].self
	h.down["n2"] = true
	n2 := h.start("n2", false)
	n2.SetMembership(h.now, Membership{Dead: []Peer{{Name: "n0", Inc: h.incs["n0"]}, oldN1, oldN2}})
	h.pump()
	h.advance(keptNamedWithin+10*time.Second, "n2")
	h.down["n1"] = false
	n1 := h.start("n1", true)
	n1.RestoreCounters(h.now, snapshot)
	n1.Joined(h.now)
	h.cores["n2"].SetMembership(h.now, Membership{Joining: []Member{{Name: "n1", Inc: n1.self.Inc, PeerAddr: "n1"}}, Dead: []Peer{{Name: "n0", Inc: h.incs["n0"]}}})
	h.setMembership("n1", []string{"n0"})
	h.advance(100*time.Millisecond, "n1", "n2")
	h.setMembership("n2", []string{"n0"})
	h.advance(time.Second, "n1", "n2")
	if !n1.Member() || n1.HandoffUnderway() {
		t.Fatalf("the new run of n1: member %v, hand-off under way %v", n1.Member(), n1.HandoffUnderway())
	}
	if got := h.count("n1", k) + h.count("n2", k); got != int64(load.admitted) {
		t.Fatalf("after the restore the cluster counts %d; %d were admitted", got, load.admitted)
	}

	n0 := h.cores["n0"]
	n1.handleTransfer(h.now, n0.self, Transfer{Seq: 40, To: n1.self.Inc, Mode: ModeEvicted, Evicted: n0.self, Was: 30, WasTo: earlier, States: evicted}, true)
	h.advance(100*time.Millisecond, "n1", "n2")
	if got := h.count("n1", k) + h.count("n2", k); got != int64(load.admitted) {
		t.Errorf("the cluster counts %d (n1 %d, n2 %d); %d were admitted", got, h.count("n1", k), h.count("n2", k), load.admitted)
	}
}
