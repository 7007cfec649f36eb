package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// resentInTakenOverCounter has n0 count 7 of a key (replicated to n1)
// and apply a transfer of n4's (2 counts, seq 50) before it dies
// unreplicated; n1 takes the key over from the replica and counts the 2
// sent again in place of the transfer to n0. It returns the load and
// n0's counter as it stopped counting (9, naming the transfer as
// applied).
func resentInTakenOverCounter(t *testing.T, h *handNet, k limiter.Key) (*handLoad, []limiter.State) {
	t.Helper()
	load := h.spent(k, "n0", 7)
	evicted := h.n0AppliesATransferUnreplicated(k, "n4")
	load.admitted += 2
	h.n0StopsAndN1TakesItsKeyOver(k)
	h.sentAgainTo("n1", "n4", k)
	h.advance(100 * time.Millisecond) // replicated to n1's successor
	if got := h.count("n1", k); got != 9 {
		t.Fatalf("n1 counts %d; want 9", got)
	}
	return load, evicted
}

// resentInN1sReplicaOfSeven starts seven nodes, with a key that falls to
// n0, n1, n2 and n3 in turn, and plays resentInTakenOverCounter: n2
// keeps n1's replica of the key, holding the 2 sent again.
func resentInN1sReplicaOfSeven(t *testing.T) (*handNet, limiter.Key, *handLoad, []limiter.State) {
	t.Helper()
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4", "n5", "n6")
	k := h.keyFallingTo("n0", "n1", "n2", "n3")
	load, evicted := resentInTakenOverCounter(t, h, k)
	if _, owner, ok := h.cores["n2"].replicas.get(k); !ok || owner.Name != "n1" {
		t.Fatalf("n2 keeps no replica of n1's counter (%v %v)", owner, ok)
	}
	return h, k, load, evicted
}

// keyFallingTo returns a key that is heirs[0]'s, and heirs[i]'s once the
// nodes before it in heirs are gone.
func (h *handNet) keyFallingTo(heirs ...string) limiter.Key {
	return h.keyWhere(func(owner func(names ...string) Member) bool {
		for i, heir := range heirs {
			left := slices.DeleteFunc(slices.Clone(h.names), func(x string) bool { return slices.Contains(heirs[:i], x) })
			if owner(left...).Name != heir {
				return false
			}
		}
		return true
	})
}

// n0AppliesATransferUnreplicated has n0, the owner of k, replicate its
// counter to n1 and then apply a transfer of 2 counts of from's (seq
// 50) that no replica of it holds. It returns n0's counter as it stops
// counting, naming the transfer as applied.
func (h *handNet) n0AppliesATransferUnreplicated(k limiter.Key, from string) []limiter.State {
	h.t.Helper()
	h.advance(20 * time.Millisecond) // replicated to n1
	n0 := h.cores["n0"]
	before := h.count("n0", k)
	n0.handleTransfer(h.now, h.cores[from].self, Transfer{Seq: 50, To: n0.self.Inc, Mode: ModeAdd, States: []limiter.State{counterOf(h.now, k, 2)}}, false)
	if got := h.count("n0", k); got != before+2 {
		h.t.Fatalf("n0 counts %d after applying %s's transfer; want %d", got, from, before+2)
	}
	return n0.engine.StatesOf(h.now, []limiter.Key{k})
}

// n0StopsAndN1TakesItsKeyOver has n0 stop answering; the others declare
// it dead, and n1 takes k over from n0's replica (7).
func (h *handNet) n0StopsAndN1TakesItsKeyOver(k limiter.Key) {
	h.t.Helper()
	h.down["n0"] = true
	h.declareDead("n0")
	if got := h.count("n1", k); got != 7 {
		h.t.Fatalf("n1 counts %d after taking the key over; want 7", got)
	}
}

