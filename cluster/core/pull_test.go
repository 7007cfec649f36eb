package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// list tells name's core who the others are, by run: members and dead.
func (h *handNet) list(name string, members []Member, dead []Peer) {
	h.cores[name].SetMembership(h.now, Membership{Members: members, Dead: dead})
	h.pump()
}

// member returns the current run of name as a member.
func (h *handNet) member(name string) Member {
	return Member{Name: name, Inc: h.incs[name], PeerAddr: name}
}

// keyMovingTo returns a key that first owns, with second its successor, in
// a ring of first and second, and that joiner owns once it joins them.
func (h *handNet) keyMovingTo(first, second, joiner string) limiter.Key {
	pair := NewRing(h.hash, []Member{h.member(first), h.member(second)})
	all := NewRing(h.hash, []Member{h.member(first), h.member(second), h.member(joiner)})
	for i := range 10000 {
		k := limiter.ZoneKey(keyhash.New([]byte("keys"), "k").String(string(rune('a'+i%26))+string(rune(i))), 1)
		o, _ := pair.Owner(k.Route())
		s, _ := pair.Successor(k.Route())
		j, _ := all.Owner(k.Route())
		if o.Name == first && s.Name == second && j.Name == joiner {
			return k
		}
	}
	h.t.Fatalf("no key of %s (then %s) that moves to %s", first, second, joiner)
	return 0
}

// A node joins while the owner of one of its new keys has crashed and
// restarted, before anyone declared the crashed run dead: the joiner pulls
// the key from the owner it knows (the crashed run), and the new run at
// the same address gets the pull. The new run never held the key; what
// the crashed run counted lives only in the replica its successor keeps.
// Were the new run's answer ("nothing here") taken as the crashed run's,
// the joiner would count the key from nothing and admit its whole limit
// again.
func TestAPullAnsweredByAnotherRunOfItsSourceSettlesNothing(t *testing.T) {
	h := newHandNet(t, "n0", "n1")
	const quota = 10
	// n2 starts with seeds: it joins later.
	h.names = append(h.names, "n2")
	h.start("n2", true)
	k := h.keyMovingTo("n0", "n1", "n2")
	load := newHandLoad(h, k, quota)
	for range 3 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond) // replicated to n1
	if load.admitted != 3 || h.count("n0", k) != 3 {
		t.Fatalf("n0 admitted %d and counts %d; want 3 and 3", load.admitted, h.count("n0", k))
	}

	// n0 crashes; n2 joins, knowing n0's crashed run as a member; n0
	// starts again at once, and nobody knows of its new run yet.
	crashed := h.member("n0")
	h.down["n0"] = true
	n2 := h.cores["n2"]
	n2.Joined(h.now)
	h.list("n2", []Member{crashed, h.member("n1")}, nil)
	h.advance(10*time.Millisecond, "n2")
	if !n2.Member() {
		t.Fatal("n2 did not join")
	}
	h.list("n1", []Member{crashed, h.member("n2")}, nil)
	h.start("n0", true)

	// Requests for the key through n2, its owner now: it pulls the key
	// from n0, and the new run answers.
	for range quota {
		load.spend("n2")
	}
	h.advance(100 * time.Millisecond)
	load.resume()

	// The crashed run is declared dead; its new run joins.
	dead := []Peer{crashed.Peer()}
	h.list("n1", []Member{h.member("n2")}, dead)
	h.list("n2", []Member{h.member("n1")}, dead)
	h.advance(2 * time.Second)
	load.resume()
	h.cores["n0"].Joined(h.now)
	all := func(name string) []Member {
		var ms []Member
		for _, x := range h.names {
			if x != name {
				ms = append(ms, h.member(x))
			}
		}
		return ms
	}
	for _, name := range h.names {
		h.list(name, all(name), nil)
	}
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
	if load.admitted > quota {
		t.Errorf("%d admitted of limit %d: the key was counted from nothing after a pull the crashed run never saw", load.admitted, quota)
	}
	if held != int64(load.admitted) {
		t.Errorf("the cluster holds %d of the key; %d were admitted", held, load.admitted)
	}
}

// A key's owner crashes; its successor leaves gracefully before anyone
// took the key over, and passes the key's replica on to the last node,
// which is left alone, without a majority: it keeps the replica, its
// hand-off of the dead owner's keys waiting. The successor starts again,
// joins, owns the key, and pulls it from the node alone. That node holds
// no counter of the key, only the dead run's replica: answered "nothing
// here", the joiner counted the key from nothing (seed
// 1795783418819287972 of the simulator: 8 admitted of 7), the replica
// reaching it only once the joiner's own replica displaced it there.
func TestAPullGivesTheReplicaOfADeadRunItsSourceKeeps(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	const quota = 10
	// A key of n2, then n1, that the next run of n1 owns in a ring with n0.
	next := Member{Name: "n1", Inc: h.incs["n1"] + 1, PeerAddr: "n1"}
	pair := NewRing(h.hash, []Member{h.member("n0"), next})
	var k limiter.Key
	for not := []limiter.Key(nil); ; not = append(not, k) {
		k = h.keyOwnedBy("n2", "n1", not...)
		if o, _ := pair.Owner(k.Route()); o.Name == "n1" {
			break
		}
	}
	load := newHandLoad(h, k, quota)
	for range 6 {
		load.spend("n2")
	}
	h.advance(20 * time.Millisecond) // replicated to n1
	if load.admitted != 6 {
		t.Fatalf("n2 admitted %d; want 6", load.admitted)
	}

	// n2 crashes; n1 leaves before anyone noticed, passing the replica on
	// to n0.
	crashed := h.member("n2")
	h.down["n2"] = true
	n1 := h.cores["n1"]
	n1.Leave(h.now)
	leaving := []Member{h.member("n1")}
	h.cores["n0"].SetMembership(h.now, Membership{Members: []Member{crashed}, Leaving: leaving})
	h.pump()
	h.advance(100*time.Millisecond, "n0", "n1")
	if !n1.Drained() {
		t.Fatal("n1 has not handed everything over")
	}

	// n0, alone, declares n2 dead: without a majority it keeps the
	// replica. The next run of n1, joined through n0 before n0 lists it,
	// owns the key and pulls it from n0.
	h.list("n0", nil, []Peer{crashed.Peer()})
	h.advance(100*time.Millisecond, "n0")
	n0 := h.cores["n0"]
	if n0.Replicas() != 1 {
		t.Fatalf("n0 keeps %d replicas; want the dead run's one", n0.Replicas())
	}
	reply := n0.handlePull(h.now, next.Peer(), Pull{To: n0.self.Inc, Keys: []limiter.Key{k}})
	var given int64
	for _, tr := range reply.Given {
		given += windowCount(tr.States)
	}
	if reply.Refused || given != 6 {
		t.Errorf("the pull was answered with %d of the key (refused %v); want the dead run's 6: the joiner would count it from nothing", given, reply.Refused)
	}
	if n0.Replicas() != 0 {
		t.Errorf("n0 still keeps %d replicas after it gave the key's away: it would send it again", n0.Replicas())
	}
}
