package core

import (
	"testing"
	"time"
)

// As TestUnitsGivenBackAgainInPlaceOfAllTheDeadOwnerHeldArePutBackWhereItsCountersCome
// (on windows), but the record that the unit came off n1's counter does
// not wait at n1: n1 leaves while n0 is dead, and the record goes with
// the key's counter to its next owner; or n1 is declared dead too, and
// the record goes with the replica of its counter to the node that takes
// the key over from it. n0, coming back, meets the record there, and the
// unit is put back once (1 counted of 1 admitted).
func TestUnitsGivenBackAgainInPlaceOfAllTheDeadOwnerHeldArePutBackWhereTheRecordWent(t *testing.T) {
	for _, how := range []string{"leaves", "dies"} {
		t.Run(how, func(t *testing.T) {
			h := newHandNet(t, "n0", "n1", "n2", "n3")
			k := h.keyOwnedBy("n0", "n1")
			load := newHandLoad(h, k, 30)
			g := h.n0GivesBackUnreplicatedAndStops(t, load, 0, 1)
			h.declareDead("n0")
			h.advance(time.Second, "n1", "n2", "n3")
			if own := load.spend("n1"); !own.done || !own.d.Allowed {
				t.Fatalf("n1's request: %+v; want admitted", own.d)
			}
			h.givesBackAgainAtN1(g)
			h.pump()
			if got := h.count("n1", k); got != 0 {
				t.Fatalf("n1 counts %d after the give-back again; want 0", got)
			}
			h.advance(500*time.Millisecond, "n1", "n2", "n3")
			if how == "leaves" {
				h.leavesWhileN0IsDead("n1")
			} else {
				h.down["n1"] = true
				h.declareDead("n0", "n1")
				h.advance(2*time.Second, "n2", "n3")
			}
			if how == "leaves" {
				h.n0ComesBackWithout(k, load, "n1")
				return
			}
			// n1 is listed as dead as n0 comes back: not listed at all,
			// it is taken to have left gracefully, and its replica for
			// stale.
			h.drops = nil
			h.learnsItWasDeclaredDead("n0")
			h.advance(2 * time.Second)
			alive := []string{"n0", "n2", "n3"}
			for _, name := range alive {
				h.list(name, h.othersThan(name, "n1"), []Peer{h.member("n1").Peer()})
			}
			h.advance(3 * time.Second)
			h.countsAndLimits(k, load, alive)
		})
	}
}
