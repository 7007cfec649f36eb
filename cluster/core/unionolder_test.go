package core

import (
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

// As in TestACounterThatHoldsAllTheCountersTheReceiversIsMadeOfAddsNothing,
// but the counter of n2's that n1 applies is an older copy (12, holding 6
// of n1's): n1's counter, 14, holds n1's earlier counter and only part of
// n2's as it was when they joined at n2 (14): it does not hold all the
// join made, and is weighed as before.
func TestACounterHoldingAnOlderCopyOfOnePartIsNotTakenForHoldingTheJoin(t *testing.T) {
	h, k, load := olderCopyOfOnePart(t, hourly)
	h.holdsAdmitted(k, load.admitted, "")
	load.spendsToTheLimit(t, "n2", "n0")
}

// As in TestACounterHoldingAnOlderCopyOfOnePartIsNotTakenForHoldingTheJoin,
// under a token bucket: what the older copy of n2's counter lacks of the
// part the join's record names is time its bucket spent beyond the copy's
// (see limiter.SubState), and comes off the record's bucket as such.
func TestABucketHoldingAnOlderCopyOfOnePartIsNotTakenForHoldingTheJoin(t *testing.T) {
	_, _, load := olderCopyOfOnePart(t, tokenBucket)
	load.holdsAdmitted()
	load.admitsTheRest("n2")
	load.holdsAdmitted()
}

// olderCopyOfOnePart plays TestACounterHoldingAnOlderCopyOfOnePartIsNotTakenForHoldingTheJoin
// under the limit that limit makes of the load's quota, up to n1 hearing
// it was declared dead.
func olderCopyOfOnePart(t *testing.T, limit func(quota int64) limiter.Limit) (*handNet, limiter.Key, *handLoad) {
	t.Helper()
	h, k, load, early := n1CountsPastItsReplicaAndStandsStill(t, limit)
	h.n2CountsOn(load, 6)
	old := h.n0sReplicaOfN2s(load, 12)
	h.n2CountsOn(load, 2)
	if got := load.units("n2"); got != 14 {
		t.Fatalf("n2 counts %d of the key after the takeover; want 14", got)
	}
	h.down["n1"] = false
	h.n1AppliesN2sCounter(load, old, 14)
	h.n2AppliesN1sEarlierCounter(load, early)
	h.n1HearsItWasDeclaredDead(load)
	return h, k, load
}
