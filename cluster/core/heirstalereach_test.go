package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// As TestAKeyAnHeirCountedAndReplicatedIsInReachAfterTheHeirDies, but the
// heir admits more after its last replica reached its successor, and
// crashes: the successor, promoting the replica as its hand-off
// completes, ends the gap the third node passed on and counts the key on
// from the replica. The key admits beyond its limit what the crash lost
// (the heir's count the replica lacked), and no more.
func TestAKeyAnHeirCountedPastItsLastReplicaStaysWithinTheBoundAfterTheHeirDies(t *testing.T) {
	cfg := handTiming
	cfg.FallbackRatio = 0.1
	h := newHandNetWith(t, cfg, "n0", "n1", "n2", "n3", "n4")
	k := h.keyWhere(func(owner func(names ...string) Member) bool {
		return owner("n0", "n1", "n2", "n3", "n4").Name == "n1" && owner("n0", "n2", "n3", "n4").Name == "n2" && owner("n0", "n3", "n4").Name == "n3"
	})
	const quota = 10
	load := newHandLoad(h, k, quota)
	for range 3 {
		load.spend("n1")
	}
	h.advance(20 * time.Millisecond) // replicated to n2

	// n1 stands still; everyone declares it dead. n2's seal queries to n0
	// are lost until n0 completed its hand-off: n2 is an heir there.
	h.down["n1"] = true
	h.advance(100 * time.Millisecond)
	h.drops = func(from string, o Outgoing) bool {
		_, ok := o.Msg.(SealQuery)
		return ok && from == "n2" && o.To.Name == "n0"
	}
	for _, name := range []string{"n0", "n2", "n3", "n4"} {
		h.setMembership(name, []string{"n1"})
	}
	for i := 0; i < 300 && h.cores["n0"].HandoffUnderway(); i++ {
		h.advance(10*time.Millisecond, "n0", "n2", "n3", "n4")
	}
	if h.cores["n0"].HandoffUnderway() {
		t.Fatal("n0 did not complete its hand-off from n1")
	}
	if !h.cores["n2"].HandoffUnderway() {
		t.Fatal("n2 completed its hand-off from n1 without n0's seal")
	}
	h.drops = nil
	h.advance(500*time.Millisecond, "n0", "n2", "n3", "n4")
	if h.cores["n2"].HandoffUnderway() {
		t.Fatal("n2 did not complete its hand-off from n1")
	}
	for range 2 {
		load.spend("n2")
	}
	load.resume()
	h.advance(50*time.Millisecond, "n0", "n2", "n3", "n4") // replicated to n3
	if st, of, ok := h.cores["n3"].replicas.get(k); !ok || of.Name != "n2" || windowCount([]limiter.State{st}) != 5 {
		t.Fatalf("n3's replica of the key: %v of %v; want 5 of n2", ok, of)
	}

	// n2 admits 2 more; their replica to n3 is lost.
	h.drops = func(from string, o Outgoing) bool {
		x, ok := o.Msg.(Transfer)
		return ok && from == "n2" && o.To.Name == "n3" && x.Mode == ModeReplica
	}
	for range 2 {
		load.spend("n2")
	}
	load.resume()
	h.advance(50*time.Millisecond, "n0", "n2", "n3", "n4")
	h.drops = nil
	const lag = 2 // what the crash loses: n2's count beyond n3's replica

	// n2 crashes; the others declare it dead, and n3 takes the key over
	// from its replica.
	h.down["n2"] = true
	h.advance(100*time.Millisecond, "n0", "n3", "n4")
	for _, name := range []string{"n0", "n3", "n4"} {
		h.setMembership(name, []string{"n1", "n2"})
	}
	h.advance(time.Second, "n0", "n3", "n4")
	if h.cores["n3"].HandoffUnderway() {
		t.Fatal("n3 did not complete its hand-off from n2")
	}
	if got := h.count("n3", k); got != 5 {
		t.Fatalf("n3 counts %d of the key; want 5 (from n2's replica)", got)
	}
	for range 3 {
		load.spend("n3")
		load.spend("n0")
	}
	load.resume()
	t.Logf("admitted %d (%v); n3 counts %d", load.admitted, load.by, h.count("n3", k))
	// Counted on from the replica, the key admits what the crash lost
	// beyond its limit, and no more.
	if load.admitted > quota+lag || h.count("n3", k) != int64(load.admitted-lag) {
		t.Errorf("admitted %d of limit %d + %d lost in the crash (%v), n3 counts %d", load.admitted, quota, lag, load.by, h.count("n3", k))
	}
}
