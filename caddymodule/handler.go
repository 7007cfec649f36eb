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

	"github.com/tollgate/tollgate/adminapi"
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
//	{http.tollgate.source}       who decided: owner, peer, blocked_cache or fallback
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
	// counted, headers, placeholders, logs and metrics say what would have
	// happened, but nothing is denied and nothing else changes: no
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

	ctx       caddy.Context
	ancestry  []caddy.Module // the modules that provisioned this one, outermost first
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
	h.ancestry = ctx.Modules()
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

	// Caddy calls Validate after Provision; nothing here needs valid values.
	policies := make([]string, 0, len(h.Zones))
	for _, z := range h.Zones {
		if z == nil { // JSON can say null; Validate would say so after a panic here
			return fmt.Errorf("tollgate: empty zone: every entry of zones needs a name and a limit")
		}
		if err := z.provision(ctx, app); err != nil {
			return err
		}
		if z.policy != "" {
			policies = append(policies, z.policy)
		}
	}
	h.policyAll = strings.Join(policies, ", ")
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

// maxInline is the number of limiter requests a decision handles without
// allocating; more (a handler with many zones) spill to the heap.
const maxInline = 8

// scratch is the working memory of one decision. It comes from a pool rather
// than the stack: Caddy's handler chains run deep, and a large frame here
// makes goroutine stacks grow (and, after each GC shrinks them, grow again).
type scratch struct {
	zones  [maxInline]*Zone
	keys   [maxInline]uint64
	reqs   [maxInline]limiter.Request
	zoneOf [maxInline]int
	named  [maxInline]bool
	netw   [maxInline]bool
	dry    [maxInline]bool
	res    [maxInline]limiter.Result
	text   [128]byte
	id     [fingerprint.IDLen]byte
	batch  batch
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// batch is what one request asks of the limiter: the zones that match it,
// and the limiter requests they expand into, each tagged with the index of
// its zone. A zone may expand into several requests, added in any order;
// the request is allowed only if every enforced one is. The slices start
// in the scratch arrays and grow onto the heap past maxInline.
type batch struct {
	zones   []*Zone           // the matching zones, in the handler's order
	keys    []uint64          // the hash of the key each zone counts by, before zone mixing
	reqs    []limiter.Request // what is asked of the limiter
	zoneOf  []int             // reqs[i] is counted for zones[zoneOf[i]]
	named   []bool            // reqs[i] claims a named lease
	dry     []bool            // reqs[i] is a dry run's: it decides nothing
	network []bool            // reqs[i] counts the client's IP network, not the client
	res     []limiter.Result  // the limiter's answer to reqs[i]
}

// reset points b at the inline arrays of sc, empty.
func (b *batch) reset(sc *scratch) {
	b.zones, b.keys, b.reqs, b.zoneOf = sc.zones[:0], sc.keys[:0], sc.reqs[:0], sc.zoneOf[:0]
	b.named, b.dry, b.res = sc.named[:0], sc.dry[:0], sc.res[:0]
	b.network = sc.netw[:0]
}

// add appends a limiter request for zone zi.
func (b *batch) add(zi int, r limiter.Request, named, dry bool) {
	b.reqs = append(b.reqs, r)
	b.zoneOf = append(b.zoneOf, zi)
	b.named = append(b.named, named)
	b.dry = append(b.dry, dry)
	b.network = append(b.network, false)
}

// Ranks of requests, in the order decideAt asks for them.
const (
	rankEnforced = iota
	rankDryRate
	rankDryLease
)

func (b *batch) rank(i int) int {
	switch {
	case !b.dry[i]:
		return rankEnforced
	case b.reqs[i].Limit.Algorithm == limiter.Concurrency:
		return rankDryLease
	}
	return rankDryRate
}

// order sorts the requests by rank, stably, and returns where the dry rate
// requests and the dry lease requests start. It moves nothing when there
// is no dry request.
func (b *batch) order() (dryRates, dryLeases int) {
	for i := 1; i < len(b.reqs); i++ { // insertion sort: few requests, no allocation
		for j := i; j > 0 && b.rank(j) < b.rank(j-1); j-- {
			b.reqs[j], b.reqs[j-1] = b.reqs[j-1], b.reqs[j]
			b.zoneOf[j], b.zoneOf[j-1] = b.zoneOf[j-1], b.zoneOf[j]
			b.named[j], b.named[j-1] = b.named[j-1], b.named[j]
			b.dry[j], b.dry[j-1] = b.dry[j-1], b.dry[j]
			b.network[j], b.network[j-1] = b.network[j-1], b.network[j]
		}
	}
	dryRates, dryLeases = len(b.reqs), len(b.reqs)
	for i := len(b.reqs) - 1; i >= 0; i-- {
		switch b.rank(i) {
		case rankDryLease:
			dryRates, dryLeases = i, i
		case rankDryRate:
			dryRates = i
		}
	}
	return dryRates, dryLeases
}

// results sizes res to the requests, inline when they fit.
func (b *batch) results() []limiter.Result {
	if n := len(b.reqs); n <= cap(b.res) {
		b.res = b.res[:n]
	} else {
		b.res = make([]limiter.Result, n)
	}
	clear(b.res)
	return b.res
}

// zoneOfReq returns the zone request i is counted for.
func (b *batch) zoneOfReq(i int) *Zone { return b.zones[b.zoneOf[i]] }

// asker is what a request is counted as: the client and its standing.
type asker struct {
	identity fingerprint.Identity
	pressure fingerprint.Reading
	key      uint64 // hash of the client ID, the default key
	tier     string
}

// outcome is a decision at one instant.
type outcome struct {
	allowed    bool           // every enforced request was granted
	dryDenied  bool           // a dry run's request would have been denied
	source     cluster.Source // who decided
	score      float64        // the client's reputation, when scoreKnown
	scoreKnown bool
	speaker    int // index of the request that speaks for the decision
}

// ServeHTTP counts r in its zones and passes it on or denies it, in three
// steps: build the limiter requests, decide them now, write the response.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if h.app.sessions.answers(r) {
		return h.app.sessions.answerProof(w, r, h.DryRun)
	}
	q := request{r: r}
	q.vars, _ = r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	h.app.identify()
	sc := scratchPool.Get().(*scratch)
	now := time.Now()
	b, who, err := h.requests(now, &q, sc)
	if err != nil || b == nil {
		scratchPool.Put(sc)
		if err != nil {
			return err
		}
		return next.ServeHTTP(w, r)
	}
	o := decideAt(now, h.node, h.app.reputationKey(who.key), b)
	v, held := h.respond(w, &q, now, b, &who, o, sc.text[:0])
	scratchPool.Put(sc)

	if v.decision == decisionDeny {
		return caddyhttp.Error(http.StatusTooManyRequests, v.zone.denyError)
	}
	if held != nil {
		held.hold()
		defer held.release()
	}
	if h.DryRun { // a trial issues no cookie
		return next.ServeHTTP(w, r)
	}
	return h.app.sessions.serve(w, r, next, v, now)
}

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
		b.add(zi, r, named, trial)
		if who.identity.Kind == fingerprint.KindFingerprint && (z.countsNetwork() || fellBack && !z.isLease()) {
			h.addNetworkRequest(b, zi, z, base, &who, trial)
		}
	}
	return b, who, nil
}

