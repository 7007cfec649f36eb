package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node joins, and pulls one of its new keys from the key's owner, which
// has not heard of it yet and lends it the key. The pull's answer is lost
// and the joiner crashes: it never applied the counter, nor refused it.
// The owner hears of it only as dead, and its ring stays as it was. The
// borrower is gone: the loan ends, and once the borrower's lease from the
// owner ran out (it can no longer apply the counter), the counter the
// owner sent it, never acknowledged, is counted at the owner again. Kept
// lent, requests for the key went to the dead borrower and were decided
// by fallback, and the counter went to it over and over, in place of the
// transfer given up on, as long as the owner's ring stayed as it was.
func TestAKeyLentToABorrowerThatDiedUnansweredComesBack(t *testing.T) {
	const quota = 8
	h, k, load := joinUnheardByTheOwner(t, quota)

	// n2 pulls the key from n0, which lends it; the answer is lost, and
	// n2 crashes.
	pulled := false
	h.unanswered = func(from string, o Outgoing) bool {
		if _, ok := o.Msg.(Pull); ok && from == "n2" {
			pulled, h.down["n2"] = true, true
			return true
		}
		return false
	}
	h.take("n2", k, quota) // it pulls the key, and never finishes
	h.advance(50 * time.Millisecond)
	h.unanswered = nil
	if !pulled {
		t.Fatal("n2 did not pull the key")
	}
	if _, lent := h.cores["n0"].lent.get(k); !lent {
		t.Fatal("n0 did not lend the key")
	}

	// n0 and n1 hear of n2 as dead; n0's ring does not change.
	dead := []Peer{h.member("n2").Peer()}
	h.list("n0", []Member{h.member("n1")}, dead)
	h.list("n1", []Member{h.member("n0")}, dead)
	// A request at n0 now waits for the counter: it may still be applied
	// by the borrower until its lease from n0 ran out.
	load.spend("n0")
	h.advance(h.cfg.LeaseTime * 2)
	load.resume()

	before := load.by[SourceFallback]
	for range 3 {
		load.spend("n0")
		load.spend("n1")
	}
	load.resume()
	if load.admitted > quota {
		t.Errorf("%d admitted of limit %d (%v)", load.admitted, quota, load.by)
	}
	if got := load.by[SourceFallback] - before; got != 0 {
		t.Errorf("%d requests were decided by fallback after the borrower's lease ran out (%v)", got, load.by)
	}
	if got := h.pendingTo("n0", dead[0]); got != 0 {
		t.Errorf("n0 still sends %d transfers to the dead run of n2", got)
	}
	if got := h.count("n0", k); got != int64(load.admitted) {
		t.Errorf("the key's owner counts %d; %d were admitted (%v)", got, load.admitted, load.by)
	}
}

// joinUnheardByTheOwner starts n0 and n1, and n2 joining, with a key that
// n0 owns and n2 will own once it joined; n0 admits 5 of it (limit
// quota). n2 joins: it hears of n0 and n1, and n1 of it, but n0 not yet,
// so n0 lends the key to n2 when n2 pulls it.
func joinUnheardByTheOwner(t *testing.T, quota int64) (*handNet, limiter.Key, *handLoad) {
	t.Helper()
	h := newHandNet(t, "n0", "n1")
	h.names = append(h.names, "n2")
	h.start("n2", true)
	k := h.keyWhere(func(r func(...string) Member) bool {
		return r("n0", "n1").Name == "n0" && r("n0", "n1", "n2").Name == "n2"
	})
	load := newHandLoad(h, k, quota)
	for range 5 {
		load.spend("n0")
	}
	h.advance(20 * time.Millisecond)
	n2 := h.cores["n2"]
	n2.Joined(h.now)
	h.list("n2", []Member{h.member("n0"), h.member("n1")}, nil)
	h.advance(10*time.Millisecond, "n2")
	if !n2.Member() {
		t.Fatal("n2 did not join")
	}
	h.list("n1", []Member{h.member("n0"), h.member("n2")}, nil)
	return h, k, load
}
