package limiter

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestHandoffKeepsCountsExact(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, FixedWindow, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			lim := Limit{Algorithm: alg, Quota: 10, Window: time.Minute}
			oldOwner, newOwner := New(Config{}), New(Config{})
			req := Request{Key: 5, Limit: lim}
			for range 4 {
				oldOwner.TakeOne(t0, req)
			}
			// The new owner already counted 3 before the hand-off landed.
			for range 3 {
				newOwner.TakeOne(t0, req)
			}
			moved := oldOwner.Extract(t0, func(k Key) bool { return k == 5 }, 0)
			if len(moved) != 1 || oldOwner.Stats().Keys != 0 {
				t.Fatalf("extracted %d, %d left; want 1 and 0", len(moved), oldOwner.Stats().Keys)
			}
			newOwner.Merge(t0, moved)
			allowed := 0
			for range 10 {
				if newOwner.TakeOne(t0, req).Allowed {
					allowed++
				}
			}
			if allowed != 3 {
				t.Fatalf("after merging 4 and 3 of 10, %d more allowed; want 3", allowed)
			}
		})
	}
}

func TestMergeAcrossAWindowEdge(t *testing.T) {
	lim := Limit{Algorithm: SlidingWindow, Quota: 10, Window: time.Minute}
	a, b := New(Config{}), New(Config{})
	req := Request{Key: 9, Limit: lim}
	for range 6 {
		a.TakeOne(t0, req) // window w
	}
	for range 2 {
		b.TakeOne(t0.Add(time.Minute), req) // window w+1
	}
	b.Merge(t0.Add(time.Minute), a.ExtractKeys(t0.Add(time.Minute), []Key{9}))
	// At the start of w+1: previous 6 at full weight plus current 2.
	if r := b.Peek(t0.Add(time.Minute), req); r.Remaining != 2 {
		t.Fatalf("remaining %d; want 2 (6 previous + 2 current of 10)", r.Remaining)
	}
}

func TestExtractDuringConcurrentTakesLosesNothing(t *testing.T) {
	lim := Limit{Quota: 1 << 30, Window: time.Hour}
	src, dst := New(Config{}), New(Config{})
	var taken atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if src.TakeOne(t0, Request{Key: Key(g*1000 + i%500), Limit: lim}).Allowed {
					taken.Add(1)
				}
			}
		})
	}
	var moved []State
	for range 50 {
		moved = append(moved, src.Extract(t0, func(Key) bool { return true }, 0)...)
	}
	close(stop)
	wg.Wait()
	moved = append(moved, src.Extract(t0, func(Key) bool { return true }, 0)...)
	dst.Merge(t0, moved)
	var total int64
	dst.Range(t0, func(s State) bool { total += int64(s.Cur); return true })
	if total != taken.Load() {
		t.Fatalf("%d counted after the moves; %d were taken", total, taken.Load())
	}
}

// TestMergeStaysWithinMaxKeys hands a small engine far more counters than it
// may hold: a hand-off or a replica must not grow the table past its bound,
// and the exhausted counters it already holds stay.
func TestMergeStaysWithinMaxKeys(t *testing.T) {
	const maxKeys = 512
	lim := Limit{Algorithm: SlidingWindow, Quota: 2, Window: time.Minute}
	dst := New(Config{MaxKeys: maxKeys})
	victim := Request{Key: 1, Limit: lim}
	for range 2 {
		dst.TakeOne(t0, victim)
	}
	if dst.TakeOne(t0, victim).Allowed {
		t.Fatal("the victim was not exhausted")
	}
	src := New(Config{})
	for k := range Key(20 * maxKeys) {
		src.TakeOne(t0, Request{Key: 1000 + k, Limit: lim})
	}
	moved := src.Extract(t0, func(Key) bool { return true }, 0)
	dst.Merge(t0, moved)
	if n := dst.Stats().Keys; n > maxKeys {
		t.Fatalf("merging %d counters grew the engine to %d keys; want at most %d", len(moved), n, maxKeys)
	}
	if dst.TakeOne(t0, victim).Allowed {
		t.Fatal("merging evicted the exhausted victim")
	}
}