// decideAt decides b at the instant now on node, for the client whose
// reputation is kept under client (0 for none): the one step that spends.
// It fills b.res.
//
// Enforced requests are taken together, with the client's reputation.
// Then the dry run's: if the request is denied, they are only peeked at
// (a denied request spends nothing); else its rate requests are taken
// together without reputation — counted, so a trial zone reports what it
// would have done, but neither penalizing the client nor leaving a
// blocked-cache entry — and its lease requests peeked at, never claimed.
func decideAt(now time.Time, node *cluster.Node, client limiter.Key, b *batch) outcome {
	res := b.results()
	enforced, dryLeases := b.order() // [0, enforced): enforced; then dry rates, then dry leases
	o := outcome{allowed: true, source: cluster.SourceOwner}
	if enforced > 0 {
		d := node.TakeFor(now, client, b.reqs[:enforced], res[:enforced])
		o.allowed, o.source, o.score, o.scoreKnown = d.Allowed, d.Source, d.Score, d.ScoreKnown
	}
	if enforced < len(b.reqs) {
		ok, src := decideDry(now, node, b, enforced, dryLeases, o.allowed)
		o.dryDenied = !ok
		if enforced == 0 {
			o.source = src // nothing enforced was asked
		}
	}
	if o.allowed {
		o.speaker = decidingRequest(res) // a denial here is a dry run's
		if res[o.speaker].Allowed {
			o.speaker = clientSpeaker(b, o.speaker) // the network's budget is never shown
		}
	} else {
		o.speaker = decidingRequest(res[:enforced])
	}
	return o
}

