package caddymodule

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"math/bits"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/limiter"
)

// ChallengeConfig is a challenge a browser passes before it is given a
// session cookie.
type ChallengeConfig struct {
	// Type is the kind of challenge: "pow", a proof of work solved by a
	// small self-contained page in JavaScript.
	Type string `json:"type"`

	// Difficulty is how many leading zero bits the proof's SHA-256 must
	// have (1 to 32): each one doubles the browser's work, about 2^N
	// hashes on average. 16 takes a fraction of a second on a phone.
	Difficulty int `json:"difficulty"`

	// Template is a file holding the owner's own challenge page: an
	// html/template (https://pkg.go.dev/html/template) that includes
	// {{template "tollgate_challenge" .}} where the check goes (its
	// progress bar, status line, <noscript> text, reference ID, form and
	// script). The page may also use {{.Host}}, the site's host name, and
	// {{.Reference}}, the challenge's reference ID as the log prints it. It
	// is read when the config loads; a page that does not include the check
	// is refused. The page is served with a Content-Security-Policy that
	// allows inline styles and scripts only: no external assets. Default:
	// the built-in page.
	Template string `json:"template,omitempty"`

	// ExceptRaw selects requests that are never challenged, besides those
	// whose Accept does not name text/html: e.g. an API's paths, or
	// clients the site knows. They stay on the cookie-less path. Default:
	// none.
	ExceptRaw caddy.ModuleMap `json:"except,omitempty" caddy:"namespace=http.matchers"`
}

// Challenge settings.
const (
	challengePoW = "pow"
	// ChallengePath is where the challenge page sends its proof. The
	// tollgate handler counts it in the zones that match it, then answers
	// it instead of passing it on.
	ChallengePath  = "/.well-known/tollgate/challenge"
	challengeTTL   = 5 * time.Minute
	maxDifficulty  = 32
	challengeIDLen = 16
	challengeMACLn = 16
	// challengeTokenLen is the decoded token: issued (8), network (8),
	// random ID, MAC.
	challengeTokenLen = 8 + 8 + challengeIDLen + challengeMACLn
)

// validate checks a challenge's settings.
func (c *ChallengeConfig) validate() error {
	if c.Type != challengePoW {
		return fmt.Errorf("tollgate: cookie challenge %q: must be pow <difficulty>", c.Type)
	}
	if err := checkDifficulty(c.Difficulty); err != nil {
		return fmt.Errorf("tollgate: cookie challenge pow %d: %w", c.Difficulty, err)
	}
	return nil
}

// checkDifficulty refuses a proof-of-work difficulty out of its bounds.
func checkDifficulty(bits int) error {
	if bits < 1 || bits > maxDifficulty {
		return fmt.Errorf("difficulty must be a whole number of bits from 1 to %d", maxDifficulty)
	}
	return nil
}

// The built-in page, and the check every page includes as
// {{template "tollgate_challenge" .}}.
var (
	//go:embed challenge.html
	challengeHTML string
	//go:embed challenge_parts.html
	challengePartsHTML string

	challengeParts = template.Must(template.New("tollgate_parts").Parse(challengePartsHTML))
	challengePage  = mustChallengePage("built-in", challengeHTML)
)

// challengePageData is what a challenge page is rendered with.
type challengePageData struct {
	Token      string
	Difficulty int
	Action     string
	Return     string
	Host       string // the site's host name, as the request named it
	Reference  string // the challenge's reference ID, as the log prints it
}

// parseChallengePage parses a challenge page named name (a file, or
// "built-in") with the check it must include, and renders it once with
// sample values to make sure the check is there.
func parseChallengePage(name, text string) (*template.Template, error) {
	parts, err := challengeParts.Clone()
	if err != nil {
		return nil, err
	}
	page, err := parts.New("page").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("parsing: %w", err)
	}
	const marker = "tollgate-sample-token-5b1d"
	var buf bytes.Buffer
	if err := page.Execute(&buf, challengePageData{Token: marker, Difficulty: 1, Action: ChallengePath, Return: "/", Host: "example.com", Reference: "0123456789ab"}); err != nil {
		return nil, fmt.Errorf("rendering: %w", err)
	}
	if !strings.Contains(buf.String(), `value="`+marker+`"`) {
		return nil, fmt.Errorf(`the page does not include {{template "tollgate_challenge" .}}, the check that earns a session: without it no browser can pass`)
	}
	return page, nil
}

func mustChallengePage(name, text string) *template.Template {
	page, err := parseChallengePage(name, text)
	if err != nil {
		panic(fmt.Sprintf("challenge page %s: %v", name, err))
	}
	return page
}

