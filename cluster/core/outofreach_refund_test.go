package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner n0 admits 6 of 10 for a caller, n3, and its successor n1
// keeps the replica; then n0 crashes and n1 is cut off. The three others,
// a majority, declare both dead, and the key's owner among them by their
// ring takes it over without a counter: the key is out of reach, decided
// by fallback until its counter comes. n3 then gives one of its units
// back (another zone of its request denied it). Given back from the new
// owner's engine, which holds nothing of the key, the unit came off
// nothing and was lost; when the cut healed and n1's replica came, the
// key held 6 of the 5 admitted (seed 1795868106151597541 of the
// simulator: 14 held, 13 admitted, and a request under the limit refused).
// The unit waits for the counter, and comes off it once it is here.
func TestAUnitGivenBackForAKeyOutOfReachWaitsForItsCounter(t *testing.T) {
	for _, settled := range []bool{false, true} {
		name := "another zone denied it"
		if settled {
			name = "settled after the response"
		}
		t.Run(name, func(t *testing.T) { unitGivenBackOutOfReach(t, settled) })
	}
}

func unitGivenBackOutOfReach(t *testing.T, settled bool) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	const quota = 10
	k := h.keyOwnedBy("n0", "n1")
	load := newHandLoad(h, k, quota)
	var last *handTake
	for range 6 {
		last = load.spend("n3")
	}
	load.resume()
	at := h.now
	h.advance(20 * time.Millisecond) // replicated to n1
	if st, _, ok := h.cores["n1"].replicas.get(k); load.admitted != 6 || load.by[SourcePeer] != 6 || !ok || windowCount([]limiter.State{st}) != 6 {
		t.Fatalf("admitted %d (%v), replica at n1 %v; want 6 by the owner and a replica of 6", load.admitted, load.by, ok)
	}

	// n0 crashes; n1 is cut off. The others take both over.
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
	if !h.cores[taker.Name].lacksCounter(k, h.cores[taker.Name].mono(h.now)) {
		t.Fatalf("the key is not out of reach at its new owner %s", taker.Name)
	}

	// n3 gives a unit back: it goes to the key's new owner.
	if settled {
		h.cores["n3"].Settle(h.now, at, last.d.Source, false, load.unitOf(k))
	} else {
		h.cores["n3"].refund(h.now, load.unitOf(k))
	}
	h.advance(200*time.Millisecond, "n2", "n3", "n4")

	// The cut heals: n1 hears it was declared dead, joins again, and sends
	// the replica it kept on to the key's owner.
	h.down["n1"] = false
	h.setMembership("n1", []string{"n0"})
	h.advance(2*time.Second, "n1", "n2", "n3", "n4")
	for _, name := range []string{"n1", "n2", "n3", "n4"} {
		h.setMembership(name, []string{"n0"})
	}
	h.advance(time.Second, "n1", "n2", "n3", "n4")
	owner, _ := h.cores["n2"].Ring().Owner(k.Route())
	if got, want := h.count(owner.Name, k), int64(load.admitted-1); got != want {
		t.Errorf("after the cut healed, the key's owner %s holds %d; %d were admitted and 1 given back (%v)", owner.Name, got, load.admitted, load.by)
	}
}
