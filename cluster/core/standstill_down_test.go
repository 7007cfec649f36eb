package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// An owner (n0) and a peer (n1) lose the link between them: each takes
// the other for down, and n1 admits n0's key in fallback. Then n0 stands
// still for longer than a call timeout, and runs again with the link
// healed. Its wait after the pause asks only the peers it does not take
// for down (n2, the key's successor, whose lease it counts by): n1 is
// not asked, and n0 counts the key at once from its own count. n1's
// fallback count reaches it only after n1's next probe of it: meanwhile
// the key admits up to the limit beside what n1 admitted. That is the
// bound's F (docs/cluster.md: a peer that does not answer is down, what
// it holds arrives later, within F), and nothing more: admitted ≤ L + F,
// the owner holds every admission once, and it refuses nothing while
// its count is under the limit.
//
// Played twice: the link heals as n0 runs again (n1's count arrives with
// its first answer to n0's probes, before the requests that waited are
// decided: exactly the limit), or only after those are decided (the
// worst case: L + F).
func TestAnOwnerThatStoodStillDoesNotWaitForAPeerItTookForDownWithinTheBound(t *testing.T) {
	for _, late := range []bool{false, true} {
		name := "link healed as it runs again"
		if late {
			name = "link healed after the requests that waited"
		}
		t.Run(name, func(t *testing.T) { stoodStillBesideAPeerTakenForDown(t, late) })
	}
}

func stoodStillBesideAPeerTakenForDown(t *testing.T, late bool) {
	const quota = 30
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOwnedBy("n0", "n2")
	load := newHandLoad(h, k, quota)
	for range 10 {
		load.spend("n0")
	}
	load.spend("n1") // n1 learns what remains: its share
	load.resume()

	// The link between n0 and n1 fails: each takes the other for down.
	h.oneway = map[[2]string]bool{}
	h.oneway[[2]string{"n0", "n1"}], h.oneway[[2]string{"n1", "n0"}] = true, true
	h.advance(300 * time.Millisecond)
	if p := h.cores["n0"].peers.get("n1"); p.reachState() != down {
		t.Fatal("n0 does not take n1 for down")
	}
	for range 5 {
		load.spend("n1")
	}
	load.resume()
	if load.by[SourceFallback] != 5 {
		t.Fatalf("n1 admitted %v while cut off from n0; want 5 by fallback", load.by)
	}

	// n0 stands still past a call timeout, within its lease; it runs
	// again with the link healed, and requests reach it at once.
	h.down["n0"] = true
	h.advance(200 * time.Millisecond)
	h.down["n0"] = false
	if !late {
		h.oneway = map[[2]string]bool{}
	}
	h.now = h.now.Add(time.Millisecond)
	h.tick("n0")
	var burst []*handTake
	for range quota {
		burst = append(burst, load.spend("n0"))
	}
	h.advance(200 * time.Millisecond)
	load.resume()
	h.oneway = map[[2]string]bool{}
	refused := 0
	for _, tk := range burst {
		if !tk.d.Allowed && tk.d.Source == SourceOwner {
			refused++
		}
	}
	t.Logf("after the pause: admitted %d (%v), %d refused by the owner; n0 counts %d", load.admitted, load.by, refused, h.count("n0", k))
	if refused > 0 && load.admitted < quota {
		t.Errorf("n0 refused %d requests with %d of %d admitted", refused, load.admitted, quota)
	}
	h.advance(time.Second)
	for range 5 {
		load.spend("n0")
		load.spend("n1")
		load.spend("n2")
	}
	load.resume()

	bound := quota + load.by[SourceFallback]
	t.Logf("admitted %d (%v), bound %d; counts %v", load.admitted, load.by, bound, h.counts(k))
	if load.admitted > bound {
		t.Errorf("%d admitted; the bound is %d", load.admitted, bound)
	}
	h.holdsAdmitted(k, load.admitted, "")
	if got := windowCount(h.cores["n1"].fallback.engine.StatesOf(h.now, []limiter.Key{k})); got != 0 {
		t.Errorf("n1 still holds %d of the key in fallback", got)
	}
}
