package caddymodule

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/limiter"
)

// Zone is one limit of a tollgate handler: which requests it counts
// (Match), whom it counts them for (Key) and how many it lets through
// (Limit per Window, or Concurrent holders at once).
type Zone struct {
	// Name identifies the zone in headers, placeholders, logs and metrics.
	// Letters, digits, '_', '-' and '.'; unique within a handler.
	Name string `json:"name"`

	// Limit is the number of requests a key may make per Window
	// (1 to 2147483647). A zone has a Limit or Concurrent, not both.
	Limit int64 `json:"limit,omitempty"`

	// Window is the period Limit applies to (1ms to 366 days).
	Window caddy.Duration `json:"window,omitempty"`

	// Concurrent makes this a lease zone: at most this many requests (or
	// named leases) per key are held at once (1 to 256). A request holds its
	// lease until its response ends (a WebSocket, until it closes), unless
	// Lease names it.
	Concurrent int64 `json:"concurrent,omitempty"`

	// Lease names a lease zone's leases: text with placeholders, e.g.
	// {http.request.header.X-Room-Id}. A named lease is held across
	// requests until it expires TTL after the last request that named it;
	// naming a held lease again is always allowed, even at the cap. Default:
	// one lease per request, released when its response ends.
	Lease string `json:"lease,omitempty"`

	// TTL is how long a lease lives unless renewed: named leases by the
	// requests that name them, a request's own lease while the request is
	// alive. Default: 15m.
	TTL caddy.Duration `json:"ttl,omitempty"`

	// Tiers overrides Limit (or Concurrent) for the tier a request is in
	// (see the handler's TierFrom): tier name → limit. Requests of another
	// tier, or none, get Limit. Tier limits can be changed at run time
	// through the admin API (PUT /tollgate/tiers), which wins until cleared.
	Tiers map[string]int64 `json:"tiers,omitempty"`

	// Key is what requests are counted by: text with at least one
	// placeholder, rendered per request, or "global" for one budget shared
	// by every request. Requests whose key renders the same share a budget;
	// a request whose key has a placeholder that renders empty (a user
	// before authentication, a missing header) is counted by the client ID
	// instead, counted in tollgate_empty_keys_total. Default:
	// the client ID ({http.tollgate.client_id}): the session of a valid
	// cookie, else the request fingerprint blended with the IP network.
	Key string `json:"key,omitempty"`

	// NetworkShare overrides the app's network_share for this zone: how
	// many times Limit one IP network may spend on requests without a
	// valid session cookie. Only rate zones keyed by the client ID have a
	// network budget. Default: the app's (4).
	NetworkShare int64 `json:"network_share,omitempty"`

	// Algorithm is sliding_window (default), fixed_window or token_bucket.
	Algorithm string `json:"algorithm,omitempty"`

	// Burst is the bucket size of a token_bucket zone: how many requests
	// may arrive at once; refilled at Limit per Window. Default: Limit.
	// Only allowed with token_bucket.
	Burst int64 `json:"burst,omitempty"`

	// MatchRaw selects the requests this zone counts. Default: all.
	MatchRaw caddy.ModuleMap `json:"match,omitempty" caddy:"namespace=http.matchers"`

	// Shared makes every handler that declares a shared zone of this name
	// count in one place; every declaration must have the same settings
	// (limit, window, algorithm, burst, concurrent, ttl, lease, key, tiers)
	// or the config is refused. By default a zone whose name is unique in
	// the config is known by its name, and zones of the same name in
	// several handlers are told apart by where each handler is (see
	// docs/configuration.md, "Zone identity").
	Shared bool `json:"shared,omitempty"`

	// DryRun makes this zone a trial: it counts and reports what it would
	// have done (the dry_run_deny decision, placeholders, log, metric) but
	// never denies, is not announced in the RateLimit headers, and has no
	// other consequence: no reputation penalty,
	// no blocked-cache entry, no lease claimed, no change to whether a
	// session cookie is issued. The handler's DryRun makes every zone a
	// trial. Default: enforced.
	DryRun bool `json:"dry_run,omitempty"`

	// CountResponse makes the zone count only requests whose response
	// matches: status codes or classes (401, 4xx as 4) and headers, as
	// reverse_proxy's response matchers take them. A request still takes
	// its unit before it is served, so an exhausted key is denied up
	// front and concurrent requests never exceed the limit; the unit is
	// given back once the response does not match. A request whose
	// upstream fails, or whose client goes away, is settled by the status
	// Caddy records for it. Default: every request counts.
	CountResponse *caddyhttp.ResponseMatcher `json:"count_response,omitempty"`

	// Cost is what one request spends: a whole number from 0 to the
	// limit, or text with placeholders that renders one, e.g.
	// {http.request.header.X-Cost}. A request that costs 0 is not counted
	// in the zone; one that renders anything else than a whole number of
	// at least 0 is logged and costs 1; one that costs more than the limit
	// is denied. Default: 1.
	Cost string `json:"cost,omitempty"`

	// CostHeader names a response header in which the upstream reports
	// what the request really cost, a whole number: the difference from
	// Cost is given back or charged once the response is written (a
	// charge beyond what remains leaves the key exhausted, owing at most
	// that charge). The header is removed from the response. Default: the
	// cost stands as taken.
	CostHeader string `json:"cost_header,omitempty"`

	// Ban keeps a key out of this zone for this long once the zone has
	// denied it, even after its window resets: every request of the key in
	// the zone is denied, with Retry-After the ban's remaining time. Bans
	// are kept by the key's owner, so they hold across the cluster and
	// across reloads; DELETE /tollgate/clients/{id} lifts them. From 1s to
	// 366 days. Default: no ban.
	Ban caddy.Duration `json:"ban,omitempty"`

	// Delay makes a request that would be denied wait for its slot, if
	// one frees up within this long, instead of being denied: the slot is
	// booked at once, so waiting requests never outnumber what the limit
	// admits. A waiting request whose client goes away gives its slot
	// back. From 1ms to 1h. Default: denied at once.
	Delay caddy.Duration `json:"delay,omitempty"`

	// DelayQueue caps the requests of one key waiting at once on this
	// node (1 to 100000); past it, requests are denied at once. Default:
	// 100. Only with Delay.
	DelayQueue int64 `json:"delay_queue,omitempty"`

	// Calendar aligns the zone's windows to the calendar instead of fixed
	// lengths: day (midnight to midnight), week (ISO: from Monday) or
	// month (from the 1st), in WindowTimezone; Window is then left empty.
	// The Caddyfile's 1d, 1w and 1mo windows set it. Only for
	// sliding_window and fixed_window.
	Calendar string `json:"calendar,omitempty"`

	// WindowTimezone is the IANA time zone of calendar windows, e.g.
	// Europe/Berlin. Default: UTC. Only with Calendar.
	WindowTimezone string `json:"window_timezone,omitempty"`

	matchers   caddyhttp.MatcherSet
	limit      limiter.Limit
	scope      string // the zone's identity: its name, and its place if not unique
	seed       uint64 // the zone's identity, hashed
	keyFixed   bool   // Key has no placeholders
	keyHash    uint64 // hash of Key when keyFixed
	quoted     string // Name as a structured-field string
	policy     string // this zone's RateLimit-Policy list member
	denyError  error
	counters   *decisionCounters
	denials    *denialCounters
	emptyKey   *emptyKeyReport
	leaseFixed bool     // Lease has no placeholders
	handler    *Handler // the handler that declares the zone
	outcome    zoneOutcome
}

