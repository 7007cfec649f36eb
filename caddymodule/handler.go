package caddymodule

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/limiter"
)

func init() {
	caddy.RegisterModule(new(Handler))
}

// Handler is the tollgate middleware: it counts each request in every zone
// that matches it and lets it through only if none of them is exhausted. A
// denied request spends nothing in any zone.
//
// Allowed requests carry the RateLimit-Policy and RateLimit headers of the
// IETF draft; denied ones get a 429 error (shape it with handle_errors) with
// the same headers and Retry-After. Each decision sets placeholders:
//
//	{http.tollgate.decision}     allow, deny or dry_run_deny
//	{http.tollgate.zone}         the zone that denied, or the one with the least left
//	{http.tollgate.remaining}    requests left in that zone
//	{http.tollgate.reset}        seconds until that zone's quota is restored
//	{http.tollgate.retry_after}  seconds to wait, when denied
//	{http.tollgate.client_id}    the client ID: s:<session> or f:<fingerprint digest>
//	{http.tollgate.client_kind}  session or fingerprint
//	{http.tollgate.ip_pressure}  distinct cookie-less fingerprints lately seen from the client's network
//	{http.tollgate.squeezed}     whether that network's cookie-less limits are squeezed
//	{http.tollgate.source}       who decided: owner, peer, blocked_cache or fallback
//	{http.tollgate.tier}         the request's tier, as tier_from rendered it
//	{http.tollgate.reputation}   the client's reputation score after the decision
//
// A zone without a key counts by client ID. Clients without a valid session
// cookie are given one (see the app's cookie settings). Each denial is
// logged and emits the event tollgate_denied.
type Handler struct {
	// Zones are the limits this handler applies, in order.
	Zones []*Zone `json:"zones,omitempty"`

	// DryRun counts requests, sets headers and placeholders and logs
	// denials, but never denies: for trying out limits on live traffic.
	DryRun bool `json:"dry_run,omitempty"`

	// TierFrom is where a request's tier comes from: text with
	// placeholders, e.g. {http.request.header.X-User-Tier} set by an auth
	// layer in front. Zones with tier limits use the request's tier's; a
	// tier no zone knows gets the zone's own limit. Default: no tiers.
	TierFrom string `json:"tier_from,omitempty"`

	// Headers says which responses carry the RateLimit-Policy and RateLimit
	// headers: "always" (default; every response a zone counted), "denied"
	// (429s only, for sites that would rather not publish their limits to
	// clients in good standing) or "off". Retry-After is always set on a 429.
	Headers string `json:"headers,omitempty"`

	ctx       caddy.Context
	app       *App
	node      *cluster.Node
	logger    *zap.Logger
	events    *caddyevents.App
	policyAll string // RateLimit-Policy when every zone matches
}

// CaddyModule returns the Caddy module information.
func (*Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.tollgate",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision connects the handler to the tollgate app and prepares its zones.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.ctx = ctx
	h.logger = ctx.Logger()
	appIface, err := ctx.App("tollgate")
	if err != nil {
		return fmt.Errorf("loading tollgate app: %w", err)
	}
	app := appIface.(*App)
	h.app = app
	h.node = app.node
	eventsIface, err := ctx.App("events")
	if err != nil {
		return fmt.Errorf("loading events app: %w", err)
	}
	h.events = eventsIface.(*caddyevents.App)

	if err := h.Validate(); err != nil {
		return err
	}
	policies := make([]string, 0, len(h.Zones))
	for _, z := range h.Zones {
		if err := z.provision(ctx, app); err != nil {
			return err
		}
		if z.policy != "" {
			policies = append(policies, z.policy)
		}
	}
	h.policyAll = strings.Join(policies, ", ")
	return nil
}

// The values of Handler.Headers.
const (
	headersAlways = "always"
	headersDenied = "denied"
	headersOff    = "off"
)

// Validate rejects zones that cannot work, naming the zone and the value.
func (h *Handler) Validate() error {
	switch h.Headers {
	case "", headersAlways, headersDenied, headersOff:
	default:
		return fmt.Errorf("tollgate: headers %q: must be always, denied or off", h.Headers)
	}
	if len(h.Zones) == 0 {
		return fmt.Errorf("tollgate: no zone configured; add at least one `zone <name> { limit <N> <window> }`")
	}
	seen := make(map[string]bool, len(h.Zones))
	for _, z := range h.Zones {
		if z == nil {
			return fmt.Errorf("tollgate: empty zone")
		}
		if len(z.Tiers) > 0 && h.TierFrom == "" {
			return fmt.Errorf("tollgate: zone %q sets tier limits, but the handler has no tier_from to tell a request's tier", z.Name)
		}
		if err := z.validate(); err != nil {
			return fmt.Errorf("tollgate: %w", err)
		}
		if seen[z.Name] {
			return fmt.Errorf("tollgate: zone %q is declared twice; zone names must be unique within a handler", z.Name)
		}
		seen[z.Name] = true
	}
	return nil
}

