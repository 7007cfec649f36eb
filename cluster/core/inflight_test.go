package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A survivor's call to an owner that froze is still out (on a starved
// machine the caller's patience runs on its own clock) when the ring drops
// the owner; the survivor seals to the key's new owner, which takes the
// key over and counts it. When the call is given up on at last, the
// request goes to the new owner, not to fallback: what the survivor
// admitted in fallback now would reach the new owner only after it
// counted past it.
func TestACallGivenUpOnAfterTheRingChangedGoesToTheNewOwner(t *testing.T) {
	cfg := handTiming
	cfg.FallbackRatio = 0.5
	h := newHandNetWith(t, cfg, "n0", "n1", "n2")
	const quota = 10
	k := h.keyOwnedBy("n2", "n0")
	load := newHandLoad(h, k, quota)

	// n1's call to n2 is out when n2 freezes.
	tk := &handTake{node: "n1", res: make([]limiter.Result, 1)}
	tk.reqs = []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: quota, Window: time.Hour}}}
	if _, done := h.cores["n1"].Take(h.now, &tk.op, OpTake, 0, tk.reqs, tk.res); done {
		t.Fatal("n1 decided n2's key itself")
	}
	if a := h.cores["n1"].Step(h.now, &tk.op); a.Kind != ActCall || a.To.Name != "n2" {
		t.Fatalf("n1's first step: %+v; want a call to n2", a)
	}
	h.down["n2"] = true
	h.advance(100*time.Millisecond, "n0", "n1")
	for range quota {
		load.spend("n0") // n0 finds n2 down and decides by fallback
	}

	// n2 is declared dead; n0 takes its key over once n1 sealed and n2's
	// lease ran out, and counts it.
	h.setMembership("n0", []string{"n2"})
	h.setMembership("n1", []string{"n2"})
	for i := 0; i < 200 && h.cores["n0"].HandoffUnderway(); i++ {
		h.advance(10*time.Millisecond, "n0", "n1")
	}
	if h.cores["n0"].HandoffUnderway() {
		t.Fatal("n0 did not take n2's key over")
	}
	for range quota {
		load.spend("n0")
	}

	// n1 gives its call up at last.
	h.cores["n1"].CallFailed(h.now, &tk.op, false)
	h.pump()
	h.drive(tk)
	h.finish(tk)
	load.count(tk)
	h.advance(time.Second)
	if tk.d.Source == SourceFallback {
		t.Errorf("the call given up on after n0 took the key over was decided by fallback")
	}
	if load.admitted > quota {
		t.Errorf("%d admitted of a limit of %d (%v)", load.admitted, quota, load.by)
	}
	if got := h.count("n0", k); got != int64(load.admitted) {
		t.Errorf("n0 holds %d; %d were admitted", got, load.admitted)
	}
}
