package fingerprint

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
)

// MinSecretLen is the shortest secret accepted, in bytes.
const MinSecretLen = 32

// Session is what a session cookie carries: a random ID and when it was
// issued.
type Session struct {
	ID     [16]byte  // random: a version 4 UUID
	Issued time.Time // whole seconds
}

// NewSession returns a session with a random (version 4 UUID) ID issued at now.
func NewSession(now time.Time) (Session, error) {
	var s Session
	if _, err := rand.Read(s.ID[:]); err != nil {
		return s, fmt.Errorf("generating session ID: %w", err)
	}
	s.ID[6] = s.ID[6]&0x0f | 0x40 // version 4
	s.ID[8] = s.ID[8]&0x3f | 0x80 // RFC 4122 variant
	s.Issued = now.Truncate(time.Second)
	return s, nil
}

// AppendID appends the session ID in UUID form: lowercase hex, as
// encoding/hex writes it, with dashes after the 4th, 6th, 8th and 10th
// bytes. It is written on every request with a session (the client ID is
// hashed from it), so eight digits at a time (see hexDigits8).
func (s Session) AppendID(b []byte) []byte {
	id := &s.ID
	h0 := hexDigits8(binary.BigEndian.Uint32(id[0:4]))
	h1 := hexDigits8(binary.BigEndian.Uint32(id[4:8]))
	h2 := hexDigits8(binary.BigEndian.Uint32(id[8:12]))
	h3 := hexDigits8(binary.BigEndian.Uint32(id[12:16]))
	var buf [36]byte
	binary.BigEndian.PutUint64(buf[0:8], h0)
	buf[8] = '-'
	binary.BigEndian.PutUint32(buf[9:13], uint32(h1>>32))
	buf[13] = '-'
	binary.BigEndian.PutUint32(buf[14:18], uint32(h1))
	buf[18] = '-'
	binary.BigEndian.PutUint32(buf[19:23], uint32(h2>>32))
	buf[23] = '-'
	binary.BigEndian.PutUint32(buf[24:28], uint32(h2))
	binary.BigEndian.PutUint64(buf[28:36], h3)
	return append(b, buf[:]...)
}

// CookieStatus is what verifying a cookie found.
type CookieStatus uint8

const (
	// CookieAbsent: the request has no session cookie.
	CookieAbsent CookieStatus = iota
	// CookieValid: signed with the current secret, within its max age.
	CookieValid
	// CookieOldSecret: valid, but signed with a secret other than the
	// first, so it should be issued again under the first.
	CookieOldSecret
	// CookieMalformed: not a cookie Tollgate could have written (bad
	// encoding, length or version, or truncated).
	CookieMalformed
	// CookieForged: well formed, but no secret signed it.
	CookieForged
	// CookieExpired: validly signed, issued longer than the max age ago.
	CookieExpired
	// CookieFuture: validly signed, issued later than now (beyond the
	// allowed clock skew).
	CookieFuture

	// NumCookieStatuses is the number of statuses: each is below it.
	NumCookieStatuses = iota
)

var cookieStatusNames = [NumCookieStatuses]string{"absent", "valid", "old_secret", "malformed", "forged", "expired", "future"}

// String names the status, as used in metric labels.
func (s CookieStatus) String() string {
	if int(s) < len(cookieStatusNames) {
		return cookieStatusNames[s]
	}
	return fmt.Sprintf("cookie_status(%d)", s)
}

// Usable reports whether the cookie identifies a session.
func (s CookieStatus) Usable() bool { return s == CookieValid || s == CookieOldSecret }

// cookieVersion is the first byte of every cookie, so the format can change.
const cookieVersion = 1

// Cookie layout: version (1) | session ID (16) | issued, Unix seconds (8) |
// HMAC-SHA256 of the preceding bytes (32). 57 bytes, 76 in base64url.
const (
	cookieSigned  = 1 + 16 + 8
	cookieBytes   = cookieSigned + sha256.Size
	cookieEncoded = (cookieBytes*8 + 5) / 6
)

// MaxClockSkew is how far in the future a cookie's issue time may be, to
// allow for clocks of different nodes disagreeing a little.
const MaxClockSkew = time.Minute

// Signer signs and verifies session cookies with a list of secrets: the
// first signs, all verify. Cookies that verified are remembered (a bounded
// number of them), so a returning client costs a map lookup rather than an
// HMAC. It is safe for concurrent use.
type Signer struct {
	macs     []*sync.Pool // of *macState, one pool per secret
	verified verifiedCache
}

