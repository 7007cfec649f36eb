package core

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// The records of what the fallback counters hold (counts sent again,
// other runs' counters) go when their windows are over, with the timed
// sweep (see Core.Tick), not by a look at every record each time one is
// kept: keeping one costs what it holds. A record whose window is not
// over stays.
func TestFallbackRecordsOfWindowsOverGoWithTheSweep(t *testing.T) {
	f := newFallback(100, FallbackLocal, 1)
	now := time.Unix(1000, 0)
	short := limiter.ZoneKey(1, 1)
	long := limiter.ZoneKey(2, 1)
	run := Peer{Name: "n1", Inc: 1}
	f.keepResent([]Resent{
		{Marks: []Replaced{{}}, State: limiter.State{Key: short, Kind: 1, Cur: 2, Expires: now.Add(time.Second).UnixNano()}},
		{Marks: []Replaced{{}}, State: limiter.State{Key: long, Kind: 1, Cur: 2, Expires: now.Add(time.Hour).UnixNano()}},
	}, now.UnixNano())
	f.keepHeld([]Held{
		{Run: run, State: limiter.State{Key: short, Kind: 1, Cur: 2, Expires: now.Add(time.Second).UnixNano()}},
		{Run: run, State: limiter.State{Key: long, Kind: 1, Cur: 2, Expires: now.Add(time.Hour).UnixNano()}},
	}, now.UnixNano())
	f.sweep(now.Add(time.Minute))
	if _, ok := f.resent[short]; ok {
		t.Fatal("a record of counts sent again whose window is over stays after the sweep")
	}
	if _, ok := f.held[short]; ok {
		t.Fatal("a record of a counter held whose window is over stays after the sweep")
	}
	if _, ok := f.resent[long]; !ok {
		t.Fatal("a record of counts sent again whose window is not over went with the sweep")
	}
	if _, ok := f.held[long]; !ok {
		t.Fatal("a record of a counter held whose window is not over went with the sweep")
	}
}
