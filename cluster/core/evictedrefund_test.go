package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node learns it was declared dead: it counts nothing until it joins
// again, in no ring, and its counters went out. Units of a key counted
// elsewhere are given back to it meanwhile (a node on its side of a split
// still took it for the key's owner, and passed the give-back on to it).
// It holds nothing of the key and knows no place for it: given back
// there, the units came off nothing and were lost, and the key's owner
// kept them counted (seed 1795912234613903859 of the simulator: 28 held
// of 27 admitted). They wait until a ring names the key's owner, and go
// there.
func TestUnitsGivenBackToANodeDeclaredDeadComeOffWhereTheKeyIsCounted(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOwnedBy("n1", "n2")
	load := h.spent(k, "n1", 5)

	// n0 stops answering; the others declare it dead. It comes back and
	// learns so: it counts nothing, in no ring, until it joins again, and
	// gossip has not told it of the others since.
	h.standsStillAndIsDeclaredDead("n0")
	h.learnsItWasDeclaredDeadKnowingNoMember("n0", k)

	h.unitGivenBackWaitsAtN0(k, load)

	// n0 joins again.
	h.joinsAgain("n0", 2*time.Second)
	h.heldBy(k, load.admitted, h.names...)
	load.spendsToTheLimit(t, "n1", "n0", "n2")
}

// spent returns the load of k, of limit 30, that spent n of it through
// node.
func (h *handNet) spent(k limiter.Key, node string, n int) *handLoad {
	load := newHandLoad(h, k, 30)
	for range n {
		load.spend(node)
	}
	load.resume()
	return load
}

// standsStillAndIsDeclaredDead has name stop answering, and the others
// declare it dead.
func (h *handNet) standsStillAndIsDeclaredDead(name string) {
	h.down[name] = true
	h.advance(100 * time.Millisecond)
	h.declareDead(name)
}

// joinsAgain has every node list every other as a member, and lets d
// pass: name, declared dead, joins again.
func (h *handNet) joinsAgain(name string, d time.Duration) {
	h.t.Helper()
	for _, x := range h.names {
		h.setMembership(x, nil)
	}
	h.advance(d)
	if !h.cores[name].Member() {
		h.t.Fatalf("%s did not join again", name)
	}
}

// declareDead has every node but dead declare them dead, and lets a
// second pass at them.
func (h *handNet) declareDead(dead ...string) {
	others := slices.DeleteFunc(slices.Clone(h.names), func(x string) bool { return slices.Contains(dead, x) })
	for _, x := range others {
		h.setMembership(x, dead)
	}
	h.advance(time.Second, others...)
}

// learnsItWasDeclaredDeadKnowingNoMember has name, declared dead by the
// others, come back and learn so: it counts nothing, in no ring, until it
// joins again; gossip has not told it of the others since, so it knows
// no member, and no place for k.
func (h *handNet) learnsItWasDeclaredDeadKnowingNoMember(name string, k limiter.Key) {
	h.t.Helper()
	h.learnsItWasDeclaredDead(name)
	c := h.cores[name]
	if c.Member() {
		h.t.Fatalf("%s is a member again at once", name)
	}
	var dead []Peer
	for _, x := range h.names {
		if x != name {
			dead = append(dead, h.member(x).Peer())
		}
	}
	h.list(name, nil, dead)
	if _, _, ok := c.placeOf(c.view.Load(), k); ok {
		h.t.Fatalf("%s knows a place for the key", name)
	}
}

// unitGivenBackWaitsAtN0 has n2 give a unit of k back to n0, which
// knows no place for it: the unit waits there.
func (h *handNet) unitGivenBackWaitsAtN0(k limiter.Key, load *handLoad) {
	h.t.Helper()
	n0 := h.cores["n0"]
	n0.handleTransfer(h.now, h.cores["n2"].self, Transfer{Seq: 500, To: n0.self.Inc, Mode: ModeRefund, Reqs: load.unitOf(k), At: h.now.UnixNano()}, true)
	h.pump()
	load.admitted--
	if !n0.unrefunded.waiting() {
		h.t.Fatal("the unit given back does not wait at n0")
	}
}
