package core

import (
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

// A leaving node cut off from the others is declared dead; just after the
// cut heals it hears so, and its counters leave its engine for the node
// that kept their replicas (ModeEvicted). That node refuses them until it
// holds a lease from the sender again, and the leave times out first: the
// node goes with those counters, as it would have gone with its engine's
// had it not heard it was dead. The simulator's account of what a node
// leaving cut off may lose (C) must name them, or the counts its owner
// admitted beyond their last replication are taken for counts the cluster
// lost without a fault to excuse it (seed 1795806430711122989: 24 held,
// 29 admitted, 2 allowed).
func TestALeaverCutOffMayLoseTheCountersItSendsAsDeclaredDead(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, _ := h.spentKey("n0", "n2", 5)
	c := h.cores["n0"]
	c.evict(h.now, "n1") // not pumped: the evicted counters wait for an answer
	if got := windowCount(c.engine.StatesOf(h.now, []limiter.Key{k})); got != 0 {
		t.Fatalf("n0's engine holds %d of the key after it was declared dead; want 0", got)
	}
	s := &sim{now: h.now, keys: []simKey{{key: k, limit: 30}}}
	s.hist.loss = map[limiter.Key]int64{}
	n := &simNode{name: "n0", inc: h.incs["n0"], core: c, engine: c.engine}
	s.noteLeftCutOff(n)
	if got := s.hist.loss[k]; got != 5 {
		t.Errorf("a node leaving cut off with 5 of a key in its evicted counters may lose %d of it; want 5", got)
	}
}
