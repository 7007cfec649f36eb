package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// An owner and a caller are cut off together from the rest, neither side
// with a majority. The owner admitted an item of the caller's whose
// answer was lost: the caller cancels it and decides the request by
// fallback. It admits another request by fallback, sends its fallback
// counts to the owner, which keeps them with its own fallback counts (no
// majority), and then gives that request's unit back (a request of two
// keys whose other key was denied): the refund follows the counts to the
// owner. Both units given back wait there until the owner knows where its
// keys are counted. Given back from its engine's count before its
// fallback counts joined it, the second came off a count that held only
// the item's unit and went no lower than nothing, and was kept when the
// fallback counts joined (seed 1795799911875834426 of the simulator:
// key 0 held 33, 32 were admitted). They come off the key's whole count.
func TestUnitsGivenBackWithoutAMajorityComeOffWhatTheFallbackCountsBrought(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k := h.keyOwnedBy("n0", "n1")
	load := newHandLoad(h, k, 30)
	n0, n4 := h.cores["n0"], h.cores["n4"]

	// n0 admits an item of n4's; the answer is lost.
	tk := h.admitUnanswered("n4", "n0", k, 30)
	if got := h.count("n0", k); got != 1 {
		t.Fatalf("n0 counts %d of the key; want the item's 1", got)
	}

	// n0 and n4 are cut off from the rest; n0 finds no majority.
	h.cut["n0"], h.cut["n4"] = true, true
	h.advance(time.Second)
	if n0.majority(n0.view.Load()) {
		t.Fatal("n0 has a majority while cut off")
	}

	// n4 gives the item up (its cancel reaches n0) and decides the request
	// by fallback.
	n4.CallFailed(h.now, &tk.op, false)
	h.pump()
	h.finish(tk)
	load.count(tk)
	if load.admitted != 1 || load.by[SourceFallback] != 1 {
		t.Fatalf("admitted %d (%v); want 1, by n4's fallback", load.admitted, load.by)
	}

	// Another request of n4's, admitted by fallback; n4's fallback counts
	// go to n0, which keeps them in fallback.
	extra := load.spend("n4")
	load.resume()
	if !extra.d.Allowed || extra.d.Source != SourceFallback {
		t.Fatalf("n4's second request: %+v; want admitted by fallback", extra.d)
	}
	h.advance(200 * time.Millisecond)
	if n4.fallback.engine.Has(h.now, k) {
		t.Fatal("n4 still holds its fallback counts of the key")
	}
	if !n0.fallback.engine.Has(h.now, k) {
		t.Fatal("n0 does not keep n4's fallback counts in fallback")
	}

	// The second request is given back: its unit follows the counts to n0.
	n4.refund(h.now, []limiter.Request{extra.reqs[0]})
	h.pump()
	load.admitted--

	// The cut heals; nobody was declared dead.
	h.cut["n0"], h.cut["n4"] = false, false
	h.advance(3 * time.Second)
	if !n0.majority(n0.view.Load()) {
		t.Fatal("n0 has no majority after the cut healed")
	}
	var held int64
	for _, name := range h.names {
		held += h.count(name, k) + windowCount(h.cores[name].fallback.engine.StatesOf(h.now, []limiter.Key{k}))
	}
	if held != int64(load.admitted) {
		t.Errorf("the cluster counts %d of the key (n0 %d); %d were admitted", held, h.count("n0", k), load.admitted)
	}
}
