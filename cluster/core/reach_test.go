package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner crashes with 6 of 10 spent, and its successor, which keeps
// the key's replica, is cut off from the others a moment later, before
// anyone declared the owner dead. The three others, a majority, declare
// both dead, and the key's owner among them by their ring takes it over:
// it holds no copy of the key's counter, and the only one lives on, on
// the other side. Counted from nothing, the key admits its whole limit
// again (16 of 10 by their owners). Decided by fallback, it admits no more
// than the fallback shares; when the cut heals, the replica comes and the
// key counts on from where it was, nothing lost.
func TestAKeyWhoseOwnerAndSuccessorDiedIsDecidedByFallbackUntilItsCounterComes(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	const quota = 10
	k := h.keyOwnedBy("n0", "n1")
	load := newHandLoad(h, k, quota)
	for range 6 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond) // replicated to n1
	if st, _, ok := h.cores["n1"].replicas.get(k); load.admitted != 6 || !ok || windowCount([]limiter.State{st}) != 6 {
		t.Fatalf("admitted %d, replica at n1 %v; want 6 and 6", load.admitted, ok)
	}

	// n0 crashes; n1 is cut off (it stops hearing anyone, and they it).
	h.down["n0"], h.down["n1"] = true, true
	h.advance(100 * time.Millisecond)
	for _, name := range []string{"n2", "n3", "n4"} {
		h.setMembership(name, []string{"n0", "n1"})
	}
	h.advance(time.Second, "n2", "n3", "n4")
	taker, _ := h.cores["n2"].Ring().Owner(k.Route())
	if h.cores[taker.Name].HandoffUnderway() {
		t.Fatalf("%s did not take the dead members' keys over", taker.Name)
	}
	fallbackBefore := load.by[SourceFallback]
	for range 2 * quota {
		load.spend("n2")
		load.spend("n3")
		load.spend("n4")
	}
	h.advance(200*time.Millisecond, "n2", "n3", "n4")
	load.resume()
	byOwners := load.admitted - load.by[SourceFallback]
	t.Logf("during the cut: admitted %d (%v), %d by fallback before", load.admitted, load.by, fallbackBefore)
	if byOwners > quota {
		t.Errorf("%d admitted by owners of limit %d (%v): %s counted the key from nothing while its counter lived on at n1", byOwners, quota, load.by, taker.Name)
	}

	// The cut heals: n1 hears it was declared dead, joins again, and sends
	// the replica it kept on to the key's owner.
	h.down["n1"] = false
	h.setMembership("n1", []string{"n0"})
	h.advance(2*time.Second, "n1", "n2", "n3", "n4")
	for _, name := range []string{"n1", "n2", "n3", "n4"} {
		h.setMembership(name, []string{"n0"})
	}
	h.advance(time.Second, "n1", "n2", "n3", "n4")
	load.resume()
	owner, _ := h.cores["n2"].Ring().Owner(k.Route())
	if got := h.count(owner.Name, k); got != int64(load.admitted) {
		t.Errorf("after the cut healed, the key's owner %s holds %d; %d were admitted (%v)", owner.Name, got, load.admitted, load.by)
	}
}
