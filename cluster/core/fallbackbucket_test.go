package core

import (
	"testing"
	"time"
)

// A key's owner n0 stands still; n1 admits 2 of the key in fallback, of
// its share of the limit (half of 30: n0 told it nothing of the key),
// then sends them to n0 once it answers again: n0 adds them once, and
// counts 2 more than before.
//
// Open on token buckets (pinned below as a known limit, docs/cluster.md
// "Known limits"): n1's fallback bucket is a bucket of its share (15 an
// hour, not 30), so each unit it admits moves its arrival time on by 4
// minutes, two of n0's units; added to n0's bucket as time, the 2 units
// count as 4 (7 held of 5 admitted, and a request under the limit
// refused).
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
		if !bucket {
			h.heldBy(k, load.admitted, h.names...)
			load.spendsToTheLimit(t, "n0", "n1", "n2")
			return
		}
		// The known limit, pinned both ways: it fails if the count comes
		// out exact (the limit is closed: check it as on windows, and
		// strike it from the docs) and if it comes out any other way.
		switch total := h.clusterCount(k); total {
		case int64(load.admitted) + 2:
			t.Logf("known limit: the cluster counts %d; %d were admitted", total, load.admitted)
		case int64(load.admitted):
			t.Fatalf("the cluster counts %d, as admitted: the known limit is closed; check both sides as on windows and strike it from docs/cluster.md", total)
		default:
			t.Errorf("the cluster counts %d (%v); %d were admitted, 2 more at worst (a known limit)", total, h.counts(k), load.admitted)
		}
	})
}
