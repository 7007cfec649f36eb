package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// A key's successor, which keeps its replica, stands still, and its owner
// crashes a moment later with 6 of 10 spent. The three others admit a
// little of the key in fallback while the owner does not answer, then
// declare both dead: the key is out of reach at the node that takes it
// over, decided by fallback until its counter comes, and what the three
// admitted in fallback joins that node's counter of the key. The owner
// comes back under a new run and owns the key again: the taker hands its
// counter of the key over, which holds nothing of the key's counter, only
// what was admitted in fallback. Taken for the counter the key lacked, it
// let the new run count the key from it (seed 1795873206313035546 of the
// simulator: 25 admitted of a bound of 18, the new run counting from 3
// while the key's counter, at 10, lived on across a split). The key stays
// out of reach at the new run until a counter that holds the counts of
// the runs that died arrives.
func TestAKeyOutOfReachHandedOnWithItsFallbackCountsStaysOutOfReach(t *testing.T) {
	cfg := handTiming
	cfg.FallbackRatio = 0.1
	h := newHandNetWith(t, cfg, "n0", "n1", "n2", "n3", "n4")
	const quota = 10
	var k limiter.Key
	for i := range 10000 {
		c := limiter.ZoneKey(keyhash.New([]byte("keys"), "k").String(string(rune('a'+i%26))+string(rune(i))), 1)
		all := h.cores["n0"].Ring()
		o, _ := all.Owner(c.Route())
		s, _ := all.Successor(c.Route())
		later := NewRing(h.hash, []Member{{Name: "n1", Inc: h.incs["n1"] + 1}, h.member("n2"), h.member("n3"), h.member("n4")})
		lo, _ := later.Owner(c.Route())
		if o.Name == "n1" && s.Name == "n0" && lo.Name == "n1" {
			k = c
			break
		}
	}
	if k == 0 {
		t.Fatal("no key owned by n1 then n0, and by n1's next run among the others")
	}
	load := newHandLoad(h, k, quota)
	for range 6 {
		load.spend("n1")
	}
	h.advance(20 * time.Millisecond) // replicated to n0

	// n0 stands still and n1 crashes; the others admit what their shares
	// let them in fallback, then declare both dead.
	h.down["n0"], h.down["n1"] = true, true
	for _, name := range []string{"n2", "n3", "n4"} {
		load.spend(name)
	}
	load.resume()
	if load.by[SourceFallback] == 0 {
		t.Fatalf("nothing admitted in fallback (%v)", load.by)
	}
	h.advance(100 * time.Millisecond)
	for _, name := range []string{"n2", "n3", "n4"} {
		h.setMembership(name, []string{"n0", "n1"})
	}
	h.advance(time.Second, "n2", "n3", "n4")
	taker, _ := h.cores["n2"].Ring().Owner(k.Route())
	if h.cores[taker.Name].HandoffUnderway() {
		t.Fatalf("%s did not take the dead members' keys over", taker.Name)
	}
	if got := h.count(taker.Name, k); got != int64(load.by[SourceFallback]) {
		t.Fatalf("%s holds %d of the key; want the fallback counts (%v)", taker.Name, got, load.by)
	}

	// n1 comes back under a new run and joins the others, n0 still dead
	// to all: the key moves to n1 with the taker's counter of it.
	n1 := h.start("n1", true)
	n1.Joined(h.now)
	for _, name := range []string{"n1", "n2", "n3", "n4"} {
		h.setMembership(name, []string{"n0"})
	}
	h.advance(500*time.Millisecond, "n1", "n2", "n3", "n4")
	if !n1.Member() || n1.HandoffUnderway() || h.cores[taker.Name].HandoffUnderway() {
		t.Fatalf("the new run of n1 did not join: member %v, hand-offs under way at n1 %v, at %s %v", n1.Member(), n1.HandoffUnderway(), taker.Name, h.cores[taker.Name].HandoffUnderway())
	}
	if owner, _ := n1.Ring().Owner(k.Route()); owner.Name != "n1" {
		t.Fatalf("the key's owner is %s; want n1", owner.Name)
	}
	if got := h.count(taker.Name, k); got != 0 {
		t.Fatalf("%s still holds %d of the key; want it handed to n1", taker.Name, got)
	}
	for range 2 * quota {
		load.spend("n1")
		load.spend(taker.Name)
	}
	h.advance(200*time.Millisecond, "n1", "n2", "n3", "n4")
	load.resume()
	if byOwners := load.admitted - load.by[SourceFallback]; byOwners > quota {
		t.Errorf("%d admitted by owners of limit %d (%v): the new run of n1 counted the key from %s's fallback counts while its counter lived on at n0", byOwners, quota, load.by, taker.Name)
	}

	// n0 moves again: it hears it was declared dead, joins again, and
	// sends the replica it kept on to the key's owner.
	h.down["n0"] = false
	h.setMembership("n0", nil)
	h.advance(2 * time.Second)
	for _, name := range h.names {
		h.setMembership(name, nil)
	}
	h.advance(time.Second)
	load.resume()
	owner, _ := h.cores["n2"].Ring().Owner(k.Route())
	if got := h.count(owner.Name, k); got != int64(load.admitted) {
		t.Errorf("after n0 moved again, the key's owner %s holds %d; %d were admitted (%v)", owner.Name, got, load.admitted, load.by)
	}
}
