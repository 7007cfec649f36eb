package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// A node that left joins again and pulls a key from its owner, which has
// not heard of the joining and lends it the key; the joiner starts to
// leave before the pull's answer comes, and refuses the counter in it
// (leaving). The owner hears of it only as leaving, then as gone: its ring
// never changes. The refused counter never left the owner, and the leaver
// will count nothing: the loan ends, and the owner counts the key again.
// Kept lent, requests for the key went to the leaver and were decided by
// fallback, and the counter went to the leaver again and again, and once
// it was gone, in place of the abandoned transfer to it still, for as long
// as the ring stayed as it was (seed 1795842680910029059 of the simulator:
// graceful changes only).
func TestACounterTheBorrowerRefusedLeavingEndsTheLoan(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	var k limiter.Key
	found := false
	for i := range 10000 {
		k = limiter.ZoneKey(keyhash.New([]byte("keys"), "k").String(string(rune('a'+i%26))+string(rune(i))), 1)
		o, _ := h.cores["n0"].Ring().Owner(k.Route())
		w, _ := h.cores["n0"].Ring().OwnerWithout(k.Route(), "n2")
		if o.Name == "n2" && w.Name == "n0" {
			found = true
			break
		}
	}
	if !found {
		t.Fatal("no key that n2 owns, and n0 without it")
	}
	load := newHandLoad(h, k, 30)
	// n2 leaves, gracefully: the key goes to n0.
	n2 := h.cores["n2"]
	n2.Leave(h.now)
	h.pump()
	h.othersSeeLeaveAndGo("n2")
	for range 3 {
		load.spend("n0")
	}
	load.resume()

	// n2 runs again and joins through n1; n0 has not heard of it. n2 pulls
	// the key from n0, and starts to leave before the answer comes.
	n2 = h.start("n2", true)
	n2.Joined(h.now)
	h.list("n2", h.othersThan("n2"), nil)
	h.list("n1", h.othersThan("n1"), nil)
	h.advance(10 * time.Millisecond)
	if !n2.Member() {
		t.Fatal("n2 did not join")
	}
	h.drops = func(from string, o Outgoing) bool {
		if _, ok := o.Msg.(Pull); ok && from == "n2" && !n2.gate.isLeaving() {
			n2.Leave(h.now)
		}
		return false
	}
	load.spend("n2")
	h.advance(50 * time.Millisecond)
	load.resume()
	h.drops = nil
	if !n2.gate.isLeaving() {
		t.Fatal("n2 did not pull the key")
	}

	// The others hear of n2 only as leaving, then not at all: it went.
	second := h.member("n2")
	h.othersSeeLeaveAndGo("n2")

	before := load.by[SourceFallback]
	for range 3 {
		load.spend("n0")
		load.spend("n1")
	}
	load.resume()
	if got := load.by[SourceFallback] - before; got != 0 {
		t.Errorf("%d requests were decided by fallback after a graceful leave (%v)", got, load.by)
	}
	if got := h.pendingTo("n0", second.Peer()); got != 0 {
		t.Errorf("n0 still sends %d transfers to the run of n2 that left", got)
	}
	if got := h.count("n0", k); got != int64(load.admitted) {
		t.Errorf("the key's owner counts %d; %d were admitted (%v)", got, load.admitted, load.by)
	}
}
