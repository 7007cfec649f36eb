package core

import (
	"testing"
	"time"
)

// A node that joins through a seed which has not yet heard that a leaving
// node left takes the leaver from the seed's view, after the leave was
// gossiped. As memberlist relays a leave to every live node (its seed
// passes on what it learns), the joiner hears of it shortly after; the
// simulator's driver must not keep the leaver listed as leaving until it
// runs again (the joiner's hand-off would wait for its seal, and its keys
// would be decided by fallback, in a schedule of graceful changes only).
func TestSimJoinerHearsOfALeaverThatLeftBeforeItsSeedKnew(t *testing.T) {
	s := newSim(1, 4)
	s.start("n00", false, Kept{})
	leaver := s.start("n01", true, Kept{})
	seed := s.start("n02", true, Kept{})
	s.runUntil(s.now.Add(time.Second))
	s.leave(leaver)
	s.runUntil(s.now.Add(100 * time.Millisecond))
	if e := seed.view["n01"]; e == nil || e.status != obsLeaving {
		t.Fatalf("the seed does not see n01 leaving: %+v", e)
	}
	s.stop(leaver) // gossiped now: the seed hears of it shortly
	joiner := s.start("n03", true, Kept{})
	s.adoptView(joiner, seed) // before the seed heard
	joiner.joined = true
	joiner.core.Joined(s.now)
	if e := joiner.view["n01"]; e == nil || e.status != obsLeaving {
		t.Fatalf("the joiner did not take n01 leaving from its seed: %+v", e)
	}
	s.runUntil(s.now.Add(500 * time.Millisecond))
	if e := joiner.view["n01"]; e != nil {
		t.Fatalf("half a second after n01 left, the joiner still lists it: %+v", e)
	}
	if got := len(joiner.core.known.Load().leaving); got != 0 {
		t.Fatalf("the joiner's core still knows %d nodes leaving", got)
	}
}

// The core's side of it: a joiner whose driver lists a node leaving that
// the joiner's stable ring lacks waits for that node's seal; once its
// driver no longer lists it (it left), the joiner's keys settle from the
// others' seals, and its requests are decided by their owner, not by
// fallback, counting what the leaver handed over.
func TestAJoinersKeySettlesOnceItsDriverNoLongerListsALeaverThatWent(t *testing.T) {
	h := newHandNet(t, "n0", "n1")
	const quota = 10
	h.names = append(h.names, "n2")
	n2 := h.start("n2", true)
	k := h.keyMovingTo("n1", "n0", "n2")
	load := newHandLoad(h, k, quota)
	for range 3 {
		load.spend("n1")
	}
	load.resume()

	// n1 leaves: it hands the key to n0, and goes.
	h.cores["n1"].Leave(h.now)
	h.cores["n0"].SetMembership(h.now, Membership{Leaving: []Member{h.member("n1")}})
	h.advance(500*time.Millisecond, "n0", "n1")
	if !h.cores["n1"].Drained() || h.count("n0", k) != 3 {
		t.Fatalf("n1 drained %v, n0 counts %d of the key; want true and 3", h.cores["n1"].Drained(), h.count("n0", k))
	}
	h.down["n1"] = true
	h.list("n0", nil, nil)

	// n2 joins through n0, whose view still listed n1 leaving.
	n2.Joined(h.now)
	n2.SetMembership(h.now, Membership{Members: []Member{h.member("n0")}, Leaving: []Member{h.member("n1")}})
	h.pump()
	h.advance(10*time.Millisecond, "n0", "n2")
	if !n2.Member() {
		t.Fatal("n2 did not join")
	}
	h.list("n0", []Member{h.member("n2")}, nil)

	// n2's driver hears that n1 left.
	h.list("n2", []Member{h.member("n0")}, nil)
	h.advance(100*time.Millisecond, "n0", "n2")
	tk := load.spend("n2")
	load.resume()
	if tk.d.Source != SourceOwner || !tk.d.Allowed || h.count("n2", k) != 4 {
		t.Fatalf("a request through n2: source %v allowed %v, n2 counts %d; want the owner's, allowed, 4", tk.d.Source, tk.d.Allowed, h.count("n2", k))
	}
}