// Defaults of lease zones.
const (
	defaultLeaseTTL = 15 * time.Minute
	maxConcurrent   = 256
)

// isLease reports whether z caps concurrent holders rather than a rate.
func (z *Zone) isLease() bool { return z.Concurrent > 0 }

// provision prepares z for requests. Caddy validates after provisioning:
// nothing here may fail or panic on a value validate would refuse.
func (z *Zone) provision(ctx caddy.Context, h limiter.Hasher) error {
	if z.MatchRaw != nil {
		mods, err := ctx.LoadModule(z, "MatchRaw")
		if err != nil {
			return fmt.Errorf("zone %q: loading matchers: %w", z.Name, err)
		}
		for _, m := range mods.(map[string]any) {
			z.matchers = append(z.matchers, m)
		}
	}
	z.prepare(h)
	z.emptyKey = &emptyKeyReport{logger: ctx.Logger()}
	z.outcome.badCost = &throttledLog{logger: ctx.Logger(), msg: "a zone's cost rendered something else than a whole number of at least 0; such requests cost 1 (logged at most once a minute)"}
	return nil
}

// prepare derives what requests need from z's settings: its limit, its
// key's hash under hasher h and its header texts. Its identity is set
// apart, by setScope, once the whole config is known.
func (z *Zone) prepare(h limiter.Hasher) {
	alg, _ := limiter.ParseAlgorithm(z.Algorithm)
	z.limit = limiter.Limit{
		Algorithm: alg,
		Quota:     z.Limit,
		Window:    time.Duration(z.Window),
		Burst:     z.Burst,
		Calendar:  z.calendar(),
	}
	if z.limit.Calendar != nil {
		z.limit.Window = z.limit.Calendar.Unit.Nominal()
	}
	if z.isLease() {
		ttl := time.Duration(z.TTL)
		if ttl == 0 {
			ttl = defaultLeaseTTL
		}
		z.limit = limiter.Limit{Algorithm: limiter.Concurrency, Quota: z.Concurrent, Window: ttl}
	}
	if z.Key == KeyGlobal {
		z.keyFixed = true
		z.keyHash = h.Sum64(z.Key)
	}
	z.leaseFixed = !strings.Contains(z.Lease, "{")
	z.quoted = strconv.Quote(z.Name) // names are validated to need no escapes
	z.policy = fmt.Sprintf("%s;q=%d;w=%d", z.quoted, z.Limit, headerSeconds(z.limit.Window))
	// Zone names need no quoting, and the message none either: it goes
	// into JSON strings built in handle_errors as it is.
	z.denyError = fmt.Errorf("rate limit of zone %s exceeded", z.Name)
	if z.isLease() {
		z.policy = "" // RateLimit headers describe rates, not slots
		z.denyError = fmt.Errorf("concurrency limit of zone %s reached: all slots held", z.Name)
	}
	z.prepareOutcome(h)
}

