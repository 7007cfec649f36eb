package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node restarts from its snapshot while the others count its key from
// its replica: its restored counter goes to them as a copy, and its
// hand-off waits for the key's counts from the node counting it. A joiner
// that owns the key by a ring naming the restarted node its source pulls
// it there: the restarted node holds nothing of the key, but its counts
// are on their way here, so the answer names where they are (or asks
// again), never "nothing": the joiner would count the key from nothing.
func TestAPullOfAKeyARestoredNodeWaitsForIsNoNothing(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n1", 7)
	h.advance(20 * time.Millisecond) // replicated to n1
	snapshot := h.cores["n0"].Keep(h.now, h.cores["n0"].engine.StatesOf(h.now, []limiter.Key{k}))

	// n0 crashes; n1 and n2 declare it dead, and n1 takes its key over.
	h.down["n0"] = true
	h.setMembership("n1", []string{"n0"})
	h.setMembership("n2", []string{"n0"})
	h.advance(time.Second, "n1", "n2")
	load.resume()
	load.spend("n1")
	if got := h.count("n1", k); got != 8 || load.admitted != 8 {
		t.Fatalf("n1 counts %d after taking over; %d admitted; want 8 and 8", got, load.admitted)
	}

	// n0 restarts from its snapshot; its link to n1 fails, so its
	// hand-off waits for n1's counts of the key.
	n0 := h.start("n0", true)
	others := []Member{{Name: "n1", Inc: h.incs["n1"], PeerAddr: "n1"}, {Name: "n2", Inc: h.incs["n2"], PeerAddr: "n2"}}
	for _, x := range []string{"n1", "n2"} {
		h.cores[x].SetMembership(h.now, Membership{Members: others, Joining: []Member{{Name: "n0", Inc: n0.self.Inc, PeerAddr: "n0"}}})
	}
	n0.SetMembership(h.now, Membership{Members: others})
	n0.RestoreCounters(h.now, snapshot)
	n0.Joined(h.now)
	h.advance(300*time.Millisecond, "n0", "n1", "n2")
	if n0.engine.Has(h.now, k) || h.count("n1", k) != 8 {
		t.Fatalf("n0 holds its restored counter %v; n1 counts %d", n0.engine.Has(h.now, k), h.count("n1", k))
	}
	h.oneway = map[[2]string]bool{{"n1", "n0"}: true, {"n0", "n1"}: true}
	n0.SetMembership(h.now, Membership{Members: append([]Member{{Name: "n0", Inc: n0.self.Inc, PeerAddr: "n0"}}, others...)})
	h.advance(100*time.Millisecond, "n0", "n2")
	if !n0.Member() || !n0.HandoffUnderway() {
		t.Fatal("n0's hand-off does not wait for n1")
	}

	// A joiner pulls the key from n0.
	joiner := Peer{Name: "n3", Inc: 1}
	reply := n0.handlePull(h.now, joiner, Pull{To: n0.self.Inc, Keys: []limiter.Key{k}})
	if reply.Refused {
		return
	}
	if slices.Contains(reply.Sending, k) || slices.ContainsFunc(reply.Moved, func(m KeyOwner) bool { return m.Key == k && m.Owner == "n1" }) {
		return
	}
	for _, tr := range reply.Given {
		if heldIn(tr.States, k) {
			return
		}
	}
	t.Errorf("n0 answers a pull of the key its hand-off waits for with nothing: %+v", reply)
}
