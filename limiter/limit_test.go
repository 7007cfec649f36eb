package limiter

import (
	"strings"
	"testing"
	"time"
)

// t0 is aligned to a minute, so windows of a minute or less start there.
var t0 = time.Unix(1_700_000_040, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestParseAlgorithm(t *testing.T) {
	for name, want := range map[string]Algorithm{
		"":               SlidingWindow,
		"sliding_window": SlidingWindow,
		"fixed_window":   FixedWindow,
		"token_bucket":   TokenBucket,
	} {
		got, err := ParseAlgorithm(name)
		if err != nil || got != want {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	_, err := ParseAlgorithm("leaky")
	if err == nil || !strings.Contains(err.Error(), `"leaky"`) || !strings.Contains(err.Error(), "token_bucket") {
		t.Errorf("ParseAlgorithm(leaky) error = %v; want it to name the value and the allowed ones", err)
	}
}

func TestLimitValidate(t *testing.T) {
	for _, tc := range []struct {
		limit Limit
		want  string // substring of the error; empty for valid
	}{
		{Limit{Quota: 1, Window: time.Millisecond}, ""},
		{Limit{Algorithm: TokenBucket, Quota: 5, Window: time.Second, Burst: 10}, ""},
		{Limit{Quota: 0, Window: time.Second}, "quota 0"},
		{Limit{Quota: -3, Window: time.Second}, "quota -3"},
		{Limit{Quota: MaxQuota + 1, Window: time.Second}, "out of range"},
		{Limit{Quota: 5, Window: 0}, "window 0s"},
		{Limit{Quota: 5, Window: -time.Second}, "window -1s"},
		{Limit{Quota: 5, Window: MaxWindow + 1}, "out of range"},
		{Limit{Quota: 5, Window: time.Second, Burst: 2}, "only allowed with token_bucket"},
		{Limit{Algorithm: TokenBucket, Quota: 5, Window: time.Second, Burst: -2}, "burst -2"},
		{Limit{Algorithm: 9, Quota: 5, Window: time.Second}, "unknown algorithm"},
	} {
		err := tc.limit.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", tc.limit, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: error %v, want one containing %q", tc.limit, err, tc.want)
		}
	}
}

func TestLimitScale(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Quota: 100, Window: time.Minute, Burst: 10}
	got := l.Scale(0.4)
	if got.Quota != 40 || got.Burst != 4 || got.Window != time.Minute {
		t.Errorf("Scale(0.4) = %+v", got)
	}
	if got := (Limit{Quota: 1, Window: time.Second}).Scale(0.1); got.Quota != 1 {
		t.Errorf("Scale never goes below 1, got %d", got.Quota)
	}
}

// step is one request in an algorithm table: at an instant, expect a result.
type step struct {
	at        time.Duration
	allowed   bool
	remaining int64
	retry     time.Duration // RetryAfter when denied; Reset when allowed
}

func runSteps(t *testing.T, l Limit, steps []step) {
	t.Helper()
	e := New(Config{})
	req := Request{Key: 42, Zone: 7, Limit: l}
	for i, s := range steps {
		r := e.TakeOne(at(s.at), req)
		wantReset := s.retry
		if r.Allowed != s.allowed || r.Remaining != s.remaining ||
			(s.allowed && r.Reset != wantReset) || (!s.allowed && (r.RetryAfter != s.retry || r.Reset != s.retry)) {
			t.Errorf("step %d at +%v: got allowed=%v remaining=%d reset=%v retry=%v; want allowed=%v remaining=%d %v",
				i, s.at, r.Allowed, r.Remaining, r.Reset, r.RetryAfter, s.allowed, s.remaining, s.retry)
		}
	}
}

func TestFixedWindow(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Quota: 3, Window: 10 * time.Second}
	runSteps(t, l, []step{
		{0, true, 2, 10 * time.Second},
		{time.Second, true, 1, 9 * time.Second},
		{2 * time.Second, true, 0, 8 * time.Second},
		{3 * time.Second, false, 0, 7 * time.Second},
		{10*time.Second - time.Millisecond, false, 0, time.Millisecond},
		{10 * time.Second, true, 2, 10 * time.Second}, // a new window
		{25 * time.Second, true, 2, 5 * time.Second},  // a window later still
	})
}

