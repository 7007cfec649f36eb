package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner is killed with 5 counted and restarts at once from its
// snapshot, before the others take it for dead: its new run owns the key
// again and counts it from the restored counter, its earlier run's. Then
// a node passes on a gap that names that earlier run and the key's
// successor as dead (they died together, by some ring it took over by):
// the key's counter is out of reach where that gap came from, but not
// here, where the earlier run's counter was restored. Taken for lacking,
// the key was decided by fallback for the gap's whole window, and a
// client under its limit refused (seed 1795894879001683263 of the
// simulator: 19 admitted of 20 after topping up).
func TestACounterRestoredBeforeAGapCameIsInReach(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n1", 5)
	h.advance(20 * time.Millisecond)
	earlier := h.member("n0")
	snapshot := h.cores["n0"].Keep(h.now, h.cores["n0"].engine.StatesOf(h.now, []limiter.Key{k}))
	successor := h.member("n1")

	h.down["n0"] = true
	n0 := h.start("n0", true)
	others := []Member{h.member("n1"), h.member("n2")}
	for _, x := range []string{"n1", "n2"} {
		h.cores[x].SetMembership(h.now, Membership{Members: h.othersThan(x, "n0"), Joining: []Member{h.member("n0")}})
	}
	n0.SetMembership(h.now, Membership{Members: others})
	n0.RestoreCounters(h.now, snapshot)
	n0.Joined(h.now)
	h.pump()
	for _, x := range []string{"n1", "n2"} {
		h.setMembership(x, nil)
	}
	n0.SetMembership(h.now, Membership{Members: others})
	h.pump()
	h.advance(time.Second)
	if n0.HandoffUnderway() || h.count("n0", k) != 5 {
		t.Fatalf("n0 counts %d of the key, hand-off under way %v; want 5, restored", h.count("n0", k), n0.HandoffUnderway())
	}

	n0.takeUnreached(h.now, []Unreached{{Ring: []Peer{earlier.Peer(), successor.Peer(), h.member("n2").Peer()}, Dead: []Peer{earlier.Peer(), successor.Peer()}, Within: 5 * time.Second}})
	if n0.lacksCounter(k, n0.mono(h.now)) {
		t.Errorf("n0 takes the key, whose counter it restored from its earlier run, for out of reach")
	}
	for range 5 {
		if tk := load.spend("n2"); !tk.done || !tk.d.Allowed || tk.d.Source != SourcePeer {
			t.Fatalf("a request for the key through n2: %+v; want admitted by its owner", tk.d)
		}
	}
}
