package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/limiter"
)

// CookieConfig is the session cookie Tollgate issues to clients.
type CookieConfig struct {
	// Name of the cookie. Default: __tollgate.
	Name string `json:"name,omitempty"`

	// MaxAge is how long a cookie stays valid after it was issued; one in
	// use is issued again once past half of it. Default: 720h (30 days).
	MaxAge caddy.Duration `json:"max_age,omitempty"`

	// Issue says who gets a cookie: "always" (default: every client
	// without a valid one, on an allowed request), "header" (only when the
	// upstream response carries IssueHeader, which is then removed: a site
	// that runs its own challenge decides who earns a cookie) or "off".
	Issue string `json:"issue,omitempty"`

	// IssueHeader is the response header that earns a cookie when Issue
	// is "header".
	IssueHeader string `json:"issue_header,omitempty"`

	// IssueLimit is how many new sessions one IP network (see IPv4Prefix,
	// IPv6Prefix) may be given per IssueWindow, squeezed by IP pressure, so
	// that a client cannot mint fresh budgets by throwing cookies away or
	// rotating headers. A client that may not get a session stays on the
	// cookie-less path, under its network's budget. Default: 30 per hour,
	// enough for an office behind one address to get its sessions on a
	// first morning.
	IssueLimit int64 `json:"issue_limit,omitempty"`

	// IssueWindow is the period of IssueLimit. Default: 1h.
	IssueWindow caddy.Duration `json:"issue_window,omitempty"`

	// Challenge, when set, makes a browser without a session pass a
	// challenge before it is given one: its page loads (GET with an Accept
	// naming text/html) get a small self-contained page that solves a proof
	// of work and comes back with a session. Other clients are not
	// challenged and are given no session: they stay on the cookie-less
	// path, under their network's budget. Default: off.
	Challenge *ChallengeConfig `json:"challenge,omitempty"`
}

// The values of CookieConfig.Issue.
const (
	issueAlways = "always"
	issueHeader = "header"
	issueOff    = "off"
)

// Defaults of cookie issuance.
const (
	defaultIssueLimit  = 30
	defaultIssueWindow = time.Hour
)

// validate checks the cookie settings; nil means the defaults.
func (c *CookieConfig) validate() error {
	if c == nil {
		return nil
	}
	switch c.Issue {
	case "", issueAlways, issueOff:
		if c.IssueHeader != "" {
			return fmt.Errorf("tollgate: cookie issue_header %q is only used with issue header", c.IssueHeader)
		}
	case issueHeader:
		if c.IssueHeader == "" {
			return fmt.Errorf("tollgate: cookie issue header needs a header name")
		}
	default:
		return fmt.Errorf("tollgate: cookie issue %q: must be always, header <name> or off", c.Issue)
	}
	if err := quotaBounds.checkSet(c.IssueLimit); err != nil {
		return fmt.Errorf("tollgate: cookie issue_limit %d: %w", c.IssueLimit, err)
	}
	if c.Challenge != nil {
		if err := c.Challenge.validate(); err != nil {
			return err
		}
		if c.Issue == issueOff || c.Issue == issueHeader {
			return fmt.Errorf("tollgate: cookie challenge needs issue always: the challenge is what earns a session")
		}
	}
	if c.IssueWindow < 0 { // the max age is the identifier's to check
		return fmt.Errorf("tollgate: cookie issue_window %s: must be positive", time.Duration(c.IssueWindow))
	}
	return nil
}

// sessions gives clients their session cookies, and is the one part of a
// request that deals with them: after an allowed decision it renews a
// valid cookie that is due, starts a new session within its network's
// minting budget, leaves it to the upstream's response (issue header), or
// answers a browser with the challenge page that earns one; and it checks
// the proofs that come back from that page. Safe for concurrent use.
type sessions struct {
	identifier *fingerprint.Identifier
	pressure   *fingerprint.Pressure // nil when IP pressure is off
	decider    decider
	logger     *zap.Logger
	issue      string        // who gets a cookie: issueAlways, issueHeader or issueOff
	earnHeader string        // the response header that earns one, with issue header
	budget     limiter.Limit // new sessions of one network: issue_limit per issue window
	zone       uint64        // seed of the minting budget's counters
	challenge  *challenger   // nil unless cookie { challenge } is set
	crawlers   *crawlerVerifier
	// refusals are what the minting budget refused, until they run out.
	refusals *sessionRefusals
}

