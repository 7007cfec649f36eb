package cluster

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// fallbackCounter decides requests for owners the node cannot reach, by its
// mode and ratio (changeable at run time: a reload keeps the node). It is
// an engine: in local mode, the counters it keeps for those owners' keys
// until they are sent to the owners (see reconciler). The node scales the
// limits it is given (fallbackLimits).
//
// A fallbackCounter is safe for concurrent use.
type fallbackCounter struct {
	*limiter.Engine // counters kept for owners this node cannot reach

	modeBits    atomic.Uint32 // FallbackMode
	ratioBits   atomic.Uint64 // float64 bits
	activations atomic.Uint64 // times a peer's keys went to fallback
}

func newFallbackCounter(maxKeys int, mode FallbackMode, ratio float64) *fallbackCounter {
	f := &fallbackCounter{Engine: limiter.New(limiter.Config{MaxKeys: maxKeys})}
	f.set(mode, ratio)
	return f
}

// set changes the mode and the ratio; a ratio outside (0, 1] means
// DefaultFallbackRatio.
func (f *fallbackCounter) set(mode FallbackMode, ratio float64) {
	if ratio <= 0 || ratio > 1 {
		ratio = DefaultFallbackRatio
	}
	f.modeBits.Store(uint32(mode))
	f.ratioBits.Store(math.Float64bits(ratio))
}

func (f *fallbackCounter) mode() FallbackMode { return FallbackMode(f.modeBits.Load()) }

// decide performs op for reqs, whose limits are already scaled for
// fallback, by the mode: local counts here, open admits, closed denies.
// empty >= 0 names a zone whose owner said it had nothing left for this
// node: a take is denied there.
func (f *fallbackCounter) decide(now time.Time, op action, client limiter.Key, reqs []limiter.Request, empty int, res []limiter.Result) (bool, float64) {
	deny := func(i int) (bool, float64) {
		for j := range res {
			res[j] = limiter.Result{Allowed: true, Remaining: -1}
		}
		for j := range res {
			if i < 0 || j == i {
				res[j] = limiter.Result{Reset: time.Second, RetryAfter: time.Second}
			}
		}
		return false, limiter.FullScore
	}
	switch f.mode() {
	case FallbackOpen:
		for i := range res {
			res[i] = limiter.Result{Allowed: true, Remaining: -1}
		}
		return true, limiter.FullScore
	case FallbackClosed:
		if op != actTake {
			return true, limiter.FullScore
		}
		return deny(-1)
	}
	if empty >= 0 && op == actTake {
		return deny(empty)
	}
	return apply(f.Engine, now, op, client, reqs, res)
}

// refund gives back what a take of reqs (with the limits it was decided
// by) granted here.
func (f *fallbackCounter) refund(now time.Time, reqs []limiter.Request) {
	for _, r := range reqs {
		f.Refund(now, r)
	}
}

func (f *fallbackCounter) ratio() float64 { return math.Float64frombits(f.ratioBits.Load()) }
