package core

import (
	"testing"
	"time"
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
	load := newHandLoad(h, k, 30)
	for range 5 {
		load.spend("n1")
	}
	load.resume()
	n0 := h.cores["n0"]

	// n0 stops answering; the others declare it dead. It comes back and
	// learns so: it counts nothing, in no ring, until it joins again.
	h.down["n0"] = true
	h.advance(100 * time.Millisecond)
	h.setMembership("n1", []string{"n0"})
	h.setMembership("n2", []string{"n0"})
	h.advance(time.Second, "n1", "n2")
	h.learnsItWasDeclaredDead("n0")
	if n0.Member() {
		t.Fatal("n0 is a member again at once")
	}
	// Gossip has not told it of the others since: it knows no member.
	h.list("n0", nil, []Peer{h.member("n1").Peer(), h.member("n2").Peer()})
	if _, _, ok := n0.placeOf(n0.view.Load(), k); ok {
		t.Fatal("n0 knows a place for the key")
	}

	// A unit of the key is given back to n0.
	n0.handleTransfer(h.now, h.cores["n2"].self, Transfer{Seq: 500, To: n0.self.Inc, Mode: ModeRefund, Reqs: load.unitOf(k), At: h.now.UnixNano()}, true)
	h.pump()
	load.admitted--

	// n0 joins again.
	for _, name := range h.names {
		h.setMembership(name, nil)
	}
	h.advance(2 * time.Second)
	if !n0.Member() {
		t.Fatal("n0 did not join again")
	}
	var held int64
	for _, name := range h.names {
		held += h.count(name, k)
	}
	if held != int64(load.admitted) {
		t.Errorf("the cluster counts %d (n1 %d); %d were admitted once the unit was given back", held, h.count("n1", k), load.admitted)
	}
}
