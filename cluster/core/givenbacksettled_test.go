package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// As in TestUnitsGivenBackAgainOfWhichTheCounterHereHeldFewerArePutBackAsFarAsTheyCameOff,
// but the give-back again (2 units) comes to n1 while the key is moving
// there, with a unit n2 admitted in fallback: it waits for the key to
// settle, and comes off the counter the key gathered, which holds 1. n0's
// counters, lacking both units, get back the 1 that came off, no more
// (4 counted of 4 admitted).
func TestUnitsGivenBackAgainWhileTheKeyMovesArePutBackAsFarAsTheyCameOffTheCounterItGathered(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	k := h.keyOwnedBy("n0", "n1")
	load := newHandLoad(h, k, 30)
	g := h.n0GivesBackUnreplicatedAndStops(t, load, 4, 2)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	unit := n0.engine.StatesOf(h.now, []limiter.Key{k})
	unit[0].Cur = 1
	for _, x := range []string{"n2", "n3"} {
		h.setMembership(x, []string{"n0"})
	}
	h.drops = func(from string, o Outgoing) bool { return from == "n1" || o.To.Name == "n1" }
	h.setMembership("n1", []string{"n0"})
	if !n1.HandoffUnderway() {
		t.Fatal("no hand-off under way at n1")
	}
	// A unit n2 admitted in fallback, and the give-back again in n0's place.
	n1.handleTransfer(h.now, n2.self, Transfer{Seq: 999, To: n1.self.Inc, Mode: ModeAdd, States: unit}, true)
	load.admitted++
	h.givesBackAgainAtN1(g)
	h.drops = nil
	h.pump()
	h.advance(time.Second, "n1", "n2", "n3")
	if n1.HandoffUnderway() {
		t.Fatal("n1 has not settled the key")
	}
	if got := h.count("n1", k); got != 0 {
		t.Fatalf("n1 counts %d once the key settled; want 0 (the unit, given back)", got)
	}
	h.advance(200*time.Millisecond, "n1", "n2", "n3")
	h.n0ComesBackWithout(k, load)
}