// decideDry decides the dry run's requests b.reqs[rates:], of which those
// from leases on are lease requests, and reports whether they would all
// have been granted, and who answered. allowed is the enforced decision.
func decideDry(now time.Time, node *cluster.Node, b *batch, rates, leases int, allowed bool) (bool, cluster.Source) {
	res := b.res
	if !allowed {
		src := node.Peek(now, b.reqs[rates:], res[rates:])
		return allGranted(res[rates:]), src
	}
	ok, src := true, cluster.SourceOwner
	if rates < leases {
		ok, src = node.Take(now, b.reqs[rates:leases], res[rates:leases])
		if !ok && src != cluster.SourceOwner {
			// A peer's denial is cached to spare the next call; a trial's
			// must not be, as the cache answers enforced requests too. The
			// source is the worst of the zones' (one zone may have been
			// decided in fallback, another denied by its owner), so any
			// source but this node's own engine may have left an entry.
			for i := rates; i < leases; i++ {
				if !res[i].Allowed {
					node.Forget(b.reqs[i].Key)
				}
			}
		}
	}
	if leases < len(b.reqs) {
		s := node.Peek(now, b.reqs[leases:], res[leases:])
		if rates == leases {
			src = s
		}
		ok = ok && allGranted(res[leases:])
	}
	return ok, src
}

func allGranted(res []limiter.Result) bool {
	for i := range res {
		if !res[i].Allowed {
			return false
		}
	}
	return true
}

// respond writes what decision o means for the response: headers, the
// verdict behind the placeholders, metrics, the log and event of a denial.
// It returns the verdict and the leases an allowed request holds, if any;
// buf is scratch for the RateLimit header.
func (h *Handler) respond(w http.ResponseWriter, q *request, now time.Time, b *batch, who *asker, o outcome, buf []byte) (*verdict, *heldLeases) {
	v := q.verdict()
	v.identity, v.pressure, v.source = who.identity, who.pressure, o.source
	v.tier, v.score, v.scoreKnown = who.tier, o.score, o.scoreKnown
	v.app, v.vars = h.app, q.vars
	if h.Headers == "" || h.Headers == headersAlways || (h.Headers == headersDenied && !o.allowed) {
		h.setHeaders(w.Header(), v, buf, b)
	}
	i := o.speaker
	v.zone = b.zoneOfReq(i)
	v.remaining = max(0, b.res[i].Remaining)
	v.reset = headerSeconds(b.res[i].Reset)
	v.retryAfter = 0
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
	v.zone.denials.inc(b.network[i])
	keyHash := b.keys[b.zoneOf[i]]
	h.reportDenial(v, keyHash, who.key, false, b.network[i])
	if !b.network[i] {
		h.app.state.ops.denied.record(v.zone.Name, v.zone.scope, keyHash, now.Add(time.Duration(v.retryAfter)*time.Second), now)
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
			held = &heldLeases{node: h.node}
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

// decidingRequest returns the index of the request that speaks for a
// decision: the denied one that asks for the longest wait, or, when all were
// allowed, the one with the fewest requests left.
func decidingRequest(res []limiter.Result) int {
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
// (draft-ietf-httpapi-ratelimit-headers) for the zones that counted a
// request. A zone counted with several requests shows the least left.
func (h *Handler) setHeaders(hdr http.Header, v *verdict, buf []byte, b *batch) {
	policy := h.policyAll
	if len(b.zones) != len(h.Zones) {
		parts := make([]string, 0, len(b.zones))
		for _, z := range b.zones {
			if z.policy != "" {
				parts = append(parts, z.policy)
			}
		}
		policy = strings.Join(parts, ", ")
	}
	if policy == "" {
		return // only lease zones: the RateLimit headers describe rates
	}
	for zi, z := range b.zones {
		if z.policy == "" {
			continue // a lease zone
		}
		remaining, reset := int64(-1), time.Duration(0)
		for i, of := range b.zoneOf {
			if of != zi || b.res[i].Remaining < 0 || b.network[i] {
				continue // another zone's, not known (this one was not asked), or the network's
			}
			if remaining < 0 || b.res[i].Remaining < remaining {
				remaining = b.res[i].Remaining
			}
			reset = max(reset, b.res[i].Reset)
		}
		if remaining < 0 {
			continue
		}
		if len(buf) > 0 {
			buf = append(buf, ", "...)
		}
		buf = append(buf, z.quoted...)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, remaining, 10)
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, headerSeconds(reset), 10)
	}
	v.headers[0], v.headers[1] = policy, string(buf)
	hdr["Ratelimit-Policy"] = v.headers[0:1:1]
	hdr["Ratelimit"] = v.headers[1:2:2]
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
		ce.Write(
			zap.String("zone", v.zone.Name),
			zap.String("reason", denialReason(v.source)),
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
