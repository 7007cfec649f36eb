package caddymodule

import (
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// refusalSlots is how many refusals sessionRefusals remembers at once
// (8 bytes each).
const refusalSlots = 1 << 16

// refusalNetworkSalt separates the refusals of networks from those of
// fingerprints.
const refusalNetworkSalt = 0x726566757365642e

// sessionRefusals remembers which cookie-less clients the minting budget
// refused a new session, and until when: a fingerprint out of its own
// sessions, or a network out of its network's, until the limiter said one
// would be free again. A client that never keeps its cookie (most API
// clients, scripts and load generators) then costs a lookup per request
// instead of a limiter decision. It only ever answers "refused" for what
// the limiter refused, and asks again once that answer runs out, so the
// minting bounds are the limiter's, unchanged; a refusal may outlive the
// limiter's answer by under a second, or, when IP pressure stops squeezing
// the network or an admin resets its counters meanwhile, until it runs out.
//
// Memory is fixed: refusalSlots entries, two candidate slots per key, each
// one atomic word (32 bits of the key, 32 of the Unix second the refusal
// ends). A new refusal takes the candidate that
// ends first; a refusal pushed out that way is asked again of the limiter.
// Two keys match only if 48 of their bits do, and a false match refuses a
// session, never gives one. Safe for concurrent use; the zero value is not
// usable, use newSessionRefusals.
type sessionRefusals struct {
	slots []atomic.Uint64
}

func newSessionRefusals() *sessionRefusals {
	return &sessionRefusals{slots: make([]atomic.Uint64, refusalSlots)}
}

// refused reports whether id was refused a session, by its fingerprint or
// its network, in a refusal that lasts past now.
func (m *sessionRefusals) refused(id *fingerprint.Identity, now time.Time) bool {
	sec := unixSeconds(now)
	return m.has(id.Digest, sec) || m.has(networkRefusalKey(id), sec)
}

// remember keeps the refusals in res, the limiter's answer at now to
// mintingBudget(id): the fingerprint's, the network's, or both.
func (m *sessionRefusals) remember(id *fingerprint.Identity, res *[2]limiter.Result, now time.Time) {
	for i, key := range [2]uint64{id.Digest, networkRefusalKey(id)} {
		if r := &res[i]; !r.Allowed && r.RetryAfter > 0 {
			m.put(key, now.Add(r.RetryAfter+time.Second-1)) // rounded up to the second
		}
	}
}

func networkRefusalKey(id *fingerprint.Identity) uint64 {
	return keyhash.Mix(id.Network ^ refusalNetworkSalt)
}

// unixSeconds returns t's Unix second, within 32 bits (until 2106).
func unixSeconds(t time.Time) uint64 {
	return uint64(min(max(t.Unix(), 0), 1<<32-1))
}

// candidates returns the two slots key may be kept in.
func (m *sessionRefusals) candidates(key uint64) (*atomic.Uint64, *atomic.Uint64) {
	const mask = refusalSlots - 1
	return &m.slots[key&mask], &m.slots[(key>>16)&mask]
}

// has reports whether key was refused until after the Unix second now.
func (m *sessionRefusals) has(key, now uint64) bool {
	a, b := m.candidates(key)
	for _, s := range [2]*atomic.Uint64{a, b} {
		if v := s.Load(); v>>32 == key>>32 && v&secondsMask > now {
			return true
		}
	}
	return false
}

// put keeps key refused until the second until: in the candidate slot
// that holds key already, else in the one whose refusal ends first.
func (m *sessionRefusals) put(key uint64, until time.Time) {
	a, b := m.candidates(key)
	switch va, vb := a.Load(), b.Load(); {
	case va>>32 == key>>32:
	case vb>>32 == key>>32 || vb&secondsMask < va&secondsMask:
		a = b
	}
	a.Store(key>>32<<32 | unixSeconds(until))
}

// secondsMask takes the end of a refusal out of a slot.
const secondsMask = 1<<32 - 1