// provisionSessions sets up session issuance for this config's node, once
// its identity and node are provisioned.
func (a *App) provisionSessions(ctx caddy.Context) error {
	cookie := a.Cookie
	if cookie == nil {
		cookie = new(CookieConfig)
	}
	s := &sessions{
		identifier: a.identifier,
		pressure:   a.pressure,
		decider:    a.decider,
		logger:     a.logger,
		issue:      cookie.Issue,
		earnHeader: http.CanonicalHeaderKey(cookie.IssueHeader),
		zone:       a.hasher.Zone("\x00tollgate cookie issuance"),
		crawlers:   a.state.crawlers,
		refusals:   newSessionRefusals(),
	}
	if s.issue == "" {
		s.issue = issueAlways
	}
	limit, window := cookie.IssueLimit, time.Duration(cookie.IssueWindow)
	if limit == 0 {
		limit = defaultIssueLimit
	}
	if window == 0 {
		window = defaultIssueWindow
	}
	s.budget = limiter.Limit{Algorithm: limiter.SlidingWindow, Quota: limit, Window: window}
	if cookie.Challenge != nil {
		var err error
		if s.challenge, err = newChallenger(ctx, cookie.Challenge, a.hashSecret, a.hasher); err != nil {
			return err
		}
		s.challenge.logger = a.logger.Named("challenge")
	}
	a.sessions = s
	return nil
}

// answers reports whether r is for the sessions themselves: a proof posted
// by the challenge page, which the handler counts in its zones and then
// leaves to answerProof instead of the next handler.
func (s *sessions) answers(r *http.Request) bool {
	return s.challenge != nil && r.URL.Path == ChallengePath
}

// serve gives an allowed request's client what it needs of a session
// before the request goes on, and returns the writer it goes on with, or
// nil when serve answered it itself. A valid cookie due to be issued again
// (an older secret, or past half its max age) is renewed; a client without
// a usable cookie gets a new session, at most issue_limit times per window
// per IP network (squeezed by IP pressure), so neither throwing cookies
// away nor rotating headers mints fresh budgets beyond that bound. With
// issuance by header, the returned writer sets the cookie only if the
// upstream response earns it; with a challenge, a browser's page load is
// answered with the challenge page instead, and no session until it passes.
func (s *sessions) serve(w http.ResponseWriter, r *http.Request, v *verdict, now time.Time) (http.ResponseWriter, error) {
	id := &v.identity
	switch {
	case s.issue == issueOff || id.Kind == fingerprint.KindSession && !id.Reissue:
	case s.issue == issueHeader:
		return &cookieIssuer{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, sessions: s, r: r, v: v, now: now}, nil
	case s.challenge != nil && id.Kind == fingerprint.KindFingerprint:
		if s.challenged(r, v, now) { // a session is earned by passing it
			return nil, s.challenge.serveChallenge(w, r, id.Network, now)
		}
	default:
		if c := s.cookie(r, v, now); c != "" {
			setCookie(w.Header(), v, c)
		}
	}
	return w, nil
}

// setCookie adds the Set-Cookie header c to hdr, kept in the verdict's
// backing when it is the response's first (no slice of its own to
// allocate).
func setCookie(hdr http.Header, v *verdict, c string) {
	if len(hdr["Set-Cookie"]) > 0 {
		hdr["Set-Cookie"] = append(hdr["Set-Cookie"], c)
		return
	}
	v.headers[2] = c
	hdr["Set-Cookie"] = v.headers[2:3:3]
}

// cookie returns the Set-Cookie header for the request's client, or "" if
// the client may not be given a new session now.
func (s *sessions) cookie(r *http.Request, v *verdict, now time.Time) string {
	id := &v.identity
	if id.Kind == fingerprint.KindSession {
		return s.identifier.SetCookie(id.Session, now, arrivedOverTLS(r))
	}
	if !s.mint(id, v.pressure.Factor, now) {
		return ""
	}
	return s.newCookie(r, now)
}