// An older copy of a counter (a snapshot, or what a node held before it was
// declared dead) merged into the newer one must not add: the newer wins.
func TestMergeNewerNeverSums(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, FixedWindow, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			lim := Limit{Algorithm: alg, Quota: 10, Window: time.Minute}
			req := Request{Key: 5, Limit: lim}
			owner := New(Config{})
			for range 4 {
				owner.TakeOne(t0, req)
			}
			old := owner.StatesOf(t0, []Key{5}) // a snapshot at 4
			for range 3 {
				owner.TakeOne(t0, req) // the owner went on to 7
			}
			owner.MergeNewer(t0, old)
			if r := owner.Peek(t0, req); r.Remaining != 3 {
				t.Fatalf("after the older copy (4) merged into 7 of 10: remaining %d; want 3", r.Remaining)
			}
			// Into an engine that lacks the key, the copy is taken as it is;
			// merged again, it adds nothing.
			fresh := New(Config{})
			fresh.MergeNewer(t0, old)
			fresh.MergeNewer(t0, old)
			if r := fresh.Peek(t0, req); r.Remaining != 6 {
				t.Fatalf("a copy of 4 merged twice into nothing: remaining %d; want 6", r.Remaining)
			}
		})
	}
}

func TestMergeNewerKeepsTheLaterWindow(t *testing.T) {
	lim := Limit{Algorithm: FixedWindow, Quota: 10, Window: time.Minute}
	req := Request{Key: 9, Limit: lim}
	a, b := New(Config{}), New(Config{})
	for range 8 {
		a.TakeOne(t0, req) // an old window
	}
	b.TakeOne(t0.Add(time.Minute), req) // the current one
	b.MergeNewer(t0.Add(time.Minute), a.StatesOf(t0.Add(time.Minute), []Key{9}))
	if r := b.Peek(t0.Add(time.Minute), req); r.Remaining != 9 {
		t.Fatalf("remaining %d; want 9: the older window's count is not the current one's", r.Remaining)
	}
}

// TestSubStateAddedToItsReplicaGivesTheCounter: a counter's replica plus
// what the counter holds beyond it is the counter, never more (a count
// doubled) nor less (a count lost); a counter with nothing beyond its
// replica gives nothing to add.
func TestSubStateAddedToItsReplicaGivesTheCounter(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, FixedWindow, TokenBucket} {
		for _, c := range []struct {
			name          string
			before, after int           // units taken before the replica, and after it
			gap           time.Duration // from the replica to the counter's last take
		}{
			{"more since", 4, 3, 0},
			{"nothing since", 4, 0, 0},
			{"more in the next window", 4, 3, time.Minute},
		} {
			t.Run(alg.String()+"/"+c.name, func(t *testing.T) {
				lim := Limit{Algorithm: alg, Quota: 20, Window: time.Minute}
				req := Request{Key: 7, Limit: lim}
				owner := New(Config{})
				for range c.before {
					owner.TakeOne(t0, req)
				}
				replica := owner.StatesOf(t0, []Key{7})[0]
				later := t0.Add(c.gap)
				for range c.after {
					owner.TakeOne(later, req)
				}
				counter := owner.StatesOf(later, []Key{7})[0]

				delta, more := SubState(later, counter, replica)
				if more != (c.after > 0) {
					t.Fatalf("SubState reports more=%v; want %v (%d taken since the replica)", more, c.after > 0, c.after)
				}
				held := New(Config{}) // where the replica's counts are held
				held.Merge(later, []State{replica})
				if more {
					held.Merge(later, []State{delta})
				}
				want := owner.Peek(later, req).Remaining
				if got := held.Peek(later, req).Remaining; got != want {
					t.Fatalf("replica plus delta leaves %d of %d; the counter leaves %d", got, lim.Quota, want)
				}
			})
		}
	}
}

// TestRefundStateIsTheCounterRefunded: a counter's state with a refund
// given back is the state of the counter the engine refunded, for every
// algorithm (the record of a counter's counts follows the counter).
func TestRefundStateIsTheCounterRefunded(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, FixedWindow, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			lim := Limit{Algorithm: alg, Quota: 20, Window: time.Minute}
			req := Request{Key: 7, Limit: lim, Cost: 2}
			e := New(Config{})
			for range 5 {
				e.TakeOne(t0, Request{Key: 7, Limit: lim})
			}
			before := e.StatesOf(t0, []Key{7})[0]
			later := t0.Add(time.Second)
			e.RefundAt(later, t0, req)
			want := e.StatesOf(later, []Key{7})[0]
			if reflect.DeepEqual(before, want) {
				t.Fatal("the refund changed nothing")
			}
			if got := RefundState(later, t0, before, req); !reflect.DeepEqual(got, want) {
				t.Fatalf("RefundState gives %+v; the engine's counter is %+v", got, want)
			}
		})
	}
}

