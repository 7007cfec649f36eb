package caddymodule

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/limiter"
)

// Handler is the tollgate middleware: it counts each request in every zone
// that matches it and lets it through only if none of them is exhausted. A
// denied request spends nothing in any zone.
//
// Allowed requests carry the RateLimit-Policy and RateLimit headers of the
// IETF draft, with the client's own limit in each enforced rate zone; denied
// ones get a 429 error (shape it with handle_errors) with
// the same headers and Retry-After. Each decision sets placeholders:
//
//	{http.tollgate.decision}     allow, deny or dry_run_deny (a dry-run zone would have denied)
//	{http.tollgate.zone}         the zone that denied, or the one with the least left
//	{http.tollgate.remaining}    requests left in that zone
//	{http.tollgate.reset}        seconds until that zone's quota is restored
//	{http.tollgate.retry_after}  seconds to wait, when denied
//	{http.tollgate.client_id}    the client ID: s:<session> or f:<fingerprint digest>
//	{http.tollgate.client_kind}  session or fingerprint
//	{http.tollgate.network}      n:<keyed hash of the client's IP network>, as the admin API takes it
//	{http.tollgate.ip_pressure}  distinct cookie-less fingerprints lately seen from the client's network
//	{http.tollgate.squeezed}     whether that network's cookie-less limits are squeezed
//	{http.tollgate.source}       who decided: owner, peer, blocked_cache, fallback, or decision (an operator's block)
//	{http.tollgate.tier}         the request's tier, as tier_from rendered it
//	{http.tollgate.reputation}   the client's reputation score after the decision; empty when not known
//
// A zone without a key counts by client ID. Clients without a valid session
// cookie are given one (see the app's cookie settings). Each denial is
// logged and emits the event tollgate_denied.
type Handler struct {
	// Zones are the limits this handler applies, in order.
	Zones []*Zone `json:"zones,omitempty"`

	// DryRun makes every zone a trial (see Zone.DryRun): requests are
	// counted, placeholders, logs and metrics say what would have
	// happened (the RateLimit headers are not sent), but nothing is denied and nothing else changes: no
	// reputation penalty, no blocked-cache entry, no lease claimed, no
	// session cookie issued, and no IP pressure observed (nor applied).
	// For trying out limits on live traffic.
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

	// FormMaxSize is how many bytes of a request body the form field
	// placeholders, {http.tollgate.form.<field>}, read at most (1 to
	// 16 MiB): a longer body has no fields, so a key made of them falls
	// back to the client ID. The body reaches the next handler unchanged.
	// Default: 64 KiB.
	FormMaxSize int64 `json:"form_max_size,omitempty"`

	ctx       caddy.Context
	ancestry  []caddy.Module // the modules that provisioned this one, outermost first
	app       *App
	decider   decider
	logger    *zap.Logger
	events    *caddyevents.App
	policyAll string // RateLimit-Policy when every zone matches
	extras    extra  // what zones ask beyond counting, checked once per request
}

// extra is a set of features that zones of a handler use, so that a
// handler whose zones use none of them does nothing more per request.
type extra uint8

const (
	extraBan      extra = 1 << iota // a zone bans
	extraAfter                      // a zone settles by the response (count_response, cost_header) or delays
	extraForm                       // a key, cost or tier uses a form field
	extraCalendar                   // a zone's windows follow the calendar: its policy's w changes
	extraCost                       // a zone's cost is not 1
)

// CaddyModule returns the Caddy module information.
func (*Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.tollgate", New: func() caddy.Module { return new(Handler) }}
}

