package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A dead owner (n0) applied a transfer of n2's (2 counts) after it last
// replicated to its successor n1, which took the key over from the
// replica and handed it to a node that joined (n3). n2, its transfer
// unacknowledged, sends the 2 again in place of it to n1, which passes
// them on to n3; n0's counter, saying it applied the transfer, comes to
// n1 and goes on to n3 too, where the 2 are weighed against it: n3
// counts them once. n3 then leaves, and hands the key back to n1 with the
// record of the transfers n0 applied. The 2 were never in a counter of
// n1's: its record of them, as counts sent again that it took in, must
// not take them out of the counter that comes back (8 held of 10
// admitted).
func TestCountsSentAgainPassedOnAreNotTakenOutOfTheCounterThatComesBack(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	h.names = append(h.names, "n3")
	n3 := h.start("n3", true)
	k := h.keyWhere(func(owner func(names ...string) Member) bool {
		return owner("n0", "n1", "n2").Name == "n0" && owner("n1", "n2").Name == "n1" && owner("n1", "n2", "n3").Name == "n3"
	})
	load := newHandLoad(h, k, 30)
	for range 7 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond) // replicated to n1
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	n0.handleTransfer(h.now, n2.self, Transfer{Seq: 50, To: n0.self.Inc, Mode: ModeAdd, States: []limiter.State{counterOf(h.now, k, 2)}}, false)
	if got := h.count("n0", k); got != 9 {
		t.Fatalf("n0 counts %d after applying n2's transfer; want 9", got)
	}
	evicted := n0.engine.StatesOf(h.now, []limiter.Key{k})
	h.n1TakesN0sKeyOver(k, load)
	load.admitted += 2 // n2's transfer, in n0's counter alone

	dead := []Peer{{Name: "n0", Inc: h.incs["n0"]}}
	n3.Joined(h.now)
	for _, name := range []string{"n1", "n2", "n3"} {
		var ms []Member
		for _, x := range []string{"n1", "n2", "n3"} {
			if x != name {
				ms = append(ms, h.member(x))
			}
		}
		h.list(name, ms, dead)
	}
	h.advance(time.Second, "n1", "n2", "n3")
	if n3.HandoffUnderway() || h.count("n3", k) != 8 {
		t.Fatalf("n3: hand-off under way %v, counts %d; want 8", n3.HandoffUnderway(), h.count("n3", k))
	}

	n1.handleTransfer(h.now, n2.self, Transfer{Seq: 51, To: n1.self.Inc, Mode: ModeAdd, States: []limiter.State{counterOf(h.now, k, 2)}, Was: 50, WasTo: n0.self}, false)
	h.advance(100*time.Millisecond, "n1", "n2", "n3")
	n1.handleTransfer(h.now, n0.self, Transfer{Seq: 40, To: n1.self.Inc, Mode: ModeEvicted, Evicted: n0.self, Was: 30, WasTo: n1.self, States: evicted,
		Applied: []Applied{{From: n2.self, Seq: 50}}}, true)
	h.advance(time.Second, "n1", "n2", "n3")
	if got := h.count("n3", k); got != int64(load.admitted) {
		t.Fatalf("n3 counts %d; %d were admitted", got, load.admitted)
	}

	n3.Leave(h.now)
	leaving := []Member{h.member("n3")}
	n1.SetMembership(h.now, Membership{Members: []Member{h.member("n2")}, Leaving: leaving, Dead: dead})
	n2.SetMembership(h.now, Membership{Members: []Member{h.member("n1")}, Leaving: leaving, Dead: dead})
	h.pump()
	h.advance(2*time.Second, "n1", "n2", "n3")
	if n1.HandoffUnderway() {
		t.Fatal("n1 has not taken the key back")
	}
	h.holdsAdmitted(k, load.admitted, "n0")
	load.spendsToTheLimit(t, "n1", "n2")
}