// TestUnitsOffAreWhatTheRefundTookOff: a counter that holds a refund's
// units gives back all of them; one that holds fewer, only those it
// holds, for every algorithm (a bucket's debt in whole units, rounded
// up).
func TestUnitsOffAreWhatTheRefundTookOff(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, FixedWindow, TokenBucket} {
		for _, held := range []int{5, 1, 0} {
			t.Run(fmt.Sprintf("%s, %d held", alg, held), func(t *testing.T) {
				lim := Limit{Algorithm: alg, Quota: 20, Window: time.Minute}
				req := Request{Key: 7, Limit: lim, Cost: 2}
				e := New(Config{})
				e.TakeOne(t0, Request{Key: 7, Limit: lim})
				e.RefundAt(t0, t0, Request{Key: 7, Limit: lim})
				for range held {
					e.TakeOne(t0, Request{Key: 7, Limit: lim})
				}
				states := e.StatesOf(t0, []Key{7})
				if len(states) != 1 {
					if alg == TokenBucket && held == 0 {
						return // a bucket that owes nothing is no counter
					}
					t.Fatalf("%d counters of the key; want 1", len(states))
				}
				want := int64(min(held, 2))
				if got := UnitsOff(req, states[0], RefundState(t0, t0, states[0], req)); got != want {
					t.Fatalf("%d units came off; want %d", got, want)
				}
			})
		}
	}
}

// Extract's order is the engine's contents', not its maps': two engines
// given the same counters in different orders give them back alike, by
// key.
func TestExtractReturnsCountersSortedByKey(t *testing.T) {
	lim := Limit{Quota: 10, Window: time.Hour}
	a, b := New(Config{}), New(Config{})
	for i := range 300 {
		a.TakeOne(t0, Request{Key: Key(i * 7919), Limit: lim})
		b.TakeOne(t0, Request{Key: Key((299 - i) * 7919), Limit: lim})
	}
	all := func(Key) bool { return true }
	got, other := a.Extract(t0, all, 0), b.Extract(t0, all, 0)
	if len(got) != 300 || len(other) != 300 {
		t.Fatalf("extracted %d and %d; want 300 each", len(got), len(other))
	}
	for i := range got {
		if i > 0 && got[i-1].Key >= got[i].Key {
			t.Fatalf("counter %d has key %d after key %d: not sorted", i, got[i].Key, got[i-1].Key)
		}
		if got[i].Key != other[i].Key {
			t.Fatalf("counter %d: key %d from one engine, %d from the other", i, got[i].Key, other[i].Key)
		}
	}
}

// As above, on a token bucket: its arrival time comes back by the time
// the copy's had moved beyond the counter handed over, never before now.
func TestLowerTakesOffWhatACopyOfABucketHeldBeyondItsCounter(t *testing.T) {
	lim := Limit{Algorithm: TokenBucket, Quota: 20, Window: time.Minute}
	req := Request{Key: 7, Limit: lim}
	every := time.Minute / 20
	debt := func(s State) time.Duration { return time.Duration(s.Stamp - t0.UnixNano()) }
	owner := New(Config{})
	for range 5 {
		owner.TakeOne(t0, req)
	}
	copied := owner.StatesOf(t0, []Key{7})[0]
	owner.Refund(t0, req)
	owner.Refund(t0, req)
	handed := owner.StatesOf(t0, []Key{7})[0]
	excess, ok := SubState(t0, copied, handed)
	if !ok {
		t.Fatal("the copy holds nothing beyond the counter handed over")
	}

	here := New(Config{})
	for range 3 { // what others admitted, counted here
		here.TakeOne(t0, req)
	}
	here.Merge(t0, []State{copied})
	here.Lower(t0, []State{excess})
	if got, want := debt(here.StatesOf(t0, []Key{7})[0]), (3+3)*every; got != want {
		t.Errorf("after Lower the bucket owes %v; want %v", got, want)
	}
	if got, want := debt(LessState(t0, copied, excess)), debt(handed); got != want {
		t.Errorf("LessState leaves a debt of %v; want %v", got, want)
	}
	here.Lower(t0, []State{copied, copied})
	if states := here.StatesOf(t0, []Key{7}); len(states) > 0 && debt(states[0]) > 0 {
		t.Errorf("lowered by more than it owes, the bucket owes %v; want nothing", debt(states[0]))
	}
}

