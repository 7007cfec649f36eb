package fingerprint

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
)

// Defaults of the session cookie.
const (
	DefaultCookieName   = "__tollgate"
	DefaultCookieMaxAge = 30 * 24 * time.Hour
)

// Config sets up an Identifier.
type Config struct {
	// Secrets sign and verify session cookies: the first signs, all
	// verify. Each is at least MinSecretLen bytes. The hashes of IP
	// prefixes and fingerprints are keyed with the last, so rotating a new
	// secret in at the front changes no client ID.
	Secrets [][]byte
	// CookieName is the session cookie's name; default DefaultCookieName.
	CookieName string
	// CookieMaxAge is how long a session cookie stays valid after it was
	// issued; default DefaultCookieMaxAge. Cookies in use are issued again
	// once past half of it, so active sessions do not expire.
	CookieMaxAge time.Duration
	// Prefixes group client IPs into networks.
	Prefixes Prefixes
}

// Kind says what a client ID was derived from.
type Kind uint8

const (
	// KindFingerprint: no usable cookie; the ID blends the request
	// fingerprint with the client's IP network.
	KindFingerprint Kind = iota
	// KindSession: the ID is the session of a valid cookie.
	KindSession
)

// String names the kind, as used in placeholders.
func (k Kind) String() string {
	if k == KindSession {
		return "session"
	}
	return "fingerprint"
}

// Identity is who a request comes from. It holds no raw IP: only a keyed
// hash of the client's network.
type Identity struct {
	Kind    Kind    // what the ID is made of: a session, or a fingerprint
	Session Session // when Kind is KindSession
	// Cookie is what verifying the request's session cookie found.
	Cookie CookieStatus
	// Reissue is set when a valid cookie should be sent again: signed with
	// an older secret, or past half its max age.
	Reissue bool
	// Fingerprint hashes the request's signals (and JA4, over TLS). It,
	// Network and Digest are only derived without a usable cookie.
	Fingerprint uint64
	// Network is the keyed hash of the client's IP prefix.
	Network uint64
	// Digest blends Fingerprint with Network: the client ID of a request
	// without a usable cookie.
	Digest uint64
}

// IDLen is the longest client ID AppendID produces.
const IDLen = 2 + 36

// AppendID appends the client ID: "s:" and the session UUID, or "f:" and
// 16 hex digits of Digest.
func (id Identity) AppendID(b []byte) []byte {
	if id.Kind == KindSession {
		return id.Session.AppendID(append(b, "s:"...))
	}
	var d [18]byte
	d[0], d[1] = 'f', ':'
	binary.BigEndian.PutUint64(d[2:10], hexDigits8(uint32(id.Digest>>32)))
	binary.BigEndian.PutUint64(d[10:18], hexDigits8(uint32(id.Digest)))
	return append(b, d[:]...)
}

// hexDigits8 returns the 8 hex digits of x, lowercase, as encoding/hex
// writes its 4 big-endian bytes: the first digit in the top byte, so that
// storing the result big-endian writes the text. The nibbles are spread
// one a byte, and each becomes '0'+n, or 'a'+n-10 from 10 up (n+6 carries
// into the byte's fifth bit exactly then), all eight at once.
func hexDigits8(x uint32) uint64 {
	v := uint64(x)
	v = (v | v<<16) & 0x0000ffff0000ffff
	v = (v | v<<8) & 0x00ff00ff00ff00ff
	v = (v | v<<4) & 0x0f0f0f0f0f0f0f0f
	letters := (v + 0x0606060606060606) >> 4 & 0x0101010101010101
	return v + 0x3030303030303030 + letters*('a'-'0'-10)
}

// ID returns the client ID as a string.
func (id Identity) ID() string { return string(id.AppendID(make([]byte, 0, IDLen))) }

// Identifier derives identities from requests. It is safe for concurrent
// use.
type Identifier struct {
	cfg      Config
	signer   *Signer
	signals  keyhash.Hasher                        // request signals
	networks keyhash.Hasher                        // IP prefixes
	blend    keyhash.Hasher                        // fingerprint ⊕ network
	seen     [len(cookieStatusNames)]atomic.Uint64 // cookies by status
}