func TestSlidingWindow(t *testing.T) {
	l := Limit{Algorithm: SlidingWindow, Quota: 10, Window: time.Minute}
	var steps []step
	for i := range 10 {
		steps = append(steps, step{time.Duration(i) * time.Second, true, int64(9 - i), time.Minute - time.Duration(i)*time.Second})
	}
	steps = append(steps,
		// Full. The next one fits when the previous window's 10, weighted
		// by the part still overlapping, fall to 9: 6s into the next window.
		step{10 * time.Second, false, 0, 56 * time.Second},
		step{30 * time.Second, false, 0, 36 * time.Second},
		step{66*time.Second - time.Millisecond, false, 0, time.Millisecond},
		step{66 * time.Second, true, 0, 54 * time.Second},
		// Half way through the second window: 10 weighted by half plus 1.
		step{90 * time.Second, true, 3, 30 * time.Second},
		step{90 * time.Second, true, 2, 30 * time.Second},
		step{90 * time.Second, true, 1, 30 * time.Second},
		step{90 * time.Second, true, 0, 30 * time.Second},
		// 5 + 5 used: the next fits when the weight falls to 0.4, at 36s.
		step{90 * time.Second, false, 0, 6 * time.Second},
		// Third window: the second window's 5 count fully at its start.
		step{120 * time.Second, true, 4, time.Minute},
		// Two idle windows later everything is forgotten.
		step{300 * time.Second, true, 9, time.Minute},
	)
	runSteps(t, l, steps)
}

func TestTokenBucket(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Quota: 10, Window: 10 * time.Second, Burst: 3}
	runSteps(t, l, []step{
		{0, true, 2, time.Second},
		{0, true, 1, 2 * time.Second},
		{0, true, 0, 3 * time.Second},
		{0, false, 0, time.Second},
		{500 * time.Millisecond, false, 0, 500 * time.Millisecond},
		{time.Second, true, 0, 3 * time.Second},
		{10 * time.Second, true, 2, time.Second}, // refilled to the burst, not beyond
	})
}

func TestTokenBucketBurstDefaultsToQuota(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Quota: 5, Window: 5 * time.Second}
	runSteps(t, l, []step{
		{0, true, 4, time.Second},
		{0, true, 3, 2 * time.Second},
		{0, true, 2, 3 * time.Second},
		{0, true, 1, 4 * time.Second},
		{0, true, 0, 5 * time.Second},
		{0, false, 0, time.Second},
	})
}

func TestCostLargerThanCapacityNeverFits(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, FixedWindow, TokenBucket} {
		e := New(Config{})
		r := e.TakeOne(t0, Request{Key: 1, Limit: Limit{Algorithm: alg, Quota: 5, Window: time.Second}, Cost: 6})
		if r.Allowed || r.RetryAfter <= 0 {
			t.Errorf("%v: cost 6 against quota 5 = %+v; want denied with a retry", alg, r)
		}
	}
}

func TestChangedLimitAppliesToExistingCounts(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, FixedWindow} {
		e := New(Config{})
		req := Request{Key: 1, Limit: Limit{Algorithm: alg, Quota: 10, Window: time.Minute}}
		for range 5 {
			e.TakeOne(t0, req)
		}
		req.Limit.Quota = 5 // lowered to what is spent: denied at once
		if r := e.TakeOne(t0, req); r.Allowed {
			t.Errorf("%v: allowed after the limit fell to what was spent", alg)
		}
		req.Limit.Quota = 7 // raised: the same counts, more room
		if r := e.TakeOne(t0, req); !r.Allowed || r.Remaining != 1 {
			t.Errorf("%v: after raising to 7 with 5 spent got %+v; want allowed, 1 left", alg, r)
		}
	}

	// A token bucket remembers time spent, not tokens: 5 of 10 per minute
	// is 30s of the bucket's 60s. At 2 per minute a token costs 30s, so
	// exactly one more fits.
	e := New(Config{})
	req := Request{Key: 1, Limit: Limit{Algorithm: TokenBucket, Quota: 10, Window: time.Minute}}
	for range 5 {
		e.TakeOne(t0, req)
	}
	req.Limit.Quota = 2
	if r := e.TakeOne(t0, req); !r.Allowed || r.Remaining != 0 {
		t.Errorf("token_bucket lowered to 2/min: got %+v; want allowed, 0 left", r)
	}
	if r := e.TakeOne(t0, req); r.Allowed {
		t.Errorf("token_bucket lowered to 2/min: allowed past the new rate")
	}
}