// A copy of a counter counted where the counter's own run later handed it
// over holding less (units given back since the copy): Lower takes what
// the copy held beyond it off the engine's counter, and LessState off a
// state the same way, window by window, never below nothing.
func TestLowerTakesOffWhatACopyHeldBeyondItsCounter(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			lim := Limit{Algorithm: alg, Quota: 20, Window: time.Minute}
			req := Request{Key: 7, Limit: lim}
			owner := New(Config{})
			for range 5 {
				owner.TakeOne(t0, req)
			}
			copied := owner.StatesOf(t0, []Key{7})[0]
			owner.Refund(t0, req)
			owner.Refund(t0, req)
			handed := owner.StatesOf(t0, []Key{7})[0]
			excess, ok := SubState(t0, copied, handed)
			if !ok {
				t.Fatal("the copy holds nothing beyond the counter handed over")
			}

			here := New(Config{})
			for range 3 { // what others admitted, counted here
				here.TakeOne(t0, req)
			}
			here.Merge(t0, []State{copied})
			here.Lower(t0, []State{excess})
			if got, want := here.StatesOf(t0, []Key{7})[0].Cur, uint32(3+3); got != want {
				t.Errorf("after Lower the counter holds %d; want %d", got, want)
			}
			if got := LessState(t0, copied, excess).Cur; got != handed.Cur {
				t.Errorf("LessState leaves %d; want %d", got, handed.Cur)
			}
			here.Lower(t0, []State{copied, copied})
			if got := here.StatesOf(t0, []Key{7})[0].Cur; got != 0 {
				t.Errorf("lowered by more than it holds, the counter holds %d; want 0", got)
			}
		})
	}
}

// A bucket counted at a share of the limit's rate (15 of 30 an hour)
// goes to the owner as the units it owes, at the owner's rate: 2 taken
// there and 3 at the owner leave 25, not 23; refilled half a unit's
// interval at the share's rate, it owes a half unit of the share's, a
// half of the owner's; a bucket owing nothing, and windows, are left as
// they are.
func TestBucketAtRateOwesItsUnitsAtTheOtherRate(t *testing.T) {
	own := Limit{Algorithm: TokenBucket, Quota: 30, Window: time.Hour}
	share := own.Scale(0.5)
	if own.Interval() != 2*time.Minute || share.Interval() != 4*time.Minute {
		t.Fatalf("intervals %v and %v; want 2m and 4m", own.Interval(), share.Interval())
	}
	node, owner := New(Config{}), New(Config{})
	for range 2 {
		node.TakeOne(t0, Request{Key: 5, Limit: share})
	}
	for range 3 {
		owner.TakeOne(t0, Request{Key: 5, Limit: own})
	}
	states := node.ExtractKeys(t0, []Key{5})
	moved := BucketAtRate(t0, states[0], share.Interval(), own.Interval())
	if got := time.Duration(moved.Stamp - t0.UnixNano()); got != 4*time.Minute {
		t.Fatalf("the bucket owes %v at the owner's rate; want 4m (2 units)", got)
	}
	owner.Merge(t0, []State{moved})
	allowed := 0
	for range 30 {
		if owner.TakeOne(t0, Request{Key: 5, Limit: own}).Allowed {
			allowed++
		}
	}
	if allowed != 25 {
		t.Fatalf("after 3 and 2 of 30, %d more allowed; want 25", allowed)
	}

	later := t0.Add(2 * time.Minute) // the share's bucket earned half a unit back
	if got := BucketAtRate(later, states[0], share.Interval(), own.Interval()); got.Stamp-later.UnixNano() != int64(3*time.Minute) {
		t.Fatalf("half a unit on, the bucket owes %v at the owner's rate; want 3m", time.Duration(got.Stamp-later.UnixNano()))
	}
	if got := BucketAtRate(t0.Add(time.Hour), states[0], share.Interval(), own.Interval()); !reflect.DeepEqual(got, states[0]) {
		t.Fatalf("a bucket owing nothing comes out %+v; want it as it was", got)
	}
	win := New(Config{})
	win.TakeOne(t0, Request{Key: 6, Limit: Limit{Algorithm: FixedWindow, Quota: 10, Window: time.Minute}})
	w := win.ExtractKeys(t0, []Key{6})[0]
	if got := BucketAtRate(t0, w, share.Interval(), own.Interval()); !reflect.DeepEqual(got, w) {
		t.Fatalf("a window comes out %+v; want it as it was", got)
	}
}

