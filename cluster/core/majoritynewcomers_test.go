package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// An owner (n0) is cut off with a minority (n0 and n4 of five); the
// larger side declares it dead, and its successor there (n1) counts its
// key on from the replica. n0 keeps the others as members, their calls
// failing, and holds a unit given back for the key. Two nodes join on n0's
// side (n5, n6): with them, n0 has a majority again (four of seven), but
// the peers that took its keys over are still cut off from it. Its pings
// to them fail, so they are not waited for, and n0 counts the key again,
// its lease from a newcomer, the key's successor by its ring, while n1
// counts it too: two sides of a split, each within one limit (the bound's
// S). The unit held comes off n0's counter, and when the split heals that
// counter meets the one n1 started from the replica.
//
// Both sides are checked: what the cluster admits stays within L + F + S
// (S: what the key's owner by neither final ring counted as owner), each
// side refuses nothing under its limit, and, once the split healed, the
// cluster holds what was admitted, the unit given back once. Before, the
// counter n0 sent as it learned it was declared dead went to the joiner
// it had replicated to, which passed it on as a plain copy of n0's
// counter: where it met n1's, started from the replica taken before the
// give-back, the larger stood, and with only the far side spending, the
// cluster held 30 of 29 admitted and refused a request under the limit.
func TestAnOwnerWhoseMajorityComesBackThroughNewcomersStaysWithinTheBound(t *testing.T) {
	for _, c := range []struct {
		name string
		// takersDead: n0's side declares the far side dead before the
		// newcomers come, so n0 does not even ping it; smallSpends: n0's
		// side spends the key during the split (else only the unit given
		// back lowers n0's counter below the replica n1 started from);
		// takerSucceeds: by n0's ring with the newcomers, n1 succeeds n0
		// in the key (else a newcomer does), so n0, without a lease from
		// it, decides the key by fallback.
		takersDead, smallSpends, takerSucceeds bool
	}{
		{"far side members, both sides spend", false, true, false},
		{"far side members, only the far side spends", false, false, false},
		{"far side dead, both sides spend", true, true, false},
		{"far side dead, only the far side spends", true, false, false},
		{"far side members, taker succeeds, both sides spend", false, true, true},
		{"far side members, taker succeeds, only the far side spends", false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) { ownerBackThroughNewcomers(t, c.takersDead, c.smallSpends, c.takerSucceeds) })
	}
}

