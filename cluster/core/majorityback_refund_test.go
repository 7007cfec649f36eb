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

// As above, but the owner never hears that the larger side declared it
// dead: it keeps two of them as members, whose calls failed while it was
// cut off. Its majority comes back with a member it hears of anew, one
// that took nothing over (it stood still through the split), before its
// probes reach the others again: the peers whose calls failed, which took
// its keys over, are the ones that can tell. Asking only the others (its
// own side, and the member heard of anew), it gave the unit back from its
// own counter, which then met the replica the larger side counted from:
// copies of one counter, the larger stands, and the unit counted twice.
func TestAnOwnerThatRegainsItsMajorityAsksThePeersCutOffFromItBeforeItGivesUnitsBack(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4", "n5")
	// n5 stands still, and the others forget it.
	h.down["n5"] = true
	for _, x := range []string{"n0", "n1", "n2", "n3", "n4"} {
		h.listOf(x, "n0", "n1", "n2", "n3", "n4")
	}
	h.advance(20 * time.Millisecond)
	// A key n0 owns, and n1 succeeds it in, by every ring here.
	k := h.keyWhere(func(owner func(names ...string) Member) bool {
		for _, ring := range [][]string{{"n1", "n2", "n3", "n4"}, {"n1", "n2", "n4"}, {"n1", "n2", "n4", "n5"}} {
			if owner(append([]string{"n0"}, ring...)...).Name != "n0" || owner(ring...).Name != "n1" {
				return false
			}
		}
		return true
	})
	load := newHandLoad(h, k, 30)
	for range 10 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond) // replicated to n1

	// n0 and n4 are cut off from the others, which declare them dead; n0
	// forgets n3, but keeps n1 and n2 as members: its calls to them fail.
	h.cut["n0"], h.cut["n4"] = true, true
	h.listOf("n0", "n1", "n2", "n4")
	h.list("n4", []Member{h.member("n0")}, []Peer{h.member("n1").Peer(), h.member("n2").Peer(), h.member("n3").Peer()})
	for _, x := range []string{"n1", "n2", "n3"} {
		h.list(x, h.othersThan(x, "n0", "n4", "n5"), []Peer{h.member("n0").Peer(), h.member("n4").Peer()})
	}
	h.advance(time.Second, "n0", "n1", "n2", "n3", "n4")
	n0 := h.cores["n0"]
	if n0.majority(n0.view.Load()) {
		t.Fatal("n0 has a majority on the smaller side")
	}
	if h.cores["n1"].HandoffUnderway() || h.count("n1", k) != 10 {
		t.Fatalf("n1 did not take the key over from its replica: hand-off under way %v, count %d", h.cores["n1"].HandoffUnderway(), h.count("n1", k))
	}
	for _, x := range []string{"n1", "n2"} {
		if p := n0.peers.get(x); p == nil || p.reachState() != down {
			t.Fatalf("n0 does not take %s for down", x)
		}
	}

	// Just after n0's probes of n1 and n2 failed once more, n0 gives a unit
	// back; the link heals, n5 runs again, and n0 hears of it anew: a
	// majority answers n0 before its next probes of n1 and n2 are due.
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("n0 does not probe n1 and n2 at once")
		}
		h.now = h.now.Add(time.Millisecond)
		h.tick("n0")
		if nextPing(n0, "n1") >= n0.mono(h.now)+int64(40*time.Millisecond) && nextPing(n0, "n2") >= n0.mono(h.now)+int64(40*time.Millisecond) {
			break
		}
	}
	n0.refund(h.now, []limiter.Request{{Key: k, Zone: 1, Limit: limiter.Limit{Algorithm: limiter.FixedWindow, Quota: load.quota, Window: time.Hour}}})
	h.pump()
	h.cut["n0"], h.cut["n4"] = false, false
	h.down["n5"] = false
	h.listOf("n0", "n1", "n2", "n4", "n5")
	h.now = h.now.Add(time.Millisecond)
	h.tick("n0", "n5")
	h.now = h.now.Add(10 * time.Millisecond)
	h.tick()
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

// listOf tells name's core that members are the current runs of the nodes
// named, and no node is dead.
func (h *handNet) listOf(name string, members ...string) {
	var list []Member
	for _, x := range members {
		if x != name {
			list = append(list, h.member(x))
		}
	}
	h.list(name, list, nil)
}

// nextPing returns when c probes name next (mono).
func nextPing(c *Core, name string) int64 {
	p := c.peers.get(name)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nextPing
}
