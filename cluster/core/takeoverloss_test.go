package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node joins and is handed a key's counter (5 admitted), but is cut off
// before its other source seals: the counts wait at the joiner for the
// key to settle, in no engine and in no replica. The others declare it
// dead and the old owner takes the key back, from nothing: it may admit
// its whole limit again while the joiner holds the 5. A takeover of a
// cut-off owner is a crash in the bound (cluster/doc.go: C, what the
// owner's count holds beyond its successor's replica), so the
// simulator's account of what the takeover may lose must name the
// counts the owner holds for a key not settled, as its account of a
// crash does, not its engine's alone (seed 1795819308601101049: 32
// admitted, 29 allowed).
func TestATakeoverOfACutOffOwnerMayLoseTheCountsItHoldsForAKeyNotSettled(t *testing.T) {
	h := newHandNet(t, "n0", "n1")
	h.names = append(h.names, "n2")
	h.start("n2", true)
	k := h.keyMovingTo("n0", "n1", "n2")
	load := newHandLoad(h, k, 10)
	for range 5 {
		load.spend("n0")
	}
	h.oneway = map[[2]string]bool{{"n2", "n1"}: true} // n1 never hears n2's seal query
	h.cores["n2"].Joined(h.now)
	for _, name := range []string{"n2", "n0", "n1"} {
		h.setMembership(name, nil)
	}
	h.advance(50 * time.Millisecond)
	if got := h.count("n2", k); got != 0 {
		t.Fatalf("n2 counts %d of the key before it settled; want 0", got)
	}
	if got := unsettledAt(&simNode{core: h.cores["n2"]}, k); got != 5 {
		t.Fatalf("n2 holds %d of the key for it to settle; want 5", got)
	}

	s := &sim{now: h.now, names: h.names, keys: []simKey{{key: k, limit: 10}}, current: map[string]*simNode{}}
	s.hist.loss = map[limiter.Key]int64{}
	for _, name := range h.names {
		c := h.cores[name]
		s.current[name] = &simNode{name: name, inc: h.incs[name], core: c, engine: c.engine}
	}
	hook := s.takeoverHook(s.current["n0"])
	tookOver := false
	h.cores["n0"].completing = func(plan *handoffPlan) {
		s.now = h.now
		tookOver = tookOver || plan.deadInc["n2"] != 0
		hook(plan)
	}
	h.cut["n2"] = true
	h.setMembership("n0", []string{"n2"})
	h.setMembership("n1", []string{"n2"})
	h.advance(2*time.Second, "n0", "n1")
	if o, _ := h.cores["n0"].Ring().Owner(k.Route()); o.Name != "n0" || !tookOver {
		t.Fatalf("n0 took n2's keys over: %v; the key's owner is %s", tookOver, o.Name)
	}
	if got := s.hist.loss[k]; got != 5 {
		t.Errorf("taking a key over from a cut-off owner that holds 5 of it for the key to settle may lose %d; want 5", got)
	}
}