// NewSigner returns a Signer for the given secrets, each at least
// MinSecretLen bytes long.
func NewSigner(secrets [][]byte) (*Signer, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("no secret")
	}
	s := &Signer{}
	s.verified.init()
	for i, secret := range secrets {
		if len(secret) < MinSecretLen {
			return nil, fmt.Errorf("secret #%d is %d bytes; it must be at least %d", i+1, len(secret), MinSecretLen)
		}
		key := cookieMACKey(secret)
		s.macs = append(s.macs, &sync.Pool{New: func() any { return &macState{h: hmac.New(sha256.New, key)} }})
	}
	return s, nil
}

// cookieMACKey derives the cookie-signing key from a secret, so the secret
// itself signs nothing a client sees.
func cookieMACKey(secret []byte) []byte {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("tollgate cookie v1"))
	return mac.Sum(nil)
}

// macState is a keyed HMAC with buffers of its own: bytes handed to a
// hash.Hash escape to the heap, so the message is copied into the pooled
// state rather than passed from the caller's stack.
type macState struct {
	h   hash.Hash
	msg [cookieSigned]byte
	sum [sha256.Size]byte
}

// mac returns the HMAC of msg under secret i.
func (s *Signer) mac(i int, msg *[cookieSigned]byte) [sha256.Size]byte {
	st := s.macs[i].Get().(*macState)
	st.msg = *msg
	st.h.Reset()
	st.h.Write(st.msg[:])
	st.h.Sum(st.sum[:0])
	sum := st.sum
	s.macs[i].Put(st)
	return sum
}

// Encode returns the cookie value for sess, signed with the first secret.
func (s *Signer) Encode(sess Session) string {
	var buf [cookieEncoded]byte
	return string(s.AppendEncoded(buf[:0], sess))
}

// AppendEncoded appends the cookie value for sess, signed with the first
// secret, to b.
func (s *Signer) AppendEncoded(b []byte, sess Session) []byte {
	var raw [cookieBytes]byte
	raw[0] = cookieVersion
	copy(raw[1:17], sess.ID[:])
	binary.BigEndian.PutUint64(raw[17:25], uint64(sess.Issued.Unix()))
	sum := s.mac(0, (*[cookieSigned]byte)(raw[:cookieSigned]))
	copy(raw[cookieSigned:], sum[:])
	return base64.RawURLEncoding.AppendEncode(b, raw[:])
}

// Decode verifies a cookie value at now. A cookie older than maxAge (if
// positive) is expired. The signature is compared in constant time.
func (s *Signer) Decode(value string, now time.Time, maxAge time.Duration) (Session, CookieStatus) {
	var sess Session
	if value == "" {
		return sess, CookieAbsent
	}
	if len(value) != cookieEncoded {
		return sess, CookieMalformed
	}
	if sess, status, ok := s.verified.get(value); ok {
		return checkAge(sess, status, now, maxAge)
	}
	var raw [cookieBytes]byte
	if !decodeBase64URL(raw[:], value) {
		return sess, CookieMalformed
	}
	if raw[0] != cookieVersion {
		return sess, CookieMalformed
	}
	status := CookieForged
	for i := range s.macs {
		if sum := s.mac(i, (*[cookieSigned]byte)(raw[:cookieSigned])); hmac.Equal(sum[:], raw[cookieSigned:]) {
			status = CookieValid
			if i > 0 {
				status = CookieOldSecret
			}
			break
		}
	}
	if status == CookieForged {
		return sess, status
	}
	copy(sess.ID[:], raw[1:17])
	issued := int64(binary.BigEndian.Uint64(raw[17:25]))
	sess.Issued = time.Unix(issued, 0)
	s.verified.put(value, sess, status)
	return checkAge(sess, status, now, maxAge)
}

// checkAge turns a validly signed session into its status at now.
func checkAge(sess Session, status CookieStatus, now time.Time, maxAge time.Duration) (Session, CookieStatus) {
	switch age := sessionAge(now, sess.Issued); {
	case age < -MaxClockSkew: // issued after now + MaxClockSkew
		return Session{}, CookieFuture
	case maxAge > 0 && age > maxAge:
		return Session{}, CookieExpired
	}
	return sess, status
}