// newCookie starts a session and returns the Set-Cookie header that
// carries it, or "" if none could be started.
func (s *sessions) newCookie(r *http.Request, now time.Time) string {
	sess, err := fingerprint.NewSession(now)
	if err != nil {
		s.logger.Error("starting a session", zap.Error(err))
		return ""
	}
	return s.identifier.SetCookie(sess, now, arrivedOverTLS(r))
}

// arrivedOverTLS reports whether the client's request came over TLS: to this
// server, or to a proxy in trusted_proxies that says so with
// X-Forwarded-Proto: https. The header is ignored from anyone else.
func arrivedOverTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	vars, _ := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	if trusted, _ := vars[caddyhttp.TrustedProxyVarKey].(bool); !trusted {
		return false
	}
	proto := r.Header.Get("X-Forwarded-Proto")
	if i := strings.IndexByte(proto, ','); i >= 0 {
		proto = proto[:i] // the first proxy's view: the client's connection
	}
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}

// fingerprintSessions is how many sessions one fingerprint on one network
// may start per issue window, of the network's limit (issue_limit): two
// thirds of it, at least 2 (20 of the default 30). Fresh browsers of one
// make behind one address (an office of identical laptops behind NAT) share
// one fingerprint, and each needs its own session; a client that never
// keeps its cookie still leaves a third of its network's sessions to the
// others.
func fingerprintSessions(networkLimit int64) int64 {
	return max(2, networkLimit*2/3)
}

// networkIssueSalt separates the session counter of a network from those of
// fingerprints.
const networkIssueSalt = 0x73657373696f6e73

// mint spends one new session of id's network (issue_limit per issue
// window, squeezed by IP pressure factor) and of its fingerprint
// (fingerprintSessions of issue_limit), both or neither, and reports
// whether it could. A refusal is remembered until it runs out, and not
// asked again meanwhile.
func (s *sessions) mint(id *fingerprint.Identity, factor float64, now time.Time) bool {
	if s.refusals.refused(id, now) {
		return false
	}
	m := mintPool.Get().(*minting)
	defer mintPool.Put(m)
	m.reqs = s.mintingBudget(id, factor)
	ok, _ := s.decider.Take(now, m.reqs[:], m.res[:])
	if !ok {
		s.refusals.remember(id, &m.res, now)
	}
	return ok
}

// mayMint reports, spending nothing, whether id could start a session now.
func (s *sessions) mayMint(id *fingerprint.Identity, factor float64, now time.Time) bool {
	if s.refusals.refused(id, now) {
		return false
	}
	m := mintPool.Get().(*minting)
	defer mintPool.Put(m)
	m.reqs = s.mintingBudget(id, factor)
	s.decider.Peek(now, m.reqs[:], m.res[:])
	if !m.res[0].Allowed || !m.res[1].Allowed {
		s.refusals.remember(id, &m.res, now)
		return false
	}
	return true
}

// minting holds one question to the minting budget: the requests and
// their results, which a decider call would otherwise move to the heap on
// every cookie-less request.
type minting struct {
	reqs [2]limiter.Request
	res  [2]limiter.Result
}

var mintPool = sync.Pool{New: func() any { return new(minting) }}

// mintingBudget returns the two counters a new session of id spends: its
// fingerprint's (fingerprintSessions of issue_limit) and its network's
// (issue_limit per issue window, squeezed by the IP pressure factor).
func (s *sessions) mintingBudget(id *fingerprint.Identity, factor float64) [2]limiter.Request {
	limit := s.budget
	if factor != 1 {
		limit = limit.Scale(factor)
	}
	perPrint := s.budget
	perPrint.Quota = fingerprintSessions(s.budget.Quota)
	netZone := s.zone ^ networkIssueSalt
	return [2]limiter.Request{
		{Key: limiter.ZoneKey(id.Digest, s.zone), Zone: s.zone, Limit: perPrint, Network: uint32(id.Network)},
		{Key: limiter.ZoneKey(id.Network, netZone), Zone: netZone, Limit: limit, Network: uint32(id.Network)},
	}
}

