package core

import (
	"slices"
	"testing"
	"time"
)

// n0, the key's owner, never replicated it (every replica to n1 lost),
// and applies a give-back whose answer is lost. n0 stops; n1 takes the
// key over with no counter of it, and the give-back is given back again
// to it in n0's place: nothing comes off, since no counter here holds
// the unit. n0 then comes back, and its counters, lacking the unit, come
// to n1: the key must count what was admitted. Recorded at n1 as come
// off its counter, the unit was put back into n0's counter as it came
// (5 counted of 4 admitted, a request under the limit refused).
func TestUnitsGivenBackAgainWhereNoCounterHeldThemArePutBackNowhere(t *testing.T) {
	forWindowsAndBuckets(t, func(t *testing.T, bucket bool) {
		h := newHandNet(t, "n0", "n1", "n2", "n3")
		h.bucket.on = bucket
		k := h.keyOwnedBy("n0", "n1")
		h.drops = func(from string, o Outgoing) bool {
			t, ok := o.Msg.(Transfer)
			return ok && from == "n0" && t.Mode == ModeReplica
		}
		load := newHandLoad(h, k, 30)
		for range 4 {
			load.spend("n0")
		}
		n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
		tk := load.spend("n2")
		if !tk.done || !tk.d.Allowed || tk.d.Source != SourcePeer {
			t.Fatalf("n2's request: %+v; want admitted by its owner", tk.d)
		}
		h.advance(100 * time.Millisecond)
		const refund = 77
		at := h.now.UnixNano()
		n0.handleTransfer(h.now, n2.self, Transfer{Seq: refund, To: n0.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at}, true)
		h.pump()
		load.admitted--
		h.advance(100 * time.Millisecond)
		h.down["n0"] = true
		h.advance(100 * time.Millisecond)
		h.declareDead("n0")
		h.advance(time.Second, "n1", "n2", "n3")
		if got := h.count("n1", k); got != 0 {
			t.Fatalf("n1 counts %d after taking the key over; want 0 (no replica)", got)
		}
		n1.handleTransfer(h.now, n2.self, Transfer{Seq: 1000, To: n1.self.Inc, Mode: ModeRefund, Reqs: slices.Clone(tk.reqs), At: at, Was: refund, WasTo: n0.self}, true)
		h.pump()
		h.advance(200*time.Millisecond, "n1", "n2", "n3")
		h.n0ComesBackWithout(k, load)
	})
}