// sessionAge returns now.Sub(issued) for a session's issue time, which
// time.Unix made (a cookie's, so no monotonic clock reading), counted in
// Unix seconds and nanoseconds. Time.Sub of a time with a monotonic
// reading and one without takes its slow path, which checks for overflow
// by adding the difference back and comparing (about 140 instructions, and
// a request with a session needed three); this is about a tenth of that.
// Differences too large for that arithmetic, which no cookie Tollgate signs
// comes near, go to Time.Sub.
func sessionAge(now, issued time.Time) time.Duration {
	s := now.Unix() - issued.Unix()
	if s <= -1<<32 || s >= 1<<32 {
		return now.Sub(issued) // saturates at the bounds of a Duration
	}
	return time.Duration(s)*time.Second + time.Duration(now.Nanosecond()-issued.Nanosecond())
}

// verifiedCacheSize is how many verified cookies a Signer remembers.
const verifiedCacheSize = 1 << 16

// verifiedWays is how many cookies share a set of the cache: a value may be
// kept in any of its set's entries. With one entry per set, 10,000 sessions
// visiting in turn missed the cache on about 14 % of visits, each costing
// an HMAC, as pairs of them sharing an entry kept evicting each other; with
// four, about 0.4 %.
const verifiedWays = 4

// verifiedCache remembers cookie values whose signature checked out, in a
// fixed table of sets of verifiedWays entries, the set chosen by a keyed
// hash of the value: no allocation, no growth, one set (four cache lines)
// read per lookup. Only validly signed values get in, and the full 64-bit
// hash must match, so a forged value passes only if it hashes like a
// verified one under a key it cannot know (2^-64). A new value goes first
// in its set and pushes out the one put in longest ago.
type verifiedCache struct {
	hasher keyhash.Hasher
	locks  [64]sync.Mutex
	sets   []verifiedSet
}

// verifiedSet is the entries a value may be kept in, the newest first.
type verifiedSet [verifiedWays]verifiedEntry

type verifiedEntry struct {
	tag    uint64 // keyed hash of the value; 0 is empty
	sess   Session
	status CookieStatus
}

func (c *verifiedCache) init() {
	key := make([]byte, 32)
	rand.Read(key)
	c.hasher = keyhash.New(key, "verified cookies")
	c.sets = make([]verifiedSet, verifiedCacheSize/verifiedWays)
}

// set returns the tag of value, its set and the lock that guards it.
func (c *verifiedCache) set(value string) (tag uint64, set *verifiedSet, mu *sync.Mutex) {
	tag = c.hasher.String(value) | 1 // never 0
	i := int(tag>>1) & (len(c.sets) - 1)
	return tag, &c.sets[i], &c.locks[i%len(c.locks)]
}

func (c *verifiedCache) get(value string) (Session, CookieStatus, bool) {
	tag, set, mu := c.set(value)
	mu.Lock()
	for i := range set {
		if set[i].tag == tag {
			e := set[i]
			mu.Unlock()
			return e.sess, e.status, true
		}
	}
	mu.Unlock()
	return Session{}, 0, false
}

func (c *verifiedCache) put(value string, sess Session, status CookieStatus) {
	tag, set, mu := c.set(value)
	mu.Lock()
	i := 0
	for i < len(set)-1 && set[i].tag != tag {
		i++
	}
	copy(set[1:i+1], set[:i]) // the others move down; the last, or the value's own, is replaced
	set[0] = verifiedEntry{tag: tag, sess: sess, status: status}
	mu.Unlock()
}

// decodeBase64URL decodes unpadded base64url s into dst, which must be
// exactly as long as s decodes to, without allocating. It rejects any
// character outside the alphabet and non-zero padding bits.
func decodeBase64URL(dst []byte, s string) bool {
	if len(s) != (len(dst)*8+5)/6 {
		return false
	}
	var acc uint32
	bits, j := 0, 0
	for i := 0; i < len(s); i++ {
		v := base64URLValue[s[i]]
		if v == 0xff {
			return false
		}
		acc = acc<<6 | uint32(v)
		if bits += 6; bits >= 8 {
			bits -= 8
			dst[j] = byte(acc >> bits)
			j++
		}
	}
	return acc&(1<<bits-1) == 0
}

var base64URLValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := range len(alphabet) {
		t[alphabet[i]] = byte(i)
	}
	return t
}()
