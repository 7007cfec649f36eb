package caddymodule

import (
	"fmt"

	"github.com/tollgate/tollgate/limiter"
)

// ReputationConfig scores clients by their violations and scales their
// limits by the score: a client starts at 100, loses Penalty points per
// denied request and regains Recovery points an hour.
type ReputationConfig struct {
	// Off turns reputation off.
	Off bool `json:"off,omitempty"`

	// Penalty is the points a denied request costs (above 0, at most 100).
	// Default: 1, so one mistake never locks anyone out.
	Penalty float64 `json:"penalty,omitempty"`

	// Recovery is the points regained per hour. Default: 10, so a client
	// that fell to 50 is back at full after 5 hours, not after one window.
	Recovery float64 `json:"recovery,omitempty"`

	// Buckets are the score bands and their limit multipliers, from the
	// highest down; the last starts at 0. Default: 75 → 1, 50 → 0.6,
	// 25 → 0.3, 0 → 0.1.
	Buckets []BucketConfig `json:"buckets,omitempty"`
}

// BucketConfig is one band of reputation scores.
type BucketConfig struct {
	// From is the lowest score of the band, 0 to 100.
	From float64 `json:"from"`

	// Factor multiplies the limits of the clients in the band, above 0
	// and at most 1.
	Factor float64 `json:"factor"`
}

// Defaults of reputation.
const (
	defaultPenalty  = 1
	defaultRecovery = 10
)

// policy returns the limiter's policy for c; nil when reputation is off.
func (c *ReputationConfig) policy() *limiter.ReputationPolicy {
	if c != nil && c.Off {
		return nil
	}
	p := &limiter.ReputationPolicy{Penalty: defaultPenalty, RecoveryPerHour: defaultRecovery, Buckets: limiter.DefaultReputationBuckets()}
	if c == nil {
		return p
	}
	if c.Penalty != 0 {
		p.Penalty = c.Penalty
	}
	if c.Recovery != 0 {
		p.RecoveryPerHour = c.Recovery
	}
	if len(c.Buckets) > 0 {
		p.Buckets = nil
		for _, b := range c.Buckets {
			p.Buckets = append(p.Buckets, limiter.Bucket{Min: b.From, Factor: b.Factor})
		}
	}
	return p
}

// provisionReputation applies reputation to this config's engine and node.
func (a *App) provisionReputation() error {
	a.reputation = a.Reputation.policy()
	if a.reputation != nil {
		if err := a.reputation.Validate(); err != nil {
			return fmt.Errorf("tollgate: reputation: %w", err)
		}
	}
	a.state.engine.SetReputation(a.reputation)
	a.node.SetReputation(a.reputation)
	a.repSeed = a.hasher.Zone("\x00tollgate reputation")
	return nil
}

// reputationKey returns the key a client's reputation is kept under: the
// same route as the client ID, so the client's owner keeps it.
func (a *App) reputationKey(clientKey uint64) limiter.Key {
	if a.reputation == nil {
		return 0
	}
	return limiter.ZoneKey(clientKey, a.repSeed)
}
