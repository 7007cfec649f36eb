package limiter

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Algorithm is how a Limit counts.
type Algorithm uint8

const (
	// SlidingWindow weights the previous fixed window's count by how much of
	// it still overlaps the sliding window ending now (the two-bucket
	// estimate). In each aligned window it admits at most the quota; over an
	// arbitrary interval of one window's length the estimate assumes the
	// previous window's requests were spread evenly, so with adversarial
	// timing (all of them at its very end) up to 2×quota-1 can land in one
	// such interval, the same bound as a fixed window but reached only at
	// that extreme. With evenly spread traffic it is exact.
	SlidingWindow Algorithm = iota
	// FixedWindow counts in windows aligned to the Unix epoch. Cheap, and
	// up to twice the quota can pass around a window boundary.
	FixedWindow
	// TokenBucket is the generic cell rate algorithm (GCRA): a bucket of
	// Burst tokens refilled at Quota per Window, kept as one timestamp.
	TokenBucket
	// Concurrency caps simultaneous holders instead of a rate: Quota slots,
	// each a lease that expires Window after it was last claimed unless
	// claimed again. Requests name their lease with LeaseID.
	Concurrency
)

var algorithmNames = [...]string{
	SlidingWindow: "sliding_window",
	FixedWindow:   "fixed_window",
	TokenBucket:   "token_bucket",
}

// AlgorithmNames lists the rate algorithms a zone may name, for error
// messages. Concurrency is configured apart, not by name.
func AlgorithmNames() string { return strings.Join(algorithmNames[:], ", ") }

// String returns the configuration name of a.
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	if a == Concurrency {
		return "concurrency"
	}
	return fmt.Sprintf("algorithm(%d)", a)
}

