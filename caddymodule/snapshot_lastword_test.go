package caddymodule

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/limiter"
)

// A snapshot's counters may hold another run's counter as that run let
// it go, its last word (cluster.Held.Last: handed over by it, or sent as
// it stopped counting). The run reads the snapshot back and sends its
// counters on as copies: where they are counted, the record says what an
// older copy of that counter held beyond the last word was given back
// since, and it comes off (see core's weighLast). The snapshot format
// keeps each record's run, generation and counts, but not the mark: read
// back, the last word is a copy like any, the older copy's larger count
// stands, and the unit given back counts again.
func TestASnapshotKeepsTheLastWordMarkOfTheCountsItsCountersHold(t *testing.T) {
	now := time.Now()
	st := limiter.State{Key: 2, Stamp: now.UnixNano(), Expires: now.Add(time.Hour).UnixNano(), Cur: 8}
	kept := cluster.Kept{
		Run:    cluster.Peer{Name: "node-a:7946", Inc: 42},
		At:     now.UnixNano(),
		States: []limiter.State{st},
		Holds:  []cluster.Held{{Run: cluster.Peer{Name: "node-b:7946", Inc: 7}, Gen: 1, State: st, Last: true}},
	}
	got, err := decodeSnapshot(encodeSnapshot(kept))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Holds) != 1 || !got.Holds[0].Last {
		t.Errorf("read back holds %+v; wrote %+v: node-b's last word on its counter is a copy now", got.Holds, kept.Holds)
	}
}
