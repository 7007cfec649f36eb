package limiter

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// A unit refunded after its window has rolled over must come out of the
// window it was counted in, never the current one: giving it to the
// current window would let that window admit one more than its limit.
func TestRefundAtTakesBackFromTheWindowItWasCountedIn(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		e := New(Config{})
		req := Request{Key: 1, Limit: Limit{Algorithm: alg, Quota: 3, Window: time.Minute}}
		taken := at(50 * time.Second)
		for range 3 {
			if !e.TakeOne(taken, req).Allowed {
				t.Fatalf("%s: a fresh key refused", alg)
			}
		}
		// The next window: three more admitted, the fourth refused.
		next := at(time.Minute + 5*time.Second)
		if alg == FixedWindow {
			for i := range 3 {
				if !e.TakeOne(next, req).Allowed {
					t.Fatalf("%s: request %d of the next window refused", alg, i+1)
				}
			}
		}
		// A unit of the earlier window is given back now.
		e.RefundAt(next, taken, req)
		if alg == FixedWindow && e.TakeOne(next, req).Allowed {
			t.Fatalf("%s: a refund of the previous window's unit admitted a 4th request in this one", alg)
		}
		if alg == SlidingWindow {
			// The previous window weighs 55/60 of its count: with one unit
			// of it given back, exactly as much more fits as that unit weighs.
			before := e.Peek(next, req).Remaining
			e.RefundAt(next, taken, req)
			if after := e.Peek(next, req).Remaining; after < before || after > before+1 {
				t.Fatalf("sliding window: a refund of the previous window moved remaining from %d to %d", before, after)
			}
		}
	}
}

// A unit charged in a window and applied after it rolled over is spent
// in the window it was charged in, never the current one: spent there, it
// would hold the current window a unit it never admitted, and refuse a
// request under the limit. A window older than the one before is over:
// nothing is spent.
func TestChargeAtSpendsInTheWindowItWasChargedIn(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		e := New(Config{})
		req := Request{Key: 1, Limit: Limit{Algorithm: alg, Quota: 3, Window: time.Minute}}
		charged := at(50 * time.Second)
		if !e.TakeOne(charged, req).Allowed {
			t.Fatalf("%s: a fresh key refused", alg)
		}
		old := Request{Key: 2, Limit: req.Limit}
		if !e.TakeOne(charged, old).Allowed {
			t.Fatalf("%s: a fresh key refused", alg)
		}
		later := at(2*time.Minute + 5*time.Second)
		e.ChargeAt(later, charged, old) // two windows back: over
		if got := e.Peek(later, old).Remaining; got != 3 {
			t.Fatalf("%s: a charge of a window that is over left %d of 3", alg, got)
		}
		next := at(time.Minute + 5*time.Second)
		before := e.Peek(next, req).Remaining
		e.ChargeAt(next, charged, req)
		after := e.Peek(next, req).Remaining
		if alg == FixedWindow && after != 3 {
			t.Fatalf("%s: a charge of the previous window left %d of 3 in this one", alg, after)
		}
		if alg == SlidingWindow && (after > before || after < before-1) {
			// The previous window weighs 55/60 of its count: one unit
			// more of it takes at most one from what remains.
			t.Fatalf("sliding window: a charge of the previous window moved remaining from %d to %d", before, after)
		}
		e.ChargeAt(next, next, req) // charged now: spent now
		if got := e.Peek(next, req).Remaining; got != after-1 {
			t.Fatalf("%s: a charge of this window left %d, want %d", alg, got, after-1)
		}
	}
}

// A refund of a unit counted now is given back at once: the client who did
// nothing wrong gets its unit back.
func TestRefundAtNowGivesTheUnitBack(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		e := New(Config{})
		req := Request{Key: 1, Limit: Limit{Algorithm: alg, Quota: 2, Window: time.Minute}}
		now := at(10 * time.Second)
		for range 2 {
			e.TakeOne(now, req)
		}
		if e.TakeOne(now, req).Allowed {
			t.Fatalf("%s: a 3rd request admitted", alg)
		}
		e.RefundAt(now, now, req)
		if !e.TakeOne(now, req).Allowed {
			t.Fatalf("%s: the refunded unit was not available again", alg)
		}
	}
}