func ownerBackThroughNewcomers(t *testing.T, takersDead, smallSpends, takerSucceeds bool) {
	const quota = 30
	h := newHandNet(t, "n0", "n1", "n2", "n3", "n4", "n5", "n6")
	// n5 and n6 are not there yet: the others forget them.
	h.down["n5"], h.down["n6"] = true, true
	for _, x := range []string{"n0", "n1", "n2", "n3", "n4"} {
		h.listOf(x, "n0", "n1", "n2", "n3", "n4")
	}
	h.advance(20 * time.Millisecond)
	// A key n0 owns, n1 succeeds in, and n1 owns on the larger side; by
	// n0's ring with the newcomers, n0 owns it and a newcomer succeeds
	// (or n1, takerSucceeds).
	k := h.keyWhere(func(owner func(names ...string) Member) bool {
		succ := owner("n1", "n2", "n3", "n4", "n5", "n6").Name
		return owner("n0", "n1", "n2", "n3", "n4").Name == "n0" &&
			owner("n1", "n2", "n3", "n4").Name == "n1" &&
			owner("n1", "n2", "n3").Name == "n1" &&
			owner("n0", "n1", "n2", "n3", "n4", "n5", "n6").Name == "n0" &&
			(succ == "n1") == takerSucceeds && succ != "n2" && succ != "n3" && succ != "n4"
	})
	load := newHandLoad(h, k, quota)
	for range 10 {
		load.spend("n0")
	}
	load.resume()
	h.advance(20 * time.Millisecond) // replicated to n1
	if load.admitted != 10 {
		t.Fatalf("%d admitted before the split; want 10", load.admitted)
	}

	// n0 and n4 are cut off; the larger side declares them dead. n0 keeps
	// n1, n2 and n3 as members: its calls to them fail.
	h.cut["n0"], h.cut["n4"] = true, true
	h.listOf("n0", "n1", "n2", "n3", "n4")
	h.listOf("n4", "n0", "n1", "n2", "n3")
	for _, x := range []string{"n1", "n2", "n3"} {
		h.list(x, h.othersThan(x, "n0", "n4", "n5", "n6"), []Peer{h.member("n0").Peer(), h.member("n4").Peer()})
	}
	h.advance(time.Second, "n0", "n1", "n2", "n3", "n4")
	n0 := h.cores["n0"]
	if n0.majority(n0.view.Load()) {
		t.Fatal("n0 has a majority on the smaller side")
	}
	if h.cores["n1"].HandoffUnderway() || h.count("n1", k) != 10 {
		t.Fatalf("n1 did not take the key over from its replica: hand-off under way %v, count %d", h.cores["n1"].HandoffUnderway(), h.count("n1", k))
	}

	if takersDead {
		far := []Peer{h.member("n1").Peer(), h.member("n2").Peer(), h.member("n3").Peer()}
		h.list("n0", []Member{h.member("n4")}, far)
		h.list("n4", []Member{h.member("n0")}, far)
		h.advance(100*time.Millisecond, "n0", "n1", "n2", "n3", "n4")
	}

	// n0 gives a unit back: it keeps it, not knowing where the key is
	// counted.
	n0.refund(h.now, load.unitOf(k))
	h.pump()
	load.admitted--
	if !n0.unrefunded.waiting() {
		t.Fatal("n0 gave the unit back without a majority")
	}

	// n5 and n6 join on n0's side, new runs; n0 and n4 hear of them.
	for _, x := range []string{"n5", "n6"} {
		h.start(x, false)
		h.cut[x] = true
	}
	all := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6"}
	for _, x := range []string{"n0", "n4", "n5", "n6"} {
		if takersDead {
			h.list(x, h.othersThan(x, "n1", "n2", "n3"), []Peer{h.member("n1").Peer(), h.member("n2").Peer(), h.member("n3").Peer()})
		} else {
			h.listOf(x, all...)
		}
	}
	h.advance(500*time.Millisecond, "n0", "n1", "n2", "n3", "n4", "n5", "n6")
	if !n0.majority(n0.view.Load()) {
		t.Fatal("n0 has no majority with the newcomers")
	}
	for _, x := range []string{"n1", "n2", "n3"} {
		if p := n0.peers.get(x); !takersDead && (p == nil || p.reachState() != down) {
			t.Fatalf("n0 does not take %s for down", x)
		}
	}
	t.Logf("after the newcomers: n0 holds %d given back, counts %d; n1 counts %d", n0.unrefunded.n.Load(), h.count("n0", k), h.count("n1", k))

	// Both sides spend the key to its limit.
	side := func(node string) (asOwner, refusedUnder int) {
		before := load.by[SourceOwner]
		for range quota + 5 {
			held := h.count(node, k) + windowCount(h.cores[node].fallback.engine.StatesOf(h.now, []limiter.Key{k}))
			tk := load.spend(node)
			for !tk.done { // the cores tick while it waits
				h.advance(10 * time.Millisecond)
				h.drive(tk)
			}
			load.resume()
			if !tk.d.Allowed && held < quota && tk.d.Source == SourceOwner {
				refusedUnder++
			}
		}
		return load.by[SourceOwner] - before, refusedUnder
	}
	var small, smallRefused int
	if smallSpends {
		small, smallRefused = side("n0")
	}
	large, largeRefused := side("n1")
	t.Logf("during the split: n0's side admitted %d as owner, n1's %d (%v); counts n0 %d n1 %d", small, large, load.by, h.count("n0", k), h.count("n1", k))
	if smallRefused+largeRefused > 0 {
		t.Errorf("refused under the limit by the key's owner: %d on n0's side, %d on n1's", smallRefused, largeRefused)
	}

	// The split heals: every node hears of every member's current run.
	for _, x := range all {
		h.cut[x] = false
	}
	h.advance(2 * time.Second)
	for _, x := range all {
		h.listOf(x, all...)
	}
	for range 300 {
		h.advance(10 * time.Millisecond)
	}
	load.resume()

	// The bound: L, plus what fallback admitted, plus what was counted as
	// owner during the split by the side whose owner is not the key's by
	// the ring every node routes by again.
	final, _ := h.cores["n1"].Ring().Owner(k.Route())
	s := small
	if final.Name == "n0" {
		s = large
	}
	bound := quota + load.by[SourceFallback] + s
	t.Logf("admitted %d (%v), bound %d (owner by the final ring %s); counts %v", load.admitted, load.by, bound, final.Name, h.counts(k))
	if load.admitted > bound {
		t.Errorf("%d admitted; the bound is %d", load.admitted, bound)
	}
	h.holdsAdmitted(k, load.admitted, "")

	// Under its limit, the key's owner admits the next request.
	if load.admitted < quota {
		tk := load.spend(final.Name)
		load.resume()
		if !tk.d.Allowed {
			t.Errorf("%s refused a request with %d of %d admitted (%+v)", final.Name, load.admitted, quota, tk.d)
		}
	}
}

// counts returns what every node counts of k, in its engine and in
// fallback.
func (h *handNet) counts(k limiter.Key) map[string]int64 {
	by := map[string]int64{}
	for _, name := range h.names {
		by[name] = h.count(name, k) + windowCount(h.cores[name].fallback.engine.StatesOf(h.now, []limiter.Key{k}))
	}
	return by
}
