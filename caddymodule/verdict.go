package caddymodule

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/fingerprint"
)

// verdict is the outcome of the tollgate handlers for one request, served as
// the {http.tollgate.*} placeholders. When several tollgate handlers see a
// request, the placeholders describe the last decision.
type verdict struct {
	// code and self make the verdict the closure of its own method value
	// v.replace (see placeholders), so that serving the placeholders
	// costs no allocation beside the verdict's. They come first, where a
	// closure keeps its code and what it captured.
	code uintptr
	self *verdict

	decision   string // one of the decision constants
	zone       *Zone  // the zone that speaks for the decision
	remaining  int64
	reset      int64 // seconds
	retryAfter int64 // seconds; 0 unless denied

	identity   fingerprint.Identity
	pressure   fingerprint.Reading
	source     cluster.Source // who decided
	tier       string
	score      float64 // the client's reputation, when scoreKnown
	scoreKnown bool
	byDecision bool                    // an operator's block denied it
	identifier *fingerprint.Identifier // hashes a session's network for {http.tollgate.network}
	vars       map[string]any          // the request's variables, for its client IP

	headers [3]string // backing for the RateLimit-Policy, RateLimit and Set-Cookie values

	now      time.Time // when it was decided
	banned   bool      // denied by the zone's ban
	overCost bool      // denied because the request costs more than the limit

	// text backs the RateLimit value of the request's first decision, so
	// that it costs no allocation of its own; written once (see keep).
	text     [verdictText]byte
	textUsed bool
}

// denial says why a denied request was denied, for the 429's error.
func (v *verdict) denial() error {
	switch {
	case v.byDecision:
		return fmt.Errorf("zone %s: blocked by an operator's decision for %d s", v.zone.Name, v.retryAfter)
	case v.banned:
		return fmt.Errorf("zone %s: banned for %d s after exceeding its rate limit", v.zone.Name, v.retryAfter)
	case v.overCost:
		return fmt.Errorf("zone %s: the request costs more than the limit of %d", v.zone.Name, v.zone.Limit)
	}
	return v.zone.denyError
}

// verdictText is the longest RateLimit value a verdict holds itself.
const verdictText = 96

// keep returns text as a string that outlives the caller's buffer: backed
// by the verdict's own array the first time (the verdict lives as long as
// the request, and its array is never written again, so the string never
// changes), copied after that (a second tollgate handler on the request),
// or when it does not fit.
func (v *verdict) keep(text []byte) string {
	if v.textUsed || len(text) == 0 || len(text) > len(v.text) {
		return string(text)
	}
	v.textUsed = true
	n := copy(v.text[:], text)
	return unsafe.String(&v.text[0], n)
}

// The values of {http.tollgate.decision}.
const (
	decisionAllow      = "allow"
	decisionDeny       = "deny"
	decisionDryRunDeny = "dry_run_deny"
)

// verdictVar is the request variable that holds a request's verdict.
const verdictVar = "tollgate.verdict"

// placeholderPrefix starts every placeholder Tollgate provides.
const placeholderPrefix = "http.tollgate."

// request is what the handler looks up about one request, each thing at
// most once: Caddy's context chain is deep, and walking it costs.
type request struct {
	r    *http.Request
	vars map[string]any // Caddy's request variables
	repl *caddy.Replacer
}

// replacer returns the request's placeholder replacer.
func (q *request) replacer() *caddy.Replacer {
	if q.repl == nil {
		q.repl = q.r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	}
	return q.repl
}

// clientIP returns the client IP Caddy determined (trusted_proxies apply).
func (q *request) clientIP() string {
	ip, _ := q.vars[caddyhttp.ClientIPVarKey].(string)
	return ip
}

// verdict returns the request's verdict, creating it and registering its
// placeholders on the first call for the request.
func (q *request) verdict() *verdict {
	if v, ok := q.vars[verdictVar].(*verdict); ok {
		return v
	}
	v := new(verdict)
	if q.vars != nil {
		q.vars[verdictVar] = v
	}
	q.replacer().Map(v.placeholders())
	return v
}

// replaceCode is the code of the method value v.replace, the same for
// every v: what a closure of it starts with.
var replaceCode = func() uintptr {
	f := (*verdict)(nil).replace
	return **(**uintptr)(unsafe.Pointer(&f))
}()

// placeholders returns v.replace as a func value without allocating one.
// A Go func value points to a closure: a word with the code to run, then
// what the code captured, which for a method value is its receiver. The
// compiler would allocate that closure, 16 bytes, on every request; the
// verdict's first two words are laid out as one instead, so the func value
// is a pointer to the verdict itself. TestVerdictPlaceholdersAreItsReplace
// checks that calling it is calling v.replace.
func (v *verdict) placeholders() caddy.ReplacerFunc {
	v.code, v.self = replaceCode, v
	return *(*caddy.ReplacerFunc)(unsafe.Pointer(&v))
}

// replace serves the {http.tollgate.*} placeholders. Values are computed
// only when a placeholder is used.
func (v *verdict) replace(key string) (any, bool) {
	name, ok := strings.CutPrefix(key, placeholderPrefix)
	if !ok {
		return nil, false
	}
	switch name {
	case "decision":
		return v.decision, true
	case "zone":
		return v.zone.Name, true
	case "remaining":
		return v.remaining, true
	case "reset":
		return v.reset, true
	case "retry_after":
		return v.retryAfter, true
	case "client_id":
		return v.identity.ID(), true
	case "client_kind":
		return v.identity.Kind.String(), true
	case "network":
		return v.networkID(), true
	case "ip_pressure":
		return v.pressure.Distinct, true
	case "squeezed":
		return v.pressure.Squeezed, true
	case "source":
		if v.byDecision {
			return reasonDecision, true
		}
		return v.source.String(), true
	case "tier":
		return v.tier, true
	case "reputation":
		if !v.scoreKnown {
			return "", true
		}
		return strconv.FormatFloat(v.score, 'f', 1, 64), true
	}
	return nil, false
}