// Concurrent takes that are refunded when their response does not count
// never let more than the limit count, and leave nothing spent for the
// refunded ones.
func TestConcurrentTakeAndRefundIsExact(t *testing.T) {
	e := New(Config{})
	req := Request{Key: 9, Limit: Limit{Quota: 5, Window: time.Hour}}
	now := at(time.Second)
	var mu sync.Mutex
	kept := 0
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			if !e.TakeOne(now, req).Allowed {
				return
			}
			if i%2 == 0 { // a response that does not count
				e.RefundAt(now, now, req)
				return
			}
			mu.Lock()
			kept++
			mu.Unlock()
		})
	}
	wg.Wait()
	if kept > 5 {
		t.Fatalf("%d counted responses against a limit of 5", kept)
	}
	if left := e.Peek(now, req).Remaining; int(left) != 5-kept {
		t.Fatalf("remaining %d after %d counted; want %d", left, kept, 5-kept)
	}
}

// A charge settles a cost reported after the fact: it spends past what
// remains, leaving the key exhausted, but never owes more than the charge.
func TestChargeLeavesTheKeyExhaustedNeverDeeplyNegative(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		e := New(Config{})
		base := Request{Key: 1, Limit: Limit{Algorithm: alg, Quota: 10, Window: time.Hour}}
		now := at(time.Second)
		e.TakeOne(now, base) // 9 left
		charge := base
		charge.Cost = 4
		e.Charge(now, charge)
		if left := e.Peek(now, base).Remaining; left != 5 {
			t.Fatalf("%s: remaining %d after 1 + 4; want 5", alg, left)
		}
		charge.Cost = 50
		e.Charge(now, charge)
		if r := e.Peek(now, base); r.Allowed {
			t.Fatalf("%s: a key charged past its limit still admits", alg)
		}
		// Owed at most the charge: 5 - 50 = -45 at the very worst, and a
		// second charge does not dig deeper than its own cost.
		e.Charge(now, charge)
		e.Charge(now, charge)
		if used := e.used(now, base); used > 10+50 {
			t.Fatalf("%s: %d units used after charges of 50 at a limit of 10; want at most 60", alg, used)
		}
	}
}

// Delay books a refused request at the instant it fits, when that is
// within MaxDelay: like x/time/rate's Reserve, every booking gets its own
// instant, never more per window than the limit, and none beyond MaxDelay.
func TestDelayBooksExactlyAndNeverOverAdmits(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		e := New(Config{})
		req := Request{Key: 1, Limit: Limit{Algorithm: alg, Quota: 10, Window: time.Second}, MaxDelay: time.Second}
		now := at(0)
		var admitted []time.Time
		denied := 0
		for range 40 {
			r := e.TakeOne(now, req)
			if !r.Allowed {
				denied++
				if r.RetryAfter <= 0 {
					t.Fatalf("%s: denied without a Retry-After", alg)
				}
				continue
			}
			if r.Delay < 0 || r.Delay > req.MaxDelay {
				t.Fatalf("%s: booked %s ahead; allowed 0 to %s", alg, r.Delay, req.MaxDelay)
			}
			admitted = append(admitted, now.Add(r.Delay))
		}
		// Within one second of delay, at 10 a second: the 10 of now and
		// the 10 of the next second; a sliding window frees its next unit
		// only 1.1s on (the previous window's 10 still weigh 9/10).
		want := 20
		if alg == SlidingWindow {
			want = 10
		}
		if len(admitted) != want || denied != 40-want {
			t.Fatalf("%s: %d admitted, %d denied of 40 at once with delay 1s at 10/s; want %d and %d", alg, len(admitted), denied, want, 40-want)
		}
		if alg == TokenBucket {
			// The k-th admission (from 0) comes no earlier than the bucket
			// allows: a burst of 10, then one every 100ms.
			slices.SortFunc(admitted, func(a, b time.Time) int { return a.Compare(b) })
			for k, a := range admitted {
				if earliest := t0.Add(time.Duration(max(0, k-9)) * 100 * time.Millisecond); a.Before(earliest) {
					t.Fatalf("token bucket: admission %d at %s, before %s", k, a.Sub(t0), earliest.Sub(t0))
				}
			}
		} else {
			perWindow := map[int64]int{}
			for _, a := range admitted {
				perWindow[a.UnixNano()/int64(time.Second)]++
			}
			for w, n := range perWindow {
				if n > 10 {
					t.Fatalf("%s: %d admissions in the window of second %d", alg, n, w)
				}
			}
		}
		// A request that would not wait (no MaxDelay) is refused while the
		// future is booked.
		plain := req
		plain.MaxDelay = 0
		if e.TakeOne(now, plain).Allowed {
			t.Fatalf("%s: a request without delay admitted while the next second is booked", alg)
		}
	}
}

