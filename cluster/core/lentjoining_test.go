package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// A node joins, and pulls one of its new keys from the key's owner, which
// has not heard of it yet and lends it the key (requests for it go there).
// Then the owner hears of the joiner, as joining: memberlist lists a node
// that has not joined its ring yet. A joining run is not gone: the loan
// stays until the owner's ring lists the joiner (and gives it the key) or
// the counter comes back. Before, the owner took any run it had seen for
// gone, ended the loan and counted the key again from nothing, its counter
// with the joiner (seed 1795822830013033918 of the simulator: a rolling
// restart and a join, graceful changes only, 13 admitted of 12).
func TestAKeyLentToAJoiningNodeStaysLentWhenTheLenderHearsItJoining(t *testing.T) {
	h := newHandNet(t, "n0", "n1")
	const quota = 10
	h.names = append(h.names, "n2", "n3")
	h.start("n2", true)
	h.start("n3", true)
	// A key of n0 (then n1), with n3 too, that n2 owns once it joins n0
	// and n1.
	k := h.keyWhere(func(r func(...string) Member) bool {
		return r("n0", "n1").Name == "n0" && r("n0", "n1", "n3").Name == "n0" && r("n0", "n1", "n2").Name == "n2"
	})
	load := newHandLoad(h, k, quota)
	for range quota - 1 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond)

	// n2 joins; n1 hears of it, n0 not yet. Through n2, the key's owner
	// by its ring, a request pulls the key from n0, which lends it.
	n2 := h.cores["n2"]
	n2.Joined(h.now)
	h.list("n2", []Member{h.member("n0"), h.member("n1")}, nil)
	h.advance(10*time.Millisecond, "n2")
	if !n2.Member() {
		t.Fatal("n2 did not join")
	}
	h.list("n1", []Member{h.member("n0"), h.member("n2")}, nil)
	load.spend("n2")
	h.advance(100 * time.Millisecond)
	load.resume()

	// n0 hears of n2, as joining, as its ring changes (n3 joined it,
	// which leaves the key with n0).
	h.cores["n3"].Joined(h.now)
	h.cores["n0"].SetMembership(h.now, Membership{Members: []Member{h.member("n1"), h.member("n3")}, Joining: []Member{h.member("n2")}})
	h.pump()
	for range 3 {
		load.spend("n0")
	}
	h.advance(100 * time.Millisecond)
	load.resume()
	t.Logf("admitted %d (%v); counts n0 %d n1 %d n2 %d", load.admitted, load.by, h.count("n0", k), h.count("n1", k), h.count("n2", k))
	if load.admitted > quota {
		t.Errorf("%d admitted of limit %d: the lender counted the key again from nothing", load.admitted, quota)
	}
}

// keyOwnedInTurn returns a key the first n nodes own in turn: h.names[i]
// owns it once those before it are gone, for each i below n.
func (h *handNet) keyOwnedInTurn(n int) limiter.Key {
	return h.keyWhere(func(owner func(names ...string) Member) bool {
		for i, name := range h.names[:n] {
			if owner(h.names[i:]...).Name != name {
				return false
			}
		}
		return true
	})
}

// keyWhere returns a key for which ok holds, given the owner of the key
// by a ring of the current runs of the nodes named.
func (h *handNet) keyWhere(ok func(owner func(names ...string) Member) bool) limiter.Key {
	for i := range 10000 {
		k := limiter.ZoneKey(keyhash.New([]byte("keys"), "k").String(string(rune('a'+i%26))+string(rune(i))), 1)
		owner := func(names ...string) Member {
			var ms []Member
			for _, x := range names {
				ms = append(ms, h.member(x))
			}
			o, _ := NewRing(h.hash, ms).Owner(k.Route())
			return o
		}
		if ok(owner) {
			return k
		}
	}
	h.t.Fatal("no such key")
	return 0
}
