package core

import (
	"testing"
	"time"
)

// Two nodes, n2 and n3, join at once, each hearing of the other as a
// member; the key's owner n0 has heard of neither yet (n1 has heard of
// both). By the ring of all four n2 owns the key; by the ring without n2,
// n3 does; by the ring without both, n0 does, and n0 counts it (5
// admitted). n2 pulls the key from the node its stable ring names, n3,
// which never counted it, and starts it from nothing, while n0, whose ring
// is unchanged, counts on from 5: two counters of one key, each deciding
// its own requests up to the limit. The key must be counted once: n2 must
// get it from n0 (lent, as to a single joiner), or decide by fallback
// until it does.
func TestTwoNodesJoiningAtOnceDoNotCountAKeyBesideItsOwner(t *testing.T) {
	const quota = 30
	h := newHandNet(t, "n0", "n1")
	h.names = append(h.names, "n2", "n3")
	h.start("n2", true)
	h.start("n3", true)
	k := h.keyWhere(func(r func(...string) Member) bool {
		return r("n0", "n1").Name == "n0" && r("n0", "n1", "n2", "n3").Name == "n2" && r("n0", "n1", "n3").Name == "n3"
	})
	load := newHandLoad(h, k, quota)
	for range 5 {
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