// setScope gives z its identity: the counters of zones with the same
// identity are the same counters.
func (z *Zone) setScope(h limiter.Hasher, scope string) {
	z.scope = scope
	z.seed = h.Zone(scope)
	z.counters = newDecisionCounters(z.Name, scope)
	z.denials = newDenialCounters(z.Name, scope)
	if z.emptyKey == nil {
		z.emptyKey = &emptyKeyReport{logger: nopLogger}
	}
	initMetrics()
	z.emptyKey.counter = metrics.emptyKeys.WithLabelValues(z.Name, scope)
	z.outcome.banSeed = banSeedOf(h, scope)
	if z.outcome.delay != nil {
		initOutcomeMetrics()
		z.outcome.delay.waiting = outcomeMetrics.waiting.WithLabelValues(z.Name, scope)
	}
}

// settings renders what a shared zone's declarations must agree on; dry
// is whether this declaration is a trial (its own dry_run or its
// handler's): a trial beside an enforced declaration would spend the
// budget that one enforces.
func (z *Zone) settings(dry bool) string {
	var b strings.Builder
	if z.isLease() {
		fmt.Fprintf(&b, "concurrent %d, ttl %s", z.Concurrent, z.limit.Window)
		if z.Lease != "" {
			fmt.Fprintf(&b, ", lease %q", z.Lease)
		}
	} else {
		fmt.Fprintf(&b, "limit %d %s, %s", z.Limit, time.Duration(z.Window), z.limit.Algorithm)
		if z.Burst != 0 && z.Burst != z.Limit { // the default burst is the limit
			fmt.Fprintf(&b, ", burst %d", z.Burst)
		}
	}
	if z.Calendar != "" {
		fmt.Fprintf(&b, ", calendar %s %s", z.Calendar, z.WindowTimezone)
	}
	if z.CountResponse != nil {
		fmt.Fprintf(&b, ", count_response %v %v", z.CountResponse.StatusCode, z.CountResponse.Headers)
	}
	if z.Cost != "" || z.CostHeader != "" {
		fmt.Fprintf(&b, ", cost %q %q", z.Cost, z.CostHeader)
	}
	if z.Ban != 0 {
		fmt.Fprintf(&b, ", ban %s", time.Duration(z.Ban))
	}
	if z.Delay != 0 {
		fmt.Fprintf(&b, ", delay %s %d", time.Duration(z.Delay), z.DelayQueue)
	}
	if dry {
		b.WriteString(", dry_run")
	}
	if z.NetworkShare != 0 {
		fmt.Fprintf(&b, ", network_share %d", z.NetworkShare)
	}
	if z.Key != "" {
		fmt.Fprintf(&b, ", key %q", z.Key)
	}
	if len(z.Tiers) > 0 {
		tiers := make([]string, 0, len(z.Tiers))
		for t, n := range z.Tiers {
			tiers = append(tiers, t+" "+strconv.FormatInt(n, 10))
		}
		slices.Sort(tiers)
		fmt.Fprintf(&b, ", tiers %s", strings.Join(tiers, ", "))
	}
	return b.String()
}