// maxInline is the number of matching zones handled without allocating.
const maxInline = 8

// scratch is the working memory of one decision. It comes from a pool rather
// than the stack: Caddy's handler chains run deep, and a large frame here
// makes goroutine stacks grow (and, after each GC shrinks them, grow again).
type scratch struct {
	zones [maxInline]*Zone
	reqs  [maxInline]limiter.Request
	res   [maxInline]limiter.Result
	text  [128]byte
	id    [fingerprint.IDLen]byte
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// ServeHTTP counts r in its zones and passes it on or denies it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	sc := scratchPool.Get().(*scratch)
	v, held, err := h.decide(w, r, sc)
	scratchPool.Put(sc)
	if err != nil {
		return err
	}
	if v == nil {
		return next.ServeHTTP(w, r)
	}
	if v.decision == decisionDeny {
		return caddyhttp.Error(http.StatusTooManyRequests, v.zone.denyError)
	}
	if held != nil {
		held.hold()
		defer held.release()
	}
	if v.issuer != nil {
		v.issuer.ResponseWriterWrapper = &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}
		return next.ServeHTTP(v.issuer, r)
	}
	return next.ServeHTTP(w, r)
}

// decide counts r in the zones that match it, sets the response headers and
// returns the request's verdict, or nil if no zone matched, and the leases
// it holds in lease zones, if any.
func (h *Handler) decide(w http.ResponseWriter, r *http.Request, sc *scratch) (*verdict, *heldLeases, error) {
	req := request{r: r}
	req.vars, _ = r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)

	zones := sc.zones[:0]
	for _, z := range h.Zones {
		ok, err := z.match(r)
		if err != nil {
			return nil, nil, caddyhttp.Error(http.StatusInternalServerError, fmt.Errorf("zone %q: matching request: %w", z.Name, err))
		}
		if ok {
			zones = append(zones, z)
		}
	}
	if len(zones) == 0 {
		return nil, nil, nil
	}

	now := time.Now()
	app := h.app
	id := app.identifier.Identify(r, req.clientIP(), ja4Of(r), now)
	if id.Cookie != fingerprint.CookieAbsent {
		cookieCounters()[id.Cookie].Inc()
	}
	reading := fingerprint.Reading{Factor: 1}
	if id.Kind == fingerprint.KindFingerprint && app.pressure != nil {
		reading = app.pressure.Observe(id.Network, id.Fingerprint, now)
	}
	clientKey := app.hasher.Sum64Bytes(id.AppendID(sc.id[:0]))
	tier := ""
	if h.TierFrom != "" {
		tier = req.replacer().ReplaceAll(h.TierFrom, "")
	}
	tiers := app.state.tiers.load()

	reqs := sc.reqs[:0]
	leases := 0
	var named [maxInline]bool
	for _, z := range zones {
		limit := z.limitFor(tier, tiers)
		r := limiter.Request{
			Key:  limiter.ZoneKey(z.hashKey(app.hasher, &req, clientKey), z.seed),
			Zone: z.seed,
		}
		if z.isLease() {
			r.LeaseID, named[min(len(reqs), maxInline-1)] = z.leaseID(app.hasher, &req)
			leases++
		} else if reading.Factor != 1 {
			limit = limit.Scale(reading.Factor)
		}
		r.Limit = limit
		reqs = append(reqs, r)
	}
	res := sc.res[:len(reqs)]
	if len(reqs) > maxInline {
		res = make([]limiter.Result, len(reqs))
	}
	d := h.node.TakeFor(now, app.reputationKey(clientKey), reqs, res)
	allowed, source, score := d.Allowed, d.Source, d.Score
	if !d.ScoreKnown {
		score = -1 // the verdict's "not known"
	}

	v := req.verdict()
	v.identity, v.pressure, v.issuer, v.source = id, reading, nil, source
	v.tier, v.score = tier, score
	if h.Headers == "" || h.Headers == headersAlways || (h.Headers == headersDenied && !allowed) {
		h.setHeaders(w.Header(), v, sc.text[:0], zones, res)
	}
	i := decidingZone(res)
	v.zone = zones[i]
	v.remaining = max(0, res[i].Remaining)
	v.reset = headerSeconds(res[i].Reset)
	v.retryAfter = 0
	if allowed {
		v.decision = decisionAllow
		v.zone.counters.inc(v.decision, source)
		h.issueCookie(w, r, v, now)
		return v, h.holdLeases(leases, zones, reqs, named[:], source), nil
	}

	v.retryAfter = headerSeconds(res[i].RetryAfter)
	if v.zone.isLease() && v.zone.Lease == "" {
		v.retryAfter = 1 // a request's own lease frees when any request ends
	}
	h.reportDenial(v, reqs[i].Key, clientKey)
	if h.DryRun {
		v.decision = decisionDryRunDeny
		v.zone.counters.inc(v.decision, source)
		return v, nil, nil
	}
	v.decision = decisionDeny
	v.zone.counters.inc(v.decision, source)
	w.Header().Set("Retry-After", strconv.FormatInt(v.retryAfter, 10))
	return v, nil, nil
}

