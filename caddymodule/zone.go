package caddymodule

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/tollgate/tollgate/limiter"
)

// Zone is one rate limit of a tollgate handler: which requests it counts
// (Match), whom it counts them for (Key) and how many it lets through
// (Limit per Window).
type Zone struct {
	// Name identifies the zone in headers, placeholders, logs and metrics.
	// Letters, digits, '_', '-' and '.'; unique within a handler.
	Name string `json:"name"`

	// Limit is the number of requests a key may make per Window
	// (1 to 2147483647). Required.
	Limit int64 `json:"limit"`

	// Window is the period Limit applies to (1ms to 366 days). Required.
	Window caddy.Duration `json:"window"`

	// Key is what requests are counted by: text with placeholders, rendered
	// per request. Requests whose key renders the same share a budget; a
	// key that renders empty puts all such requests in one budget. Default:
	// the client ID ({http.tollgate.client_id}): the session of a valid
	// cookie, else the request fingerprint blended with the IP network.
	Key string `json:"key,omitempty"`

	// Algorithm is sliding_window (default), fixed_window or token_bucket.
	Algorithm string `json:"algorithm,omitempty"`

	// Burst is the bucket size of a token_bucket zone: how many requests
	// may arrive at once; refilled at Limit per Window. Default: Limit.
	// Only allowed with token_bucket.
	Burst int64 `json:"burst,omitempty"`

	// MatchRaw selects the requests this zone counts. Default: all.
	MatchRaw caddy.ModuleMap `json:"match,omitempty" caddy:"namespace=http.matchers"`

	// Shared makes every handler that declares a shared zone of this name
	// count in one place. By default, zones are scoped to their handler.
	Shared bool `json:"shared,omitempty"`

	matchers  caddyhttp.MatcherSet
	limit     limiter.Limit
	scope     string // the zone's identity: its name, and #n unless shared
	seed      uint64 // the zone's identity, hashed
	keyFixed  bool   // Key has no placeholders
	keyHash   uint64 // hash of Key when keyFixed
	quoted    string // Name as a structured-field string
	policy    string // this zone's RateLimit-Policy list member
	denyError error
	counters  *decisionCounters
}

// provision prepares z for requests. It expects validate to pass.
func (z *Zone) provision(ctx caddy.Context, app *App) error {
	if z.MatchRaw != nil {
		mods, err := ctx.LoadModule(z, "MatchRaw")
		if err != nil {
			return fmt.Errorf("zone %q: loading matchers: %w", z.Name, err)
		}
		for _, m := range mods.(map[string]any) {
			z.matchers = append(z.matchers, m)
		}
	}
	alg, _ := limiter.ParseAlgorithm(z.Algorithm)
	z.limit = limiter.Limit{
		Algorithm: alg,
		Quota:     z.Limit,
		Window:    time.Duration(z.Window),
		Burst:     z.Burst,
	}
	z.scope = app.zoneIdentity(z.Name, z.Shared)
	z.seed = app.hasher.Zone(z.scope)
	app.registerZone(z)
	if z.Key != "" && !strings.Contains(z.Key, "{") {
		z.keyFixed = true
		z.keyHash = app.hasher.Sum64(z.Key)
	}
	z.quoted = strconv.Quote(z.Name) // names are validated to need no escapes
	z.policy = fmt.Sprintf("%s;q=%d;w=%d", z.quoted, z.Limit, headerSeconds(z.limit.Window))
	z.denyError = fmt.Errorf("rate limit of zone %q exceeded", z.Name)
	z.counters = newDecisionCounters(z.Name)
	return nil
}

// validate reports the first thing wrong with z, naming the directive.
func (z *Zone) validate() error {
	if err := validateZoneName(z.Name); err != nil {
		return err
	}
	if z.Limit < 1 || z.Limit > limiter.MaxQuota {
		return fmt.Errorf("zone %q: limit %d: must be a whole number from 1 to %d", z.Name, z.Limit, int64(limiter.MaxQuota))
	}
	if err := validateWindow(time.Duration(z.Window)); err != nil {
		return fmt.Errorf("zone %q: limit window %s: %v", z.Name, time.Duration(z.Window), err)
	}
	alg, err := limiter.ParseAlgorithm(z.Algorithm)
	if err != nil {
		return fmt.Errorf("zone %q: algorithm: %v", z.Name, err)
	}
	if z.Burst != 0 && alg != limiter.TokenBucket {
		return fmt.Errorf("zone %q: burst is only allowed with algorithm token_bucket, not %s", z.Name, alg)
	}
	if z.Burst < 0 || z.Burst > limiter.MaxQuota {
		return fmt.Errorf("zone %q: burst %d: must be a whole number from 1 to %d", z.Name, z.Burst, int64(limiter.MaxQuota))
	}
	return nil
}

func validateZoneName(name string) error {
	if name == "" {
		return fmt.Errorf("zone without a name")
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("zone name %q: only letters, digits, '_', '-' and '.' are allowed", name)
		}
	}
	return nil
}

func validateWindow(d time.Duration) error {
	if d < time.Millisecond || d > limiter.MaxWindow {
		return fmt.Errorf("must be from 1ms to %s", limiter.MaxWindow)
	}
	return nil
}

// parseLimit parses the N of `limit <N> <window>`.
func parseLimit(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || n > limiter.MaxQuota {
		return 0, fmt.Errorf("%q must be a whole number from 1 to %d", s, int64(limiter.MaxQuota))
	}
	return n, nil
}

// parseWindow parses a window such as 30s, 1m or 1h.
func parseWindow(s string) (time.Duration, error) {
	d, err := parseDuration(s, 0)
	if err != nil {
		return 0, err
	}
	if err := validateWindow(d); err != nil {
		return 0, fmt.Errorf("%q %v", s, err)
	}
	return d, nil
}

// parseDuration parses a duration with a unit (30s, 1m, 1h, 1d), at least
// least long if that is positive.
func parseDuration(s string, least time.Duration) (time.Duration, error) {
	if s != "" && strings.Trim(s, "0123456789.") == "" {
		return 0, fmt.Errorf("%q needs a unit, e.g. 30s, 1m, 1h or 1d", s)
	}
	d, err := caddy.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (e.g. 30s, 1m, 1h or 1d)", s)
	}
	if least > 0 && d < least {
		return 0, fmt.Errorf("%q must be at least %s", s, least)
	}
	return d, nil
}

// match reports whether z counts r.
func (z *Zone) match(r *http.Request) (bool, error) {
	if len(z.matchers) == 0 {
		return true, nil
	}
	return z.matchers.MatchWithError(r)
}

// hashKey returns the hash of the key a request is counted by in z;
// clientKey is the hash of the request's client ID, the default key.
func (z *Zone) hashKey(h limiter.Hasher, q *request, clientKey uint64) uint64 {
	switch {
	case z.keyFixed:
		return z.keyHash
	case z.Key == "":
		return clientKey
	default:
		return h.Sum64(q.replacer().ReplaceAll(z.Key, ""))
	}
}

// headerSeconds renders a duration as the whole seconds of the RateLimit
// headers, rounding up so that clients never come back too early.
func headerSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}
