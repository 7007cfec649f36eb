package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A dead owner (n0) applied a transfer of n2's (2 counts) after it last
// replicated to its successor n1, which took the key over from the
// replica. n2, its transfer unacknowledged, sends the 2 again in place of
// it to n1, which counts them and replicates its counter to its own
// successor n2; then n1 dies too, and n2 takes the key over from that
// replica. n0's counter, saying it applied the transfer, comes to n2: the
// replica held the 2 as counts sent again in place of that transfer, so
// the counter adds nothing (it added them again: 11 held of 9 admitted).
func TestCountsSentAgainInAReplicaAreNotAddedAgainByTheDeadRunsCounter(t *testing.T) {
	h, k, load, evicted := resentInN1sReplicaOfFive(t)
	if s, _ := h.cores["n1"].view.Load().ring.Successor(k.Route()); s.Name != "n2" || h.count("n1", k) != 9 {
		t.Fatalf("n1: successor %s, counts %d; want n2 and 9", s.Name, h.count("n1", k))
	}
	h.n1StopsAndN2TakesItsKeyOver(k, 9)
	h.n0sCounterComesTo("n2", "n2", evicted, h.cores["n1"].self)
	h.advance(time.Second)
	h.heldBy(k, load.admitted, "n2", "n3", "n4")
	load.spendsToTheLimit(t, "n2", "n3", "n4")
}

// resentInN1sReplicaOfFive starts five nodes, with a key that falls to
// n0, n1 and n2 in turn: n0 counts 7 (replicated to n1) and applies a
// transfer of n2's (2 counts) that no replica holds; n1 takes the key
// over and counts the 2 n2 sends again in place of the transfer, and
// replicates its counter to n2. It returns n0's counter as it stopped
// counting (9, naming the transfer as applied).
func resentInN1sReplicaOfFive(t *testing.T) (*handNet, limiter.Key, *handLoad, []limiter.State) {
	t.Helper()
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k := h.keyFallingTo("n0", "n1", "n2")
	load := h.spent(k, "n0", 7)
	if s, _ := h.cores["n0"].view.Load().ring.Successor(k.Route()); s.Name != "n1" {
		t.Fatalf("the key's successor is %s; want n1", s.Name)
	}
	evicted := h.n0AppliesATransferUnreplicated(k, "n2")
	load.admitted += 2
	h.n0StopsAndN1TakesItsKeyOver(k)
	h.sentAgainTo("n1", "n2", k)
	h.advance(100 * time.Millisecond) // replicated to n2
	return h, k, load, evicted
}

// As above, but the node that counted the counts sent again keeps a
// snapshot of its counter and crashes, and its next run reads it back and
// owns the key again: the snapshot holds the 2 as counts sent again in
// place of the dead owner's transfer, so the dead owner's counter, saying
// it applied the transfer, adds nothing (it added them again: 12 held of
// 10 admitted).
func TestCountsSentAgainInASnapshotAreNotAddedAgainByTheDeadRunsCounter(t *testing.T) {
	h, k, load, evicted := resentAfterN1TookN0sKeyOver(t)

	// n1 keeps a snapshot and crashes; its next run reads it back, joins,
	// and owns the key.
	n1 := h.cores["n1"]
	snapshot := n1.Keep(h.now, n1.engine.StatesOf(h.now, []limiter.Key{k}))
	h.down["n1"] = true
	h.n1RestartsAndJoins(k, &snapshot, int64(load.admitted))
	h.n0sCounterComesTo("n1", "n2", evicted, Peer{})
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "n0")
	load.spendsToTheLimit(t, "n1", "n2")
}

// As TestCountsSentAgainInAReplicaAreNotAddedAgainByTheDeadRunsCounter,
// but n1 admits one more and keeps a snapshot before it replicates again,
// and its next run reads the snapshot back and owns the key again once n2
// took it over from the replica: the record of the counts sent again
// comes back twice, with the replica's counter handed back and with the
// snapshot's copy, which holds the one more. The 2 are one record, and the
// dead owner's counter adds nothing (without the record it added them
// again: 12 held of 10 admitted; kept twice, they came out of its counter
// twice: 8 held).
func TestCountsSentAgainInAReplicaAndASnapshotOfTheSameCounterAreOneRecord(t *testing.T) {
	h, k, load, evicted := resentInN1sReplicaOfFive(t)
	n1 := h.cores["n1"]
	load.spend("n1")
	snapshot := n1.Keep(h.now, n1.engine.StatesOf(h.now, []limiter.Key{k}))
	if got := windowCount(snapshot.States); got != 10 || load.admitted != 10 {
		t.Fatalf("the snapshot holds %d, %d admitted; want 10 and 10", got, load.admitted)
	}

	// n1 crashes before it replicates the one more; n2 takes the key over.
	earlier := n1.self
	h.n1StopsAndN2TakesItsKeyOver(k, 9)

	// n1's next run reads the snapshot back, joins, and owns the key.
	n1 = h.start("n1", true)
	n1.RestoreCounters(h.now, snapshot)
	n1.Joined(h.now)
	for _, name := range []string{"n2", "n3", "n4"} {
		h.cores[name].SetMembership(h.now, Membership{Joining: []Member{h.member("n1")}, Dead: []Peer{{Name: "n0", Inc: h.incs["n0"]}, earlier}})
	}
	h.pump()
	h.setMembership("n1", []string{"n0"})
	h.advance(100 * time.Millisecond)
	for _, name := range []string{"n2", "n3", "n4"} {
		h.setMembership(name, []string{"n0"})
	}
	h.advance(2 * time.Second)
	if n1.HandoffUnderway() || h.count("n1", k) != 10 {
		t.Fatalf("the new run of n1: hand-off under way %v, counts %d; want 10", n1.HandoffUnderway(), h.count("n1", k))
	}
	h.n0sCounterComesTo("n1", "n2", evicted, Peer{})
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "n0")
	load.spendsToTheLimit(t, "n1", "n2", "n3")
}