// challenged reports whether an allowed request of a client without a
// session gets the challenge page instead of its response: it is a
// browser's page load the owner did not except, not from a search engine's
// crawler verified by DNS, and the client may still start a session (so a
// client that could not get one anyway, its fingerprint or its network out
// of new sessions, is served on the cookie-less path, not sent round in
// circles).
func (s *sessions) challenged(r *http.Request, v *verdict, now time.Time) bool {
	if !wantsChallenge(r) || s.challenge.exempt(r) {
		return false
	}
	if ip, _ := v.vars[caddyhttp.ClientIPVarKey].(string); s.crawlers.verifiedCrawler(r, ip, now) {
		return false // crawlers never solve it: they stay cookie-less, counted as their own clients
	}
	return s.mayMint(&v.identity, v.pressure.Factor, now)
}

// answerProof answers the challenge page's POST: if the proof holds and
// the token was not used, the client gets a session (within its network's
// issue limit) and goes back to the page it asked for. A dry-run handler
// observes no IP pressure.
func (s *sessions) answerProof(w http.ResponseWriter, r *http.Request, dryRun bool) error {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return caddyhttp.Error(http.StatusMethodNotAllowed, errors.New("the challenge takes a POST"))
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		return caddyhttp.Error(http.StatusBadRequest, errChallengeMalformed)
	}
	now := time.Now()
	q := request{r: r}
	q.vars, _ = r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	id := s.identifier.Identify(r, q.clientIP(), ja4Of(r), now)
	net := id.Network
	if id.Kind == fingerprint.KindSession {
		net = s.identifier.Network(q.clientIP())
	}
	token := r.PostForm.Get("token")
	tokenID, err := s.challenge.check(token, r.PostForm.Get("answer"), net, now)
	if err == nil && !s.challenge.spend(s.decider, tokenID, now) {
		err = errChallengeReplayed
	}
	s.challenge.logProof(referenceOf(token), err)
	if err != nil {
		challengeCounter(err).Inc()
		return caddyhttp.Error(http.StatusForbidden, fmt.Errorf("%w (reference %s)", err, referenceOf(token)))
	}
	challengeCounter(nil).Inc()
	if id.Kind == fingerprint.KindFingerprint && s.mint(&id, s.proofPressure(&id, dryRun, now), now) {
		if c := s.newCookie(r, now); c != "" {
			w.Header().Add("Set-Cookie", c)
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, safeReturn(r.PostForm.Get("return")), http.StatusSeeOther)
	return nil
}

// proofPressure returns the IP-pressure factor of the network of a client
// posting a proof, which squeezes its issue limit as on any other request.
func (s *sessions) proofPressure(id *fingerprint.Identity, dryRun bool, now time.Time) float64 {
	if s.pressure == nil || dryRun {
		return 1
	}
	return s.pressure.Observe(id.Network, id.Fingerprint, now).Factor
}

// cookieIssuer sets the session cookie on responses that carry the issuing
// header (which it removes), for cookie issuance by header.
type cookieIssuer struct {
	*caddyhttp.ResponseWriterWrapper
	sessions *sessions
	r        *http.Request
	v        *verdict
	now      time.Time
	decided  bool
}

// WriteHeader sets the cookie if the response earns it, then writes the
// status.
func (c *cookieIssuer) WriteHeader(status int) {
	if !c.decided && status >= 200 {
		c.decided = true
		hdr := c.Header()
		if _, earned := hdr[c.sessions.earnHeader]; earned {
			delete(hdr, c.sessions.earnHeader)
			if cookie := c.sessions.cookie(c.r, c.v, c.now); cookie != "" {
				hdr.Add("Set-Cookie", cookie)
			}
		}
	}
	c.ResponseWriterWrapper.WriteHeader(status)
}

// Write writes the status first, if not yet written.
func (c *cookieIssuer) Write(p []byte) (int, error) {
	if !c.decided {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriterWrapper.Write(p)
}
