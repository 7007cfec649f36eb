package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// spentBeforeAJoin starts n0 and n1 (n2 started, not yet joined) and
// spends 5 of a key n0 owns that moves to n2 when it joins, n0 then its
// successor.
func spentBeforeAJoin(t *testing.T) (*handNet, limiter.Key, *handLoad) {
	t.Helper()
	h := newHandNet(t, "n0", "n1")
	h.names = append(h.names, "n2")
	h.start("n2", true)
	k := h.keyMovingTo("n0", "n1", "n2")
	load := newHandLoad(h, k, 10)
	for range 5 {
		load.spend("n0")
	}
	return h, k, load
}

// joinWithoutSettling has n2 join and be handed k by n0, while n1 never
// hears n2's seal query: the counts wait at n2 for the key to settle.
func (h *handNet) joinWithoutSettling(k limiter.Key) {
	h.t.Helper()
	h.oneway = map[[2]string]bool{{"n2", "n1"}: true}
	h.cores["n2"].Joined(h.now)
	for _, name := range []string{"n2", "n0", "n1"} {
		h.setMembership(name, nil)
	}
	h.advance(50 * time.Millisecond)
	if got := h.count("n2", k); got != 0 {
		h.t.Fatalf("n2 counts %d of the key before it settled; want 0", got)
	}
}

// A node joins and is handed a key's counter (5 admitted), but is cut off
// before its other source seals: the counts wait at the joiner for the
// key to settle. The others declare it dead and the old owner, the
// joiner's successor for the key, takes the key back. The counts the
// joiner holds for the key are protected as its engine's are: the taker
// starts the key from them, not from nothing (a rolling restart, then a
// partition cutting off the node that just joined: seeds
// 1795819308601101049 and 1795821322507534036 of the simulator). When the
// split heals, the joiner's held counts come back to the taker, which
// weighs them against what it started the key from: each admitted unit
// is held once.
func TestCountsHeldForAKeyNotSettledSurviveATakeoverOfTheReceiver(t *testing.T) {
	h, k, load := spentBeforeAJoin(t)
	h.joinWithoutSettling(k)

	h.cut["n2"] = true
	h.setMembership("n0", []string{"n2"})
	h.setMembership("n1", []string{"n2"})
	h.advance(2*time.Second, "n0", "n1")
	if o, _ := h.cores["n0"].Ring().Owner(k.Route()); o.Name != "n0" {
		t.Fatalf("the key's owner is %s; want n0", o.Name)
	}
	if got := h.count("n0", k); got != 5 {
		t.Fatalf("n0 took the key over from n2 counting %d; want the 5 n2 held for it", got)
	}
	for range 2 {
		load.spend("n0")
	}
	load.resume()

	// The split heals: n2 is a member again and the key moves to it anew.
	h.cut["n2"] = false
	h.oneway = nil
	for _, name := range []string{"n2", "n0", "n1"} {
		h.setMembership(name, nil)
	}
	h.advance(6 * time.Second)
	load.resume()
	t.Logf("admitted %d %v", load.admitted, load.by)
	h.holdsAdmitted(k, load.admitted, "")
}