// holdLeases collects the leases an allowed request claimed, copied out of
// the scratch memory they were built in.
func (h *Handler) holdLeases(n int, zones []*Zone, reqs []limiter.Request, named []bool, src cluster.Source) *heldLeases {
	if n == 0 {
		return nil
	}
	held := &heldLeases{node: h.node, src: src}
	for i, z := range zones {
		if z.isLease() {
			held.reqs = append(held.reqs, reqs[i])
			held.named = append(held.named, i < len(named) && named[i])
		}
	}
	return held
}

// denialReason says why a request was denied, from who decided.
func denialReason(src cluster.Source) string {
	switch src {
	case cluster.SourceBlockedCache:
		return "known_blocked"
	case cluster.SourceFallback:
		return "fallback"
	}
	return "limit"
}

// decidingZone returns the index of the zone that speaks for a decision:
// the denying zone that asks for the longest wait, or, when all allowed,
// the zone with the fewest requests left.
func decidingZone(res []limiter.Result) int {
	best := 0
	for i := 1; i < len(res); i++ {
		a, b := &res[i], &res[best]
		switch {
		case a.Allowed != b.Allowed:
			if !a.Allowed {
				best = i
			}
		case !a.Allowed:
			if a.RetryAfter > b.RetryAfter {
				best = i
			}
		case a.Remaining >= 0 && (b.Remaining < 0 || a.Remaining < b.Remaining):
			best = i // unknown counts (-1, from a cache or an open fallback) rank last
		}
	}
	return best
}

// setHeaders writes the RateLimit-Policy and RateLimit headers
// (draft-ietf-httpapi-ratelimit-headers) for the zones that counted r.
func (h *Handler) setHeaders(hdr http.Header, v *verdict, buf []byte, zones []*Zone, res []limiter.Result) {
	policy := h.policyAll
	if len(zones) != len(h.Zones) {
		parts := make([]string, 0, len(zones))
		for _, z := range zones {
			if z.policy != "" {
				parts = append(parts, z.policy)
			}
		}
		policy = strings.Join(parts, ", ")
	}
	if policy == "" {
		return // only lease zones: the RateLimit headers describe rates
	}
	for i, z := range zones {
		if res[i].Remaining < 0 || z.policy == "" {
			continue // not known (this zone was not asked), or a lease zone
		}
		if len(buf) > 0 {
			buf = append(buf, ", "...)
		}
		buf = append(buf, z.quoted...)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, max(0, res[i].Remaining), 10)
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, headerSeconds(res[i].Reset), 10)
	}
	v.headers[0], v.headers[1] = policy, string(buf)
	hdr["Ratelimit-Policy"] = v.headers[0:1:1]
	hdr["Ratelimit"] = v.headers[1:2:2]
}

// reportDenial logs a denial and emits the tollgate_denied event. Neither
// carries the key or the client ID: the log has keyed hashes only.
func (h *Handler) reportDenial(v *verdict, key limiter.Key, clientKey uint64) {
	if ce := h.logger.Check(zapcore.InfoLevel, "request denied"); ce != nil {
		ce.Write(
			zap.String("zone", v.zone.Name),
			zap.String("reason", denialReason(v.source)),
			zap.String("client_hash", strconv.FormatUint(clientKey, 16)),
			zap.String("key_hash", strconv.FormatUint(uint64(key), 16)),
			zap.String("client_kind", v.identity.Kind.String()),
			zap.String("source", v.source.String()),
			zap.Int64("retry_after", v.retryAfter),
			zap.Bool("dry_run", h.DryRun),
		)
	}
	h.events.Emit(h.ctx, "tollgate_denied", map[string]any{
		"zone":        v.zone.Name,
		"retry_after": v.retryAfter,
		"source":      v.source.String(),
		"dry_run":     h.DryRun,
	})
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
