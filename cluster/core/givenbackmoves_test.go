package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A give-back the key's owner n0 applied (its answer lost, its replicas
// to its successor n1 lost) is given back again, in place of it, to n1,
// which took the key over from n0's stale replica and applies it: the
// units come off its counter, and n1 records them as given back in n0's
// place. n1 then leaves gracefully and hands the key's counter to n3.
// When n0, declared dead, comes back and its counters come to where the
// key is counted, they lack the units as the counter there does: the
// units must be put back once, wherever the counter went, and the key
// count what was admitted: the record of them goes with the counter.
func TestUnitsGivenBackAgainArePutBackWhereTheKeysCounterWent(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	k, load := h.n1GivesBackAgainInN0sPlace()
	n0, n1 := h.cores["n0"], h.cores["n1"]

	// n1 leaves gracefully: the key's counter goes to n3.
	n1.Leave(h.now)
	leaving := []Member{h.member("n1")}
	h.cores["n2"].SetMembership(h.now, Membership{Members: []Member{h.member("n3")}, Dead: []Peer{n0.self}, Leaving: leaving})
	h.cores["n3"].SetMembership(h.now, Membership{Members: []Member{h.member("n2")}, Dead: []Peer{n0.self}, Leaving: leaving})
	h.pump()
	for range 100 {
		h.advance(50*time.Millisecond, "n1", "n2", "n3")
		if n1.Drained() {
			break
		}
	}
	if !n1.Drained() {
		t.Fatal("n1 did not hand everything over")
	}
	h.down["n1"] = true
	h.cores["n2"].SetMembership(h.now, Membership{Members: []Member{h.member("n3")}, Dead: []Peer{n0.self}})
	h.cores["n3"].SetMembership(h.now, Membership{Members: []Member{h.member("n2")}, Dead: []Peer{n0.self}})
	h.advance(time.Second, "n2", "n3")
	if got := h.count("n2", k) + h.count("n3", k); got != int64(load.admitted) {
		t.Fatalf("n2 and n3 count %d after n1 left; %d were admitted", got, load.admitted)
	}
	h.n0ComesBackAndCountsWhatWasAdmitted(k, load, "n1")
}

// The same, but n1 crashes instead of leaving (of five nodes: three stay,
// a majority): the key is taken over from the replica of n1's counter,
// which carries the record of the units it lacks, and n0's counters meet
// it there.
func TestUnitsGivenBackAgainArePutBackWhereTheReplicaOfTheKeysCounterWasTakenOver(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k, load := h.n1GivesBackAgainInN0sPlace()
	h.n1CrashesAndTheSurvivorsCountTheKey(k, load)
	h.n0ComesBackAndCountsWhatWasAdmitted(k, load, "n1")
}

// The same, and n1 restarts from a snapshot it wrote after the units came
// off its counter: the snapshot's counter comes to the key's owner with
// the same record the replica brought. It is one record: put back twice,
// the key counted a unit the client had back.
func TestUnitsGivenBackAgainOnRecordInAReplicaAndASnapshotArePutBackOnce(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k, load := h.n1GivesBackAgainInN0sPlace()
	n1 := h.cores["n1"]
	snapshot := n1.Keep(h.now, n1.engine.StatesOf(h.now, []limiter.Key{k}))
	if !slices.ContainsFunc(snapshot.Resent, func(x Resent) bool { return x.Given != nil && x.Given.Req.Key == k }) {
		t.Fatalf("n1's snapshot carries no record of the unit given back again: %+v", snapshot.Resent)
	}
	h.n1CrashesAndTheSurvivorsCountTheKey(k, load)

	// n1 restarts from its snapshot and joins again.
	n1 = h.start("n1", true)
	n1.RestoreCounters(h.now, snapshot)
	n1.Joined(h.now)
	for _, x := range []string{"n1", "n2", "n3", "n4"} {
		h.setMembership(x, []string{"n0"})
	}
	h.advance(3*time.Second, "n1", "n2", "n3", "n4")
	h.n0ComesBackAndCountsWhatWasAdmitted(k, load, "")
}

