package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// A key's owner (n1) counts 8, of which its replica at its successor (n2)
// holds 6, and stands still; n2 counts the key on from that replica, 8
// more: 14, holding 6 of n1's counter. n1 comes back and applies n2's
// counter (it adds 8: 16). n1's own earlier counter, 8, reaches n2 (a
// replica of it sent on): n2 adds the 2 its counter did not hold of it,
// 16. Then n1 hears it was declared dead and its counter, 16, goes to
// n2, holding n1's earlier 8 (its own) and n2's counter as it was at 14:
// n2's counter is those two and nothing more, so it adds nothing. Weighed
// by the larger of the two shares alone (14), the 2 of n1's counter that
// n2 took in after its counter reached 14 count twice (seed
// 1795922762223411046 of the simulator: key 6 held 20, 18 admitted).
func TestACounterThatHoldsAllTheCountersTheReceiversIsMadeOfAddsNothing(t *testing.T) {
	h, k, load, early, rep := overlappingTakeover(t)

	// n1 comes back and applies n2's counter; n1's earlier counter
	// reaches n2, sent on by n0.
	h.down["n1"] = false
	h.n1AppliesN2sCounter(load, rep, 16)
	h.n2AppliesN1sEarlierCounter(load, early)

	h.n1HearsItWasDeclaredDead(load)
	h.holdsAdmitted(k, load.admitted, "")
	load.spendsToTheLimit(t, "n2", "n0")
}

// As in TestACounterThatHoldsAllTheCountersTheReceiversIsMadeOfAddsNothing,
// but n2's counter and n1's earlier one join as the key settles at n2:
// n2 sees n1 again and hands it the key (n1, down, never applies it), then
// takes n1 for dead again; its counter, given up on, and n1's earlier
// counter, sent on by n0, wait for the hand-off and settle together, 16.
// n1's counter (it applied n2's, 16) comes holding both: nothing is added.
func TestCountersThatSettledTogetherAreSharedWholeByACounterHoldingThemAll(t *testing.T) {
	h, k, load, early, rep := overlappingTakeover(t)
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]

	// n1 (not ticking yet) applies n2's counter, sent on by n0.
	h.n1AppliesN2sCounter(load, rep, 16)

	// n2 sees n1 again and hands the key back; n1, down, does not answer.
	h.setMembership("n0", nil)
	h.setMembership("n2", nil)
	h.advance(20*time.Millisecond, "n0", "n2")

	// n1 is taken for dead again; n2's hand-off waits for n0's seal while
	// n1's earlier counter arrives.
	h.drops = func(from string, o Outgoing) bool {
		_, q := o.Msg.(SealQuery)
		_, r := o.Msg.(SealReply)
		return q || r
	}
	h.setMembership("n0", []string{"n1"})
	h.setMembership("n2", []string{"n1"})
	n2.handleTransfer(h.now, n0.self, Transfer{Seq: 1001, To: n2.self.Inc, Epoch: 1, Mode: ModeAdd, CountersOf: n1.self, States: early}, true)
	h.drops = nil
	h.advance(2*time.Second, "n0", "n2")
	if got := h.count("n2", k); got != 16 {
		t.Fatalf("n2 counts %d of the key once it settled; want 16", got)
	}

	h.down["n1"] = false
	h.n1HearsItWasDeclaredDead(load)
	h.holdsAdmitted(k, load.admitted, "")
	load.spendsToTheLimit(t, "n2", "n0")
}

// n1HearsItWasDeclaredDead lets n1, back, hear it was declared dead: its
// counter goes out, to n2.
func (h *handNet) n1HearsItWasDeclaredDead(load *handLoad) {
	h.advance(2 * time.Second)
	load.resume()
	h.t.Logf("admitted %d %v; counts %v", load.admitted, load.by, h.counts(load.k))
}

// overlappingTakeover counts 8 of a key at its owner n1 (successor n2,
// then n0), of which n1 replicated 6 to n2, and has n1 stand still: n0
// and n2 declare it dead, n2 counts the key on from n1's replica, 8 more,
// and replicates its counter (14, holding 6 of n1's) to n0. It returns
// n1's counter as it stopped (early) and n0's replica of n2's counter.
func overlappingTakeover(t *testing.T) (*handNet, limiter.Key, *handLoad, []limiter.State, replica) {
	t.Helper()
	return overlappingTakeoverUnder(t, hourly)
}

// overlappingTakeoverUnder is overlappingTakeover under the limit of the
// load's quota that limit makes.
func overlappingTakeoverUnder(t *testing.T, limit func(quota int64) limiter.Limit) (*handNet, limiter.Key, *handLoad, []limiter.State, replica) {
	t.Helper()
	h, k, load, early := n1CountsPastItsReplicaAndStandsStill(t, limit)
	h.n2CountsOn(load, 8)
	if got := load.units("n2"); got != 14 {
		t.Fatalf("n2 counts %d of the key after the takeover; want 14", got)
	}
	return h, k, load, early, h.n0sReplicaOfN2s(load, 14)
}