// n1StopsAndN2TakesItsKeyOver has n1 stop answering after n0; the others
// declare both dead, and n2 takes k over from n1's replica, counting want.
func (h *handNet) n1StopsAndN2TakesItsKeyOver(k limiter.Key, want int64) {
	h.t.Helper()
	h.down["n1"] = true
	h.declareDead("n0", "n1")
	h.advance(time.Second)
	if n2 := h.cores["n2"]; n2.HandoffUnderway() || h.count("n2", k) != want {
		h.t.Fatalf("n2: hand-off under way %v, counts %d; want %d", n2.HandoffUnderway(), h.count("n2", k), want)
	}
}

// sentAgainTo has from send node the 2 counts again, in place of its
// transfer to n0 (seq 50).
func (h *handNet) sentAgainTo(node, from string, k limiter.Key) {
	to := h.cores[node]
	to.handleTransfer(h.now, h.cores[from].self, Transfer{Seq: 51, To: to.self.Inc, Mode: ModeAdd, States: []limiter.State{counterOf(h.now, k, 2)}, Was: 50, WasTo: h.cores["n0"].self}, false)
}

// n0sCounterComesTo has n0's counter, sent as it stopped counting, naming
// from's transfer (seq 50) as applied, come to node name; sent to wasTo,
// a run of n0's successor, if that is not the zero Peer.
func (h *handNet) n0sCounterComesTo(name, from string, evicted []limiter.State, wasTo Peer) {
	n0, to := h.cores["n0"], h.cores[name]
	tr := Transfer{Seq: 40, To: to.self.Inc, Mode: ModeEvicted, Evicted: n0.self, States: evicted, Applied: []Applied{{From: h.cores[from].self, Seq: 50}}}
	if wasTo != (Peer{}) {
		tr.Was, tr.WasTo = 30, wasTo
	}
	to.handleTransfer(h.now, n0.self, tr, true)
}

// othersSeeN2LeaveAndN3TakesN1Over has n3 to n6 hear that n2 leaves, n0
// and n1 dead; n2 goes, and n3 takes k over from the replica of n1's that
// n2 passed on or sent it (9).
func (h *handNet) othersSeeN2LeaveAndN3TakesN1Over(k limiter.Key) {
	h.t.Helper()
	dead := []Peer{{Name: "n0", Inc: h.incs["n0"]}, h.cores["n1"].self}
	for _, name := range []string{"n3", "n4", "n5", "n6"} {
		h.cores[name].SetMembership(h.now, Membership{Members: h.othersThan(name, "n0", "n1", "n2"), Leaving: []Member{h.member("n2")}, Dead: dead})
		h.pump()
	}
	h.advance(200 * time.Millisecond)
	h.down["n2"] = true
	for _, name := range []string{"n3", "n4", "n5", "n6"} {
		h.list(name, h.othersThan(name, "n0", "n1", "n2"), dead)
	}
	h.advance(h.cfg.HandoffWindow + time.Second)
	if n3 := h.cores["n3"]; n3.HandoffUnderway() || h.count("n3", k) != 9 {
		h.t.Fatalf("n3: hand-off under way %v, counts %d; want 9", n3.HandoffUnderway(), h.count("n3", k))
	}
}

// As TestCountsSentAgainInAReplicaAreNotAddedAgainByTheDeadRunsCounter,
// but n1's successor for the key (n2), which keeps the replica holding
// the 2 sent again, leaves and passes it on to n3, which succeeds n1
// without it; n1 crashes before it replicates again, and n3 takes the
// key over from the replica passed on. n0's counter, saying it applied
// the transfer, comes to n3: the replica held the 2 as counts sent again
// in place of that transfer, so it adds nothing.
func TestCountsSentAgainInAReplicaPassedOnAreNotAddedAgainByTheDeadRunsCounter(t *testing.T) {
	h, k, load, evicted := resentInN1sReplicaOfSeven(t)

	// n2 leaves and passes n1's replica on to n3; n1 crashes.
	h.cores["n2"].Leave(h.now)
	h.pump()
	if _, owner, ok := h.cores["n3"].replicas.get(k); !ok || owner.Name != "n1" {
		t.Fatalf("n3 keeps no replica of n1's counter passed on (%v %v)", owner, ok)
	}
	h.down["n1"] = true
	h.othersSeeN2LeaveAndN3TakesN1Over(k)
	h.n0sCounterComesTo("n3", "n4", evicted, Peer{})
	h.advance(time.Second)
	h.heldBy(k, load.admitted, "n3", "n4", "n5", "n6")
	load.spendsToTheLimit(t, "n3", "n4", "n5")
}