// Provision connects the handler to the tollgate app and prepares its zones.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.ctx = ctx
	h.ancestry = ctx.Modules()
	h.logger = ctx.Logger()
	appIface, err := ctx.App("tollgate")
	if err != nil {
		return fmt.Errorf("loading tollgate app: %w", err)
	}
	app := appIface.(*App)
	h.app = app
	h.decider = app.decider
	eventsIface, err := ctx.App("events")
	if err != nil {
		return fmt.Errorf("loading events app: %w", err)
	}
	h.events = eventsIface.(*caddyevents.App)

	// Caddy calls Validate after Provision; nothing here needs valid values.
	policies := make([]string, 0, len(h.Zones))
	for _, z := range h.Zones {
		if z == nil { // JSON can say null; Validate would say so after a panic here
			return fmt.Errorf("tollgate: empty zone: every entry of zones needs a name and a limit")
		}
		if err := z.provision(ctx, app.hasher); err != nil {
			return err
		}
		if h.announces(z) {
			policies = append(policies, z.policy)
		}
		h.extras |= z.extras()
	}
	if usesForm(h.TierFrom) {
		h.extras |= extraForm
	}
	h.policyAll = strings.Join(policies, ", ")
	warnUnixListeners(httpAppOf(ctx), h.logger)
	return app.registerHandler(h, httpAppOf(ctx))
}

// httpAppOf returns the http app among the modules that provisioned ctx,
// the one whose routes hold the handler.
func httpAppOf(ctx caddy.Context) *caddyhttp.App {
	for _, m := range ctx.Modules() {
		if a, ok := m.(*caddyhttp.App); ok {
			return a
		}
	}
	return nil
}

// describe names a handler by its zones, for errors about a handler not
// yet placed in the config.
func (h *Handler) describe() string {
	names := make([]string, len(h.Zones))
	for i, z := range h.Zones {
		names[i] = z.Name
	}
	return "the handler of zones " + strings.Join(names, ", ")
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
		return settingError{"headers", fmt.Errorf("tollgate: headers %q: must be always, denied or off", h.Headers)}
	}
	if err := formSizeBounds.checkSet(h.FormMaxSize); err != nil {
		return settingError{"form_max_size", fmt.Errorf("tollgate: form_max_size %d: %w", h.FormMaxSize, err)}
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
			return settingError{z, fmt.Errorf("tollgate: zone %q sets tier limits, but the handler has no tier_from to tell a request's tier", z.Name)}
		}
		if err := z.validate(); err != nil {
			return settingError{z, fmt.Errorf("tollgate: %w", err)}
		}
		if seen[z.Name] {
			return settingError{z, fmt.Errorf("tollgate: zone %q is declared twice; zone names must be unique within a handler", z.Name)}
		}
		seen[z.Name] = true
	}
	return nil
}

// ServeHTTP counts r in its zones and passes it on or denies it, in three
// steps: build the limiter requests, decide them now, write the response.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	proof := h.app.sessions.answers(r)
	if proof { // counted by its zones like any request; answered instead of passed on
		next = caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			return h.app.sessions.answerProof(w, r, h.DryRun)
		})
	}
	q := request{r: r}
	q.vars, _ = r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	h.app.identify()
	sc := scratchPool.Get().(*scratch)
	now := time.Now()
	b, who, err := h.requests(now, &q, sc)
	if err == nil && b != nil {
		switch h.checkDecisions(w, &q, now, b, &who) {
		case decisionsBlocked:
			scratchPool.Put(sc)
			v := q.verdict()
			return deny(w, r, v, v.denial(), []string{v.zone.Name})
		case decisionsAllowed:
			b = nil // an operator let the key skip every zone that matched
		}
	}
	if err != nil || b == nil {
		scratchPool.Put(sc)
		if err != nil {
			return err
		}
		return next.ServeHTTP(w, r)
	}
	var o outcome
	banned := false
	if h.extras&extraBan != 0 {
		o, banned = h.checkBans(now, b)
	}
	if !banned {
		o = decideAt(now, h.decider, h.app.reputationKey(who.key), b)
	}
	v, held := h.respond(w, &q, now, b, &who, o, sc.text[:0])
	var after *afterward
	var violated []string
	if h.extras&(extraAfter|extraBan) != 0 {
		after = h.afterDecision(now, b, o)
	}
	if v.decision == decisionDeny {
		violated = deniedZones(b)
	}
	scratchPool.Put(sc)

	if v.decision == decisionDeny {
		return deny(w, r, v, v.denial(), violated)
	}
	if after != nil {
		defer after.free()
		if !after.wait(r.Context()) {
			if held != nil {
				held.hold()
				held.release()
			}
			return caddyhttp.Error(statusClientClosedRequest, r.Context().Err())
		}
		w = after.writer(w)
	}
	if held != nil {
		held.hold()
		defer held.release()
	}
	if !h.DryRun && !proof { // a trial issues no cookie; a proof earns its own
		if w, err = h.app.sessions.serve(w, r, v, now); w == nil || err != nil {
			return err // answered: the challenge page
		}
	}
	err = next.ServeHTTP(w, r)
	if after != nil {
		after.settle(err)
	}
	return err
}

