package core

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// A node that left joins again and pulls a key from its owner, which has
// not heard of the joining yet and lends it the key (requests for it go
// there); the joiner leaves again before the owner ever lists it, and
// hands the key's counter back to the lender, the key's owner by the ring
// of both. The counter that came back from the borrower ends the loan:
// placed anew by the loan, it went back to the borrower, which refused it
// (leaving), and once the borrower was gone it was sent again in place of
// the abandoned transfer to the borrower still, over and over, for as long
// as the ring stayed as it was (seed 1795792943506378862 of the simulator:
// graceful changes only, and the cluster never settled).
func TestACounterHandedBackByTheNodeAKeyWasLentToEndsTheLoan(t *testing.T) {
	h := newHandNet(t, "n0", "n1", "n2")
	var k limiter.Key
	found := false
	for i := range 10000 {
		k = limiter.ZoneKey(keyhash.New([]byte("keys"), "k").String(string(rune('a'+i%26))+string(rune(i))), 1)
		o, _ := h.cores["n0"].Ring().Owner(k.Route())
		w, _ := h.cores["n0"].Ring().OwnerWithout(k.Route(), "n2")
		next := NewRing(h.hash, []Member{h.member("n0"), h.member("n1"), {Name: "n2", Inc: 2, PeerAddr: "n2"}})
		j, _ := next.Owner(k.Route())
		if o.Name == "n2" && w.Name == "n0" && j.Name == "n2" {
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

	// n2 runs again and joins; n1 hears of it, n0 only that it is joining.
	n2 = h.start("n2", true)
	n2.Joined(h.now)
	h.list("n2", h.othersThan("n2"), nil)
	h.list("n1", h.othersThan("n1"), nil)
	h.cores["n0"].SetMembership(h.now, Membership{Members: h.othersThan("n0", "n2"), Joining: []Member{h.member("n2")}})
	h.pump()
	h.advance(10 * time.Millisecond)
	if !n2.Member() {
		t.Fatal("n2 did not join")
	}
	load.spend("n2") // n2 pulls the key from n0, which lends it
	h.advance(100 * time.Millisecond)
	load.resume()
	if got := h.count("n2", k); got != int64(load.admitted) {
		t.Fatalf("the joiner counts %d of the key; %d were admitted (%v)", got, load.admitted, load.by)
	}

	// n2 leaves again: it hands the key back to n0, and goes.
	left := h.member("n2").Peer()
	n2.Leave(h.now)
	h.pump()
	h.advance(200 * time.Millisecond)
	h.down["n2"] = true
	for _, name := range []string{"n0", "n1"} {
		h.list(name, h.othersThan(name, "n2"), []Peer{left})
	}
	h.advance(3 * time.Second)

	if got := h.pendingTo("n0", left); got != 0 {
		t.Errorf("n0 still sends %d transfers to the run of n2 that left", got)
	}
	if got := h.count("n0", k); got != int64(load.admitted) {
		t.Errorf("the key's owner counts %d; %d were admitted", got, load.admitted)
	}
}

// othersThan lists every node but name and those in not as members.
func (h *handNet) othersThan(name string, not ...string) []Member {
	var ms []Member
	for _, x := range h.names {
		if x != name && !slices.Contains(not, x) {
			ms = append(ms, h.member(x))
		}
	}
	return ms
}

// othersSeeLeaveAndGo has every node but leaver hear of it as leaving,
// one after the other, and 200 ms later as gone; 100 ms more then pass.
func (h *handNet) othersSeeLeaveAndGo(leaver string) {
	leaving := h.member(leaver)
	for _, name := range h.names {
		if name != leaver {
			h.cores[name].SetMembership(h.now, Membership{Members: h.othersThan(name, leaver), Leaving: []Member{leaving}})
			h.pump()
		}
	}
	h.advance(200 * time.Millisecond)
	h.down[leaver] = true
	for _, name := range h.names {
		if name != leaver {
			h.list(name, h.othersThan(name, leaver), nil)
		}
	}
	h.advance(100 * time.Millisecond)
}
