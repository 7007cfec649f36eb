package core

import (
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

// A node took a key over from its dead owner and waits for its hand-off
// to settle it: a counter of the key came meanwhile and waits there, and a
// count the node passed on to the owner's dead run is still on its way.
// The owner restarts and pulls the key. The reply gives the transfer on
// its way again, and with it everything else the node holds of the key:
// given alone, the new run settles the key on that one count and admits
// up to its limit again before the waiting counter reaches it (seed
// 1795798213455094595 of the simulator: the restarted owner settled a key
// on 1 while 21 waited at the node that took it over, and admitted 24 of
// a bound of 22).
func TestAPullOfAKeyWithATransferOnItsWayGivesAllHeldOfIt(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n2", 6)
	n0, n2 := h.cores["n0"], h.cores["n2"]
	counter := n0.engine.StatesOf(h.now, []limiter.Key{k})
	if got := windowCount(counter); load.admitted != 6 || got != 6 {
		t.Fatalf("admitted %d, n0 counts %d; want 6 and 6", load.admitted, got)
	}
	old := n0.Self()

	// n0 crashes. n2 passes on to it one count admitted for the key
	// elsewhere; it does not arrive.
	h.down["n0"] = true
	one := counter[0]
	one.Cur, one.Prev = 1, 0
	n2.sendTransfer(h.now, old, Transfer{Mode: ModeAdd, States: []limiter.State{one}}, purposeForward)
	h.pump()

	// n2 takes n0 for dead: the key moves to n2 and waits there. The dead
	// run's counter reaches n2 meanwhile.
	n2.SetMembership(h.now, Membership{Members: []Member{h.member("n1")}, Dead: []Peer{old}})
	h.pump()
	if !n2.HandoffUnderway() {
		t.Fatal("no hand-off under way at n2")
	}
	n2.handleTransfer(h.now, h.cores["n1"].Self(), Transfer{Seq: 1, To: n2.self.Inc, Mode: ModeAdd, CountersOf: old, States: counter}, true)
	if got := h.count("n2", k); got != 0 {
		t.Fatalf("n2 counts %d before the key settled", got)
	}

	// n0 runs again and pulls the key from n2.
	n0 = h.start("n0", true)
	reply := n2.handlePull(h.now, n0.Self(), Pull{To: n2.self.Inc, Keys: []limiter.Key{k}})
	if reply.Refused || len(reply.Sending) > 0 {
		t.Fatalf("the pull's reply: refused %v, sending %v; want the key given", reply.Refused, reply.Sending)
	}
	var given int64
	for _, tr := range reply.Given {
		for _, s := range tr.States {
			if s.Key == k {
				given += windowCount([]limiter.State{s})
			}
		}
	}
	if given != 7 {
		t.Errorf("the pull's reply gives %d of the key in %d transfers; n2 holds 7 of it (the counter's 6 and the 1 on its way)", given, len(reply.Given))
	}
}
