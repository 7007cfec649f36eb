package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// n0, the key's owner, never replicated it (every replica to n1 lost),
// and applies a give-back whose answer is lost. n0 stops; n1 takes the
// key over with no counter of it, and the give-back is given back again
// to it in n0's place: nothing comes off, since no counter here holds
// the unit. n0 then comes back, and its counters, lacking the unit, come
// to n1: the key must count what was admitted. Recorded at n1 as come
// off its counter, the unit was put back into n0's counter as it came
// (5 counted of 4 admitted, a request under the limit refused).
func TestUnitsGivenBackAgainWhereNoCounterHeldThemArePutBackNowhere(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3")
		h.bucket.on = bucket
		k := h.keyOwnedBy("n0", "n1")
		load := newHandLoad(h, k, 30)
		g := h.n0GivesBackUnreplicatedAndStops(t, load, 4, 1)
		h.declareDead("n0")
		h.advance(time.Second, "n1", "n2", "n3")
		if got := h.count("n1", k); got != 0 {
			t.Fatalf("n1 counts %d after taking the key over; want 0 (no replica)", got)
		}
		h.givesBackAgainAtN1(g)
		h.pump()
		h.advance(200*time.Millisecond, "n1", "n2", "n3")
		h.n0ComesBackWithout(k, load)
	})
}

// deadOwnerGaveBack is a give-back a dead owner applied, whose answer was
// lost: the units given back and the instant they were counted at.
type deadOwnerGaveBack struct {
	reqs []limiter.Request
	at   int64
}

// deadOwnersGiveBack numbers the give-back n0 applies in
// n0GivesBackUnreplicatedAndStops.
const deadOwnersGiveBack = 77

// n0GivesBackUnreplicatedAndStops is the start the tests of units given
// back again in place of a dead owner's give-back share: n0 owns the key
// and every replica it sends is lost; it admits own units of it, then n2
// admits one through it; n0 applies a give-back of cost of n2's units
// whose answer is lost, and stops (down, not yet declared dead).
func (h *handNet) n0GivesBackUnreplicatedAndStops(t testing.TB, load *handLoad, own int, cost int64) deadOwnerGaveBack {
	t.Helper()
	h.drops = func(from string, o Outgoing) bool {
		t, ok := o.Msg.(Transfer)
		return ok && from == "n0" && t.Mode == ModeReplica
	}
	for range own {
		load.spend("n0")
	}
	n0, n2 := h.cores["n0"], h.cores["n2"]
	tk := load.spend("n2")
	if !tk.done || !tk.d.Allowed || tk.d.Source != SourcePeer {
		t.Fatalf("n2's request: %+v; want admitted by its owner", tk.d)
	}
	g := deadOwnerGaveBack{reqs: slices.Clone(tk.reqs)}
	if cost > 1 {
		g.reqs[0].Cost = cost
	}
	h.advance(100 * time.Millisecond)
	g.at = h.now.UnixNano()
	n0.handleTransfer(h.now, n2.self, Transfer{Seq: deadOwnersGiveBack, To: n0.self.Inc, Mode: ModeRefund, Reqs: g.reqs, At: g.at}, true)
	h.pump()
	load.admitted -= int(cost)
	h.advance(100 * time.Millisecond)
	h.down["n0"] = true
	h.advance(100 * time.Millisecond)
	return g
}

// givesBackAgainAtN1 gives g's units back again at n1, in n0's place, as
// n2 does when n0 is declared dead.
func (h *handNet) givesBackAgainAtN1(g deadOwnerGaveBack) {
	n1 := h.cores["n1"]
	n1.handleTransfer(h.now, h.cores["n2"].self, Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(g.reqs), At: g.at, Was: deadOwnersGiveBack, WasTo: h.cores["n0"].self}, true)
}
