package core

import (
	"testing"
	"time"
)

// A key's owner n0 stands still; n1 admits 2 of the key in fallback, its
// share of the limit (half of 30), then sends them to n0 once it answers
// again: n0 adds them once, and counts 2 more than before, on a window as
// on a token bucket.
func TestFallbackAdmissionsOfABucketReachTheOwnerAsTheUnitsAdmitted(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2")
		h.bucket.on = bucket
		k := h.keyOwnedBy("n0", "n1")
		load := h.spent(k, "n0", 3)
		h.advance(20 * time.Millisecond)

		h.down["n0"] = true
		h.advance(100 * time.Millisecond)
		for range 2 {
			load.spend("n1")
		}
		load.resume()
		if load.by[SourceFallback] != 2 {
			t.Fatalf("admitted %v; want 2 by fallback", load.by)
		}
		h.down["n0"] = false
		h.advance(time.Second)
		h.heldBy(k, load.admitted, h.names...)
		load.spendsToTheLimit(t, "n0", "n1", "n2")
	})
}