// statusClientClosedRequest is the status Caddy records for a request
// whose client went away (nginx's 499).
const statusClientClosedRequest = 499

// requests builds what q asks of the limiter, in sc: the zones that match
// it and one limiter request per zone. It returns a nil batch if no zone
// matches.
func (h *Handler) requests(now time.Time, q *request, sc *scratch) (*batch, asker, error) {
	b := &sc.batch
	b.reset(sc)
	for _, z := range h.Zones {
		ok, err := z.match(q.r)
		if err != nil {
			return nil, asker{}, caddyhttp.Error(http.StatusInternalServerError, fmt.Errorf("zone %q: matching request: %w", z.Name, err))
		}
		if ok {
			b.zones = append(b.zones, z)
		}
	}
	if len(b.zones) == 0 {
		return nil, asker{}, nil
	}

	app := h.app
	var who asker
	who.identity = app.identifier.Identify(q.r, q.clientIP(), ja4Of(q.r), now)
	cookieCounters()[who.identity.Cookie].Inc()
	who.pressure = fingerprint.Reading{Factor: 1}
	if who.identity.Kind == fingerprint.KindFingerprint && app.pressure != nil && !h.DryRun {
		// A dry-run handler does not feed IP pressure, which squeezes
		// enforced zones everywhere.
		who.pressure = app.pressure.Observe(who.identity.Network, who.identity.Fingerprint, now)
	}
	who.key = app.hasher.Sum64Bytes(who.identity.AppendID(sc.id[:0]))
	if h.extras&extraForm != 0 {
		f := &formFields{r: q.r, limit: h.FormMaxSize}
		if f.limit == 0 {
			f.limit = defaultFormMaxSize
		}
		q.replacer().Map(f.replace)
	}
	if h.TierFrom != "" {
		who.tier = q.replacer().ReplaceAll(h.TierFrom, "")
	}
	tiers := app.state.tiers.load()

	for zi, z := range b.zones {
		base := z.limitFor(who.tier, tiers)
		limit, trial := base, h.DryRun || z.DryRun
		key, fellBack := z.keyOf(app.hasher, q, who.key)
		b.keys = append(b.keys, key)
		r := limiter.Request{
			Key:     limiter.ZoneKey(key, z.seed),
			Zone:    z.seed,
			Network: app.networkOf(z, &who, q),
		}
		named := false
		if z.isLease() {
			r.LeaseID, named = z.leaseID(app.hasher, q)
		} else if who.pressure.Factor != 1 {
			limit = limit.Scale(who.pressure.Factor)
		}
		r.Limit = limit
		if h.extras&(extraCost|extraAfter) != 0 && !z.isLease() {
			if r.Cost = z.costOf(q); r.Cost == 0 {
				continue // free in this zone: not counted
			}
			if z.outcome.delay != nil && !trial && z.outcome.delay.enter(r.Key) {
				r.MaxDelay = time.Duration(z.Delay)
			}
		}
		b.add(zi, r, named, trial)
		if who.identity.Kind == fingerprint.KindFingerprint && (z.countsNetwork() || fellBack && !z.isLease()) {
			h.addNetworkRequest(b, zi, z, base, &who, trial)
			b.reqs[len(b.reqs)-1].Cost = r.Cost
		}
	}
	if len(b.reqs) == 0 {
		return nil, who, nil // every zone's cost was 0
	}
	return b, who, nil
}