// ParseAlgorithm returns the algorithm with the given configuration name;
// the empty name means SlidingWindow.
func ParseAlgorithm(name string) (Algorithm, error) {
	if name == "" {
		return SlidingWindow, nil
	}
	for i, n := range algorithmNames {
		if n == name {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (allowed: %s)", name, AlgorithmNames())
}

// MaxQuota is the largest quota or burst a Limit may have.
const MaxQuota = math.MaxInt32

// MaxWindow is the longest window a Limit may have.
const MaxWindow = 366 * 24 * time.Hour

// Limit is how many units a key may spend per window.
type Limit struct {
	Algorithm Algorithm
	// Quota is the number of units per Window, 1 to MaxQuota.
	Quota int64
	// Window is the period the quota applies to, 1ms to MaxWindow.
	Window time.Duration
	// Burst is the bucket size of a TokenBucket; zero means Quota. Other
	// algorithms must leave it zero.
	Burst int64
	// Calendar, when set, aligns a window algorithm's windows to calendar
	// days, ISO weeks or months of a time zone instead of fixed lengths
	// from the Unix epoch; Window is then the unit's nominal length
	// (Calendar.Nominal). Nil for fixed-length windows.
	Calendar *Calendar
}

// Validate reports what is wrong with l, if anything.
func (l Limit) Validate() error {
	if int(l.Algorithm) >= len(algorithmNames) && l.Algorithm != Concurrency {
		return fmt.Errorf("unknown algorithm %d (allowed: %s)", l.Algorithm, AlgorithmNames())
	}
	if l.Quota < 1 || l.Quota > MaxQuota {
		return fmt.Errorf("quota %d out of range (allowed: 1 to %d)", l.Quota, int64(MaxQuota))
	}
	if l.Window < time.Millisecond || l.Window > MaxWindow {
		return fmt.Errorf("window %s out of range (allowed: 1ms to %s)", l.Window, MaxWindow)
	}
	if l.Burst != 0 && l.Algorithm != TokenBucket {
		return fmt.Errorf("burst %d is only allowed with %s, not %s", l.Burst, TokenBucket, l.Algorithm)
	}
	if l.Burst < 0 || l.Burst > MaxQuota {
		return fmt.Errorf("burst %d out of range (allowed: 1 to %d)", l.Burst, int64(MaxQuota))
	}
	if l.Calendar != nil {
		if l.Algorithm != SlidingWindow && l.Algorithm != FixedWindow {
			return fmt.Errorf("calendar windows are for %s and %s, not %s", SlidingWindow, FixedWindow, l.Algorithm)
		}
		if err := l.Calendar.validate(); err != nil {
			return err
		}
	}
	return nil
}

// Scale returns l with its quota and burst multiplied by ratio, never below 1.
// The fallback path and, later, reputation use it.
func (l Limit) Scale(ratio float64) Limit {
	if ratio == 1 {
		return l
	}
	l.Quota = scaleCount(l.Quota, ratio)
	if l.Burst != 0 {
		l.Burst = scaleCount(l.Burst, ratio)
	}
	return l
}

func scaleCount(n int64, ratio float64) int64 {
	s := int64(float64(n) * ratio)
	return max(1, min(s, MaxQuota))
}

// capacity is the number of units available to a fresh key.
func (l Limit) capacity() int64 {
	if l.Algorithm == TokenBucket && l.Burst > 0 {
		return l.Burst
	}
	return l.Quota
}

// Result is the outcome of one request against one Limit.
type Result struct {
	// Allowed reports whether the units were (or, in a batch that was
	// denied elsewhere, would have been) granted.
	Allowed bool
	// Remaining is the number of units left after this request.
	Remaining int64
	// Reset is the time until the quota is restored: the end of the current
	// window for the window algorithms, the time until the bucket is full
	// for TokenBucket. When denied, it equals RetryAfter.
	Reset time.Duration
	// RetryAfter is how long to wait before the same request can pass;
	// zero when allowed.
	RetryAfter time.Duration
	// Next is, when allowed, the time until more units are available than
	// Remaining (draft-ietf-httpapi-ratelimit-headers-10's t): the end of
	// the window for a fixed window, sooner for a sliding window or a
	// token bucket. Zero when nothing is spent, or when not known; Reset
	// then stands in for it.
	Next time.Duration
	// Delay is, when allowed, how long the request must wait before it is
	// served: it was booked for that instant (Request.MaxDelay). Zero for
	// a request admitted now.
	Delay time.Duration
	// Quota is the limit the request was decided against when it is not
	// the request's own (a cluster node deciding by fallback counts its
	// share of it); zero otherwise.
	Quota int64
}

// entry is the state of one key: 24 bytes.
//
// Window algorithms keep the start of the current window in stamp, the counts
// of the current and previous windows in cur and prev, and set expires to
// stamp + 2×window, so the window length can be recovered without the Limit
// (hand-off needs that). TokenBucket keeps the theoretical arrival time in
// stamp and sets expires = stamp. Reputation keeps the time of its last
// change in stamp, the score ×1000 in cur, and sets expires to when the score
// is back at full. The kinds that need no previous count mark prev with a
// value no count reaches (counts stay below MaxQuota). An entry whose expires
// has passed is equivalent to no entry at all, so it can be dropped at any
// moment.
type entry struct {
	stamp   int64
	expires int64
	cur     uint32
	prev    uint32
}

// Kinds of entry.
const (
	kindNone uint8 = iota // the zero entry: nothing counted
	kindWindow
	kindBucket
	kindReputation
)

// Marks in prev of the kinds that do not use it.
const (
	markBucket     uint32 = 0xffffffff
	markReputation uint32 = 0xfffffffe
)

// kind says what e holds.
func (e entry) kind() uint8 {
	switch {
	case e.prev == markBucket:
		return kindBucket
	case e.prev == markReputation:
		return kindReputation
	case e.expires == 0:
		return kindNone
	}
	return kindWindow
}

// withKind returns e marked as kind k.
func (e entry) withKind(k uint8) entry {
	switch k {
	case kindBucket:
		e.prev = markBucket
	case kindReputation:
		e.prev = markReputation
	}
	return e
}

// unusable is the answer to a request under a limit that fails Validate:
// denied, to come back in a second. Config and every other entry point
// validate limits; this keeps a bad one that slipped through from dividing
// by zero or granting without bound.
var unusable = Result{Reset: time.Second, RetryAfter: time.Second}

// apply spends n units of l at now from state e. It returns the next state
// (meaningful only when allowed) and the result.
//
// State written under another algorithm is converted, so changing a zone's
// algorithm neither resets its clients nor double-counts them: a window
// count (the current window's, plus the previous one's as the sliding
// window weighs it) becomes that many tokens taken from the bucket, and a
// bucket's debt (the time until it is full, at l's rate) becomes the
// current window's count. Changing the quota or window keeps the state as
// it is and judges it by the new limit.
func (l Limit) apply(e entry, now, n int64) (entry, Result) {
	if l.Quota < 1 || l.Window <= 0 {
		return e, unusable
	}
	if l.Algorithm == TokenBucket {
		return l.applyGCRA(e, now, n)
	}
	return l.applyWindow(e, now, n)
}

// span returns the window of l that contains the instant now: its start
// and its length, in ns.
func (l Limit) span(now int64) (start, length int64) {
	if l.Calendar != nil {
		return l.Calendar.span(now)
	}
	w := int64(l.Window)
	start = now - now%w
	return start, w
}

// roll brings a window entry forward to the window containing now. An
// entry already in a later window (booked ahead, see book) stays there.
func (l Limit) roll(e entry, now int64) entry {
	start, w := l.span(now)
	expires := start + 2*w
	if l.Calendar != nil {
		_, next := l.span(start + w)
		expires = start + w + next // kept through the next window, as its previous one
	}
	if e.kind() == kindBucket && e.stamp > now {
		// A bucket in debt: its debt, in tokens at l's rate, becomes the
		// count of the current window.
		used := min((e.stamp-now+l.interval()-1)/l.interval(), int64(MaxQuota))
		return entry{stamp: start, expires: expires, cur: uint32(used)}
	}
	if e.expires <= now || e.kind() != kindWindow {
		// Expired, or no state worth converting: start afresh.
		return entry{stamp: start, expires: expires}
	}
	if l.Calendar != nil {
		eStart, ew := l.span(e.stamp)
		switch {
		case e.stamp > now:
			return e // booked ahead
		case now < eStart+ew:
			e.stamp = eStart // the same window (aligned, if written under another limit)
		case eStart+ew == start:
			e.prev, e.cur = e.cur, 0
			e.stamp = start
		default:
			e.prev, e.cur = 0, 0
			e.stamp = start
		}
		e.expires = expires
		return e
	}
	switch {
	case now < e.stamp+w:
		// Same window (also when the window grew since e was written, or
		// a later window booked ahead).
	case now < e.stamp+2*w:
		e.prev, e.cur = e.cur, 0
		e.stamp = start
	default:
		e.prev, e.cur = 0, 0
		e.stamp = start
	}
	e.expires = e.stamp + 2*w
	return e
}

func (l Limit) applyWindow(e entry, now, n int64) (entry, Result) {
	e = l.roll(e, now)
	if e.stamp > now {
		// A later window holds bookings: nothing fits before it starts.
		_, r := l.applyWindow(e, e.stamp, n)
		retry := time.Duration(e.stamp-now) + r.RetryAfter
		return e, Result{Reset: retry, RetryAfter: retry}
	}
	_, w := l.span(e.stamp)
	elapsed := now - e.stamp
	if elapsed >= w { // the window shrank since e was written
		elapsed = w - 1
	}
	used := float64(e.cur)
	weight := 0.0
	if l.Algorithm == SlidingWindow && e.prev > 0 {
		weight = float64(w-elapsed) / float64(w)
		used += float64(e.prev) * weight
	}
	toEnd := time.Duration(w - elapsed)
	if used+float64(n) <= float64(l.Quota) {
		e.cur += uint32(n)
		r := Result{
			Allowed:   true,
			Remaining: int64(float64(l.Quota) - used - float64(n)),
			Reset:     toEnd,
			Next:      toEnd,
		}
		if l.Algorithm == SlidingWindow && e.prev > 0 && r.Remaining < l.Quota {
			// The previous window's weight falls as the window slides: the
			// next unit comes when one more than what remains fits.
			r.Next = min(toEnd, l.windowRetry(e, w, elapsed, r.Remaining+1))
		}
		return e, r
	}
	retry := l.windowRetry(e, w, elapsed, n)
	return e, Result{Remaining: max(0, int64(float64(l.Quota)-used)), Reset: retry, RetryAfter: retry}
}

// windowRetry returns how long until n units fit, given the rolled entry e,
// the length w of its window and the time elapsed in it.
func (l Limit) windowRetry(e entry, w64, elapsed, n int64) time.Duration {
	w := float64(w64)
	quota := float64(l.Quota)
	cur, prev := float64(e.cur), float64(e.prev)
	if float64(n) > quota {
		return time.Duration(w64) // can never fit; ask to come back after a window
	}
	if l.Algorithm == SlidingWindow {
		// Within this window, prev's weight falls linearly to zero.
		if room := quota - cur - float64(n); room >= 0 && prev > 0 {
			at := w * (1 - room/prev) // time into the window when it fits
			if d := at - float64(elapsed); at < w {
				return ceilDuration(max(d, 1))
			}
		}
		// Next window: cur becomes prev and decays from full weight.
		d := w - float64(elapsed)
		if cur > quota-float64(n) {
			d += w * (1 - (quota-float64(n))/cur)
		}
		return ceilDuration(d)
	}
	return time.Duration(w64 - elapsed)
}

func ceilDuration(ns float64) time.Duration {
	return time.Duration(math.Ceil(ns))
}

// interval is the time a token bucket takes to earn one token, in ns.
func (l Limit) interval() int64 { return max(int64(l.Window)/l.Quota, 1) }

// Interval is what each unit a token bucket of l admits moves its arrival
// time on by: the time it takes to earn one unit back. It is zero for a
// limit that fails Validate.
func (l Limit) Interval() time.Duration {
	if l.Quota < 1 || l.Window <= 0 {
		return 0
	}
	return time.Duration(l.interval())
}

// Capacity is what a fresh key may spend of l at once: a token bucket's
// burst, else the quota.
func (l Limit) Capacity() int64 { return l.capacity() }

// windowUsed returns the units a window entry holds as spent at now: the
// current window's count plus the previous one's, weighted as the sliding
// window weighs it. The window length is recovered from the entry.
func windowUsed(e entry, now int64) int64 {
	w := (e.expires - e.stamp) / 2
	if w <= 0 || e.expires <= now {
		return 0
	}
	switch elapsed := now - e.stamp; {
	case elapsed < 0:
		return int64(e.cur)
	case elapsed < w:
		return int64(e.cur) + int64(float64(e.prev)*float64(w-elapsed)/float64(w)+0.5)
	default: // the next window: cur is now the previous one's count
		return int64(float64(e.cur)*float64(2*w-elapsed)/float64(w) + 0.5)
	}
}

func (l Limit) applyGCRA(e entry, now, n int64) (entry, Result) {
	interval := l.interval()
	burst := l.capacity()
	tolerance := interval * burst
	tat := e.stamp
	switch {
	case e.kind() == kindWindow:
		// A window count becomes that many tokens taken.
		tat = now + min(windowUsed(e, now), burst)*interval
	case e.kind() != kindBucket || tat < now:
		tat = now // fresh, expired or state of another kind
	}
	next := tat + n*interval
	if next-now <= tolerance {
		remaining := (tolerance - (next - now)) / interval
		// One more token than remains is earned when the debt falls below
		// what remaining+1 tokens leave of the tolerance.
		more := max(0, next-now-(tolerance-(remaining+1)*interval))
		return entry{stamp: next, expires: next, prev: markBucket}, Result{
			Allowed:   true,
			Remaining: remaining,
			Reset:     time.Duration(next - now),
			Next:      time.Duration(min(more, next-now)),
		}
	}
	retry := time.Duration(next - now - tolerance)
	if n > burst {
		retry = time.Duration(tolerance) // can never fit
	}
	return e, Result{
		Remaining:  max(0, (tolerance-(tat-now))/interval),
		Reset:      retry,
		RetryAfter: retry,
	}
}

// book answers a request that apply denied (with denied) by booking it for
// the earliest instant its n units fit, if that is within maxDelay of now:
// the units are counted at that instant, so no two bookings share one and
// no window (or bucket) holds more than the limit. It returns the next
// state and the result, with Delay set, or e and denied when nothing fits
// in time.
func (l Limit) book(e entry, now, n, maxDelay int64, denied Result) (entry, Result) {
	wait := int64(denied.RetryAfter)
	if maxDelay <= 0 || wait <= 0 || wait > maxDelay || n > l.capacity() {
		return e, denied
	}
	next, r := l.apply(e, now+wait, n)
	if !r.Allowed {
		return e, denied // cannot happen: RetryAfter is when it fits
	}
	r.Delay = time.Duration(wait)
	r.Reset += r.Delay
	if r.Next > 0 {
		r.Next += r.Delay
	}
	return next, r
}

// refund gives n units back to a state, for a request that was admitted
// (or booked) at the instant at but then turned away elsewhere, or whose
// response did not count. Units come out of the window they were counted
// in: the current one, or the previous one, which a sliding window still
// weighs; units of an older window are gone.
func (l Limit) refund(e entry, now, at, n int64) entry {
	if e.expires <= now || l.Quota < 1 || l.Window <= 0 {
		return e
	}
	if l.Algorithm == TokenBucket {
		if e.kind() != kindBucket {
			return e
		}
		// It stays its key's counter until the arrival time it had, at
		// nothing if it owed no more: a copy of it taken before holds
		// units it lacks, and, gone, it was no last word on them
		// (TestACounterAllGivenBackAfterItsReplicaLowersTheCounterStartedFromIt).
		e.stamp = max(e.stamp-n*l.interval(), now)
		return e
	}
	if e.kind() != kindWindow {
		return e
	}
	start, w := l.span(e.stamp)
	switch {
	case at >= start && at < start+w:
		e.cur -= uint32(min(int64(e.cur), n))
	case at < start:
		if prevStart, _ := l.span(start - 1); at >= prevStart {
			e.prev -= uint32(min(int64(e.prev), n))
		}
	}
	return e
}

// charge spends n more units at now from state e whatever the limit says,
// for a cost settled after the request was served: the key is left
// exhausted if that is more than remains, but never owes more than n.
// A window's units are spent in the window of the instant at they were
// charged at (now, or earlier for a charge that waited): in the current
// one, or in the one before it, which a sliding window still weighs, and
// not at all in an older one, which is over. Spent in the window they
// are applied in, they would hold that window units it never admitted.
// A bucket has no windows: its units are spent at now.
func (l Limit) charge(e entry, now, at, n int64) entry {
	if l.Quota < 1 || l.Window <= 0 || n <= 0 {
		return e
	}
	if l.Algorithm == TokenBucket {
		interval := l.interval()
		tat := e.stamp
		if e.kind() != kindBucket || tat < now {
			tat = now
			if e.kind() == kindWindow {
				tat = now + min(windowUsed(e, now), l.capacity())*interval
			}
		}
		ceiling := now + (l.capacity()+n)*interval // owing at most n tokens
		tat = min(tat+n*interval, max(ceiling, tat))
		return entry{stamp: tat, expires: tat, prev: markBucket}
	}
	e = l.roll(e, now)
	start, w := l.span(e.stamp)
	if nowStart, _ := l.span(now); at < nowStart {
		// Charged in a window before now's: into e's previous window if
		// it is that one (a booked entry's previous window is now's).
		if prevStart, _ := l.span(start - 1); at >= prevStart && at < start {
			// Never owing more than n: at most Quota + n, and never less
			// than it held.
			prev := int64(e.prev)
			e.prev = uint32(max(prev, min(prev+n, int64(l.Quota)+n)))
		}
		return e
	}
	at = max(now, e.stamp)
	used := float64(e.cur)
	if l.Algorithm == SlidingWindow && e.prev > 0 {
		used += float64(e.prev) * float64(w-min(at-e.stamp, w-1)) / float64(w)
	}
	room := float64(l.Quota+n) - used // up to n past the limit
	add := max(0, min(n, int64(room)))
	e.cur += uint32(add)
	return e
}
