package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// A joiner's request for a key moving to it waits for the hand-off; as
// that wait ends, the node learns of another joiner, the key's successor
// by the ring now, which has given it no lease yet (it was just seen: the
// first ping goes out at the next tick). The successor answers calls, and
// its lease comes within a round trip: the request must wait for it, within
// its patience, and be decided by the key's owner, not by fallback in the
// middle of a graceful join (simulator seed 1795811428927412524: a
// rolling restart whose restarted node joined as the successor of a key
// the other restarted node waited for).
func TestARequestWaitsForTheLeaseOfASuccessorThatJustJoined(t *testing.T) {
	h := newHandNet(t, "n0", "n1")
	h.names = append(h.names, "n2", "n3")
	h.start("n2", true)
	h.start("n3", true)
	three := NewRing(h.hash, []Member{h.member("n0"), h.member("n1"), h.member("n2")})
	four := NewRing(h.hash, []Member{h.member("n0"), h.member("n1"), h.member("n2"), h.member("n3")})
	var k limiter.Key
	for i := range 10000 {
		c := limiter.ZoneKey(keyhash.New([]byte("keys"), "k").String(string(rune('a'+i%26))+string(rune(i))), 1)
		o3, _ := three.Owner(c.Route())
		o4, _ := four.Owner(c.Route())
		s4, _ := four.Successor(c.Route())
		if o3.Name == "n2" && o4.Name == "n2" && s4.Name == "n3" {
			k = c
			break
		}
	}
	if k == 0 {
		t.Fatal("no key of n2 whose successor is n3 once n3 joins")
	}
	// n2 joins n0 and n1, which do not see it yet: the key waits for
	// their seals.
	h.cores["n2"].Joined(h.now)
	h.list("n2", []Member{h.member("n0"), h.member("n1")}, nil)
	h.advance(10*time.Millisecond, "n2")
	if !h.cores["n2"].Member() {
		t.Fatal("n2 did not join")
	}
	tk := h.take("n2", k, 10)
	if tk.done {
		t.Fatalf("decided at once (%+v): want it to wait for the hand-off", tk.d)
	}
	// As the wait ends, n2 learns of n3, before any tick pings it.
	h.now = tk.until
	h.cores["n3"].Joined(h.now)
	h.list("n2", []Member{h.member("n0"), h.member("n1"), h.member("n3")}, nil)
	h.drive(tk)
	for _, name := range []string{"n0", "n1", "n3"} {
		var others []Member
		for _, x := range h.names {
			if x != name {
				others = append(others, h.member(x))
			}
		}
		h.list(name, others, nil)
	}
	for range 20 {
		if tk.done {
			break
		}
		h.advance(10 * time.Millisecond)
		h.drive(tk)
	}
	if !tk.done || !tk.d.Allowed || tk.d.Source != SourceOwner {
		t.Fatalf("decided %+v (done %v): want admitted by n2 as the key's owner", tk.d, tk.done)
	}
	if got := h.count("n2", k); got != 1 {
		t.Errorf("n2 counts the key at %d; want 1", got)
	}
}