// heldBy checks that the nodes named hold, counted and in fallback,
// admitted of k: nothing lost, nothing counted twice.
func (h *handNet) heldBy(k limiter.Key, admitted int, names ...string) {
	h.t.Helper()
	var held int64
	by := h.counts(k)
	for _, name := range names {
		held += by[name]
	}
	if held != int64(admitted) {
		h.t.Errorf("%v hold %d of the key (%v); %d were admitted", names, held, by, admitted)
	}
}

// As above, but n1 crashes first, and its successor n2, declared n1
// dead, leaves before its hand-off takes n1 over: it sends n1's replica,
// which holds the 2 sent again, to the key's owner without it (n3) as
// n1's counter. n0's counter, saying it applied the transfer, comes to
// n3: the counter sent on held the 2 as counts sent again in place of
// that transfer, so it adds nothing.
func TestCountsSentAgainInADeadRunsReplicaSentOnAreNotAddedAgainByTheDeadRunsCounter(t *testing.T) {
	h, k, load, evicted := resentInN1sReplicaOfSeven(t)

	// n1 crashes and is declared dead; n2 leaves before it takes n1 over.
	h.down["n1"] = true
	for _, name := range []string{"n2", "n3", "n4", "n5", "n6"} {
		h.setMembership(name, []string{"n0", "n1"})
	}
	h.pump()
	h.cores["n2"].Leave(h.now)
	h.pump()
	h.othersSeeN2LeaveAndN3TakesN1Over(k)
	h.n0sCounterComesTo("n3", "n4", evicted, Peer{})
	h.advance(time.Second)
	h.heldBy(k, load.admitted, "n3", "n4", "n5", "n6")
	load.spendsToTheLimit(t, "n3", "n4")
}

// The 2 sent again in place of n0's transfer come to n1 while it has no
// majority: kept in fallback, they join its counter of the key once the
// majority answers again. n1 replicates, and dies; n2 takes the key over
// from the replica, and n0's counter, saying it applied the transfer,
// comes to n2: the replica held the 2 as counts sent again in place of
// that transfer, so it adds nothing.
func TestCountsSentAgainKeptInFallbackAreNotAddedAgainByTheDeadRunsCounter(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k := h.keyFallingTo("n0", "n1", "n2")
	load := h.spent(k, "n0", 7)
	evicted := h.n0AppliesATransferUnreplicated(k, "n4")
	load.admitted += 2
	h.n0StopsAndN1TakesItsKeyOver(k)

	h.n1KeepsTheCountsSentAgainInFallback(k)
	h.cut["n1"], h.cut["n4"] = false, false
	h.advance(3 * time.Second)
	if n1 := h.cores["n1"]; !n1.majority(n1.view.Load()) || h.count("n1", k) != 9 {
		t.Fatalf("n1: majority %v, counts %d; want 9", n1.majority(n1.view.Load()), h.count("n1", k))
	}

	h.n1StopsAndN2TakesItsKeyOver(k, 9)
	h.n0sCounterComesTo("n2", "n4", evicted, Peer{})
	h.advance(time.Second)
	h.heldBy(k, load.admitted, "n2", "n3", "n4")
	load.spendsToTheLimit(t, "n2", "n3", "n4")
}

// n1KeepsTheCountsSentAgainInFallback cuts n1 off with n4, without a
// majority, and has n4 send n1 the 2 again in place of its transfer to
// n0: n1 keeps them in fallback. Of the nodes, running (all if none)
// tick.
func (h *handNet) n1KeepsTheCountsSentAgainInFallback(k limiter.Key, running ...string) {
	h.t.Helper()
	n0, n1, n4 := h.cores["n0"], h.cores["n1"], h.cores["n4"]
	h.cut["n1"], h.cut["n4"] = true, true
	h.advance(time.Second, running...)
	if n1.majority(n1.view.Load()) {
		h.t.Fatal("n1 has a majority while cut off")
	}
	if a, _ := n1.Handle(h.now, n4.Self(), Transfer{Seq: 51, To: n1.self.Inc, Mode: ModeAdd, States: []limiter.State{counterOf(h.now, k, 2)}, Was: 50, WasTo: n0.self}).(Ack); a.Refused {
		h.t.Fatal("n1 refused the counts sent again")
	}
	h.pump()
	if got := windowCount(n1.fallback.engine.StatesOf(h.now, []limiter.Key{k})); got != 2 {
		h.t.Fatalf("n1 keeps %d in fallback; want 2", got)
	}
}

