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
		if !in.once(from, seq, seq, int64(seq), false, func() []limiter.Key { return nil }) {
			t.Fatalf("replica transfer %d not applied", seq)
		}
	}
	addition := uint64(replicas + 1)
	in.once(from, addition, addition, int64(addition), true, func() []limiter.Key { return nil })
	in.once(from, addition+1, addition+1, int64(addition+1), false, func() []limiter.Key { return nil })
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
