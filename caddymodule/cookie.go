package caddymodule

import (
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/limiter"
)

// issueCookie gives an allowed request's client a session cookie when it
// needs one: a valid cookie due to be issued again (an older secret, or past
// half its max age) is renewed; a client without a usable cookie gets a new
// session, at most issue_limit times per window per IP network (squeezed
// by IP pressure), so neither throwing cookies away nor rotating headers
// mints fresh budgets beyond that bound. With issuance by header, the
// cookie is only set if the upstream response earns it.
func (h *Handler) issueCookie(w http.ResponseWriter, r *http.Request, v *verdict, now time.Time) {
	app := h.app
	v.challenge = false
	if app.issue == issueOff {
		return
	}
	id := &v.identity
	if id.Kind == fingerprint.KindSession && !id.Reissue {
		return
	}
	if app.issue == issueHeader {
		v.issuer = &cookieIssuer{handler: h, r: r, v: v, now: now}
		return
	}
	if app.challenge != nil && id.Kind == fingerprint.KindFingerprint {
		v.challenge = h.challengeFor(r, v, now) // a session is earned by passing it
		return
	}
	if c := h.sessionCookie(r, v, now); c != nil {
		w.Header().Add("Set-Cookie", c.String())
	}
}

// sessionCookie returns the cookie for the request's client, or nil if the
// client may not be given a new session now.
func (h *Handler) sessionCookie(r *http.Request, v *verdict, now time.Time) *http.Cookie {
	app := h.app
	id := &v.identity
	secure := arrivedOverTLS(r)
	if id.Kind == fingerprint.KindSession {
		return app.identifier.Cookie(id.Session, now, secure)
	}
	if !h.maySessionStart(id, v.pressure.Factor, now) {
		return nil
	}
	sess, err := fingerprint.NewSession(now)
	if err != nil {
		h.logger.Error("starting a session", zap.Error(err))
		return nil
	}
	return app.identifier.Cookie(sess, now, secure)
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

// fingerprintIssueLimit is how many sessions one fingerprint on one network
// may start per issue window: a client that drops its cookie gets a new one
// again, but one that never keeps them does not spend its network's sessions
// on every request.
const fingerprintIssueLimit = 2

// networkIssueSalt separates the session counter of a network from those of
// fingerprints.
const networkIssueSalt = 0x73657373696f6e73

// maySessionStart spends one new session of id's network (issue_limit per
// issue window, squeezed by IP pressure factor) and of its fingerprint
// (fingerprintIssueLimit), both or neither, and reports whether it could.
func (h *Handler) maySessionStart(id *fingerprint.Identity, factor float64, now time.Time) bool {
	reqs := h.sessionIssue(id, factor)
	var res [2]limiter.Result
	ok, _ := h.node.Take(now, reqs[:], res[:])
	return ok
}

// sessionIssue returns the two counters a new session of id spends: its
// fingerprint's (fingerprintIssueLimit) and its network's (issue_limit per
// issue window, squeezed by the IP pressure factor).
func (h *Handler) sessionIssue(id *fingerprint.Identity, factor float64) [2]limiter.Request {
	app := h.app
	limit := app.issueLimit
	if factor != 1 {
		limit = limit.Scale(factor)
	}
	perPrint := app.issueLimit
	perPrint.Quota = fingerprintIssueLimit
	netZone := app.issueZone ^ networkIssueSalt
	return [2]limiter.Request{
		{Key: limiter.ZoneKey(id.Digest, app.issueZone), Zone: app.issueZone, Limit: perPrint, Network: uint32(id.Network)},
		{Key: limiter.ZoneKey(id.Network, netZone), Zone: netZone, Limit: limit, Network: uint32(id.Network)},
	}
}

// cookieIssuer sets the session cookie on responses that carry the issuing
// header (which it removes), for cookie issuance by header.
type cookieIssuer struct {
	*caddyhttp.ResponseWriterWrapper
	handler *Handler
	r       *http.Request
	v       *verdict
	now     time.Time
	decided bool
}

func (c *cookieIssuer) WriteHeader(status int) {
	if !c.decided && status >= 200 {
		c.decided = true
		hdr := c.Header()
		if _, earned := hdr[c.handler.app.issueHeader]; earned {
			delete(hdr, c.handler.app.issueHeader)
			if cookie := c.handler.sessionCookie(c.r, c.v, c.now); cookie != nil {
				hdr.Add("Set-Cookie", cookie.String())
			}
		}
	}
	c.ResponseWriterWrapper.WriteHeader(status)
}

func (c *cookieIssuer) Write(p []byte) (int, error) {
	if !c.decided {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriterWrapper.Write(p)
}
