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
	h.n1LeavesForN3(k, load)
	h.n0ComesBackAndCountsWhatWasAdmitted(k, load, "n1")
}

// The same, but n0, back, crashes for good once it has sent its counters
// (to n1, gone: sent again in their place to n3, where the key is
// counted). They lack the units, and must come to the record saying that
// n0 applied the give-back. Sent again without the list of the transfers
// n0 applied, they met the record of n0's counter there (the stale
// replica) as n0's last word that held the units no more, and the units
// came off the key's counter a second time; the record waited for a
// counter of n0's saying so, which never came (3 counted of 4 admitted).
// (Where the key's counter went on to n0 later, it got them back there.)
func TestUnitsGivenBackAgainArePutBackForTheRunsCountersSentAgainInPlaceOfThoseToAGoneNode(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	k, load := h.n1GivesBackAgainInN0sPlace()
	h.n1LeavesForN3(k, load)

	h.drops = nil
	h.learnsItWasDeclaredDead("n0")
	h.advance(2 * time.Second)
	// n0 hears that n1 is gone: its counters go to n3 in place of n1.
	h.list("n0", h.othersThan("n0", "n1"), []Peer{{Name: "n1", Inc: h.incs["n1"]}})
	h.advance(500 * time.Millisecond)
	h.down["n0"] = true
	h.advance(2*time.Second, "n2", "n3")
	if got := h.count("n2", k) + h.count("n3", k); got != int64(load.admitted) {
		t.Fatalf("n2 and n3 count %d (%v); %d were admitted (n2's unit was given back once)", got, h.counts(k), load.admitted)
	}
	for i := 0; int64(load.admitted) < load.quota; i++ {
		at := []string{"n2", "n3"}[i%2]
		if tk := load.spend(at); !tk.done || !tk.d.Allowed {
			t.Fatalf("request at %s refused with %d of %d admitted: %+v", at, load.admitted, load.quota, tk.d)
		}
	}
	if tk := load.spend("n2"); tk.done && tk.d.Allowed {
		t.Fatalf("request past the limit admitted: %d of %d", load.admitted, load.quota)
	}
}

// n0 joins again before its counters, sent to n1 as it learnt it was
// declared dead, reach n1: n1 hands the key's counter, with the record,
// over to n0, which applied the give-back, and then sends n0's counters
// on to it. The key's counter lacks the units n0's counter lacks, and
// holds a copy of n0's counter (the stale replica) that holds them: where
// n0's counter came, that copy lacked them too. Put back into the key's
// counter instead, they were to come off again as n0's counter came,
// holding less than the copy: a bucket, which nothing comes off, counted
// them once too many (5 counted of 4 admitted, a request under the limit
// refused).
func TestUnitsGivenBackAgainComingToTheRunThatAppliedTheGiveBackAreOffTheCopyOfItsCounter(t *testing.T) {
	for _, bucket := range []bool{false, true} {
		h := newHandNet(t, "n0", "n1", "n2", "n3")
		h.bucket.on = bucket
		k, load := h.n1GivesBackAgainInN0sPlace()
		h.drops = func(from string, o Outgoing) bool {
			t, ok := o.Msg.(Transfer)
			return ok && from == "n0" && t.Mode == ModeEvicted
		}
		h.learnsItWasDeclaredDead("n0")
		h.advance(500 * time.Millisecond)
		for _, x := range h.names {
			h.list(x, h.othersThan(x), nil)
		}
		h.advance(2 * time.Second)
		h.drops = nil
		h.advance(3 * time.Second)
		var total int64
		for _, x := range h.names {
			total += h.count(x, k)
		}
		if total != int64(load.admitted) {
			t.Fatalf("bucket %v: the cluster counts %d (%v); %d were admitted (n2's unit was given back once)", bucket, total, h.counts(k), load.admitted)
		}
		for i := 0; int64(load.admitted) < load.quota; i++ {
			at := h.names[i%len(h.names)]
			if tk := load.spend(at); !tk.done || !tk.d.Allowed {
				t.Fatalf("bucket %v: request at %s refused with %d of %d admitted: %+v", bucket, at, load.admitted, load.quota, tk.d)
			}
		}
		if tk := load.spend("n0"); tk.done && tk.d.Allowed {
			t.Fatalf("bucket %v: request past the limit admitted: %d of %d", bucket, load.admitted, load.quota)
		}
	}
}

// n1LeavesForN3 has n1 leave gracefully, n0 taken for dead: the key's
// counter goes to n3, and n2 and n3 then count what was admitted of k.
func (h *handNet) n1LeavesForN3(k limiter.Key, load *handLoad) {
	h.t.Helper()
	n0, n1 := h.cores["n0"], h.cores["n1"]
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
		h.t.Fatal("n1 did not hand everything over")
	}
	h.down["n1"] = true
	h.cores["n2"].SetMembership(h.now, Membership{Members: []Member{h.member("n3")}, Dead: []Peer{n0.self}})
	h.cores["n3"].SetMembership(h.now, Membership{Members: []Member{h.member("n2")}, Dead: []Peer{n0.self}})
	h.advance(time.Second, "n2", "n3")
	if got := h.count("n2", k) + h.count("n3", k); got != int64(load.admitted) {
		h.t.Fatalf("n2 and n3 count %d after n1 left; %d were admitted", got, load.admitted)
	}
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

// The same, and a node joins (n4) and takes the key's counter, with the
// record, from n1 before n0 comes back. n0, back, replicates its counter
// to n1, which sends on the replica of n4's counter it displaces, naming
// what n0 applied (the give-back) and holding a copy of n0's counter
// taken before it. That copy is not n0's counter as n0 let it go: the
// record must wait for n0's counters, which lack the unit. Taken by the
// copy, it lowered the record of n0's counter here, which the copy's own
// stale one raised again, and n0's counters, coming last, took the unit
// off the key's counter a second time.
func TestUnitsGivenBackAgainPulledByAJoinerAreNotTakenByACopyOfTheirRunsCounter(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	k := h.keyWhere(func(owner func(names ...string) Member) bool {
		return owner("n0", "n1", "n2", "n3").Name == "n0" && owner("n1", "n2", "n3").Name == "n1" && owner("n1", "n2", "n3", "n4").Name == "n4"
	})
	k, load := h.n1GivesBackAgainInN0sPlaceOn(k)

	// n4 joins and pulls the key from n1.
	h.names = append(h.names, "n4")
	n4 := h.start("n4", true)
	n4.Joined(h.now)
	dead := []Peer{h.cores["n0"].self}
	for _, x := range []string{"n1", "n2", "n3", "n4"} {
		h.list(x, h.othersThan(x, "n0"), dead)
	}
	h.advance(2*time.Second, "n1", "n2", "n3", "n4")
	if got := h.count("n4", k); !n4.Member() || got != int64(load.admitted) {
		t.Fatalf("n4: member %v, counts %d; %d were admitted", n4.Member(), got, load.admitted)
	}
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
	return h.n1GivesBackAgainInN0sPlaceOn(h.keyOwnedBy("n0", "n1"))
}

// n1GivesBackAgainInN0sPlaceOn is n1GivesBackAgainInN0sPlace on k, a key
// of n0's with successor n1.
func (h *handNet) n1GivesBackAgainInN0sPlaceOn(k limiter.Key) (limiter.Key, *handLoad) {
	h.t.Helper()
	return h.givesBackAgainInN0sPlaceOn(k, true, false)
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
