package core

import (
	"testing"
	"time"
)

// A node joins and pulls one of its new keys from the key's owner, which
// has not heard of it yet and lends it the key: the borrower applies the
// counter and counts most of the key's limit. The lender decides one
// request for the key by fallback (its call to the borrower lost), and
// owes the borrower that count. The borrower starts to leave: its
// hand-over of the key's counter to the lender is slow, and it refuses
// the lender's fallback count (leaving). The refusal must not end the
// loan while the borrower still holds the key's counter: the lender would
// count the key again from what it holds, which is not the counter, and
// admit the limit again before the counter comes back.
func TestARefusalByALeavingBorrowerThatHoldsTheCounterKeepsTheLoan(t *testing.T) {
	const quota = 30
	h, k, load := joinUnheardByTheOwner(t, quota)

	// n2 pulls the key from n0, which lends it, and counts 20 of it.
	for range 20 {
		load.spend("n2")
	}
	h.advance(50 * time.Millisecond)
	load.resume()
	if _, lent := h.cores["n0"].lent.get(k); !lent {
		t.Fatal("n0 did not lend the key")
	}
	if got := h.count("n2", k); got != int64(load.admitted) {
		t.Fatalf("the borrower counts %d; %d were admitted (%v)", got, load.admitted, load.by)
	}

	// n0's call to n2 for the key is lost: fallback decides it, and n0
	// owes n2 that count.
	h.oneway = map[[2]string]bool{{"n0", "n2"}: true}
	load.spend("n0")
	h.advance(100 * time.Millisecond)
	load.resume()
	if load.by[SourceFallback] == 0 {
		t.Fatalf("n0 decided nothing by fallback (%v)", load.by)
	}

	// n2 starts to leave; its hand-over to n0 is slow (lost, sent again).
	slow := true
	h.drops = func(from string, o Outgoing) bool {
		_, ok := o.Msg.(Transfer)
		return slow && ok && from == "n2" && o.To.Name == "n0"
	}
	h.cores["n2"].Leave(h.now)
	h.pump()
	h.cores["n0"].SetMembership(h.now, Membership{Members: []Member{h.member("n1")}, Leaving: []Member{h.member("n2")}})
	h.pump()
	h.cores["n1"].SetMembership(h.now, Membership{Members: []Member{h.member("n0")}, Leaving: []Member{h.member("n2")}})
	h.pump()
	delete(h.oneway, [2]string{"n0", "n2"})
	h.advance(300 * time.Millisecond) // n0 hears n2 again, and sends it its fallback count: refused
	if _, lent := h.cores["n0"].lent.get(k); !lent {
		t.Errorf("n0 no longer lends the key, which n2 holds, leaving (n0 counts %d)", h.count("n0", k))
	}

	for range quota {
		load.spend("n0")
	}
	h.advance(50 * time.Millisecond)
	load.resume()
	slow = false
	h.advance(500 * time.Millisecond)
	h.othersSeeLeaveAndGo("n2")
	h.drops = nil

	fb := load.by[SourceFallback]
	if load.admitted > quota+fb {
		t.Errorf("%d admitted of limit %d and %d by fallback (%v)", load.admitted, quota, fb, load.by)
	}
	if got := h.count("n0", k); got != int64(load.admitted) {
		t.Errorf("the key's owner counts %d; %d were admitted (%v)", got, load.admitted, load.by)
	}
}
