package caddymodule

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/limiter"
)

// The bounds of settings. Each rule is written once, here, and applied both
// where the Caddyfile reads a value (which names the value as written, at
// its line) and by Validate (which names it as configured, for JSON too).

// wholeRange is the bounds of a whole-number setting.
type wholeRange struct{ lo, hi int64 }

// The bounds of whole-number settings.
var (
	quotaBounds        = wholeRange{1, limiter.MaxQuota} // a limit, burst, tier limit or issue_limit
	concurrentBounds   = wholeRange{1, maxConcurrent}    // holders of a lease zone, and their tier limits
	networkShareBounds = wholeRange{1, maxNetworkShare}
	maxKeysBounds      = wholeRange{1, maxMaxKeys}
)

// check refuses n outside r, saying what is allowed.
func (r wholeRange) check(n int64) error {
	if n < r.lo || n > r.hi {
		return r.refusal()
	}
	return nil
}

// checkSet is check for a setting whose zero means its default.
func (r wholeRange) checkSet(n int64) error {
	if n == 0 {
		return nil
	}
	return r.check(n)
}

// parse reads a whole number within r.
func (r wholeRange) parse(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, r.refusal()
	}
	return n, r.check(n)
}

func (r wholeRange) refusal() error {
	return fmt.Errorf("must be a whole number from %d to %d", r.lo, r.hi)
}

// checkAboveZero refuses x unless it is above 0 and at most hi: a ratio
// (hi 1), a penalty or a recovery.
func checkAboveZero(x, hi float64) error {
	if !(x > 0 && x <= hi) {
		return fmt.Errorf("must be a number above 0 and at most %g", hi)
	}
	return nil
}

// parseAboveZero reads a number above 0 and at most hi.
func parseAboveZero(s string, hi float64) (float64, error) {
	x, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, checkAboveZero(0, hi)
	}
	return x, checkAboveZero(x, hi)
}

// Bounds of lease TTLs and of the snapshot interval.
const (
	minLeaseTTL         = time.Second
	minSnapshotInterval = time.Second
)

// checkLeaseTTL refuses a lease zone's TTL out of its bounds.
func checkLeaseTTL(d time.Duration) error {
	switch {
	case d < minLeaseTTL:
		return fmt.Errorf("must be at least %s", minLeaseTTL)
	case d > limiter.MaxWindow:
		return fmt.Errorf("must be at most %s", limiter.MaxWindow)
	}
	return nil
}

// checkSnapshotInterval refuses a snapshot interval too short to write.
func checkSnapshotInterval(d time.Duration) error {
	if d < minSnapshotInterval {
		return fmt.Errorf("must be at least %s", minSnapshotInterval)
	}
	return nil
}

// validateWindow refuses a limit's window out of the limiter's bounds.
func validateWindow(d time.Duration) error {
	if d < time.Millisecond || d > limiter.MaxWindow {
		return fmt.Errorf("must be from 1ms to %s", limiter.MaxWindow)
	}
	return nil
}

// checkSecret refuses secret #n (from 1), as configured or with its
// placeholders replaced, if it is too short to sign or key anything.
func checkSecret(n int, secret string) error {
	if len(secret) < fingerprint.MinSecretLen {
		return fmt.Errorf("secret #%d is %d bytes; it must be at least %d (e.g. openssl rand -base64 48)", n, len(secret), fingerprint.MinSecretLen)
	}
	return nil
}
