package core

import (
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

// The records of joins (see unionRecord) are kept by key like the
// replicas: a store full of them takes no record of a new key, so a flood
// of joins (as many keys as a node counts) cannot grow them past the
// store's size, while a key that has records goes on adding to them.
func TestUnionRecordsOfNewKeysStopAtTheStoresSize(t *testing.T) {
	const size = 4
	r := newReplicaStore(size)
	run := Peer{Name: "n1", Inc: 1}
	for i := range 10 * size {
		k := limiter.ZoneKey(uint64(i+1), 1)
		part := []Held{{Run: run, State: limiter.State{Key: k, Kind: 1, Cur: 2}}}
		r.noteUnion(int64(i), k, nil, part, limiter.State{Key: k, Kind: 1, Cur: 2})
	}
	if n := len(r.unions); n > size {
		t.Fatalf("%d keys' union records kept, more than the store's size %d", n, size)
	}
	var kept limiter.Key
	for k := range r.unions {
		kept = k
	}
	before := len(r.unions[kept])
	part := []Held{{Run: run, State: limiter.State{Key: kept, Kind: 1, Cur: 3}}}
	r.noteUnion(100, kept, nil, part, limiter.State{Key: kept, Kind: 1, Cur: 3})
	if got := len(r.unions[kept]); got != before+1 {
		t.Fatalf("a key with records kept %d of them after another join, want %d", got, before+1)
	}
}
