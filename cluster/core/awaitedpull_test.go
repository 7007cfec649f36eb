package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node back in its ring refuses the hand-off of one of its keys (it
// holds no lease from the sender yet): the sender sends it again. Before
// it does, a node that owns the key by a newer ring pulls it from the
// first. Answered "nothing here", the puller counts the key from nothing
// while its counts are still at the sender, which then places them at the
// puller too (seed 1795814444520314657 of the simulator: 13 admitted of
// a limit of 12).
func TestAPullOfAKeyWhoseCountsAreStillComingNamesTheirSender(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	const quota = 10
	k := h.keyOwnedBy("n1", "n0")
	h.down["n1"] = true
	h.setMembership("n0", []string{"n1"})
	h.setMembership("n2", []string{"n1"})
	h.advance(time.Second)
	load := newHandLoad(h, k, quota)
	for range 3 {
		load.spend("n0")
	}
	load.resume()
	if got := h.count("n0", k); got != 3 || load.admitted != 3 {
		t.Fatalf("n0 holds %d of the key with n1 dead, %d admitted; want 3 and 3", got, load.admitted)
	}

	// n1 comes back and enters its ring; n0's hand-off of the key reaches
	// it before any ping of n0 did.
	n0 := h.cores["n0"]
	h.cut["n1"] = true
	n1 := h.start("n1", true)
	n1.Joined(h.now)
	h.setMembership("n1", nil)
	h.advance(10*time.Millisecond, "n1")
	if !n1.Member() {
		t.Fatal("the new run of n1 did not enter its ring")
	}
	h.cut["n1"] = false
	states := n0.engine.StatesOf(h.now, []limiter.Key{k})
	ack, ok := n1.Handle(h.now, n0.Self(), Transfer{To: n1.Self().Inc, Seq: 1 << 20, Mode: ModeAdd, Own: true, States: states}).(Ack)
	if !ok || !ack.Refused {
		t.Fatalf("n1 answered n0's hand-off with %+v; want it refused (no lease from n0 yet)", ack)
	}

	// n2 owns the key by a newer ring and pulls it from n1.
	n2 := h.cores["n2"]
	reply, ok := n1.Handle(h.now, n2.Self(), Pull{To: n1.Self().Inc, Keys: []limiter.Key{k}}).(PullReply)
	if !ok {
		t.Fatalf("n1 answered the pull with %T", reply)
	}
	named := reply.Refused || len(reply.Given) > 0 || slices.Contains(reply.Sending, k) ||
		slices.Contains(reply.Moved, KeyOwner{Key: k, Owner: "n0"})
	if !named {
		t.Errorf("n1 answered a pull of a key whose counts n0 sends it again with nothing: %+v", reply)
	}
}