// TestChangedAlgorithmConvertsTheCount spends in one algorithm and then
// asks under another, at fixed instants: the spent units carry over.
func TestChangedAlgorithmConvertsTheCount(t *testing.T) {
	window := Limit{Algorithm: SlidingWindow, Quota: 3, Window: time.Minute}
	fixed := Limit{Algorithm: FixedWindow, Quota: 3, Window: time.Minute}
	bucket := Limit{Algorithm: TokenBucket, Quota: 3, Window: time.Minute} // a token per 20s
	for _, tc := range []struct {
		name       string
		from, to   Limit
		spent      int // units spent under from, at +0s, +1s, …
		askAt      time.Duration
		wantLeft   int64 // remaining under to, after one more allowed; -1: denied
		wantLeft2  int64
		secondAtTo time.Duration
	}{
		// 3 spent in the window: the bucket is empty. Until a take writes
		// bucket state, the window's count (decaying as the sliding window
		// does) is what is converted: at 80s it weighs 2, a token is free.
		{"window to bucket, full", window, bucket, 3, 5 * time.Second, -1, 0, 80 * time.Second},
		// 2 spent in the window: one token left in the bucket.
		{"window to bucket, one left", window, bucket, 2, 5 * time.Second, 0, -1, 6 * time.Second},
		// The bucket's debt of 3 tokens becomes a count of 3: denied.
		{"bucket to window, full", bucket, window, 3, 5 * time.Second, -1, -1, 10 * time.Second},
		// A debt of 1 token, 5s later less than one: a count of 1.
		{"bucket to window, one spent", bucket, window, 1, 5 * time.Second, 1, 0, 6 * time.Second},
		// Fixed and sliding windows share the count.
		{"fixed to sliding", fixed, window, 3, 5 * time.Second, -1, -1, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := New(Config{})
			req := Request{Key: 42, Zone: 7, Limit: tc.from}
			for i := range tc.spent {
				if r := e.TakeOne(at(time.Duration(i)*time.Second), req); !r.Allowed {
					t.Fatalf("spending %d under %s: denied", i+1, tc.from.Algorithm)
				}
			}
			req.Limit = tc.to
			for i, want := range []struct {
				at   time.Duration
				left int64
			}{{tc.askAt, tc.wantLeft}, {tc.secondAtTo, tc.wantLeft2}} {
				r := e.TakeOne(at(want.at), req)
				switch {
				case want.left < 0 && r.Allowed:
					t.Fatalf("ask %d at +%s under %s: allowed (%d left); want denied", i+1, want.at, tc.to.Algorithm, r.Remaining)
				case want.left >= 0 && (!r.Allowed || r.Remaining != want.left):
					t.Fatalf("ask %d at +%s under %s: allowed=%v, %d left; want allowed, %d left", i+1, want.at, tc.to.Algorithm, r.Allowed, r.Remaining, want.left)
				}
			}
		})
	}
}

// TestUnusableLimitDeniesWithoutPanicking gives the engine limits that fail
// Validate, as a bug upstream could: they deny, and never divide by zero.
func TestUnusableLimitDeniesWithoutPanicking(t *testing.T) {
	e := New(Config{})
	for _, l := range []Limit{
		{Algorithm: TokenBucket, Quota: 0, Window: time.Minute},
		{Algorithm: TokenBucket, Quota: -1, Window: time.Minute},
		{Algorithm: SlidingWindow, Quota: 0, Window: time.Minute},
		{Algorithm: FixedWindow, Quota: 5, Window: 0},
		{Algorithm: SlidingWindow, Quota: 5, Window: -time.Second},
	} {
		req := Request{Key: 42, Zone: 7, Limit: l}
		if r := e.TakeOne(at(0), req); r.Allowed {
			t.Errorf("%+v: allowed", l)
		}
		var res [2]Result
		if e.Take(at(0), []Request{req, {Key: 43, Zone: 7, Limit: Limit{Quota: 1, Window: time.Second}}}, res[:]) {
			t.Errorf("%+v in a batch: allowed", l)
		}
		e.Peek(at(0), req)
		e.Refund(at(0), req)
	}
}