// challenger issues proof-of-work challenges and checks their answers. A
// challenge is a token the server signs: when it was issued, the client's
// network, a random ID. The answer is a counter such that SHA-256 of
// "token:counter" starts with difficulty zero bits. A token is good for
// challengeTTL, from the network it was issued to, once: its ID is spent in
// the limiter, whose take is atomic, so a replay is refused even by
// another node of a cluster.
type challenger struct {
	difficulty int
	page       *template.Template // the built-in page, or the owner's
	logger     *zap.Logger
	except     caddyhttp.MatcherSet
	mac        []byte         // HMAC key
	hasher     limiter.Hasher // hashes token IDs
	zone       uint64         // seed of the spent-token counters
}

// newChallenger builds the challenge of cfg, its tokens signed with a key
// derived from secret.
func newChallenger(ctx caddy.Context, cfg *ChallengeConfig, secret []byte, h limiter.Hasher) (*challenger, error) {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("tollgate challenge v1"))
	c := &challenger{difficulty: cfg.Difficulty, page: challengePage, logger: zap.NewNop(), mac: m.Sum(nil), hasher: h, zone: h.Zone("\x00tollgate challenge")}
	if cfg.Template != "" {
		text, err := os.ReadFile(cfg.Template)
		if err != nil {
			return nil, fmt.Errorf("tollgate: cookie challenge template %q: %w; want a readable file holding an HTML template that includes {{template \"tollgate_challenge\" .}}", cfg.Template, err)
		}
		if c.page, err = parseChallengePage(cfg.Template, string(text)); err != nil {
			return nil, fmt.Errorf("tollgate: cookie challenge template %q: %w", cfg.Template, err)
		}
	}
	if cfg.ExceptRaw != nil {
		mods, err := ctx.LoadModule(cfg, "ExceptRaw")
		if err != nil {
			return nil, fmt.Errorf("tollgate: cookie challenge except: loading matchers: %w", err)
		}
		for _, mod := range mods.(map[string]any) {
			c.except = append(c.except, mod)
		}
	}
	return c, nil
}

// exempt reports whether r is one the owner said never to challenge.
func (c *challenger) exempt(r *http.Request) bool {
	if len(c.except) == 0 {
		return false
	}
	ok, err := c.except.MatchWithError(r)
	return ok || err != nil // a matcher that fails does not challenge
}

func (c *challenger) sign(b []byte) []byte {
	m := hmac.New(sha256.New, c.mac)
	m.Write(b)
	return m.Sum(nil)[:challengeMACLn]
}

// referenceOf returns the reference ID of a token, as the page shows it
// and the log prints it: the first bytes of its random ID, in hex; "" for
// a token that does not decode.
func referenceOf(token string) string {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) != challengeTokenLen {
		return ""
	}
	return hex.EncodeToString(raw[16 : 16+challengeRefLen])
}

// challengeRefLen is how many bytes of a token's random ID its reference
// shows: enough to find one page among a day's in the log.
const challengeRefLen = 6

// token returns a new challenge for a client of network net at now.
func (c *challenger) token(net uint64, now time.Time) (string, error) {
	b := make([]byte, 16+challengeIDLen, challengeTokenLen)
	binary.BigEndian.PutUint64(b, uint64(now.UnixNano()))
	binary.BigEndian.PutUint64(b[8:], net)
	if _, err := rand.Read(b[16:]); err != nil {
		return "", err
	}
	b = append(b, c.sign(b)...)
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Reasons a proof is refused.
var (
	errChallengeMalformed = errors.New("malformed challenge")
	errChallengeForged    = errors.New("challenge not issued by this site")
	errChallengeExpired   = errors.New("challenge expired")
	errChallengeNetwork   = errors.New("challenge issued to another network")
	errChallengeWork      = errors.New("proof of work does not meet the difficulty")
	errChallengeReplayed  = errors.New("challenge already used")
)

// check verifies the answer to token from a client of network net at now,
// without spending it: the MAC and the network are compared in constant
// time, then one SHA-256 checks the work. It returns the token's ID.
func (c *challenger) check(token, answer string, net uint64, now time.Time) ([]byte, error) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) != challengeTokenLen || len(answer) == 0 || len(answer) > 20 {
		return nil, errChallengeMalformed
	}
	body, mac := raw[:16+challengeIDLen], raw[16+challengeIDLen:]
	if !hmac.Equal(mac, c.sign(body)) {
		return nil, errChallengeForged
	}
	issued := time.Unix(0, int64(binary.BigEndian.Uint64(body)))
	if now.Before(issued.Add(-time.Minute)) || now.After(issued.Add(challengeTTL)) {
		return nil, errChallengeExpired
	}
	var want [8]byte
	binary.BigEndian.PutUint64(want[:], net)
	if subtle.ConstantTimeCompare(body[8:16], want[:]) != 1 {
		return nil, errChallengeNetwork
	}
	if _, err := strconv.ParseUint(answer, 10, 64); err != nil {
		return nil, errChallengeMalformed
	}
	if leadingZeroBits(sha256.Sum256([]byte(token+":"+answer))) < c.difficulty {
		return nil, errChallengeWork
	}
	return body[16:], nil
}

