package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner n2 receives n1's counter of it, handed over by n1 itself:
// 8, its last word (n1 had admitted 9 and given one back). n2 then leaves
// gracefully and hands the key's counter to n0, which owns the key
// without it. Late, a copy of n1's counter taken before the give-back (9,
// n1's replica sent on by a node that took n1 for dead) reaches n0. It is
// an older copy of the counter whose last word n0 holds (inside n2's
// counter): it adds nothing, and n0 counts 8. Had it reached n2 before the
// leave, n2 would have counted 8 (the record there says n1's counter was
// handed over); the record that goes with the counter to n0 says only
// that it holds 8 of n1's, so the older copy, larger, adds its 9th there.
func TestAnOlderCopyOfAHandedOverCounterAddsNothingWhereTheCounterWentOn(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3")
	k := h.keyOrdered("n2", "n0", "n1")
	older, handed := loweredCounter(h.now, k, 9)
	n0, n1, n2, n3 := h.cores["n0"], h.cores["n1"], h.cores["n2"], h.cores["n3"]
	own := Transfer{Seq: 1000, To: n2.self.Inc, Epoch: 1, Mode: ModeAdd, Own: true, States: []limiter.State{handed}}
	n2.handleTransfer(h.now, n1.self, own, false)
	h.pump()
	if got := h.count("n2", k); got != 8 {
		t.Fatalf("n2 counts %d of the key; n1 handed 8 over", got)
	}

	// n2 leaves: the key's counter goes to n0.
	n2.Leave(h.now)
	h.pump()
	h.othersSeeLeaveAndGo("n2")
	h.advance(100 * time.Millisecond)
	if got := h.count("n0", k); got != 8 {
		t.Fatalf("n0 counts %d of the key after n2 left; n2 handed it 8", got)
	}

	// The older copy of n1's counter arrives at n0.
	copyOf := Transfer{Seq: 1000, To: n0.self.Inc, Epoch: 1, Mode: ModeAdd, CountersOf: n1.self, States: []limiter.State{older}}
	n0.handleTransfer(h.now, n3.self, copyOf, false)
	h.pump()
	h.advance(100 * time.Millisecond)
	if got := h.count("n0", k) + h.count("n1", k) + h.count("n3", k); got != 8 {
		t.Errorf("the cluster counts %d of the key (n0 %d); n1's counter, handed over, holds 8", got, h.count("n0", k))
	}
}

// As above, but the counter n1 hands over reaches a node that does not
// count the key (n2: the rings disagree while membership changes) and is
// passed on to n0, which counts it and had counted the older copy (9) of
// n1's counter already. n0 counts 8: n1's last word comes off what the
// older copy held beyond it wherever it is weighed. Passed on as n1's
// counter like any copy, it is weighed as one (the larger stands), and the
// unit given back counts again.
func TestAHandedOverCounterPassedOnLowersTheOlderCopyWhereTheKeyIsCounted(t *testing.T) {
	h, k, handed := anOlderCopyCountedAtN0(t)
	n1, n2 := h.cores["n1"], h.cores["n2"]
	own := Transfer{Seq: 1000, To: n2.self.Inc, Epoch: 1, Mode: ModeAdd, Own: true, States: []limiter.State{handed}}
	n2.handleTransfer(h.now, n1.self, own, false)
	h.pump()
	h.advance(100 * time.Millisecond)
	if got := h.clusterCount(k); got != 8 {
		t.Errorf("the cluster counts %d of the key (%v); n1's counter, handed over, holds 8", got, h.counts(k))
	}
}

// As above, but n1's last word is its counter sent as it stopped
// counting, declared dead (ModeEvicted, 8), carried for it by n3 to n2,
// which kept no replica of n1's of the key and does not count it: n2
// sends it on to n0, where the older copy (9) is counted, as n1's
// counter. n0 counts 8. Sent on as a plain copy of n1's counter, the
// larger stood there, and the unit given back counted again.
func TestAnEvictedCounterPassedOnLowersTheOlderCopyWhereTheKeyIsCounted(t *testing.T) {
	h, k, evicted := anOlderCopyCountedAtN0(t)
	n1, n2, n3 := h.cores["n1"], h.cores["n2"], h.cores["n3"]
	last := Transfer{Seq: 1001, To: n2.self.Inc, Epoch: 1, Mode: ModeEvicted, Evicted: n1.self, States: []limiter.State{evicted}}
	n2.handleTransfer(h.now, n3.self, last, false)
	h.pump()
	h.advance(100 * time.Millisecond)
	if got := h.clusterCount(k); got != 8 {
		t.Errorf("the cluster counts %d of the key (%v); n1's counter, sent as it stopped counting, holds 8", got, h.counts(k))
	}
}

// The first case the other way round: n0 counts the older copy of n1's
// counter (9) first, then n2's counter reaches it, handed over by n2, and
// holds n1's handed-over counter (8), its last word, which the record
// that goes with it says (Held.Last). n2's counter holds nothing but
// that: n0 counts 8, what the older copy held beyond the last word coming
// off. Without the mark the record was a copy's: the larger stood, 9.
func TestACounterHoldingALastWordLowersTheOlderCopyWhereItArrives(t *testing.T) {
	h, k, handed := anOlderCopyCountedAtN0(t)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	own := Transfer{Seq: 1000, To: n0.self.Inc, Epoch: 1, Mode: ModeAdd, Own: true, States: []limiter.State{handed},
		Holds: []Held{{Run: n1.self, State: handed, Last: true}}}
	n0.handleTransfer(h.now, n2.self, own, false)
	h.pump()
	h.advance(100 * time.Millisecond)
	if got := h.clusterCount(k); got != 8 {
		t.Errorf("the cluster counts %d of the key (%v); n2's counter holds n1's last word, 8, and nothing more", got, h.counts(k))
	}
}

// anOlderCopyCountedAtN0 starts four nodes, n0 to n3, and a key that n0
// owns, then n1, then n2. n0 counts an older copy of n1's counter (9),
// sent on by n3; it returns n1's counter as n1 let it go, a unit given
// back since (8).
func anOlderCopyCountedAtN0(t *testing.T) (h *handNet, k limiter.Key, lowered limiter.State) {
	t.Helper()
	h = newHandNet(t, "n0", "n1", "n2", "n3")
	k = h.keyOrdered("n0", "n1", "n2")
	older, lowered := loweredCounter(h.now, k, 9)
	n0, n1, n3 := h.cores["n0"], h.cores["n1"], h.cores["n3"]
	copyOf := Transfer{Seq: 1000, To: n0.self.Inc, Epoch: 1, Mode: ModeAdd, CountersOf: n1.self, States: []limiter.State{older}}
	n0.handleTransfer(h.now, n3.self, copyOf, false)
	h.pump()
	if got := h.count("n0", k); got != 9 {
		t.Fatalf("n0 counts %d of the key; the copy of n1's counter holds 9", got)
	}
	return h, k, lowered
}

// clusterCount returns what the nodes count of k, their engines and their
// fallback counts together.
func (h *handNet) clusterCount(k limiter.Key) int64 {
	var sum int64
	for _, n := range h.counts(k) {
		sum += n
	}
	return sum
}
