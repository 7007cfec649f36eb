package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A leaving owner hands its counter of a key to its successor, which
// does not know yet that the owner leaves and forwards the counter back to
// it; the owner refuses it (it is leaving), and the refusal is lost. The
// successor learns that the owner left and asks it for the key: the owner
// handed its counter to the asker, so it gives nothing, and the key counts
// at the successor while its counter is still in the successor's own
// transfer, unacknowledged. Units given back then must wait for that
// counter: given back from the empty count there, they were lost, and the
// counter, refused again and placed anew, still held them (seed
// 1795784061977584032 of the simulator: the cluster held 29 of 28
// admitted).
func TestUnitsGivenBackFollowTheirCounterOnItsWay(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	k, load := h.spentKey("n0", "n2", 5)
	n0, n2 := h.cores["n0"], h.cores["n2"]
	if got := h.count("n0", k); got != int64(load.admitted) {
		t.Fatalf("n0 counts %d of the key; %d were admitted", got, load.admitted)
	}

	h.unacked[[2]string{"n2", "n0"}] = true
	n0.Leave(h.now)
	h.pump()
	if got := h.count("n0", k) + h.count("n2", k); got != 0 {
		t.Fatalf("the engines count %d of the key; its counter should be on its way back to n0", got)
	}

	n2.SetMembership(h.now, Membership{Members: []Member{h.member("n1")}, Leaving: []Member{h.member("n0")}})
	h.pump()
	h.advance(20 * time.Millisecond)

	// A caller's cancel gives one unit back at the key's owner now.
	n2.refund(h.now, []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: load.quota, Window: time.Hour}, Cost: 1}})

	delete(h.unacked, [2]string{"n2", "n0"})
	h.advance(2 * time.Second)
	if got := h.count("n2", k); got != int64(load.admitted)-1 {
		t.Errorf("n2 counts %d of the key; %d were admitted and 1 given back", got, load.admitted)
	}
}