// NewIdentifier checks cfg, fills in its defaults and returns an Identifier.
func NewIdentifier(cfg Config) (*Identifier, error) {
	if cfg.CookieName == "" {
		cfg.CookieName = DefaultCookieName
	}
	if cfg.CookieMaxAge == 0 {
		cfg.CookieMaxAge = DefaultCookieMaxAge
	}
	if cfg.CookieMaxAge < time.Minute {
		return nil, fmt.Errorf("cookie max age %s: must be at least 1m", cfg.CookieMaxAge)
	}
	if err := cfg.Prefixes.Validate(); err != nil {
		return nil, err
	}
	if err := CheckCookieName(cfg.CookieName); err != nil {
		return nil, err
	}
	signer, err := NewSigner(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	last := cfg.Secrets[len(cfg.Secrets)-1]
	return &Identifier{
		cfg:      cfg,
		signer:   signer,
		signals:  keyhash.New(last, "tollgate signals v1"),
		networks: keyhash.New(last, "tollgate network v1"),
		blend:    keyhash.New(last, "tollgate client v1"),
	}, nil
}

// CookieName returns the session cookie's name.
func (x *Identifier) CookieName() string { return x.cfg.CookieName }

// Identify derives the identity of r, whose client IP (as the proxy
// settings determine it) is clientIP and whose TLS ClientHello, if known,
// has the JA4 fingerprint ja4. clientIP is hashed here and kept nowhere.
func (x *Identifier) Identify(r *http.Request, clientIP, ja4 string, now time.Time) Identity {
	var id Identity
	if value, ok := cookieValue(r.Header, x.cfg.CookieName); ok {
		id.Session, id.Cookie = x.signer.Decode(value, now, x.cfg.CookieMaxAge)
		x.seen[id.Cookie].Add(1)
	}
	if id.Cookie.Usable() {
		id.Kind = KindSession
		id.Reissue = id.Cookie == CookieOldSecret || sessionAge(now, id.Session.Issued) > x.cfg.CookieMaxAge/2
		return id // the session says who it is: no need to look further
	}
	id.Fingerprint = fingerprintOf(x.signals, r, ja4)
	id.Network = x.network(clientIP)
	id.Digest = x.blend.Uint64(id.Fingerprint ^ keyhash.Mix(id.Network))
	return id
}

// Network returns the keyed hash of the IP network clientIP belongs to, as
// Identity.Network holds it for requests without a usable cookie.
func (x *Identifier) Network(clientIP string) uint64 { return x.network(clientIP) }

// network hashes the prefix clientIP belongs to. Anything that is not an
// IP address shares one network.
func (x *Identifier) network(clientIP string) uint64 {
	p, ok := x.cfg.Prefixes.Prefix(clientIP)
	if !ok {
		return x.networks.String("\x00not an IP")
	}
	var b [17]byte
	a := p.Addr().As16()
	copy(b[:], a[:])
	b[16] = byte(p.Bits())
	return x.networks.Bytes(b[:])
}

// Cookie returns the cookie carrying sess, issued again at now so its max
// age runs from now. Secure is set for TLS connections.
func (x *Identifier) Cookie(sess Session, now time.Time, secure bool) *http.Cookie {
	sess.Issued = now.Truncate(time.Second)
	return &http.Cookie{
		Name:     x.cfg.CookieName,
		Value:    x.signer.Encode(sess),
		Path:     "/",
		MaxAge:   int(x.cfg.CookieMaxAge / time.Second),
		HttpOnly: true,
		Secure:   secure,
		SameSite: http.SameSiteLaxMode,
	}
}

// SetCookie returns the Set-Cookie header that carries sess, issued again
// at now: what Cookie(sess, now, secure).String() renders, built in one
// allocation.
func (x *Identifier) SetCookie(sess Session, now time.Time, secure bool) string {
	sess.Issued = now.Truncate(time.Second)
	var buf [192]byte
	b := append(buf[:0], x.cfg.CookieName...)
	b = append(b, '=')
	b = x.signer.AppendEncoded(b, sess)
	b = append(b, "; Path=/"...)
	if maxAge := int64(x.cfg.CookieMaxAge / time.Second); maxAge > 0 {
		b = append(b, "; Max-Age="...)
		b = strconv.AppendInt(b, maxAge, 10)
	}
	b = append(b, "; HttpOnly"...)
	if secure {
		b = append(b, "; Secure"...)
	}
	b = append(b, "; SameSite=Lax"...)
	return string(b)
}

// CookieCounts returns how many cookies were seen with each status since the
// Identifier was created (absent cookies are not counted).
func (x *Identifier) CookieCounts() map[CookieStatus]uint64 {
	out := make(map[CookieStatus]uint64)
	for i := range x.seen {
		if n := x.seen[i].Load(); n > 0 {
			out[CookieStatus(i)] = n
		}
	}
	return out
}

// CheckCookieName refuses a cookie name that is not an HTTP token, which a
// Set-Cookie header could not carry as it is.
func CheckCookieName(name string) error {
	if !validCookieName(name) {
		return fmt.Errorf("cookie name %q: must be a token (letters, digits and !#$%%&'*+-.^_`|~)", name)
	}
	return nil
}

// validCookieName reports whether name is a non-empty HTTP token.
func validCookieName(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isAlnum(c) && strings.IndexByte("!#$%&'*+-.^_`|~", c) < 0 {
			return false
		}
	}
	return name != ""
}

// cookieValue finds the first cookie called name in the request's Cookie
// headers without parsing (and allocating for) the others. Quotes around
// the value are removed, as net/http does.
func cookieValue(h http.Header, name string) (string, bool) {
	for _, line := range h["Cookie"] {
		for more := true; more; {
			var part string
			part, line, more = strings.Cut(line, ";")
			part = strings.TrimSpace(part)
			k, v, ok := strings.Cut(part, "=")
			if !ok || k != name {
				continue
			}
			if len(v) > 1 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return v, true
		}
	}
	return "", false
}