// n1CountsPastItsReplicaAndStandsStill counts 8 of a key at its owner n1
// (successor n2, then n0), of which n1 replicated 6 to n2, and has n1
// stand still: n0 and n2 declare it dead, and n2 takes the key over from
// n1's replica. It returns n1's counter as it stopped (early). The load's
// limit is what limit makes of its quota.
func n1CountsPastItsReplicaAndStandsStill(t *testing.T, limit func(quota int64) limiter.Limit) (*handNet, limiter.Key, *handLoad, []limiter.State) {
	t.Helper()
	h := newHandNet(t, "n0", "n1", "n2")
	k := h.keyOrdered("n1", "n2", "n0")
	load := newHandLoad(h, k, 40)
	load.limit = limit(load.quota)
	for range 6 {
		load.spend("n1")
	}
	load.resume()
	h.advance(50 * time.Millisecond) // replicated to n2: 6
	for range 2 {
		load.spend("n1")
	}
	load.resume()
	early := h.cores["n1"].engine.StatesOf(h.now, []limiter.Key{k})
	h.down["n1"] = true
	h.setMembership("n0", []string{"n1"})
	h.setMembership("n2", []string{"n1"})
	h.advance(2 * time.Second)
	return h, k, load, early
}

// n2CountsOn has n2, counting n1's key, admit n more, replicated to n0.
func (h *handNet) n2CountsOn(load *handLoad, n int) {
	for range n {
		load.spend("n2")
	}
	load.resume()
	h.advance(100 * time.Millisecond) // replicated to n0
}

// n0sReplicaOfN2s returns n0's replica of n2's counter of the load's
// key, which must hold want.
func (h *handNet) n0sReplicaOfN2s(load *handLoad, want int64) replica {
	h.t.Helper()
	n0 := h.cores["n0"]
	n0.replicas.mu.Lock()
	rep, ok := n0.replicas.states[load.k]
	n0.replicas.mu.Unlock()
	if !ok || rep.owner.Name != "n2" || load.unitsOf([]limiter.State{rep.state}) != want {
		h.t.Fatalf("n0 keeps no replica of n2's counter of the key at %d (%v)", want, rep)
	}
	return rep
}

// n1AppliesN2sCounter has n1 apply n2's counter of the load's key as
// n0's replica holds it, sent on by n0: n1 then counts want.
func (h *handNet) n1AppliesN2sCounter(load *handLoad, rep replica, want int64) {
	h.t.Helper()
	n0, n1 := h.cores["n0"], h.cores["n1"]
	n1.handleTransfer(h.now, n0.self, Transfer{Seq: 1000, To: n1.self.Inc, Epoch: 1, Mode: ModeAdd, CountersOf: rep.owner, States: []limiter.State{rep.state}, Holds: rep.holds}, true)
	if got := load.units("n1"); got != want {
		h.t.Fatalf("n1 counts %d of the key with n2's counter in; want %d", got, want)
	}
}

// n2AppliesN1sEarlierCounter has n1's counter as it stopped (early), sent
// on by n0, reach n2, which joins it with its own: 16.
func (h *handNet) n2AppliesN1sEarlierCounter(load *handLoad, early []limiter.State) {
	h.t.Helper()
	n0, n1, n2 := h.cores["n0"], h.cores["n1"], h.cores["n2"]
	n2.handleTransfer(h.now, n0.self, Transfer{Seq: 1001, To: n2.self.Inc, Epoch: 1, Mode: ModeAdd, CountersOf: n1.self, States: early}, true)
	if got := load.units("n2"); got != 16 {
		h.t.Fatalf("n2 counts %d of the key with n1's earlier counter in; want 16", got)
	}
}

// tokenBucket is a token bucket of quota an hour.
func tokenBucket(quota int64) limiter.Limit {
	return limiter.Limit{Algorithm: limiter.TokenBucket, Quota: quota, Window: time.Hour}
}

// As in TestACounterThatHoldsAllTheCountersTheReceiversIsMadeOfAddsNothing,
// under a token bucket: the join's record and the copies weighed against
// it are arrival times, and what an older copy lacks of a part is time
// its bucket spent beyond the copy's (see limiter.SubState). The counter
// that holds all the join made adds nothing, and its owner admits what
// the bucket has left, not more.
func TestABucketThatHoldsAllTheBucketsTheReceiversIsMadeOfAddsNothing(t *testing.T) {
	h, _, load, early, rep := overlappingTakeoverUnder(t, tokenBucket)
	h.down["n1"] = false
	h.n1AppliesN2sCounter(load, rep, 16)
	h.n2AppliesN1sEarlierCounter(load, early)
	h.n1HearsItWasDeclaredDead(load)
	load.holdsAdmitted()
	load.admitsTheRest("n2")
	load.holdsAdmitted()
}
