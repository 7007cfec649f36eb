package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node joins and pulls one of its new keys from the key's owner, which
// has not heard of it yet and lends it the key. The borrower applies the
// counter and counts the key's requests, but every acknowledgement it
// sends the lender is lost; then it leaves, gracefully, and hands the
// counter back to the lender, which hears of it only as leaving, then as
// gone: its ring never changes. The counter that came back holds all the
// borrower counted and ends the loan: the lender neither counts again the
// counter it lent (never acknowledged), nor keeps sending it to the run
// that left, nor decides the key by fallback.
func TestACounterLentWhoseAcknowledgementWasLostComesBackOnceWithTheLeaver(t *testing.T) {
	h, k, load := lendWithAcknowledgementsLost(t, 30)
	// n2 leaves: it hands the key back to n0, and goes.
	left := h.member("n2").Peer()
	h.cores["n2"].Leave(h.now)
	h.pump()
	h.othersSeeLeaveAndGo("n2")
	h.advance(h.cfg.LeaseTime * 2)
	h.drops = nil

	before := load.by[SourceFallback]
	for range 3 {
		load.spend("n0")
		load.spend("n1")
	}
	load.resume()
	if got := load.by[SourceFallback] - before; got != 0 {
		t.Errorf("%d requests were decided by fallback after a graceful leave (%v)", got, load.by)
	}
	if load.admitted != 14 {
		t.Errorf("%d of 14 requests admitted under a limit of 30: a client under it was refused (%v)", load.admitted, load.by)
	}
	if got := h.pendingTo("n0", left); got != 0 {
		t.Errorf("n0 still sends %d transfers to the run of n2 that left", got)
	}
	if _, lent := h.cores["n0"].lent.get(k); lent {
		t.Error("the key is still lent to the run of n2 that left")
	}
	if got := h.count("n0", k); got != int64(load.admitted) {
		t.Errorf("the key's owner counts %d; %d were admitted (%v)", got, load.admitted, load.by)
	}
}

// lendWithAcknowledgementsLost starts n0 and n1, and n2 joining, with a key
// that n0 owns and n2 will; n0 counts 5 of it. n2 joins, which n1 hears of
// and n0 not yet, and pulls the key from n0, which lends it; n2 applies the
// counter and admits 3 more, and every acknowledgement it sends n0 is
// lost (they stay lost until the caller sets h.drops anew).
func lendWithAcknowledgementsLost(t *testing.T, quota int64) (*handNet, limiter.Key, *handLoad) {
	t.Helper()
	h, k, load := joinUnheardByTheOwner(t, quota)

	// Every acknowledgement n2 sends n0 is lost.
	acks := 0
	h.drops = func(from string, o Outgoing) bool {
		if _, ok := o.Msg.(Ack); ok && from == "n2" && o.To.Name == "n0" {
			acks++
			return true
		}
		return false
	}
	for range 3 {
		load.spend("n2") // the first pulls the key from n0, which lends it
	}
	h.advance(100 * time.Millisecond)
	load.resume()
	if _, lent := h.cores["n0"].lent.get(k); !lent {
		t.Fatal("n0 did not lend the key")
	}
	if acks == 0 {
		t.Fatal("n2 acknowledged nothing to n0")
	}
	if got := h.count("n2", k); got != int64(load.admitted) {
		t.Fatalf("the borrower counts %d; %d were admitted (%v)", got, load.admitted, load.by)
	}

	return h, k, load
}

// As above, but the borrower crashes where it left: n0 hears of it only as
// dead, and its ring never changes. What the borrower admitted since it
// applied the counter is lost with it (a crash may lose that much), but
// the counter lent is not: once the borrower's lease from n0 ran out, the
// counter n0 sent it, never acknowledged, is counted at n0 again, the loan
// ends, and the key is decided by its owner, not by fallback.
func TestACounterLentWhoseAcknowledgementWasLostComesBackWhenTheBorrowerDies(t *testing.T) {
	const quota = 30
	h, k, load := lendWithAcknowledgementsLost(t, quota)
	lentCount := int64(load.admitted - 3)
	h.down["n2"] = true
	dead := []Peer{h.member("n2").Peer()}
	h.list("n0", []Member{h.member("n1")}, dead)
	h.list("n1", []Member{h.member("n0")}, dead)
	h.advance(h.cfg.LeaseTime * 2)
	h.drops = nil

	before := load.by[SourceFallback]
	for range 3 {
		load.spend("n0")
		load.spend("n1")
	}
	load.resume()
	if got := load.by[SourceFallback] - before; got != 0 {
		t.Errorf("%d requests were decided by fallback after the borrower's lease ran out (%v)", got, load.by)
	}
	if load.admitted != 14 {
		t.Errorf("%d of 14 requests admitted under a limit of 30: a client under it was refused (%v)", load.admitted, load.by)
	}
	if got := h.pendingTo("n0", dead[0]); got != 0 {
		t.Errorf("n0 still sends %d transfers to the dead run of n2", got)
	}
	if _, lent := h.cores["n0"].lent.get(k); lent {
		t.Error("the key is still lent to the dead run of n2")
	}
	if got, want := h.count("n0", k), lentCount+6; got != want {
		t.Errorf("the key's owner counts %d; want %d, the counter it lent and the 6 admitted since (%v)", got, want, load.by)
	}
}
