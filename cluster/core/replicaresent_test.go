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
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k := h.keyWhere(func(owner func(names ...string) Member) bool {
		return owner("n0", "n1", "n2", "n3", "n4").Name == "n0" && owner("n1", "n2", "n3", "n4").Name == "n1" && owner("n2", "n3", "n4").Name == "n2"
	})
	load := newHandLoad(h, k, 30)
	for range 7 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond) // replicated to n1
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	if s, _ := n0.view.Load().ring.Successor(k.Route()); s.Name != "n1" {
		t.Fatalf("the key's successor is %s; want n1", s.Name)
	}
	n0.handleTransfer(h.now, n2.self, Transfer{Seq: 50, To: n0.self.Inc, Mode: ModeAdd, States: []limiter.State{counterOf(h.now, k, 2)}}, false)
	load.admitted += 2
	evicted := n0.engine.StatesOf(h.now, []limiter.Key{k})

	h.down["n0"] = true
	for _, name := range []string{"n1", "n2", "n3", "n4"} {
		h.setMembership(name, []string{"n0"})
	}
	h.advance(time.Second, "n1", "n2", "n3", "n4")
	if got := h.count("n1", k); got != 7 {
		t.Fatalf("n1 counts %d after taking the key over; want 7", got)
	}
	n1.handleTransfer(h.now, n2.self, Transfer{Seq: 51, To: n1.self.Inc, Mode: ModeAdd, States: []limiter.State{counterOf(h.now, k, 2)}, Was: 50, WasTo: n0.self}, false)
	h.advance(100*time.Millisecond, "n1", "n2", "n3", "n4") // replicated to n2
	if s, _ := n1.view.Load().ring.Successor(k.Route()); s.Name != "n2" || h.count("n1", k) != 9 {
		t.Fatalf("n1: successor %s, counts %d; want n2 and 9", s.Name, h.count("n1", k))
	}

	h.down["n1"] = true
	for _, name := range []string{"n2", "n3", "n4"} {
		h.setMembership(name, []string{"n0", "n1"})
	}
	h.advance(2*time.Second, "n2", "n3", "n4")
	if n2.HandoffUnderway() || h.count("n2", k) != 9 {
		t.Fatalf("n2: hand-off under way %v, counts %d; want 9", n2.HandoffUnderway(), h.count("n2", k))
	}
	n2.handleTransfer(h.now, n0.self, Transfer{Seq: 40, To: n2.self.Inc, Mode: ModeEvicted, Evicted: n0.self, Was: 30, WasTo: n1.self, States: evicted,
		Applied: []Applied{{From: n2.self, Seq: 50}}}, true)
	h.advance(time.Second, "n2", "n3", "n4")
	var held int64
	for _, name := range []string{"n2", "n3", "n4"} {
		held += h.count(name, k)
	}
	if held != int64(load.admitted) {
		t.Errorf("the cluster holds %d of the key (n2 %d); %d were admitted", held, h.count("n2", k), load.admitted)
	}
	load.spendsToTheLimit(t, "n2", "n3", "n4")
}

