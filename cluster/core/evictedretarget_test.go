package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Five nodes. A key's owner n1 stands still with 6 counted; n0, its successor, takes
// it over from its replica and replicates it to n2, naming n1's counts it
// holds. n1 comes back, declared dead, and sends n2 its counter of the
// key as it stops counting; n2 sends it on, as it came, to the key's
// owner without n1: n0, which has just crashed. Given up on its way there,
// the counter is placed at n2, which owns the key now: it is n1's last
// word, weighed against the counts of n1's that n0's replica holds. Placed
// as it came (an evicted counter, named nowhere), it was a bare addition,
// counted beside the replica that holds it already (12 held of 6; seed
// 1795884982545073151 of the simulator, with a sooner re-ask of a seal).
func TestAnEvictedCounterSentOnAndGivenUpIsWeighedWhereItIsPlaced(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k := h.keyOrdered("n1", "n0", "n2")
	load := newHandLoad(h, k, 30)
	for range 6 {
		load.spend("n1")
	}
	load.resume()
	h.advance(50 * time.Millisecond)
	n1run := h.member("n1").Peer()
	n0, n2 := h.cores["n0"], h.cores["n2"]

	h.down["n1"] = true
	for _, name := range []string{"n0", "n2", "n3", "n4"} {
		h.cores[name].SetMembership(h.now, Membership{Members: h.othersThan(name, "n1"), Dead: []Peer{n1run}})
		h.pump()
	}
	h.advance(2*time.Second, "n0", "n2", "n3", "n4")
	if n0.HandoffUnderway() || h.count("n0", k) != 6 {
		t.Fatalf("n0 counts %d of the key, hand-off under way %v; want 6, taken over", h.count("n0", k), n0.HandoffUnderway())
	}
	if st, owner, ok := n2.replicas.get(k); !ok || owner.Name != "n0" || st.Cur != 6 {
		t.Fatalf("n2's replica of the key: %v of %v (%v); want n0's 6", st.Cur, owner, ok)
	}

	// n0 crashes; n1's counter comes to n2, which sends it on to n0.
	h.down["n0"] = true
	n2.handleTransfer(h.now, n1run, Transfer{Seq: 500, To: n2.self.Inc, Epoch: 1, Mode: ModeEvicted, Evicted: n1run, States: []limiter.State{counterOf(h.now, k, 6)}}, true)
	h.pump()
	if h.pendingTo("n2", n0.self) == 0 {
		t.Fatal("n2 did not send n1's counter on to n0")
	}
	// n2 declares n0 dead and takes its keys over.
	for _, name := range []string{"n2", "n3", "n4"} {
		h.cores[name].SetMembership(h.now, Membership{Members: h.othersThan(name, "n0", "n1"), Dead: []Peer{n1run, n0.self}})
		h.pump()
	}
	h.advance(3*time.Second, "n2", "n3", "n4")
	if n2.HandoffUnderway() {
		t.Fatal("n2 did not take n0's keys over")
	}
	if got := h.count("n2", k); got != 6 {
		t.Errorf("n2 counts %d of the key; 6 were admitted, all by n1, whose counter and n0's replica both hold them", got)
	}
}