// validate reports the first thing wrong with z, naming the directive.
func (z *Zone) validate() error {
	if err := validateZoneName(z.Name); err != nil {
		return err
	}
	if err := validateKey(z.Name, z.Key); err != nil {
		return err
	}
	for tier, n := range z.Tiers {
		if err := validateTierName(tier); err != nil {
			return fmt.Errorf("zone %q: %v", z.Name, err)
		}
		if tier == defaultTier {
			return fmt.Errorf("zone %q: tier default: %q is the zone's own limit (limit or concurrent); set it there, or at run time with PUT /tollgate/tiers", z.Name, defaultTier)
		}
		if err := z.validateTierLimit(n); err != nil {
			return fmt.Errorf("zone %q: tier %s %v", z.Name, tier, err)
		}
	}
	if z.Concurrent != 0 {
		ttl := time.Duration(z.TTL)
		if err := concurrentBounds.check(z.Concurrent); err != nil {
			return fmt.Errorf("zone %q: concurrent %d: %w", z.Name, z.Concurrent, err)
		}
		switch {
		case z.Limit != 0 || z.Window != 0:
			return fmt.Errorf("zone %q: a zone has either limit or concurrent, not both", z.Name)
		case z.Algorithm != "" || z.Burst != 0:
			return fmt.Errorf("zone %q: algorithm and burst are for limit zones, not concurrent ones", z.Name)
		}
		if ttl != 0 {
			if err := checkLeaseTTL(ttl); err != nil {
				return fmt.Errorf("zone %q: ttl %s: %w", z.Name, ttl, err)
			}
		}
		if set := z.outcomeSettings(); set != "" {
			return fmt.Errorf("zone %q: %s is for limit zones, not concurrent ones", z.Name, set)
		}
		return nil
	}
	if err := validateNetworkShare("network_share", z.NetworkShare); err != nil {
		return fmt.Errorf("zone %q: %v", z.Name, err)
	}
	if z.Lease != "" || z.TTL != 0 {
		return fmt.Errorf("zone %q: lease and ttl are for concurrent zones", z.Name)
	}
	if err := quotaBounds.check(z.Limit); err != nil {
		return fmt.Errorf("zone %q: limit %d: %w", z.Name, z.Limit, err)
	}
	alg, err := limiter.ParseAlgorithm(z.Algorithm)
	if err != nil {
		return fmt.Errorf("zone %q: algorithm: %v", z.Name, err)
	}
	if err := z.validateWindows(alg); err != nil {
		return err
	}
	if z.Burst != 0 && alg != limiter.TokenBucket {
		return fmt.Errorf("zone %q: burst is only allowed with algorithm token_bucket, not %s", z.Name, alg)
	}
	if err := quotaBounds.checkSet(z.Burst); err != nil {
		return fmt.Errorf("zone %q: burst %d: %w", z.Name, z.Burst, err)
	}
	return z.validateOutcome()
}

