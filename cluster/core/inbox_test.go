package core

import (
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

// TestInboxRemembersPastNumbersOnlyOfAdditions: the numbers a sender's
// floor passed are kept (for appliedKeep) only for transfers whose counts
// may come again by another node in their place, bare additions. Replicas
// go every ReplicateEvery to each successor: kept too, they would fill
// the record with hundreds of numbers a second per owner.
func TestInboxRemembersPastNumbersOnlyOfAdditions(t *testing.T) {
	in := newInbox()
	from := Peer{Name: "n1", Inc: 1}
	const replicas = 1000
	for seq := uint64(1); seq <= replicas; seq++ {
		if !in.once(from, seq, seq, int64(seq), false, false, func(func(limiter.Key) bool) (counted, later []limiter.Key) { return nil, nil }) {
			t.Fatalf("replica transfer %d not applied", seq)
		}
	}
	addition := uint64(replicas + 1)
	in.once(from, addition, addition, int64(addition), true, false, func(func(limiter.Key) bool) (counted, later []limiter.Key) { return nil, nil })
	in.once(from, addition+1, addition+1, int64(addition+1), false, false, func(func(limiter.Key) bool) (counted, later []limiter.Key) { return nil, nil })
	a := in.sender(from)
	if len(a.past) != 1 {
		t.Fatalf("the record keeps %d numbers the floor passed; want 1, the addition's", len(a.past))
	}
	key := limiter.Key(7)
	if got := in.firstCopies(Applied{From: from, Seq: addition}, []limiter.State{{Key: key, Cur: 1}}, int64(addition+2)); len(got) != 0 {
		t.Errorf("counts sent again in place of the applied addition %d are added again: %+v", addition, got)
	}
	if got := in.firstCopies(Applied{From: from, Seq: addition + 5}, []limiter.State{{Key: key, Cur: 1}}, int64(addition+2)); len(got) != 1 {
		t.Errorf("counts sent again in place of a transfer never applied here: %+v; want them added", got)
	}
}

// A transfer of bare additions whose counts join this run's counters
// later (kept in fallback, waiting for their keys) is on record as such
// as soon as it is applied, under the sender's record lock: a snapshot
// read between its application and a later record of it (Core.Keep)
// would leave it out, and a copy of the snapshot would add its counts
// again when its sender sends them in place of it.
func TestInboxRecordsAdditionsThatJoinLaterAsTheyAreApplied(t *testing.T) {
	in := newInbox()
	from := Peer{Name: "n1", Inc: 1}
	key := limiter.Key(7)
	in.once(from, 1, 1, 1, true, false, func(func(limiter.Key) bool) (counted, later []limiter.Key) { return nil, []limiter.Key{key} })
	got := in.counted(func(KeptApplied) bool { return true })
	if len(got) != 1 || got[0].From != from || got[0].Seq != 1 || len(got[0].Keys) != 1 || got[0].Keys[0] != key {
		t.Fatalf("the inbox lists %+v; want transfer 1 of n1, of key %v", got, key)
	}
}
