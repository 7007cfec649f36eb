package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// An owner is cut off with a minority: without a majority, it keeps a
// unit given back for its key until it knows where the key is counted.
// The others declare it dead, and its successor starts the key from the
// replica, which holds every unit the owner granted. The link heals, and
// the owner has a majority again (the members on its side, and one it had
// forgotten, which no failed call marks as down) before any peer that took
// its keys over answered it: a majority answering is no word yet that
// none did. Taken off its own counter then, the unit is lost where that
// counter meets the replica: the two are copies of one counter, and the
// larger stands. The owner asks its peers first, as after standing still,
// and the unit comes off the counter where the key is counted.
func TestAUnitGivenBackByAnOwnerThatRegainsItsMajorityComesOffWhereItsKeyIsCounted(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4")
	k, load := h.spentKey("n0", "n1", 10) // limit 30
	h.advance(20 * time.Millisecond)      // replicated to n1

	// n0 and n4 are cut off from the others; n0 forgets n3.
	h.cut["n0"], h.cut["n4"] = true, true
	h.cores["n0"].SetMembership(h.now, Membership{
		Members: []Member{h.member("n4")},
		Dead:    []Peer{h.member("n1").Peer(), h.member("n2").Peer()},
	})
	h.setMembership("n4", []string{"n1", "n2", "n3"})
	for _, x := range []string{"n1", "n2", "n3"} {
		h.setMembership(x, []string{"n0", "n4"})
	}
	h.advance(time.Second)
	if h.cores["n0"].majority(h.cores["n0"].view.Load()) {
		t.Fatal("n0 has a majority on the smaller side")
	}
	if h.cores["n1"].HandoffUnderway() || h.count("n1", k) != 10 {
		t.Fatalf("n1 did not take the key over from its replica: hand-off under way %v, count %d", h.cores["n1"].HandoffUnderway(), h.count("n1", k))
	}

	// n0 gives a unit back; the link heals, and n0 hears of every member
	// again before any of them answered it.
	h.cores["n0"].refund(h.now, []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: load.quota, Window: time.Hour}}})
	h.pump()
	h.cut["n0"], h.cut["n4"] = false, false
	h.cores["n0"].SetMembership(h.now, Membership{Members: []Member{h.member("n1"), h.member("n2"), h.member("n3"), h.member("n4")}})
	h.now = h.now.Add(time.Millisecond)
	h.cores["n0"].Tick(h.now)
	for range 100 {
		h.advance(10 * time.Millisecond)
	}
	var got int64
	for _, x := range h.names {
		got += h.count(x, k)
	}
	if got != 9 {
		t.Errorf("the cluster counts %d (n0 %d, n1 %d); 9 were admitted", got, h.count("n0", k), h.count("n1", k))
	}
}
