package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A node's fallback share of a key is fixed for the window when it is
// made: a membership change in the middle of an outage (the unreachable
// owner declared dead, the ring two nodes smaller) does not grow it, or
// the nodes falling back together admit more than the key's limit.
func TestAFallbackShareHoldsThroughAMembershipChange(t *testing.T) {
	f := newFallback(16, FallbackLocal, 0.4)
	const k = limiter.Key(7)
	nothing := func() (int64, bool) { return 0, false }
	now := time.Unix(1000, 0).UnixNano()
	if got := f.available(k, 100, nothing, now, time.Minute, 2); got != 50 {
		t.Fatalf("a node of two that may fall back, told nothing: %d available of 100; want 50", got)
	}
	f.spend(k, 30, now)
	// The owner is declared dead: one other node left.
	if got := f.available(k, 100, nothing, now+1, time.Minute, 1); got != 20 {
		t.Fatalf("after the ring shrank: %d available; want 20 (the share of 50 made for the window, 30 spent)", got)
	}
	// The next window makes a new share, by the membership then.
	if got := f.available(k, 100, nothing, now+int64(time.Minute), time.Minute, 1); got != 100 {
		t.Fatalf("the next window: %d available; want 100", got)
	}
}
