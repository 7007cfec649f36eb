package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Two nodes, n2 and n3, join at once, each hearing of the other as a
// member; the key's owner n0 has heard of neither yet (n1 has heard of
// both). By the ring of all four n2 owns the key; by the ring without n2,
// n3 does; by the ring without both, n0 does, and n0 counts it (5
// admitted). n2 pulls the key from the node its stable ring names, n3,
// which never counted it: n3, joining too, sends the pull on to where its
// own hand-off would take the key from without n2, n0, which lends n2 the
// key, as to a single joiner. Before, n3 answered "nothing here", n2
// started the key from nothing while n0, whose ring is unchanged, counted
// on from 5: two counters of one key, each deciding its own requests up to
// the limit (60 admitted of 30).
func TestTwoNodesJoiningAtOnceDoNotCountAKeyBesideItsOwner(t *testing.T) {
	const quota = 30
	h, k, load := twoJoinersAtOnce(t, quota, 5)
	for range quota {
		load.spend("n0")
		load.spend("n2")
	}
	h.advance(50 * time.Millisecond)
	load.resume()
	fb := load.by[SourceFallback]
	if load.admitted > quota+fb {
		t.Errorf("%d admitted of limit %d and %d by fallback (%v): n0 counts %d, n2 %d, n3 %d", load.admitted, quota, fb, load.by, h.count("n0", k), h.count("n2", k), h.count("n3", k))
	}
}

// The same two joiners, with requests under the limit through every node
// while n0 has heard of neither and once it has heard of both: none is
// refused, and the key is counted once, at n2 (lent there by n0, which
// counts nothing of it beside; then n2's by every ring, with what n0
// admitted in fallback meanwhile).
func TestTwoNodesJoiningAtOnceRefuseNoRequestUnderTheLimit(t *testing.T) {
	const quota = 30
	h, k, load := twoJoinersAtOnce(t, quota, 5)
	spend := func(n int) {
		for i := range n {
			load.spend([]string{"n0", "n1", "n2", "n3"}[i%4])
		}
		h.advance(50 * time.Millisecond)
		load.resume()
	}
	spend(12)
	if got := h.count("n0", k); got != 0 {
		t.Errorf("n0 counts %d of the key beside n2 (%v)", got, load.by)
	}
	for _, name := range []string{"n0", "n1", "n2", "n3"} {
		h.list(name, h.othersThan(name), nil)
	}
	h.advance(100 * time.Millisecond)
	spend(12)
	if load.admitted != 29 {
		t.Errorf("%d of 29 requests admitted under a limit of %d: a client under it was refused (%v)", load.admitted, quota, load.by)
	}
	if got := h.count("n2", k); got != int64(load.admitted) {
		t.Errorf("n2 counts %d of the key; %d were admitted (%v)", got, load.admitted, load.by)
	}
}

// twoJoinersAtOnce starts n0 and n1, with spent requests for a key through
// n0, its owner, then has n2 and n3 join at once: each lists the other as
// a member (a driver does once Joined makes Member true), n1 lists both,
// and n0 has heard of neither. By the ring of all four n2 owns the key, by
// the ring without n2 n3 does.
func twoJoinersAtOnce(t *testing.T, quota int64, spent int) (*handNet, limiter.Key, *handLoad) {
	h := newHandNet(t, "n0", "n1")
	h.names = append(h.names, "n2", "n3")
	h.start("n2", true)
	h.start("n3", true)
	k := h.keyWhere(func(r func(...string) Member) bool {
		return r("n0", "n1").Name == "n0" && r("n0", "n1", "n2", "n3").Name == "n2" && r("n0", "n1", "n3").Name == "n3"
	})
	load := newHandLoad(h, k, quota)
	for range spent {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond)
	h.cores["n2"].Joined(h.now)
	h.cores["n3"].Joined(h.now)
	h.list("n2", h.othersThan("n2"), nil)
	h.list("n3", h.othersThan("n3"), nil)
	h.list("n1", h.othersThan("n1"), nil)
	h.advance(50 * time.Millisecond)
	if !h.cores["n2"].Member() || !h.cores["n3"].Member() {
		t.Fatal("n2 and n3 did not join")
	}
	return h, k, load
}

// Three nodes, n2, n3 and n4, join at once, each hearing of the others as
// members; the key's owner n0 has heard of none of them. The key ranks
// n2, n3, n4, then n0: n2 pulls it from n3, which (joining) sends the pull
// on to n4, the owner by its stable ring without n2; n4 takes n3 for a
// member that owns the key without n2 and sends it back there. Before, the
// pull went round between n3 and n4, n2's requests fell back, and once the
// hand-off window ended n2 counted the key from nothing beside n0 (60
// admitted of 30 and 7 by fallback). A pull sent back to a node that
// already sent it on goes to the asker's stable owner of the key without
// the nodes that did, n0, which lends it the key.
func TestThreeNodesJoiningAtOnceDoNotSendAKeysPullRoundAmongThemselves(t *testing.T) {
	const quota = 30
	h := newHandNet(t, "n0", "n1")
	joiners := []string{"n2", "n3", "n4"}
	h.names = append(h.names, joiners...)
	for _, n := range joiners {
		h.start(n, true)
	}
	k := h.keyWhere(func(r func(...string) Member) bool {
		return r("n0", "n1").Name == "n0" && r("n0", "n1", "n2", "n3", "n4").Name == "n2" && r("n0", "n1", "n3", "n4").Name == "n3" && r("n0", "n1", "n4").Name == "n4"
	})
	load := newHandLoad(h, k, quota)
	for range 5 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond)
	for _, n := range joiners {
		h.cores[n].Joined(h.now)
	}
	for _, n := range append(joiners, "n1") {
		h.list(n, h.othersThan(n), nil)
	}
	h.advance(50 * time.Millisecond)
	for range 10 {
		load.spend("n0")
		load.spend("n2")
		h.advance(100 * time.Millisecond)
	}
	load.resume()
	if got := h.count("n2", k); got == 0 {
		t.Errorf("n2 counts nothing of the key, n0 %d: it was not lent to n2 (%v)", h.count("n0", k), load.by)
	}
	h.advance(h.cfg.HandoffWindow)
	for range quota {
		load.spend("n0")
		load.spend("n2")
	}
	h.advance(100 * time.Millisecond)
	load.resume()
	if fb := load.by[SourceFallback]; load.admitted > quota+fb {
		t.Errorf("%d admitted of limit %d and %d by fallback (%v): n0 counts %d, n2 %d", load.admitted, quota, fb, load.by, h.count("n0", k), h.count("n2", k))
	}
}