// validateTierLimit checks a tier's limit for this zone's kind.
func (z *Zone) validateTierLimit(n int64) error {
	bounds := quotaBounds
	if z.Concurrent != 0 {
		bounds = concurrentBounds
	}
	if err := bounds.check(n); err != nil {
		return fmt.Errorf("%d: %w", n, err)
	}
	return nil
}

func validateTierName(name string) error { return validateName("tier", name) }

func validateZoneName(name string) error { return validateName("zone", name) }

// validateName checks the name of a zone or tier: letters, digits, '_',
// '-' and '.', so it needs no quoting in headers, logs or metrics.
func validateName(what, name string) error {
	if name == "" {
		return fmt.Errorf("%s without a name", what)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("%s name %q: only letters, digits, '_', '-' and '.' are allowed", what, name)
		}
	}
	return nil
}

// match reports whether z counts r.
func (z *Zone) match(r *http.Request) (bool, error) {
	if len(z.matchers) == 0 {
		return true, nil
	}
	return z.matchers.MatchWithError(r)
}

// defaultTier names, in the run-time tier table, the limit of requests
// with no tier or one the zone does not list: the zone's own limit until
// it is overridden. The Caddyfile cannot declare a tier of that name.
const defaultTier = adminapi.DefaultTier

// limitFor returns z's limit for a request of the given tier: the run-time
// override from the admin API, else the zone's tier setting, else the
// default tier's (its run-time override, else the zone's own limit).
func (z *Zone) limitFor(tier string, overrides *tierTable) limiter.Limit {
	if overrides == nil && (tier == "" || len(z.Tiers) == 0) {
		return z.limit
	}
	n, ok := int64(0), false
	if tier != "" && tier != defaultTier {
		n, ok = overrides.get(z.Name, tier)
		if !ok {
			n, ok = z.Tiers[tier]
		}
	}
	if !ok {
		n, ok = overrides.get(z.Name, defaultTier)
	}
	if !ok || n < 1 {
		return z.limit // every entry refuses n < 1; this keeps one that slipped through from any engine
	}
	l := z.limit
	l.Quota = n
	if l.Algorithm == limiter.TokenBucket && l.Burst != 0 {
		l.Burst = max(1, l.Burst*n/z.Limit) // the burst keeps its proportion
	}
	return l
}

// leaseID returns the lease a request claims in a lease zone, and whether
// it is named (held across requests) rather than the request's own.
func (z *Zone) leaseID(h limiter.Hasher, q *request) (uint64, bool) {
	if z.Lease == "" {
		return rand.Uint64() | 1, false // a request's own: unique is enough
	}
	name := z.Lease
	if !z.leaseFixed {
		name = q.replacer().ReplaceAll(z.Lease, "")
	}
	return h.Sum64(name) | 1, true
}

// keyOf returns the hash of the key a request is counted by in z, and
// whether the key rendered empty and fell back to the client ID (counted
// and logged); clientKey is the hash of the request's client ID, the
// default key. The handler renders each zone's key once per request and
// keeps it.
func (z *Zone) keyOf(h limiter.Hasher, q *request, clientKey uint64) (uint64, bool) {
	switch {
	case z.keyFixed:
		return z.keyHash, false
	case z.Key == "":
		return clientKey, false
	}
	if s, ok := z.renderKey(q); ok {
		return h.Sum64(s), false
	}
	return clientKey, true
}

// headerSeconds renders a duration as the whole seconds of the RateLimit
// headers, rounding up so that clients never come back too early.
func headerSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}