// Fallback counts that hold a count sent again in place of a transfer
// the key's owner applied (its acknowledgement lost) go to the owner as
// additions with the record of it (see reconcileTo): the owner, which
// holds the count already, takes it out and adds the rest.
func TestFallbackCountsGoToTheOwnerWithTheRecordOfTheCountsSentAgainTheyHold(t *testing.T) {
	h, k, load, one, rec := resentToAnOwner(t)
	n1, n2 := h.cores["n1"], h.cores["n2"]
	two := one
	two.Cur = 3
	load.admitted += 2 // admitted by n2 in fallback, beside the one
	n1.handleTransfer(h.now, n2.self, Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeAdd, States: []limiter.State{two}, Resent: []Resent{rec}}, true)
	h.pump()
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "")
	load.spendsToTheLimit(t, "n1", "n0", "n2")
}

// A node whose counter of a key holds a count sent again in place of a
// transfer the key's owner applied hands the counter over to the owner,
// which refuses it; the node is then declared dead while alive, and its
// counter, refused, goes out with the others as a dead node's: with the
// record, so the owner takes the count out of it (without it the count
// was added again: 7 held of 6 admitted).
func TestCountsKeptInPlaceOfATransferGoWithARefusedCounterOfANodeDeclaredDead(t *testing.T) {
	h, k, load, one, rec := resentToAnOwner(t)
	n1, n2 := h.cores["n1"], h.cores["n2"]
	holdInItsCounter(h, n2, one, rec)
	n2.pushKeys(h.now, []limiter.Key{k})
	var handed *Outgoing
	for _, o := range n2.Outbox() {
		if tr, ok := o.Msg.(Transfer); ok && tr.Mode == ModeAdd && tr.Own && slices.ContainsFunc(tr.States, func(s limiter.State) bool { return s.Key == k }) {
			handed = &o
		}
	}
	if handed == nil || len(handed.Msg.(Transfer).Resent) != 1 {
		t.Fatalf("n2 handed no counter of the key over with the record: %+v", handed)
	}
	n2.Answered(h.now, handed.ID, Ack{Seq: handed.Msg.(Transfer).Seq, Refused: true})

	n2.evict(h.now, "n1")
	var sent []Transfer
	for _, o := range n2.Outbox() {
		if tr, ok := o.Msg.(Transfer); ok && tr.Mode == ModeEvicted && slices.ContainsFunc(tr.States, func(s limiter.State) bool { return s.Key == k }) {
			sent = append(sent, tr)
		}
	}
	if len(sent) != 1 {
		t.Fatalf("the dead node sent %d counters of the key; want 1", len(sent))
	}
	if len(sent[0].Resent) != 1 {
		t.Errorf("the dead node's counter went without the record: %+v", sent[0].Resent)
	}
	sent[0].To = n1.self.Inc
	n1.handleTransfer(h.now, n2.self, sent[0], true)
	h.pump()
	h.holdsAdmitted(k, load.admitted, "n2")
	h.advance(time.Second) // n0 hears from n1 again
	load.spendsToTheLimit(t, "n1", "n0")
}

