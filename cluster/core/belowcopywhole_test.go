package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// n1 takes n0's key over from its replica (5), and a unit n0 admitted is
// given back to it (4: below the copy of n0's counter it holds); it
// admits one more (5). None of n1's replicas reach n2, which takes the
// key over from nothing once n1 is declared dead too, and admits one
// (1). n0, declared dead while alive, sends its counter (5, the unit
// given back to n1 among them) to n2: no copy of it is held there, and
// it is added whole (6). n1's counters then come: they hold 4 of n0's
// 5, but the counter at n2 holds n0's whole, the unit given back to n1
// still in it, so the two share all 5: n1's adds nothing (6 counted of
// 6), and the owner admits up to the limit, no further. Shared no more
// than the 4 n1's counter holds, its one more was added, and the unit
// given back counted again (7 of 6).
func TestACounterBelowTheCopyItHoldsSharesAllOfItWhereTheCounterHereHoldsTheCopyWhole(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h, k, load := n1TakesTheKeyOverAndIsGivenBackAUnit(t, bucket)
		load.spend("n1")
		h.n1StopsUnreplicated(t, k, load)
		load.spend("n3")
		h.advance(100*time.Millisecond, "n2", "n3", "n4", "n5")
		h.learnsItWasDeclaredDead("n0")
		h.setMembership("n0", []string{"n1"})
		h.advance(time.Second, "n0", "n2", "n3", "n4", "n5")
		h.down["n0"] = true
		if got := h.count("n2", k); got != 6 {
			t.Fatalf("n2 counts %d once n0's counters came; want 6 (its own 1, n0's 5)", got)
		}
		h.learnsItWasDeclaredDead("n1")
		h.advance(time.Second, "n1", "n2", "n3", "n4", "n5")
		h.down["n1"] = true
		alive := []string{"n2", "n3", "n4", "n5"}
		h.leaveAlive(alive, "n0", "n1")
		h.countsExactly(k, load, alive)
		load.spendsToTheLimit(t, "n2", "n3", "n4", "n5")
	})
}

// n1TakesTheKeyOverAndIsGivenBackAUnit is the start the tests of a
// counter below a copy it holds share: of six nodes, n0, n1, n2 and n3
// own a key in turn (keyOwnedInTurn); n0 admits 4 and n2 one through it
// (5, replicated to n1); n0 is declared dead while alive, and every
// replica n1 sends from then on is lost; n1 takes the key over from the
// replica (5) and n2's unit is given back to it (4, below the copy of
// n0's counter it holds).
func n1TakesTheKeyOverAndIsGivenBackAUnit(t *testing.T, bucket bool) (*handNet, limiter.Key, *handLoad) {
	t.Helper()
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4", "n5")
	h.bucket.on = bucket
	k := h.keyOwnedInTurn(4)
	load := newHandLoad(h, k, 30)
	for range 4 {
		load.spend("n0")
	}
	tk := load.spend("n2")
	h.advance(100 * time.Millisecond) // replicated to n1
	h.down["n0"] = true
	h.drops = func(from string, o Outgoing) bool {
		t, ok := o.Msg.(Transfer)
		return ok && from == "n1" && t.Mode == ModeReplica
	}
	h.declareDead("n0")
	n1, n2 := h.cores["n1"], h.cores["n2"]
	n1.handleTransfer(h.now, n2.self, Transfer{Seq: 900, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: h.now.UnixNano()}, true)
	h.pump()
	load.admitted--
	return h, k, load
}

// n1StopsUnreplicated has n1, counting all that was admitted and none of
// it replicated since it took the key over, declared dead while alive:
// n2 takes the key over with nothing of it.
func (h *handNet) n1StopsUnreplicated(t *testing.T, k limiter.Key, load *handLoad) {
	t.Helper()
	h.advance(100 * time.Millisecond)
	if got := h.count("n1", k); got != int64(load.admitted) {
		t.Fatalf("n1 counts %d; %d were admitted", got, load.admitted)
	}
	h.down["n1"] = true
	h.declareDead("n0", "n1")
	h.drops = nil
	if got := h.count("n2", k); got != 0 {
		t.Fatalf("n2 counts %d after taking the key over; want 0 (no replica of n1's)", got)
	}
}
