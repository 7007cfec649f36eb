package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner (n0) admits a unit for n2's caller, which gives it back:
// n2's give-back to n0 is held up on the way. n2 takes n0 for dead, gives
// the give-back up and sends it again in its place to n1, which still
// takes n0 for alive and passes it on, naming the give-back it replaces:
// n0 gives the unit back. Then the first give-back, late, reaches n0 (n0
// was never gone: listed again, the same run). It is the same unit: it
// must not come off again, or the key holds one less than was admitted,
// and a request under its limit may be admitted past it. Both sides are
// checked: the owner holds exactly what was admitted, the key admits
// what is left of its limit and no more.
func TestAGiveBackArrivingAfterTheCopySentInItsPlaceComesOffOnce(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n1", 4)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]

	var late *Transfer
	h.drops = func(from string, o Outgoing) bool {
		if t, ok := o.Msg.(Transfer); ok && from == "n2" && o.To.Name == "n0" && t.Mode == ModeRefund {
			if late == nil {
				late = &t
			}
			return true
		}
		return false
	}
	tk := load.spend("n2")
	if !tk.done || !tk.d.Allowed || tk.d.Source != SourcePeer {
		t.Fatalf("n2's request: %+v; want admitted by its owner", tk.d)
	}
	n2.sendTransfer(h.now, n0.self, Transfer{Mode: ModeRefund, Reqs: slices.Clone(tk.reqs)}, purposeRefund)
	h.pump()
	if late == nil || h.count("n0", k) != 5 {
		t.Fatalf("n0 counts %d before the give-back (held up: %v); want 5", h.count("n0", k), late != nil)
	}

	// The copy sent in its place, passed on by n1 to n0.
	n1.handleTransfer(h.now, n2.self, Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), Was: late.Seq, WasTo: n0.self}, true)
	h.pump()
	if got := h.count("n0", k); got != 4 {
		t.Fatalf("n0 counts %d once the copy came; want 4", got)
	}

	// The first give-back, late.
	n0.handleTransfer(h.now, n2.self, *late, false)
	h.pump()
	h.drops = nil
	h.advance(time.Second)
	total := h.count("n0", k) + h.count("n1", k) + h.count("n2", k)
	if total != 4 || h.count("n0", k) != 4 {
		t.Errorf("the cluster counts %d (n0 %d); 4 were admitted (the fifth unit was given back once)", total, h.count("n0", k))
	}
	for i := range 26 {
		if tk := load.spend("n1"); !tk.done || !tk.d.Allowed {
			t.Fatalf("request %d of 26 after the give-back: %+v; want admitted (limit 30, 4 counted)", i+1, tk.d)
		}
	}
	if tk := load.spend("n1"); !tk.done || tk.d.Allowed {
		t.Errorf("the 31st unit: %+v; want refused", tk.d)
	}
}

// As above, for counts n2 admitted in fallback: the transfer that adds
// them to the key's owner, n0, is held up; the copy n2 sends in its place
// (taking n0 for dead) is passed on to n0 by n1, which takes n0 for
// alive, and added. The first transfer, late, adds nothing more.
func TestAnAdditionArrivingAfterTheCopySentInItsPlaceAddsNothing(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n1", 4)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	fallback := counterOf(h.now, k, 2)
	n0.handleTransfer(h.now, n1.self, Transfer{Seq: 1000, To: n0.self.Inc, Epoch: 1, Mode: ModeAdd, States: []limiter.State{fallback}, Was: 50, WasFrom: n2.self, WasTo: n0.self}, false)
	h.pump()
	if got := h.count("n0", k); got != 6 {
		t.Fatalf("n0 counts %d once the copy came; want 6", got)
	}
	n0.handleTransfer(h.now, n2.self, Transfer{Seq: 50, To: n0.self.Inc, Epoch: 1, Mode: ModeAdd, States: []limiter.State{fallback}}, false)
	h.pump()
	h.advance(time.Second)
	if got := h.clusterCount(k); got != 6 || h.count("n0", k) != 6 {
		t.Errorf("the cluster counts %d (n0 %d); 6 were admitted", got, h.count("n0", k))
	}
	for i := range 24 {
		if tk := load.spend("n1"); !tk.done || !tk.d.Allowed {
			t.Fatalf("request %d of 24: %+v; want admitted (limit 30, 6 counted)", i+1, tk.d)
		}
	}
	if tk := load.spend("n1"); !tk.done || tk.d.Allowed {
		t.Errorf("the 31st unit: %+v; want refused", tk.d)
	}
}
