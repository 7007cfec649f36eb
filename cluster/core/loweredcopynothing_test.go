package core

import (
	"slices"
	"testing"
	"time"
)

// As TestAnEvictedCounterLoweredByAGiveBackLowersTheCounterStartedFromItsReplicaByNoMoreThanItHeldBeyond,
// but n1 admitted one request only, replicated to n2, and gave it back:
// its counter is at nothing as it is cut off. n2 takes the key over from
// the replica (1) and admits 3 of its own. n1's last word on the key,
// nothing, is to take the replica's unit off n2's counter (3 counted of
// 3 admitted), and the key is then spent up to its limit through n2.
func TestACounterAllGivenBackAfterItsReplicaLowersTheCounterStartedFromIt(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2")
		h.bucket.on = bucket
		k := h.keyOrdered("n1", "n2", "n0")
		load := newHandLoad(h, k, 30)
		tk := load.spend("n1")
		load.resume()
		h.advance(50 * time.Millisecond) // replicated to n2
		n1 := h.cores["n1"]
		n1.refund(h.now, slices.Clone(tk.reqs))
		load.admitted--
		h.cut["n1"] = true
		h.advance(50 * time.Millisecond)
		if got := h.count("n1", k); got != 0 {
			t.Fatalf("n1 counts %d of the key after its unit was given back; want 0", got)
		}
		h.setMembership("n0", []string{"n1"})
		h.setMembership("n2", []string{"n1"})
		h.advance(2 * time.Second)
		if got := h.count("n2", k); got != 1 {
			t.Fatalf("n2 took the key over with %d; want its replica, 1", got)
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