// A node whose counter of a key holds a count sent again in place of a
// transfer the key's owner applied leaves: the counter it hands over
// goes with the record, and the owner takes the count out of it.
func TestCountsKeptInPlaceOfATransferGoWithACounterHandedOverOnLeave(t *testing.T) {
	h, k, load, one, rec := resentToAnOwner(t)
	n2 := h.cores["n2"]
	holdInItsCounter(h, n2, one, rec)
	n2.Leave(h.now)
	var handed []Transfer
	for _, o := range n2.Outbox() {
		if tr, ok := o.Msg.(Transfer); ok && tr.Mode == ModeAdd && slices.ContainsFunc(tr.States, func(s limiter.State) bool { return s.Key == k }) {
			handed = append(handed, tr)
		}
	}
	if len(handed) != 1 || len(handed[0].Resent) != 1 {
		t.Errorf("the leaving node's counter went without the record: %+v", handed)
	}
	h.pump()
	h.othersSeeLeaveAndGo("n2")
	h.holdsAdmitted(k, load.admitted, "n2")
	load.spendsToTheLimit(t, "n1", "n0", "n3")
}

// As TestCountsSentAgainInAReplicaAreNotAddedAgainByTheDeadRunsCounter,
// but n1 crashes, and before n2 (which keeps n1's replica, holding the 2
// sent again) hears of it, a replica of the key comes to n2 from n3,
// which counted one of it by a ring n2 does not follow yet: it displaces
// n1's, which n2 sends to n3 as n1's counter, and which comes back to n2
// once the key is n2's. n0's counter, saying it applied the transfer,
// comes to n2: the counter sent on held the 2 as counts sent again in
// place of that transfer, so it adds nothing.
func TestCountsSentAgainInADisplacedReplicaAreNotAddedAgainByTheDeadRunsCounter(t *testing.T) {
	h, k, load, evicted := resentInN1sReplicaOfSeven(t)
	n2, n3 := h.cores["n2"], h.cores["n3"]

	h.down["n1"] = true
	for _, name := range []string{"n3", "n4", "n5", "n6"} {
		h.setMembership(name, []string{"n0", "n1"})
	}
	h.pump()
	one := counterOf(h.now, k, 1)
	n3.engine.Merge(h.now, []limiter.State{one})
	load.admitted++
	n2.handleTransfer(h.now, n3.self, Transfer{Seq: 900, To: n2.self.Inc, Mode: ModeReplica, States: []limiter.State{one}}, false)
	if _, owner, ok := n2.replicas.get(k); !ok || owner.Name != "n3" {
		t.Fatalf("n2's replica of the key is not n3's (%v %v)", owner, ok)
	}
	h.setMembership("n2", []string{"n0", "n1"})
	h.advance(h.cfg.HandoffWindow + time.Second)
	if n2.HandoffUnderway() || h.count("n2", k) != 10 {
		t.Fatalf("n2: hand-off under way %v, counts %d; want 10 (%v)", n2.HandoffUnderway(), h.count("n2", k), h.counts(k))
	}

	h.n0sCounterComesTo("n2", "n4", evicted, Peer{})
	h.advance(time.Second)
	h.heldBy(k, load.admitted, h.names[2:]...)
	load.spendsToTheLimit(t, "n2", "n3", "n4")
}

// As TestCountsSentAgainInASnapshotAreNotAddedAgainByTheDeadRunsCounter,
// but n1 restarts without a snapshot: once its next run joins and owns
// the key, n2 sends it the replica of n1's earlier run, which holds the
// 2 sent again, as that run's counter. n0's counter, saying it applied
// the transfer, comes to n1: the counter sent on held the 2 as counts
// sent again in place of that transfer, so it adds nothing (without the
// record it added them again: 12 held of 10 admitted).
func TestCountsSentAgainInAnEarlierRunsReplicaPulledAreNotAddedAgainByTheDeadRunsCounter(t *testing.T) {
	h, k, load, evicted := resentAfterN1TookN0sKeyOver(t)
	h.advance(50 * time.Millisecond) // replicated to n2
	if st, owner, ok := h.cores["n2"].replicas.get(k); !ok || owner != h.cores["n1"].self || windowCount([]limiter.State{st}) != int64(load.admitted) {
		t.Fatalf("n2's replica of the key: %v of %v (%v); want n1's %d", st, owner, ok, load.admitted)
	}

	// n1 crashes; its next run, without a snapshot, joins and owns the key.
	h.down["n1"] = true
	h.n1RestartsAndJoins(k, nil, int64(load.admitted))

	h.n0sCounterComesTo("n1", "n2", evicted, Peer{})
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "n0")
	load.spendsToTheLimit(t, "n1", "n2")
}

