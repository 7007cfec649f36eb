package core

import (
	"testing"
	"time"
)

// A node joins and pulls one of its new keys from the key's owner, which
// has not heard of it yet and lends it the key; the borrower applies the
// counter (acknowledged) and counts the key. Then the borrower is cut off,
// and the lender hears of it as dead at once, its ring unchanged: the
// borrower may go on counting the key until its lease from the lender (its
// successor for the key) runs out. The lender must not count the key
// again from the counter it lent, nor from the borrower's replica, before
// then: the two would count it side by side.
func TestALenderWaitsForACutOffBorrowersLeaseBeforeItCountsTheKeyAgain(t *testing.T) {
	const quota = 30
	h, k, load := joinUnheardByTheOwner(t, quota)

	// n2 pulls the key from n0, which lends it, and counts 10 of it.
	for range 10 {
		load.spend("n2")
	}
	h.advance(50 * time.Millisecond)
	load.resume()
	if _, lent := h.cores["n0"].lent.get(k); !lent {
		t.Fatal("n0 did not lend the key")
	}

	// n2 is cut off; n0 and n1 hear of it as dead at once.
	h.cut["n2"] = true
	dead := []Peer{h.member("n2").Peer()}
	h.list("n0", []Member{h.member("n1")}, dead)
	h.list("n1", []Member{h.member("n0")}, dead)
	for range quota {
		load.spend("n0")
		load.spend("n2")
	}
	h.advance(50 * time.Millisecond)
	load.resume()
	fb := load.by[SourceFallback]
	if load.admitted > quota+fb {
		t.Errorf("%d admitted of limit %d and %d by fallback (%v): n0 counts %d, n2 %d", load.admitted, quota, fb, load.by, h.count("n0", k), h.count("n2", k))
	}
}
