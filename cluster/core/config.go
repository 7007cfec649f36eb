package core

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// FallbackMode says what a node does with a request whose owner it cannot
// reach, or that its owner cannot count yet.
type FallbackMode uint8

const (
	// FallbackLocal counts the request on this node, with every limit
	// multiplied by the fallback ratio: a brief over-block beats an
	// under-block.
	FallbackLocal FallbackMode = iota
	// FallbackOpen lets the request through uncounted.
	FallbackOpen
	// FallbackClosed denies the request.
	FallbackClosed
)

var fallbackNames = [...]string{"local", "open", "closed"}

// String names the mode as configured.
func (m FallbackMode) String() string {
	if int(m) < len(fallbackNames) {
		return fallbackNames[m]
	}
	return fmt.Sprintf("fallback(%d)", m)
}

// ParseFallbackMode returns the mode with the given name; empty is local.
func ParseFallbackMode(s string) (FallbackMode, error) {
	if s == "" {
		return FallbackLocal, nil
	}
	for i, n := range fallbackNames {
		if n == s {
			return FallbackMode(i), nil
		}
	}
	return 0, fmt.Errorf("fallback %q: must be local, open or closed", s)
}

// Defaults of a core.
const (
	DefaultFallbackRatio  = 0.4
	DefaultCallTimeout    = 100 * time.Millisecond
	DefaultHandoffWindow  = 10 * time.Second
	DefaultProbeInterval  = 500 * time.Millisecond
	DefaultReplicateEvery = 5 * time.Millisecond
	DefaultCacheSlots     = 1 << 16
)

// Config sets up a Core. Zero fields take the defaults above.
type Config struct {
	// Self is this run of the node.
	Self Member
	// Engine holds the counters of the keys this node owns.
	Engine *limiter.Engine
	// Hasher keys the ring.
	Hasher keyhash.Hasher
	// Joining: the node has seeds to join and counts no key as its owner
	// until Core.Joined is called; without seeds it counts from the start.
	Joining bool

	// Fallback and FallbackRatio: what to do for owners that cannot be
	// reached (see FallbackMode); the ratio is above 0 and at most 1.
	Fallback      FallbackMode
	FallbackRatio float64
	// CallTimeout is the peer call timeout: how long an owner holds a
	// request for keys whose counts it is pulling, and the pace of retries.
	CallTimeout time.Duration
	// HandoffWindow bounds how long after a membership change a node waits
	// for the nodes it takes keys from to hand them all over; past it, it
	// counts what has not arrived from nothing (what arrives later adds).
	HandoffWindow time.Duration
	// ProbeInterval is how often the node pings every peer (leases and
	// liveness).
	ProbeInterval time.Duration
	// LeaseTime is how long an answered ping lets this node count the keys
	// whose successor answered it, and how long a node waits, after it last
	// heard from a peer it believes dead, before it starts that peer's keys
	// from their replicas. Default 3 × ProbeInterval.
	LeaseTime time.Duration
	// ReplicateEvery is how often changed counters go to their successors.
	ReplicateEvery time.Duration
	// CacheSlots sizes the caches of what owners said (denied keys,
	// remaining counts, scores).
	CacheSlots int
	// Seed seeds the jitter of retries; runs with the same seed and the
	// same inputs do the same.
	Seed uint64

	// Hooks are called as things happen; each may be nil.
	Hooks Hooks
	// Logger receives protocol events; default: discarded.
	Logger *slog.Logger
}

// Hooks tell the core's driver that it has work. They are called with no
// lock of the core held, must not block, and must not call the core back
// synchronously.
type Hooks struct {
	// Outbox: messages wait to be sent (Core.Outbox).
	Outbox func()
	// Settled: keys became countable, or their wait ended; requests that
	// wait for keys should look again.
	Settled func()
	// Member: the node entered or left its own ring (it announces it).
	Member func(member bool)
}

func (c *Config) setDefaults() {
	if c.FallbackRatio <= 0 || c.FallbackRatio > 1 {
		c.FallbackRatio = DefaultFallbackRatio
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.HandoffWindow <= 0 {
		c.HandoffWindow = DefaultHandoffWindow
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.LeaseTime <= 0 {
		c.LeaseTime = 3 * c.ProbeInterval
	}
	if c.ReplicateEvery <= 0 {
		c.ReplicateEvery = DefaultReplicateEvery
	}
	if c.CacheSlots <= 0 {
		c.CacheSlots = DefaultCacheSlots
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Engine == nil {
		c.Engine = limiter.New(limiter.Config{})
	}
}

// Source says who decided a request.
type Source uint8

const (
	// SourceOwner: this node owns the keys and counted them.
	SourceOwner Source = iota
	// SourcePeer: the owner, another node, counted them.
	SourcePeer
	// SourceBlockedCache: a key was known to be denied; no call was made.
	SourceBlockedCache
	// SourceFallback: the owner could not be reached, or could not count
	// the keys yet; this node decided by its fallback mode.
	SourceFallback
)

var sourceNames = [...]string{"owner", "peer", "blocked_cache", "fallback"}

// String names the source, as used in metric labels and logs.
func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return fmt.Sprintf("source(%d)", s)
}

// Decision is what a take decided for a request's zones.
type Decision struct {
	// Allowed: every zone granted its units (and all were spent).
	Allowed bool
	// Source says who decided; for zones decided in several places, the
	// last in the order owner, peer, blocked cache, fallback.
	Source Source
	// Score is the client's reputation as its owner knows it after the
	// decision (limiter.FullScore without reputation), when ScoreKnown.
	Score float64
	// ScoreKnown is false when no owner of the client's reputation was
	// asked (a cache answered, or fallback decided).
	ScoreKnown bool
}