func leadingZeroBits(sum [32]byte) int {
	n := 0
	for i := 0; i < len(sum); i += 8 {
		w := binary.BigEndian.Uint64(sum[i:])
		n += bits.LeadingZeros64(w)
		if w != 0 {
			break
		}
	}
	return n
}

// wantsChallenge reports whether r is a browser asking for a page: a GET
// whose Accept names text/html. Other clients (APIs, scripts, fetches) are
// never challenged.
func wantsChallenge(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html")
}

// serveChallenge answers r with the challenge page for a client of network
// net; the page comes back to r's URL once solved.
func (c *challenger) serveChallenge(w http.ResponseWriter, r *http.Request, net uint64, now time.Time) error {
	tok, err := c.token(net, now)
	if err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, fmt.Errorf("making a challenge: %w", err))
	}
	ref := referenceOf(tok)
	var buf bytes.Buffer
	if err := c.page.Execute(&buf, challengePageData{
		Token:      tok,
		Difficulty: c.difficulty,
		Action:     ChallengePath,
		Return:     r.URL.RequestURI(),
		Host:       hostName(r.Host),
		Reference:  ref,
	}); err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, fmt.Errorf("rendering the challenge page %s: %w", ref, err))
	}
	if ce := c.logger.Check(zapcore.InfoLevel, "challenge served"); ce != nil {
		ce.Write(zap.String("reference", ref), zap.String("network", adminapi.NetworkID(net)))
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; form-action 'self'")
	hdr.Set("X-Robots-Tag", "noindex")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(buf.Bytes())
	return err
}

// hostName is the host a request named, without its port.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}

// safeReturn keeps a return URL on this site: a path, not //host or a
// scheme. Browsers drop TABs and newlines from a URL and read "\\" as "/",
// so "/\t/evil.example" is "//evil.example" to them: a return URL with any
// control character or space is refused (the challenge page sends the
// request's URI, escaped, which has none).
func safeReturn(s string) string {
	if !strings.HasPrefix(s, "/") || strings.HasPrefix(s, "//") || strings.HasPrefix(s, "/\\") {
		return "/"
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return "/"
		}
	}
	return s
}

// spend marks a token ID used, in the limiter d decides with (one use per
// challengeTTL), and reports whether it was still unused.
func (c *challenger) spend(d decider, tokenID []byte, now time.Time) bool {
	key := limiter.ZoneKey(c.hasher.Sum64Bytes(tokenID), c.zone)
	var res [1]limiter.Result
	ok, _ := d.Take(now, []limiter.Request{{
		Key:   key,
		Zone:  c.zone,
		Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Quota: 1, Burst: 1, Window: challengeTTL + time.Minute},
	}}, res[:])
	return ok
}

// challengeResult names a proof's result as the metric and the log do.
func challengeResult(err error) string {
	switch err {
	case nil:
		return "passed"
	case errChallengeForged:
		return "forged"
	case errChallengeExpired:
		return "expired"
	case errChallengeNetwork:
		return "network"
	case errChallengeWork:
		return "work"
	case errChallengeReplayed:
		return "replayed"
	}
	return "malformed"
}

// challengeCounter returns the counter of a proof's result; nil is passed.
func challengeCounter(err error) prometheus.Counter {
	initMetrics()
	return metrics.challenge.WithLabelValues(challengeResult(err))
}

// logProof logs the outcome of a proof under its page's reference ID, so
// that a visitor who reports the reference the page showed can be found:
// refused at info level, passed at debug.
func (c *challenger) logProof(ref string, err error) {
	level, msg := zapcore.DebugLevel, "challenge passed"
	if err != nil {
		level, msg = zapcore.InfoLevel, "challenge refused"
	}
	if ce := c.logger.Check(level, msg); ce != nil {
		fields := []zap.Field{zap.String("reference", ref)}
		if err != nil {
			fields = append(fields, zap.String("reason", challengeResult(err)))
		}
		ce.Write(fields...)
	}
}
