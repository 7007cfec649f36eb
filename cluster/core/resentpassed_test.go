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
	h, k := joinerN3Waits(t)
	load := h.spent(k, "n0", 7)
	evicted := h.n0AppliesATransferUnreplicated(k, "n2")
	h.n1TakesN0sKeyOver(k, load)
	load.admitted += 2 // n2's transfer, in n0's counter alone
	h.n3JoinsAndTakesTheKey(k, 8)

	h.sentAgainTo("n1", "n2", k)
	h.advance(100 * time.Millisecond)
	h.n0sCounterComesTo("n1", "n2", evicted, h.cores["n1"].self)
	h.advance(time.Second)
	if got := h.count("n3", k); got != int64(load.admitted) {
		t.Fatalf("n3 counts %d; %d were admitted", got, load.admitted)
	}
	h.n3LeavesAndN1TakesTheKeyBack("n1", "n2")
	h.holdsAdmitted(k, load.admitted, "n0")
	load.spendsToTheLimit(t, "n1", "n2")
}

// joinerN3Waits starts n0, n1 and n2, and n3, which waits to join, with
// a key that is n0's, n1's once n0 is gone, and n3's once n3 joins.
func joinerN3Waits(t *testing.T) (*handNet, limiter.Key) {
	t.Helper()
	h := newHandNet(t, "n0", "n1", "n2")
	h.names = append(h.names, "n3")
	h.start("n3", true)
	k := h.keyWhere(func(owner func(names ...string) Member) bool {
		return owner("n0", "n1", "n2").Name == "n0" && owner("n1", "n2").Name == "n1" && owner("n1", "n2", "n3").Name == "n3"
	})
	return h, k
}

// n3JoinsAndTakesTheKey has n3 join n1 and n2 (n0 dead) and take k over
// from n1, counting want.
func (h *handNet) n3JoinsAndTakesTheKey(k limiter.Key, want int64) {
	h.t.Helper()
	n3 := h.cores["n3"]
	n3.Joined(h.now)
	h.listAll([]Peer{{Name: "n0", Inc: h.incs["n0"]}}, "n1", "n2", "n3")
	h.advance(time.Second)
	if n3.HandoffUnderway() || h.count("n3", k) != want {
		h.t.Fatalf("n3: hand-off under way %v, counts %d; want %d", n3.HandoffUnderway(), h.count("n3", k), want)
	}
}

// n3LeavesAndN1TakesTheKeyBack has n3 leave: the nodes that stay (n0
// dead) hear so, and n1 takes the key back.
func (h *handNet) n3LeavesAndN1TakesTheKeyBack(stay ...string) {
	h.t.Helper()
	h.cores["n3"].Leave(h.now)
	leaving := []Member{h.member("n3")}
	dead := []Peer{{Name: "n0", Inc: h.incs["n0"]}}
	for _, name := range stay {
		var ms []Member
		for _, x := range stay {
			if x != name {
				ms = append(ms, h.member(x))
			}
		}
		h.cores[name].SetMembership(h.now, Membership{Members: ms, Leaving: leaving, Dead: dead})
	}
	h.pump()
	h.advance(2 * time.Second)
	if h.cores["n1"].HandoffUnderway() {
		h.t.Fatal("n1 has not taken the key back")
	}
}