// resentAfterN1TookN0sKeyOver starts three nodes; n0 counts 7 of a key
// (replicated to n1) and applies a transfer of n2's (2 counts) that no
// replica holds; n1 takes the key over (n1TakesN0sKeyOver) and counts the
// 2 n2 sends again in place of the transfer: 10. It returns n0's counter
// as it stopped counting (9, naming the transfer as applied).
func resentAfterN1TookN0sKeyOver(t *testing.T) (*handNet, limiter.Key, *handLoad, []limiter.State) {
	t.Helper()
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n1", 7)
	evicted := h.n0AppliesATransferUnreplicated(k, "n2")
	h.n1TakesN0sKeyOver(k, load)
	load.admitted += 2 // n2's transfer, in n0's counter alone
	h.sentAgainTo("n1", "n2", k)
	h.pump()
	if got := h.count("n1", k); got != int64(load.admitted) {
		t.Fatalf("n1 counts %d after the counts sent again; %d were admitted", got, load.admitted)
	}
	return h, k, load, evicted
}

// n1RestartsAndJoins starts n1's next run in a net of n0 (dead), n1 and
// n2, reading snapshot back if there is one, and has it join: n2 hears of
// it as joining, then as a member, and the run owns k again, counting
// want.
func (h *handNet) n1RestartsAndJoins(k limiter.Key, snapshot *Kept, want int64) *Core {
	h.t.Helper()
	dead := []Peer{{Name: "n0", Inc: h.incs["n0"]}}
	n1 := h.start("n1", true)
	if snapshot != nil {
		n1.RestoreCounters(h.now, *snapshot)
	}
	n1.Joined(h.now)
	h.cores["n2"].SetMembership(h.now, Membership{Joining: []Member{h.member("n1")}, Dead: dead})
	h.list("n1", []Member{h.member("n2")}, dead)
	h.advance(100*time.Millisecond, "n1", "n2")
	h.list("n2", []Member{h.member("n1")}, dead)
	h.advance(time.Second, "n1", "n2")
	if !n1.Member() || n1.HandoffUnderway() || h.count("n1", k) != want {
		h.t.Fatalf("the new run of n1: member %v, hand-off under way %v, counts %d; want %d", n1.Member(), n1.HandoffUnderway(), h.count("n1", k), want)
	}
	return n1
}

// The other side of the record: a counter holding a count sent again in
// place of a transfer to the key's owner that the owner never applied
// (it was held up) comes to the owner, which adds the count (it holds
// none of it); the transfer, come late, adds it no more.
func TestCountsKeptInPlaceOfATransferTheOwnerNeverAppliedAreAddedOnce(t *testing.T) {
	h, k, load := n1CountsFiveOfFour(t)
	n0, n1 := h.cores["n0"], h.cores["n1"]
	one := n1.engine.StatesOf(h.now, []limiter.Key{k})[0]
	one.Cur = 1
	n0.sendTransfer(h.now, n1.self, Transfer{Mode: ModeAdd, States: []limiter.State{one}}, purposeReconcile)
	var late Outgoing
	for _, o := range n0.Outbox() {
		late = o
		n0.Failed(h.now, o.ID)
	}
	sent := late.Msg.(Transfer)
	n0.out.settle(sent.Seq) // given up on
	load.admitted++
	rec := Resent{Marks: []Replaced{{From: n0.self, Seq: sent.Seq, To: n1.self}}, State: one}

	h.n2HandsOverItsCounterHolding(k, one, rec)
	if got := h.count("n1", k); got != 6 {
		t.Fatalf("n1 counts %d once the counter came; want 6", got)
	}
	n1.Handle(h.now, n0.Self(), late.Msg)
	h.pump()
	h.advance(time.Second)
	h.holdsAdmitted(k, load.admitted, "")
	load.spendsToTheLimit(t, "n1", "n0", "n2")
}