// respond writes what decision o means for the response: headers, the
// verdict behind the placeholders, metrics, the log and event of a denial.
// It returns the verdict and the leases an allowed request holds, if any;
// buf is scratch for the RateLimit header.
func (h *Handler) respond(w http.ResponseWriter, q *request, now time.Time, b *batch, who *asker, o outcome, buf []byte) (*verdict, *heldLeases) {
	v := q.verdict()
	v.identity, v.pressure, v.source = who.identity, who.pressure, o.source
	v.tier, v.score, v.scoreKnown = who.tier, o.score, o.scoreKnown
	v.now = now
	v.identifier, v.vars = h.app.identifier, q.vars
	if h.Headers == "" || h.Headers == headersAlways || (h.Headers == headersDenied && !o.allowed) {
		h.setHeaders(w.Header(), v, buf, b)
	}
	i := o.speaker
	v.zone = b.zoneOfReq(i)
	v.remaining = max(0, b.res[i].Remaining)
	v.reset = headerSeconds(b.res[i].Reset)
	v.retryAfter = 0
	v.banned, v.overCost = o.banned, !o.allowed && costTooHigh(&b.reqs[i])
	if o.allowed {
		v.decision = decisionAllow
		if o.dryDenied {
			v.decision = decisionDryRunDeny
			v.retryAfter = h.retryAfter(v.zone, b.res[i])
			v.zone.denials.inc(b.network[i])
			h.reportDenial(v, b.keys[b.zoneOf[i]], who.key, true, b.network[i])
		}
		v.zone.counters.inc(v.decision, o.source)
		return v, h.holdLeases(b)
	}

	v.retryAfter = h.retryAfter(v.zone, b.res[i])
	v.zone.denials.incDenial(b.network[i], o.banned)
	keyHash := b.keys[b.zoneOf[i]]
	h.reportDenial(v, keyHash, who.key, false, b.network[i])
	until := now.Add(time.Duration(v.retryAfter) * time.Second)
	if b.network[i] {
		h.app.state.lists.denied.record(v.zone.Name, v.zone.scope+adminapi.NetworkScopeSuffix, who.identity.Network, until, now)
	} else {
		h.app.state.lists.denied.record(v.zone.Name, v.zone.scope, keyHash, until, now)
	}
	v.decision = decisionDeny
	v.zone.counters.inc(v.decision, o.source)
	w.Header().Set("Retry-After", strconv.FormatInt(v.retryAfter, 10))
	return v, nil
}

// retryAfter is the Retry-After, in seconds, of a denial by zone z.
func (h *Handler) retryAfter(z *Zone, r limiter.Result) int64 {
	if z.isLease() && z.Lease == "" {
		return 1 // a request's own lease frees when any request ends
	}
	return headerSeconds(r.RetryAfter)
}