// A booking given back (its client left while waiting) frees its instant
// for the next request that waits.
func TestCancelledBookingFreesItsSlot(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		e := New(Config{})
		req := Request{Key: 1, Limit: Limit{Algorithm: alg, Quota: 2, Window: time.Second}, MaxDelay: 2 * time.Second}
		now := at(0)
		var last Result
		booked := 0
		for r := e.TakeOne(now, req); r.Allowed; r = e.TakeOne(now, req) {
			if last = r; r.Delay > 0 {
				booked++
			}
		}
		if booked == 0 {
			t.Fatalf("%s: nothing booked at 2/s within 2s", alg)
		}
		e.RefundAt(now, now.Add(last.Delay), req)
		r := e.TakeOne(now, req)
		if !r.Allowed || r.Delay > req.MaxDelay {
			t.Fatalf("%s: after a booking was given back, the next waiter got %+v", alg, r)
		}
		if e.TakeOne(now, req).Allowed {
			t.Fatalf("%s: one freed booking admitted two waiters", alg)
		}
	}
}

// The time until more quota is available (draft -10's t) is no later than
// the full reset, and for a sliding window or bucket comes before it.
func TestNextIsWhenMoreQuotaComes(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Quota: 10, Window: time.Minute}
	_, r := l.apply(entry{}, at(15*time.Second).UnixNano(), 1)
	if r.Next != 45*time.Second {
		t.Fatalf("fixed window: Next %s; want the window's end, 45s", r.Next)
	}
	// A token bucket of 10 a minute earns one every 6s.
	l = Limit{Algorithm: TokenBucket, Quota: 10, Window: time.Minute}
	e, r := l.apply(entry{}, at(0).UnixNano(), 3)
	if r.Next != 6*time.Second || r.Reset != 18*time.Second {
		t.Fatalf("token bucket after 3: Next %s, Reset %s; want 6s and 18s", r.Next, r.Reset)
	}
	_, r = l.apply(e, at(2*time.Second).UnixNano(), 1)
	if r.Next != 4*time.Second {
		t.Fatalf("token bucket 2s later: Next %s; want 4s", r.Next)
	}
	// A sliding window with a full previous window frees units as it slides.
	l = Limit{Algorithm: SlidingWindow, Quota: 10, Window: time.Minute}
	e = entry{}
	for range 10 {
		e, _ = l.apply(e, at(0).UnixNano(), 1)
	}
	e, r = l.apply(e, at(time.Minute+30*time.Second).UnixNano(), 1)
	if !r.Allowed || r.Next <= 0 || r.Next >= r.Reset {
		t.Fatalf("sliding window: %+v; want Next before Reset", r)
	}
	// At Next, one more fits than now.
	_, later := l.apply(e, at(time.Minute+30*time.Second+r.Next).UnixNano(), 1)
	if later.Remaining+1 <= r.Remaining {
		t.Fatalf("sliding window: %d left after Next, %d now; want more", later.Remaining+1, r.Remaining)
	}
}

// used returns the units req's counter holds as spent at now.
func (e *Engine) used(now time.Time, req Request) int64 {
	s := &e.shards[shardOf(req.Key)]
	s.mu.Lock()
	v := s.entries[req.Key].entry
	s.mu.Unlock()
	ns := now.UnixNano()
	if v.kind() == kindBucket {
		return max(0, (v.stamp-ns+req.Limit.interval()-1)/req.Limit.interval())
	}
	return windowUsed(v, ns)
}
