package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// As in TestACounterThatHoldsAllTheCountersTheReceiversIsMadeOfAddsNothing,
// but the counter of n2's that n1 applies is an older copy (12, holding 6
// of n1's): n1's counter, 14, holds n1's earlier counter and only part of
// n2's as it was when they joined at n2 (14): it does not hold all the
// join made, and is weighed as before.
func TestACounterHoldingAnOlderCopyOfOnePartIsNotTakenForHoldingTheJoin(t *testing.T) {
	olderCopyOfOnePart(t, hourly)
}

// As in TestACounterHoldingAnOlderCopyOfOnePartIsNotTakenForHoldingTheJoin,
// under a token bucket: what the older copy of n2's counter lacks of the
// part the join's record names is time its bucket spent beyond the copy's
// (see limiter.SubState), and comes off the record's bucket as such.
func TestABucketHoldingAnOlderCopyOfOnePartIsNotTakenForHoldingTheJoin(t *testing.T) {
	olderCopyOfOnePart(t, func(quota int64) limiter.Limit {
		return limiter.Limit{Algorithm: limiter.TokenBucket, Quota: quota, Window: time.Hour}
	})
}

func olderCopyOfOnePart(t *testing.T, limit func(quota int64) limiter.Limit) {
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOrdered("n1", "n2", "n0")
	load := newHandLoad(h, k, 40)
	load.limit = limit(load.quota)
	for range 6 {
		load.spend("n1")
	}
	load.resume()
	h.advance(50 * time.Millisecond)
	for range 2 {
		load.spend("n1")
	}
	load.resume()
	early := h.cores["n1"].engine.StatesOf(h.now, []limiter.Key{k})
	h.down["n1"] = true
	h.setMembership("n0", []string{"n1"})
	h.setMembership("n2", []string{"n1"})
	h.advance(2 * time.Second)
	for range 6 {
		load.spend("n2")
	}
	load.resume()
	h.advance(100 * time.Millisecond)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	n0.replicas.mu.Lock()
	old, ok := n0.replicas.states[k]
	n0.replicas.mu.Unlock()
	if !ok || old.owner.Name != "n2" || load.unitsOf([]limiter.State{old.state}) != 12 {
		t.Fatalf("n0 keeps no replica of n2's counter of the key at 12 (%v)", old)
	}
	for range 2 {
		load.spend("n2")
	}
	load.resume()
	h.advance(100 * time.Millisecond)
	if got := load.units("n2"); got != 14 {
		t.Fatalf("n2 counts %d of the key after the takeover; want 14", got)
	}

	h.down["n1"] = false
	n1.handleTransfer(h.now, n0.self, Transfer{Seq: 1000, To: n1.self.Inc, Epoch: 1, Mode: ModeAdd, CountersOf: old.owner, States: []limiter.State{old.state}, Holds: old.holds}, true)
	if got := load.units("n1"); got != 14 {
		t.Fatalf("n1 counts %d of the key with n2's older counter in; want 14", got)
	}
	n2.handleTransfer(h.now, n0.self, Transfer{Seq: 1001, To: n2.self.Inc, Epoch: 1, Mode: ModeAdd, CountersOf: n1.self, States: early}, true)
	if got := load.units("n2"); got != 16 {
		t.Fatalf("n2 counts %d of the key with n1's earlier counter in; want 16", got)
	}

	h.advance(2 * time.Second)
	load.resume()
	t.Logf("admitted %d %v; counts n0 %d n1 %d n2 %d", load.admitted, load.by, load.units("n0"), load.units("n1"), load.units("n2"))
	load.holdsAdmitted()
	load.admitsTheRest("n2")
	load.holdsAdmitted()
}
