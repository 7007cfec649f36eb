package limiter

import (
	"testing"
	"time"
)

// A client's reputation that arrives from another engine (a hand-off, or
// a snapshot read back) scales its limits at once, on the single-request
// path too, which reads no reputation for a client with none on record.
func TestReputationArrivingScalesLimits(t *testing.T) {
	for _, newer := range []bool{false, true} {
		src, dst := New(Config{}), New(Config{})
		src.SetReputation(testPolicy)
		dst.SetReputation(testPolicy)
		client := Key(1<<40 | 1)
		deny := Request{Key: 1<<40 | 2, Limit: Limit{Quota: 1, Window: time.Hour}}
		for range 41 { // one allowed, then 40 denials: 60, the 60% bucket
			src.TakeFor(t0, client, []Request{deny}, make([]Result, 1))
		}
		states := src.Extract(t0, func(k Key) bool { return k == client }, 0)
		if newer {
			dst.MergeNewer(t0, states)
		} else {
			dst.Merge(t0, states)
		}
		api := Request{Key: 1<<40 | 3, Limit: Limit{Quota: 10, Window: time.Minute}}
		n := 0
		for range 10 {
			if ok, _ := dst.TakeFor(t0, client, []Request{api}, make([]Result, 1)); ok {
				n++
			}
		}
		if n != 6 {
			t.Errorf("newer %v: %d of 10 allowed after the reputation of 60 arrived; want 6", newer, n)
		}
	}
}

// The reputations filter says "may hold" for every key with a record, and
// forgets a record once it has expired and its shard was swept.
func TestReputationsFilterFollowsTheRecords(t *testing.T) {
	e := New(Config{})
	e.SetReputation(testPolicy)
	clients := []Key{1<<40 | 1, 2<<40 | 7, 3<<40 | 9}
	deny := Request{Key: 1<<41 | 5, Limit: Limit{Quota: 1, Window: time.Hour}}
	for _, c := range clients {
		if e.reps.mayHold(c) {
			t.Fatalf("client %x may hold a reputation before any was kept", c)
		}
	}
	e.TakeFor(t0, clients[0], []Request{deny}, make([]Result, 1)) // spends the unit
	e.TakeFor(t0, clients[0], []Request{deny}, make([]Result, 1)) // denied: penalized
	e.Penalize(t0, clients[1])
	for _, c := range clients[:2] {
		if !e.reps.mayHold(c) {
			t.Fatalf("client %x holds a reputation the filter does not show", c)
		}
	}
	if e.reps.mayHold(clients[2]) {
		t.Fatalf("client %x, never penalized, may hold a reputation", clients[2])
	}
	// One point recovers in 6 minutes; after that, and a sweep of every
	// shard, nothing is on record.
	later := t0.Add(7 * time.Minute)
	for range numShards {
		e.Sweep(later)
	}
	for _, c := range clients {
		if e.reps.mayHold(c) {
			t.Errorf("client %x may hold a reputation after its record expired and was swept", c)
		}
	}
}

// A denial on the path that reads no reputation penalizes the client as
// the batch path does, with one request or several.
func TestDenialWithoutRecordPenalizes(t *testing.T) {
	for _, n := range []int{1, 2} {
		e := New(Config{})
		e.SetReputation(testPolicy)
		client := Key(5<<40 | 1)
		reqs := []Request{{Key: 5<<40 | 2, Limit: Limit{Quota: 1, Window: time.Hour}}, {Key: 5<<40 | 3, Limit: Limit{Quota: 100, Window: time.Hour}}}[:n]
		res := make([]Result, n)
		if ok, score := e.TakeFor(t0, client, reqs, res); !ok || score != FullScore {
			t.Fatalf("%d requests: first take %v, score %g; want allowed, %g", n, ok, score, FullScore)
		}
		ok, score := e.TakeFor(t0, client, reqs, res)
		if ok || score != FullScore-testPolicy.Penalty {
			t.Fatalf("%d requests: second take %v, score %g; want denied, %g", n, ok, score, FullScore-testPolicy.Penalty)
		}
		if n == 2 && res[1].Remaining != 99 {
			t.Errorf("the allowed request of a denied batch shows %d left; want 99 (nothing spent)", res[1].Remaining)
		}
		if s := e.Reputation(t0, client); s != FullScore-testPolicy.Penalty {
			t.Errorf("%d requests: reputation %g; want %g", n, s, FullScore-testPolicy.Penalty)
		}
	}
}