// As above, but the node that counted the counts sent again keeps a
// snapshot of its counter and crashes, and its next run reads it back and
// owns the key again: the snapshot holds the 2 as counts sent again in
// place of the dead owner's transfer, so the dead owner's counter, saying
// it applied the transfer, adds nothing (it added them again: 12 held of
// 10 admitted).
func TestCountsSentAgainInASnapshotAreNotAddedAgainByTheDeadRunsCounter(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n1", 7)
	h.advance(20 * time.Millisecond) // replicated to n1
	n0, n2 := h.cores["n0"], h.cores["n2"]
	n0.handleTransfer(h.now, n2.self, Transfer{Seq: 50, To: n0.self.Inc, Mode: ModeAdd, States: []limiter.State{counterOf(h.now, k, 2)}}, false)
	evicted := n0.engine.StatesOf(h.now, []limiter.Key{k})
	h.n1TakesN0sKeyOver(k, load)
	load.admitted += 2 // n2's transfer, in n0's counter alone
	n1 := h.cores["n1"]
	n1.handleTransfer(h.now, n2.self, Transfer{Seq: 51, To: n1.self.Inc, Mode: ModeAdd, States: []limiter.State{counterOf(h.now, k, 2)}, Was: 50, WasTo: n0.self}, false)
	h.pump()
	if got := h.count("n1", k); got != int64(load.admitted) {
		t.Fatalf("n1 counts %d after the counts sent again; %d were admitted", got, load.admitted)
	}

	// n1 keeps a snapshot and crashes; its next run reads it back, joins,
	// and owns the key.
	snapshot := n1.Keep(h.now, n1.engine.StatesOf(h.now, []limiter.Key{k}))
	dead := []Peer{{Name: "n0", Inc: h.incs["n0"]}}
	h.down["n1"] = true
	n1 = h.start("n1", true)
	n1.RestoreCounters(h.now, snapshot)
	n1.Joined(h.now)
	h.cores["n2"].SetMembership(h.now, Membership{Joining: []Member{h.member("n1")}, Dead: dead})
	h.list("n1", []Member{h.member("n2")}, dead)
	h.advance(100*time.Millisecond, "n1", "n2")
	h.list("n2", []Member{h.member("n1")}, dead)
	h.advance(time.Second, "n1", "n2")
	if !n1.Member() || n1.HandoffUnderway() || h.count("n1", k) != int64(load.admitted) {
		t.Fatalf("the new run of n1: member %v, hand-off under way %v, counts %d; want %d", n1.Member(), n1.HandoffUnderway(), h.count("n1", k), load.admitted)
	}

	n1.handleTransfer(h.now, n0.self, Transfer{Seq: 40, To: n1.self.Inc, Mode: ModeEvicted, Evicted: n0.self, States: evicted,
		Applied: []Applied{{From: n2.self, Seq: 50}}}, true)
	h.advance(time.Second, "n1", "n2")
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
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k := h.keyWhere(func(owner func(names ...string) Member) bool {
		return owner("n0", "n1", "n2", "n3", "n4").Name == "n0" && owner("n1", "n2", "n3", "n4").Name == "n1" && owner("n2", "n3", "n4").Name == "n2"
	})
	load := newHandLoad(h, k, 30)
	for range 7 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond) // replicated to n1
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	n0.handleTransfer(h.now, n2.self, Transfer{Seq: 50, To: n0.self.Inc, Mode: ModeAdd, States: []limiter.State{counterOf(h.now, k, 2)}}, false)
	load.admitted += 2
	evicted := n0.engine.StatesOf(h.now, []limiter.Key{k})
	h.down["n0"] = true
	for _, name := range []string{"n1", "n2", "n3", "n4"} {
		h.setMembership(name, []string{"n0"})
	}
	h.advance(time.Second, "n1", "n2", "n3", "n4")
	n1.handleTransfer(h.now, n2.self, Transfer{Seq: 51, To: n1.self.Inc, Mode: ModeAdd, States: []limiter.State{counterOf(h.now, k, 2)}, Was: 50, WasTo: n0.self}, false)
	h.advance(100*time.Millisecond, "n1", "n2", "n3", "n4") // replicated to n2
	load.resume()
	load.spend("n1")
	snapshot := n1.Keep(h.now, n1.engine.StatesOf(h.now, []limiter.Key{k}))
	if got := windowCount(snapshot.States); got != 10 || load.admitted != 10 {
		t.Fatalf("the snapshot holds %d, %d admitted; want 10 and 10", got, load.admitted)
	}

	// n1 crashes before it replicates the one more; n2 takes the key over.
	earlier := n1.self
	h.down["n1"] = true
	for _, name := range []string{"n2", "n3", "n4"} {
		h.setMembership(name, []string{"n0", "n1"})
	}
	h.advance(2*time.Second, "n2", "n3", "n4")
	if n2.HandoffUnderway() || h.count("n2", k) != 9 {
		t.Fatalf("n2: hand-off under way %v, counts %d; want 9", n2.HandoffUnderway(), h.count("n2", k))
	}

	// n1's next run reads the snapshot back, joins, and owns the key.
	n1 = h.start("n1", true)
	n1.RestoreCounters(h.now, snapshot)
	n1.Joined(h.now)
	for _, name := range []string{"n2", "n3", "n4"} {
		h.cores[name].SetMembership(h.now, Membership{Joining: []Member{h.member("n1")}, Dead: []Peer{{Name: "n0", Inc: h.incs["n0"]}, earlier}})
	}
	h.pump()
	h.setMembership("n1", []string{"n0"})
	h.advance(100*time.Millisecond, "n1", "n2", "n3", "n4")
	for _, name := range []string{"n2", "n3", "n4"} {
		h.setMembership(name, []string{"n0"})
	}
	h.advance(2*time.Second, "n1", "n2", "n3", "n4")
	if n1.HandoffUnderway() || h.count("n1", k) != 10 {
		t.Fatalf("the new run of n1: hand-off under way %v, counts %d; want 10", n1.HandoffUnderway(), h.count("n1", k))
	}

	n1.handleTransfer(h.now, n0.self, Transfer{Seq: 40, To: n1.self.Inc, Mode: ModeEvicted, Evicted: n0.self, States: evicted,
		Applied: []Applied{{From: n2.self, Seq: 50}}}, true)
	h.advance(time.Second, "n1", "n2", "n3", "n4")
	h.holdsAdmitted(k, load.admitted, "n0")
	load.spendsToTheLimit(t, "n1", "n2", "n3")
}
