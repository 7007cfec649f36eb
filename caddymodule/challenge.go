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
	"errors"
	"fmt"
	"html/template"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"

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
	// tollgate handler answers it before any zone is matched.
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

//go:embed challenge.html
var challengeHTML string

var challengePage = template.Must(template.New("challenge").Parse(challengeHTML))

// challenger issues proof-of-work challenges and checks their answers. A
// challenge is a token the server signs: when it was issued, the client's
// network, a random ID. The answer is a counter such that SHA-256 of
// "token:counter" starts with difficulty zero bits. A token is good for
// challengeTTL, from the network it was issued to, once: its ID is spent in
// the limiter, whose take is atomic, so a replay is refused even by
// another node of a cluster.
type challenger struct {
	difficulty int
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
	c := &challenger{difficulty: cfg.Difficulty, mac: m.Sum(nil), hasher: h, zone: h.Zone("\x00tollgate challenge")}
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
	var buf bytes.Buffer
	if err := challengePage.Execute(&buf, map[string]any{
		"Token":      tok,
		"Difficulty": c.difficulty,
		"Action":     ChallengePath,
		"Return":     r.URL.RequestURI(),
	}); err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, err)
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

// challengeCounter returns the counter of a proof's result; nil is passed.
func challengeCounter(err error) prometheus.Counter {
	result := "passed"
	switch err {
	case nil:
	case errChallengeForged:
		result = "forged"
	case errChallengeExpired:
		result = "expired"
	case errChallengeNetwork:
		result = "network"
	case errChallengeWork:
		result = "work"
	case errChallengeReplayed:
		result = "replayed"
	default:
		result = "malformed"
	}
	initMetrics()
	return metrics.challenge.WithLabelValues(result)
}
