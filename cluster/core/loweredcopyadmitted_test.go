package core

import (
	"slices"
	"testing"
	"time"
)

// As TestAnEvictedCounterLoweredByAGiveBackLowersTheCounterStartedFromItsReplica,
// but n2, having taken the key over from n1's replica (9), admits 3 of
// its own before n1's last word (8) comes: what the replica held beyond
// it comes off n2's counter, no more (11 counted of 11 admitted), and the
// key is then spent up to its limit through n2 and no further, on
// windows and buckets (a bucket comes down by the time the replica's
// arrival time had moved beyond the last word's).
func TestAnEvictedCounterLoweredByAGiveBackLowersTheCounterStartedFromItsReplicaByNoMoreThanItHeldBeyond(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2")
		h.bucket.on = bucket
		k := h.keyOrdered("n1", "n2", "n0")
		load := newHandLoad(h, k, 30)
		var tk *handTake
		for range 9 {
			tk = load.spend("n1")
		}
		load.resume()
		h.advance(50 * time.Millisecond) // replicated to n2
		n1 := h.cores["n1"]
		n1.refund(h.now, slices.Clone(tk.reqs))
		load.admitted--
		h.cut["n1"] = true
		h.advance(50 * time.Millisecond)
		h.setMembership("n0", []string{"n1"})
		h.setMembership("n2", []string{"n1"})
		h.advance(2 * time.Second)
		if got := h.count("n2", k); got != 9 {
			t.Fatalf("n2 took the key over with %d; want its replica, 9", got)
		}
		for range 3 {
			if tk := load.spend("n2"); !tk.done || !tk.d.Allowed {
				t.Fatalf("n2's request: %+v; want admitted", tk.d)
			}
		}
		h.advance(200 * time.Millisecond)
		h.cut["n1"] = false
		h.advance(3 * time.Second)
		if total := h.count("n0", k) + h.count("n1", k) + h.count("n2", k); total != int64(load.admitted) {
			t.Fatalf("the cluster counts %d of the key (%v); %d were admitted", total, h.counts(k), load.admitted)
		}
		load.spendsToTheLimit(t, "n2", "n0")
	})
}
