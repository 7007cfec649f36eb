package core

import (
	"testing"
	"time"
)

// n0, the key's owner, and n1 are cut off from the other three: neither
// has a majority. n1 admits 2 of a token bucket in fallback at its share
// and sends them to n0, which keeps them in fallback for the key's owner
// (counted at the owner's rate); n0 then admits 2 more in fallback at its
// own share, in the same counter. The cut heals: n0 counts what the
// counter holds as the 4 units admitted, each once, and admits the rest
// of the limit, no request under it refused.
func TestBucketCountsKeptForTheOwnerAndTakenAtAShareReachTheOwnerOnceEach(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	h.bucket.on = true
	k := h.keyOwnedBy("n0", "n1")
	load := h.spent(k, "n0", 3)
	n0, n1 := h.cores["n0"], h.cores["n1"]

	h.cut["n0"], h.cut["n1"] = true, true
	h.advance(time.Second)
	if n0.majority(n0.view.Load()) || n1.majority(n1.view.Load()) {
		t.Fatal("a node cut off with one other has a majority")
	}
	admit := func(c *Core) {
		t.Helper()
		tk := load.spend(c.self.Name)
		load.resume()
		if !tk.d.Allowed || tk.d.Source != SourceFallback {
			t.Fatalf("through %s: allowed %v by %v; want admitted by fallback", c.self.Name, tk.d.Allowed, tk.d.Source)
		}
	}
	admit(n1)
	admit(n1)
	if !n1.reconcileTo(h.now, n1.view.Load(), n0.self) {
		t.Fatal("n1 sends no fallback count")
	}
	h.pump()
	if n1.fallback.engine.Has(h.now, k) || !n0.fallback.engine.Has(h.now, k) {
		t.Fatal("n0 keeps nothing in fallback of what n1 sent it")
	}
	admit(n0)
	admit(n0)

	h.cut["n0"], h.cut["n1"] = false, false
	h.advance(3 * time.Second)
	if !n0.majority(n0.view.Load()) {
		t.Fatal("n0 has no majority after the cut healed")
	}
	h.heldBy(k, load.admitted, h.names...)
	load.spendsToTheLimit(t, "n0", "n1", "n2")
}
