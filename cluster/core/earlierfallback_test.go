package core

import (
	"testing"
	"time"
)

// A key's owner crashes just after a node joined that becomes the key's
// owner once the crashed run is gone; the only copy of the key's counter
// is the replica the key's successor keeps, which has not declared the
// owner dead. The joiner and a third member do: the joiner takes the key
// over, and what it admits for it by fallback meanwhile waits beside the
// key, which waits for the successor's seal. The owner starts again and
// joins; its stable ring gives the key to the joiner, which sends it its
// units (placed anew: additions) and, as the new run pulls the key, gives
// them again in the pull's reply. They are not the key's counter, and say
// nothing of the replica the crashed run left at the successor, which has
// not heard of the new run yet. Settled on them, the key was counted from
// those units alone, and the replica came on top too late (seed
// 1795879663048108637 of the simulator: 35 admitted of 26 + 8 in
// fallback).
func TestARestartedOwnersKeyWaitsForTheReplicaWhenThePullGivesOnlyFallbackUnits(t *testing.T) {
	h := newHandNet(t, "n0", "n2", "n3")
	const quota = 10
	// n1 starts with seeds: it joins later.
	h.names = append(h.names, "n1")
	h.start("n1", true)
	k := h.keyWhere(func(owner func(names ...string) Member) bool {
		return owner("n0", "n2", "n3").Name == "n0" && owner("n2", "n3").Name == "n2" &&
			owner("n0", "n1", "n2", "n3").Name == "n0" && owner("n1", "n2", "n3").Name == "n1"
	})
	load := newHandLoad(h, k, quota)
	for range 6 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond) // replicated to n2
	if load.admitted != 6 {
		t.Fatalf("n0 admitted %d; want 6", load.admitted)
	}

	// n1 joins; n0 crashes.
	n1 := h.cores["n1"]
	n1.Joined(h.now)
	h.list("n1", []Member{h.member("n0"), h.member("n2"), h.member("n3")}, nil)
	h.advance(10*time.Millisecond, "n1")
	if !n1.Member() {
		t.Fatal("n1 did not join")
	}
	crashed := h.member("n0")
	h.down["n0"] = true
	h.list("n2", []Member{crashed, h.member("n1"), h.member("n3")}, nil)
	h.list("n3", []Member{crashed, h.member("n1"), h.member("n2")}, nil)
	h.advance(50*time.Millisecond, "n1", "n2", "n3")

	// n1 and n3 declare n0 dead; n2, which keeps the replica, does not.
	// n1 owns the key and admits requests for it by fallback.
	// n1 owns the key and admits requests for it by fallback; n3's seal
	// has n1 count those units as the key's, where they wait for the key
	// to settle.
	h.list("n1", []Member{h.member("n2"), h.member("n3")}, []Peer{crashed.Peer()})
	h.advance(100*time.Millisecond, "n1", "n2", "n3")
	for range 2 {
		load.spend("n1")
	}
	h.advance(time.Second, "n1", "n2", "n3")
	load.resume()
	if load.by[SourceFallback] == 0 {
		t.Fatalf("n1 admitted nothing by fallback (%v)", load.by)
	}
	h.list("n3", []Member{h.member("n1"), h.member("n2")}, []Peer{crashed.Peer()})
	h.advance(time.Second, "n1", "n2", "n3")

	// n0 starts again and joins; n1 and n3 list its new run, n2 not yet.
	n0 := h.start("n0", true)
	n0.Joined(h.now)
	h.list("n0", []Member{h.member("n1"), h.member("n2"), h.member("n3")}, nil)
	h.advance(10*time.Millisecond, "n0")
	if !n0.Member() {
		t.Fatal("the new run of n0 did not join")
	}
	// n1 sends the new run its units; their acknowledgement is lost
	// for a while, and they are on their way still as the key is pulled.
	h.unacked[[2]string{"n1", "n0"}] = true
	h.list("n1", []Member{h.member("n0"), h.member("n2"), h.member("n3")}, nil)
	h.list("n3", []Member{h.member("n0"), h.member("n1"), h.member("n2")}, nil)
	for range quota {
		load.spend("n0")
	}
	h.advance(200 * time.Millisecond)
	load.resume()
	h.unacked[[2]string{"n1", "n0"}] = false

	// n2 hears of the new run: the replica goes to it.
	h.list("n2", []Member{h.member("n0"), h.member("n1"), h.member("n3")}, nil)
	h.advance(time.Second)
	for range quota {
		load.spend("n0")
		load.spend("n1")
		load.spend("n2")
	}
	h.advance(time.Second)
	load.resume()
	held := h.count("n0", k) + h.count("n1", k) + h.count("n2", k) + h.count("n3", k)
	t.Logf("admitted %d (%v); counts n0 %d n1 %d n2 %d", load.admitted, load.by, h.count("n0", k), h.count("n1", k), h.count("n2", k))
	if n := load.by[SourceOwner] + load.by[SourcePeer]; n > quota {
		t.Errorf("owners admitted %d of limit %d (%v): the new run counted the key from the joiner's fallback units beside its earlier run's replica", n, quota, load.by)
	}
	if held != int64(load.admitted) {
		t.Errorf("the cluster holds %d of the key; %d were admitted", held, load.admitted)
	}
}
