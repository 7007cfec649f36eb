package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node joins and pulls one of its new keys from the key's owner, which
// lends it the key and hears of the borrower only as joining (its ring
// stays as it was). The borrower's hand-off completes by its window; it
// counts the key and replicates it to the lender, its successor for the
// key. A membership update that leaves the lender's
// ring as it was must keep that replica: the borrower is alive, joining,
// and has not left (runLeft takes every run that is not a member for one
// that left). Dropped, the borrower's crash loses all it counted of the
// key, not only its last few milliseconds: the lender counts the key
// again from the counter it lent. Without that update in between, the
// replica comes here when the borrower is declared dead, and the limit
// holds.
func TestAReplicaOfAJoiningBorrowerOutlivesAMembershipUpdateOfTheSameRing(t *testing.T) {
	const quota = 30
	h, k, load := joinUnheardByTheOwner(t, quota)

	// n0 hears of n2 only as joining.
	joining := Membership{Members: []Member{h.member("n1")}, Joining: []Member{h.member("n2")}}
	h.cores["n0"].SetMembership(h.now, joining)
	h.pump()
	h.advance(300 * time.Millisecond)

	// n2 pulls the key from n0, which lends it; its hand-off completes
	// by its window, and it counts 15 more.
	load.spend("n2")
	h.advance(h.cfg.HandoffWindow + time.Second)
	load.resume()
	for range 14 {
		load.spend("n2")
	}
	h.advance(100 * time.Millisecond)
	load.resume()
	if _, lent := h.cores["n0"].lent.get(k); !lent {
		t.Fatal("n0 did not lend the key")
	}
	if st, _, ok := h.cores["n0"].replicas.get(k); !ok || windowCount([]limiter.State{st}) != int64(load.admitted) {
		t.Fatalf("n0's replica of the key: %v %v; want %d", st, ok, load.admitted)
	}

	// n0 hears the same again: its ring stays as it was.
	h.cores["n0"].SetMembership(h.now, joining)
	h.pump()
	if _, _, ok := h.cores["n0"].replicas.get(k); !ok {
		t.Error("n0 dropped n2's replica of the key, n2 joining")
	}

	// n2 crashes well after its last change; n0 and n1 hear of it as dead.
	h.advance(100 * time.Millisecond)
	h.down["n2"] = true
	dead := []Peer{h.member("n2").Peer()}
	h.list("n0", []Member{h.member("n1")}, dead)
	h.list("n1", []Member{h.member("n0")}, dead)
	h.advance(h.cfg.LeaseTime * 2)
	for range quota {
		load.spend("n0")
	}
	h.advance(100 * time.Millisecond)
	load.resume()
	if fb := load.by[SourceFallback]; load.admitted > quota+fb {
		t.Errorf("%d admitted of limit %d and %d by fallback (%v): n2's counts were lost with it", load.admitted, quota, fb, load.by)
	}
}
