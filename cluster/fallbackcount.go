package cluster

import (
	"math"
	"sync/atomic"

	"github.com/tollgate/tollgate/limiter"
)

// fallbackCounter decides for owners the node cannot reach: its mode and
// ratio, changeable at run time (a reload keeps the node), and, in local
// mode, the counters it keeps for those owners' keys until they are sent
// to the owners (see reconciler).
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

func (f *fallbackCounter) ratio() float64 { return math.Float64frombits(f.ratioBits.Load()) }