// holdLeases collects the leases an allowed request claimed, copied out of
// the scratch memory they were built in. A dry run claims none.
func (h *Handler) holdLeases(b *batch) *heldLeases {
	var held *heldLeases
	for i := range b.reqs {
		if b.reqs[i].Limit.Algorithm != limiter.Concurrency || b.dry[i] {
			continue
		}
		if held == nil {
			held = &heldLeases{decider: h.decider}
		}
		held.reqs = append(held.reqs, b.reqs[i])
		held.named = append(held.named, b.named[i])
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

// announces reports whether z appears in the RateLimit headers: rate zones
// that are enforced. A lease zone caps holders, not a rate; a trial zone
// (its own dry_run or its handler's) is not enforced, and a client that
// followed its numbers would slow down for nothing.
func (h *Handler) announces(z *Zone) bool {
	return z.policy != "" && !z.DryRun && !h.DryRun
}

// setHeaders writes the RateLimit-Policy and RateLimit headers
// (draft-ietf-httpapi-ratelimit-headers) for the enforced rate zones that
// counted a request. Each tells the client the limit it actually has: q is
// the zone's limit for its tier, squeezed by IP pressure and scaled by its
// reputation, and r counts down from it (a zone counted with several
// requests shows the least left). A denial by the client's network budget
// shows r=0 in its zone, with that budget's wait in t; the network's own
// numbers are never shown.
func (h *Handler) setHeaders(hdr http.Header, v *verdict, buf []byte, b *batch) {
	factor := 1.0
	if rep := h.app.reputation; rep != nil && v.scoreKnown {
		factor = rep.Factor(v.score)
	}
	// The policy is policyAll, unless a q differs or a calendar window's
	// length is this month's or this day's.
	configured := len(b.zones) == len(h.Zones) && h.extras&extraCalendar == 0
	for zi, z := range b.zones {
		if !h.announces(z) {
			continue
		}
		quota, remaining, reset, denied := int64(-1), int64(-1), time.Duration(0), false
		for i, of := range b.zoneOf {
			if of != zi {
				continue
			}
			r := &b.res[i]
			if b.network[i] {
				if !r.Allowed { // never its numbers, only that it denied and for how long
					denied = true
					reset = max(reset, r.Reset)
				}
				continue
			}
			if quota < 0 {
				quota = quotaOf(b, i, factor)
			}
			if r.Remaining < 0 {
				continue // not known: this one was not asked
			}
			if remaining < 0 || r.Remaining < remaining {
				remaining = r.Remaining
			}
			reset = max(reset, quotaAhead(r))
		}
		if denied {
			remaining = 0
		}
		if quota >= 0 && quota != z.Limit {
			configured = false
		}
		if remaining < 0 {
			continue
		}
		if len(buf) > 0 {
			buf = append(buf, ", "...)
		}
		buf = append(buf, z.quoted...)
		buf = append(buf, ";r="...)
		buf = appendCount(buf, remaining)
		buf = append(buf, ";t="...)
		buf = appendCount(buf, headerSeconds(reset))
	}
	if len(buf) == 0 {
		return // no enforced rate zone counted it: only leases or trials
	}
	v.headers[0], v.headers[1] = h.policyAll, v.keep(buf)
	if !configured {
		v.headers[0] = h.policyOf(b, factor, v.now, buf[len(buf):])
	}
	hdr["Ratelimit-Policy"] = v.headers[0:1:1]
	hdr["Ratelimit"] = v.headers[1:2:2]
}

// quotaOf returns the limit request i of b counted against: the one its
// decision names (a cluster node's fallback share), or its own scaled by
// the client's reputation factor.
func quotaOf(b *batch, i int, factor float64) int64 {
	if q := b.res[i].Quota; q > 0 {
		return q
	}
	if factor == 1 { // Scale(1) is the limit itself: no copy of it to make
		return b.reqs[i].Limit.Quota
	}
	return b.reqs[i].Limit.Scale(factor).Quota
}

// appendCount appends n in decimal, as strconv.AppendInt(b, n, 10) does:
// the RateLimit header's counts, on every response. Up to 16 digits are
// made eight at a time (decimal8) and stored in b's spare capacity, which
// it may write up to 16 bytes into, without leading zeros: a quarter of
// strconv's instructions for a count of nine digits.
func appendCount(b []byte, n int64) []byte {
	const ascii = 0x3030303030303030
	l := len(b)
	if n < 0 || n >= 1e16 || cap(b)-l < 16 {
		return strconv.AppendInt(b, n, 10)
	}
	b = b[:l+16]
	if n < 1e8 {
		x := decimal8(uint32(n))
		zeros := min(bits.TrailingZeros64(x)/8, 7) // leading zeros, 0 kept
		binary.LittleEndian.PutUint64(b[l:], (x|ascii)>>(8*zeros))
		return b[:l+8-zeros]
	}
	hi := decimal8(uint32(n / 1e8)) // not 0
	zeros := bits.TrailingZeros64(hi) / 8
	binary.LittleEndian.PutUint64(b[l:], (hi|ascii)>>(8*zeros))
	binary.LittleEndian.PutUint64(b[l+8-zeros:], decimal8(uint32(n%1e8))|ascii)
	return b[:l+16-zeros]
}

// decimal8 returns the 8 decimal digits of n < 10⁸, with leading zeros,
// one a byte (values 0 to 9), the first in the lowest byte: n split in
// two halves of four digits, each in two of two, each in two digits, every
// lane at once. The divisions by 100 and 10 are multiplications by
// 10486/2²⁰ and 103/2¹⁰, exact for the lanes' values (below 10⁴ and 10²).
func decimal8(n uint32) uint64 {
	x := uint64(n/10000) | uint64(n%10000)<<32
	h := (x * 10486 >> 20) & 0x0000007f0000007f
	x = h | (x-h*100)<<16
	h = (x * 103 >> 10) & 0x000f000f000f000f
	return h | (x-h*10)<<8
}

// policyOf renders the RateLimit-Policy of a request whose zones are not
// all the handler's, or whose limits are not the configured ones: each
// enforced rate zone that counted it, with the quota of the client's own
// request scaled by its reputation factor, and the length of its window
// at now (a calendar month or day has its own). buf is scratch.
func (h *Handler) policyOf(b *batch, factor float64, now time.Time, buf []byte) string {
	for zi, z := range b.zones {
		if !h.announces(z) {
			continue
		}
		for i, of := range b.zoneOf {
			if of != zi || b.network[i] {
				continue
			}
			if len(buf) > 0 {
				buf = append(buf, ", "...)
			}
			buf = append(buf, z.quoted...)
			buf = append(buf, ";q="...)
			buf = strconv.AppendInt(buf, quotaOf(b, i, factor), 10)
			buf = append(buf, ";w="...)
			window := z.limit.Window
			if z.limit.Calendar != nil {
				_, window = z.limit.Calendar.Span(now)
			}
			buf = strconv.AppendInt(buf, headerSeconds(window), 10)
			break
		}
	}
	return string(buf)
}

// reportDenial logs a denial, or a dry run's would-be denial, and emits
// the tollgate_denied event. Neither carries the key or the client ID: the
// log has their keyed hashes only, as hashed IDs (h:…) the admin API looks
// up; budget says whether the client's own budget or its network's denied.
func (h *Handler) reportDenial(v *verdict, keyHash, clientKey uint64, dryRun, network bool) {
	if ce := h.logger.Check(zapcore.InfoLevel, "request denied"); ce != nil {
		budget := reasonClient
		if network {
			budget = reasonNetwork
		}
		reason := denialReason(v.source)
		switch {
		case v.banned:
			reason = "banned"
		case v.overCost:
			reason = "cost_exceeds_limit"
		}
		ce.Write(
			zap.String("zone", v.zone.Name),
			zap.String("reason", reason),
			zap.String("budget", budget),
			zap.String("client_hash", adminapi.HashedID(clientKey)),
			zap.String("key_hash", adminapi.HashedID(keyHash)),
			zap.String("client_kind", v.identity.Kind.String()),
			zap.String("source", v.source.String()),
			zap.Int64("retry_after", v.retryAfter),
			zap.Bool("dry_run", dryRun),
		)
	}
	h.events.Emit(h.ctx, "tollgate_denied", map[string]any{
		"zone":        v.zone.Name,
		"retry_after": v.retryAfter,
		"source":      v.source.String(),
		"dry_run":     dryRun,
	})
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
