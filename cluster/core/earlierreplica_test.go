package core

import (
	"testing"
	"time"
)

// A key's owner crashes, and before anyone declares it dead a node joins
// that becomes the key's successor: the crashed run never sent it the
// key's counter afresh, and the only copy of what it counted is the
// replica its former successor keeps. The owner starts again and joins;
// its stable ring (the others, without it) gives the key to the joiner,
// which it pulls the key from. The joiner holds nothing of the key, and
// the former successor, which has not heard of the new run yet, keeps the
// replica. Settled on the joiner's "nothing here", the key was counted
// from nothing, and the replica, sent on once the former successor heard
// of the new run, came on top (seed 1795867967205942039 of the simulator:
// 8 admitted of 7).
func TestARestartedOwnersKeyWaitsForTheReplicaItsEarlierRunLeftAtAFormerSuccessor(t *testing.T) {
	h := newHandNet(t, "n0", "n2")
	const quota = 10
	// n1 starts with seeds: it joins later.
	h.names = append(h.names, "n1")
	h.start("n1", true)
	k := h.keyWhere(func(owner func(names ...string) Member) bool {
		return owner("n0", "n2").Name == "n0" && owner("n0", "n1", "n2").Name == "n0" && owner("n1", "n2").Name == "n1"
	})
	load := newHandLoad(h, k, quota)
	for range 6 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond) // replicated to n2
	if load.admitted != 6 {
		t.Fatalf("n0 admitted %d; want 6", load.admitted)
	}

	// n0 crashes; n1 joins, knowing n0's crashed run as a member, and
	// succeeds it in the key.
	crashed := h.member("n0")
	h.down["n0"] = true
	n1 := h.cores["n1"]
	n1.Joined(h.now)
	h.list("n1", []Member{crashed, h.member("n2")}, nil)
	h.advance(10*time.Millisecond, "n1")
	if !n1.Member() {
		t.Fatal("n1 did not join")
	}
	h.list("n2", []Member{crashed, h.member("n1")}, nil)
	h.advance(50*time.Millisecond, "n1", "n2")

	// n0 starts again and joins; n1 lists its new run, n2 not yet.
	n0 := h.start("n0", true)
	n0.Joined(h.now)
	h.list("n0", []Member{h.member("n1"), h.member("n2")}, nil)
	h.advance(10*time.Millisecond, "n0")
	if !n0.Member() {
		t.Fatal("the new run of n0 did not join")
	}
	h.list("n1", []Member{h.member("n0"), h.member("n2")}, nil)
	for range quota {
		load.spend("n0")
	}
	h.advance(200 * time.Millisecond)
	load.resume()

	// n2 hears of the new run: the replica goes to it.
	h.list("n2", []Member{h.member("n0"), h.member("n1")}, nil)
	h.advance(time.Second)
	for range quota {
		load.spend("n0")
		load.spend("n1")
		load.spend("n2")
	}
	h.advance(time.Second)
	load.resume()
	held := h.count("n0", k) + h.count("n1", k) + h.count("n2", k)
	t.Logf("admitted %d (%v); counts n0 %d n1 %d n2 %d", load.admitted, load.by, h.count("n0", k), h.count("n1", k), h.count("n2", k))
	if n := load.by[SourceOwner] + load.by[SourcePeer]; n > quota {
		t.Errorf("owners admitted %d of limit %d (%v): the new run counted the key from nothing beside its earlier run's replica", n, quota, load.by)
	}
	if held != int64(load.admitted) {
		t.Errorf("the cluster holds %d of the key; %d were admitted", held, load.admitted)
	}
}