// n1GivesBackAgainInN0sPlace plays, in a cluster of n0–n3 or more, on a key of
// n0's with successor n1 and 4 spent: n2's request is admitted by n0 and
// given back; n0 applies the give-back, but its answer and its replica to
// n1 are lost. n0 stops answering, and the others declare it dead; n1
// takes the key over from the stale replica, and the give-back is given
// back again to it in n0's place: the unit comes off n1's counter, which
// then replicates.
func (h *handNet) n1GivesBackAgainInN0sPlace() (limiter.Key, *handLoad) {
	h.t.Helper()
	k, load := h.spentKey("n0", "n1", 4)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]

	tk := load.spend("n2")
	if !tk.done || !tk.d.Allowed || tk.d.Source != SourcePeer {
		h.t.Fatalf("n2's request: %+v; want admitted by its owner", tk.d)
	}
	h.advance(100 * time.Millisecond) // replicated to n1
	h.drops = func(from string, o Outgoing) bool {
		t, ok := o.Msg.(Transfer)
		return ok && from == "n0" && o.To.Name == "n1" && t.Mode == ModeReplica
	}
	const refund = 77
	at := h.now.UnixNano()
	n0.handleTransfer(h.now, n2.self, Transfer{Seq: refund, To: n0.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at}, true)
	h.pump()
	load.admitted--
	h.advance(100 * time.Millisecond)

	// n0 stops answering; n1 takes the key over from its stale replica.
	h.down["n0"] = true
	h.advance(100 * time.Millisecond)
	others := slices.DeleteFunc(slices.Clone(h.names), func(x string) bool { return x == "n0" })
	for _, x := range others {
		h.setMembership(x, []string{"n0"})
	}
	h.advance(2*time.Second, others...)
	if got := h.count("n1", k); got != 5 {
		h.t.Fatalf("n1 counts %d after taking the key over; want 5 (the stale replica)", got)
	}
	n1.handleTransfer(h.now, n2.self, Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at, Was: refund, WasTo: n0.self}, true)
	h.pump()
	if got := h.count("n1", k); got != int64(load.admitted) {
		h.t.Fatalf("n1 counts %d after the give-back again; %d were admitted", got, load.admitted)
	}
	h.advance(200*time.Millisecond, others...)
	return k, load
}

// n1CrashesAndTheSurvivorsCountTheKey plays, in a cluster of n0–n4 with
// n0 declared dead: n1 crashes, the survivors declare it dead and count
// k where it goes (from the replica of n1's counter), one more request
// spent. They must count what was admitted.
func (h *handNet) n1CrashesAndTheSurvivorsCountTheKey(k limiter.Key, load *handLoad) {
	h.t.Helper()
	h.down["n1"] = true
	h.advance(100 * time.Millisecond)
	survivors := []string{"n2", "n3", "n4"}
	for _, x := range survivors {
		h.setMembership(x, []string{"n0", "n1"})
	}
	h.advance(2*time.Second, survivors...)
	load.spend("n2") // the key settles where it is counted now
	h.advance(time.Second, survivors...)
	load.resume()
	var got int64
	for _, x := range survivors {
		got += h.count(x, k)
	}
	if got != int64(load.admitted) {
		h.t.Fatalf("the survivors count %d after n1 crashed (%v); %d were admitted", got, h.counts(k), load.admitted)
	}
}

// n0ComesBackAndCountsWhatWasAdmitted plays n0, declared dead while
// alive, coming back: it learns it was declared dead, its counters go to
// where the key is counted, and it joins again, gone (crashed or left),
// if named, being out. The cluster must then count what was admitted of k, and
// admit it up to its limit with no request under it refused.
func (h *handNet) n0ComesBackAndCountsWhatWasAdmitted(k limiter.Key, load *handLoad, gone string) {
	h.t.Helper()
	h.drops = nil
	h.learnsItWasDeclaredDead("n0")
	h.advance(2 * time.Second)
	var alive []string
	for _, name := range h.names {
		if name != gone {
			var dead []string
			if gone != "" {
				dead = []string{gone}
			}
			h.setMembership(name, dead)
			alive = append(alive, name)
		}
	}
	h.advance(3 * time.Second)
	var total int64
	for _, name := range alive {
		total += h.count(name, k)
	}
	if total != int64(load.admitted) {
		h.t.Fatalf("the cluster counts %d (%v); %d were admitted (n2's unit was given back once)", total, h.counts(k), load.admitted)
	}
	// The other side: the key is spent up to its limit, through its owner
	// and forwarded, and no request under it is refused.
	owner, _ := h.cores["n2"].Ring().Owner(k.Route())
	load.spendsToTheLimit(h.t, owner.Name, slices.DeleteFunc(alive, func(x string) bool { return x == owner.Name })...)
}
