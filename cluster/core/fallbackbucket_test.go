package core

import (
	"testing"
	"time"
)

// A key's owner n0 stands still; n1 admits 2 of the key in fallback, of
// its share of the limit (half of 30: n0 told it nothing of the key),
// then sends them to n0 once it answers again: n0 adds them once, and
// counts 2 more than before, on windows and on token buckets alike.
//
// n1's fallback bucket is a bucket of its share (15 an hour, not 30), so
// each unit it admits moves its arrival time on by 4 minutes, two of
// n0's units; added to n0's bucket as that time, the 2 units counted as
// 4 (7 held of 5 admitted, and a request under the limit refused). They
// reach n0 as the units admitted, at n0's rate.
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