// ChargeState spends units again on a counter as ChargeAt does on one
// the engine holds: into the window they were counted in, or as a
// bucket's debt, on a counter at nothing too.
func TestChargeStatePutsUnitsBackIntoACounterAtNothing(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, TokenBucket} {
		lim := Limit{Algorithm: alg, Quota: 20, Window: time.Minute}
		req := Request{Key: 7, Limit: lim, Cost: 2}
		held := New(Config{})
		held.ChargeAt(t0, t0, req)
		want := held.StatesOf(t0, []Key{7})[0]
		if got := ChargeState(t0, t0, State{Key: 7}, req); !reflect.DeepEqual(got, want) {
			t.Errorf("%v: ChargeState on nothing gives %+v; want %+v", alg, got, want)
		}
		before := New(Config{})
		before.TakeOne(t0, Request{Key: 7, Limit: lim})
		s := before.StatesOf(t0, []Key{7})[0]
		before.ChargeAt(t0, t0, req)
		if got, want := ChargeState(t0, t0, s, req), before.StatesOf(t0, []Key{7})[0]; !reflect.DeepEqual(got, want) {
			t.Errorf("%v: ChargeState gives %+v; want %+v", alg, got, want)
		}
	}
}

// A bucket given back all it owed is still its key's counter, at
// nothing, until the arrival time it had: a copy of it taken before the
// give-back holds units it lacks, and its run's last word on the key,
// sent as it stops counting, is that counter at nothing. Once that time
// passes, it is none.
func TestABucketGivenBackAllItOwedIsACounterUntilItsArrivalTimeHad(t *testing.T) {
	lim := Limit{Algorithm: TokenBucket, Quota: 20, Window: time.Minute}
	req := Request{Key: 7, Limit: lim}
	e := New(Config{})
	e.TakeOne(t0, req)
	e.Refund(t0, req)
	if !e.Has(t0, 7) {
		t.Fatal("the bucket given back all it owed is no counter")
	}
	if states := e.StatesOf(t0, []Key{7}); len(states) != 1 || states[0].Stamp != t0.UnixNano() {
		t.Fatalf("StatesOf gives %+v; want the bucket at nothing", states)
	}
	if e.Has(t0.Add(time.Minute/20), 7) {
		t.Error("the bucket is a counter past the arrival time it had")
	}
}

// A bucket at nothing merged with another at nothing stays its key's
// counter, at nothing, until the later arrival time either had: merged as
// a bucket whose arrival time is now, it was no counter, and units given
// back again had no counter of the key to be put back into.
func TestBucketsAtNothingMergedStayACounterUntilTheLaterArrivalTime(t *testing.T) {
	lim := Limit{Algorithm: TokenBucket, Quota: 20, Window: time.Minute}
	req := Request{Key: 7, Limit: lim}
	a, b := New(Config{}), New(Config{})
	a.TakeOne(t0, req)
	a.Refund(t0, req)
	for range 2 {
		b.TakeOne(t0, req)
	}
	for range 2 {
		b.Refund(t0, req)
	}
	at := t0.Add(time.Millisecond)
	a.Merge(at, b.StatesOf(at, []Key{7}))
	if !a.Has(at, 7) {
		t.Fatal("the buckets at nothing merged are no counter")
	}
	if states := a.StatesOf(at, []Key{7}); len(states) != 1 || states[0].Stamp > at.UnixNano() {
		t.Fatalf("StatesOf gives %+v; want a bucket at nothing", states)
	}
	if !a.Has(t0.Add(time.Minute/20), 7) {
		t.Error("the merged bucket is no counter before the later arrival time either had")
	}
	if a.Has(t0.Add(2*time.Minute/20), 7) {
		t.Error("the merged bucket is a counter past the later arrival time either had")
	}
}
