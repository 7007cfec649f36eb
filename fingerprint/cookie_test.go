package fingerprint

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"math"
	"strings"
	"testing"
	"time"
)

var (
	secretA = []byte("0123456789abcdef0123456789abcdef-a")
	secretB = []byte("0123456789abcdef0123456789abcdef-b")
	t0      = time.Unix(1_790_000_000, 0)
)

func mustSigner(t testing.TB, secrets ...[]byte) *Signer {
	t.Helper()
	s, err := NewSigner(secrets)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustSession(t testing.TB, now time.Time) Session {
	t.Helper()
	s, err := NewSession(now)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCookieRoundTrip(t *testing.T) {
	s := mustSigner(t, secretA)
	sess := mustSession(t, t0)
	value := s.Encode(sess)
	if len(value) != cookieEncoded || strings.ContainsAny(value, "+/=") {
		t.Fatalf("cookie %q: want %d base64url characters", value, cookieEncoded)
	}
	got, status := s.Decode(value, t0.Add(time.Hour), 24*time.Hour)
	if status != CookieValid || got.ID != sess.ID || !got.Issued.Equal(sess.Issued) {
		t.Fatalf("Decode = %+v, %v; want %+v, valid", got, status, sess)
	}
	if id := string(sess.AppendID(nil)); len(id) != 36 || id[14] != '4' {
		t.Errorf("session ID %q is not a version 4 UUID", id)
	}
}

func TestCookieRotation(t *testing.T) {
	old := mustSigner(t, secretA)
	rotated := mustSigner(t, secretB, secretA) // new secret first
	sess := mustSession(t, t0)

	_, status := rotated.Decode(old.Encode(sess), t0, time.Hour)
	if status != CookieOldSecret || !status.Usable() {
		t.Fatalf("cookie signed with the old secret: %v; want old_secret (usable, to be issued again)", status)
	}
	if _, status := rotated.Decode(rotated.Encode(sess), t0, time.Hour); status != CookieValid {
		t.Fatalf("cookie signed with the new secret: %v", status)
	}
	// Once the old secret is dropped, its cookies are forged.
	if _, status := mustSigner(t, secretB).Decode(old.Encode(sess), t0, time.Hour); status != CookieForged {
		t.Fatalf("cookie of a dropped secret: %v; want forged", status)
	}
}

func TestCookieRejections(t *testing.T) {
	s := mustSigner(t, secretA)
	sess := mustSession(t, t0)
	good := s.Encode(sess)
	raw, _ := base64.RawURLEncoding.DecodeString(good)

	flip := func(i int) string {
		b := bytes.Clone(raw)
		b[i] ^= 1
		return base64.RawURLEncoding.EncodeToString(b)
	}
	for _, tc := range []struct {
		name  string
		value string
		now   time.Time
		want  CookieStatus
	}{
		{"empty", "", t0, CookieAbsent},
		{"truncated", good[:len(good)-1], t0, CookieMalformed},
		{"too long", good + "A", t0, CookieMalformed},
		{"not base64", strings.Repeat("*", cookieEncoded), t0, CookieMalformed},
		{"standard base64 alphabet", "+" + good[1:], t0, CookieMalformed},
		{"padding", good[:len(good)-1] + "=", t0, CookieMalformed},
		{"other version", flip(0), t0, CookieMalformed},
		{"session ID changed", flip(5), t0, CookieForged},
		{"issue time changed", flip(24), t0, CookieForged},
		{"signature changed", flip(40), t0, CookieForged},
		{"expired", good, t0.Add(24*time.Hour + time.Second), CookieExpired},
		{"future dated", good, t0.Add(-MaxClockSkew - time.Second), CookieFuture},
		{"within clock skew", good, t0.Add(-MaxClockSkew + time.Second), CookieValid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, status := s.Decode(tc.value, tc.now, 24*time.Hour)
			if status != tc.want {
				t.Fatalf("status %v, want %v", status, tc.want)
			}
			if !status.Usable() && got != (Session{}) {
				t.Errorf("an unusable cookie returned a session %+v", got)
			}
		})
	}
}

func TestNewSignerRejectsShortSecrets(t *testing.T) {
	_, err := NewSigner([][]byte{secretA, []byte("too short")})
	if err == nil || !strings.Contains(err.Error(), "secret #2 is 9 bytes; it must be at least 32") {
		t.Fatalf("error = %v", err)
	}
	if _, err := NewSigner(nil); err == nil {
		t.Fatal("no secrets accepted")
	}
}

// FuzzDecodeCookie feeds arbitrary values to the cookie parser: it must
// never panic, and whatever it accepts must be exactly what Encode writes.
func FuzzDecodeCookie(f *testing.F) {
	s := mustSigner(f, secretA, secretB)
	good := s.Encode(mustSession(f, t0))
	f.Add(good)
	f.Add(good[:40])
	f.Add("")
	f.Add(strings.Repeat("A", cookieEncoded))
	f.Add(strings.Repeat("_", cookieEncoded))
	f.Add("AQ" + good[2:])
	f.Fuzz(func(t *testing.T, value string) {
		sess, status := s.Decode(value, t0, time.Hour)
		if status.Usable() && s.Encode(sess) != value {
			t.Fatalf("accepted %q, which encodes back as %q", value, s.Encode(sess))
		}
	})
}

func BenchmarkDecodeCookie(b *testing.B) {
	s := mustSigner(b, secretA)
	value := s.Encode(mustSession(b, t0))
	b.ReportAllocs()
	for b.Loop() {
		if _, st := s.Decode(value, t0, time.Hour); st != CookieValid {
			b.Fatal(st)
		}
	}
}

func TestVerifiedCookiesAreRememberedButStillAged(t *testing.T) {
	s := mustSigner(t, secretA)
	value := s.Encode(mustSession(t, t0))
	if _, st := s.Decode(value, t0, time.Hour); st != CookieValid {
		t.Fatal(st)
	}
	if _, _, ok := s.verified.get(value); !ok {
		t.Fatal("a verified cookie was not remembered")
	}
	// From the cache, expiry and future dates still apply.
	if _, st := s.Decode(value, t0.Add(2*time.Hour), time.Hour); st != CookieExpired {
		t.Errorf("a remembered cookie past its max age: %v", st)
	}
	if _, st := s.Decode(value, t0.Add(-time.Hour), time.Hour); st != CookieFuture {
		t.Errorf("a remembered cookie before its issue time: %v", st)
	}
	// Forged values are never remembered.
	forged := value[:len(value)-2] + "AA"
	s.Decode(forged, t0, time.Hour)
	if _, _, ok := s.verified.get(forged); ok {
		t.Error("a forged cookie was remembered")
	}
}

func TestVerifiedCacheIsBounded(t *testing.T) {
	s := mustSigner(t, secretA)
	for i := range verifiedCacheSize + 5000 {
		var sess Session
		binary.BigEndian.PutUint64(sess.ID[:], uint64(i))
		sess.Issued = t0
		s.Decode(s.Encode(sess), t0, time.Hour)
	}
	if n := len(s.verified.sets) * verifiedWays; n != verifiedCacheSize {
		t.Fatalf("the cache holds %d slots; the bound is %d", n, verifiedCacheSize)
	}
}

// Cookies that share a set of the cache are all remembered, up to its
// ways, and a value put again is not kept twice.
func TestVerifiedCacheKeepsASetsWays(t *testing.T) {
	s := mustSigner(t, secretA)
	c := &s.verified
	var values []string
	var first *verifiedSet
	for i := 0; len(values) < verifiedWays+1; i++ { // ways+1 values of one set
		var sess Session
		binary.BigEndian.PutUint64(sess.ID[:], uint64(i))
		sess.Issued = t0
		v := s.Encode(sess)
		_, set, _ := c.set(v)
		if first == nil {
			first = set
		}
		if set == first {
			values = append(values, v)
		}
	}
	for _, v := range values[:verifiedWays] {
		s.Decode(v, t0, time.Hour)
		s.Decode(v, t0, time.Hour) // found, not put again
	}
	for i, v := range values[:verifiedWays] {
		if _, _, ok := c.get(v); !ok {
			t.Fatalf("value %d of %d in one set was not remembered", i, verifiedWays)
		}
	}
	s.Decode(values[verifiedWays], t0, time.Hour)
	if _, _, ok := c.get(values[0]); ok {
		t.Error("the value put in longest ago was kept past the set's ways")
	}
	for i, v := range values[1:] {
		if _, _, ok := c.get(v); !ok {
			t.Errorf("value %d was pushed out; only the oldest should be", i+1)
		}
	}
}

// TestSessionAgeIsSub checks the session's age against Time.Sub, which it
// replaces: for issue times as a cookie carries them (whole seconds, from
// time.Unix), now with and without a monotonic reading, differences around
// the clock skew and the max age to the nanosecond, and ones too large for
// a Duration.
func TestSessionAgeIsSub(t *testing.T) {
	wall := time.Now()
	nows := []time.Time{wall, wall.Round(0), t0, time.Unix(0, 0), time.Unix(1<<40, 999_999_999)}
	var diffs []time.Duration
	for _, d := range []time.Duration{0, MaxClockSkew, DefaultCookieMaxAge / 2, DefaultCookieMaxAge, 24 * time.Hour, 100 * 365 * 24 * time.Hour} {
		for _, e := range []time.Duration{-time.Second, -1, 0, 1, time.Second} {
			diffs = append(diffs, d+e, -d+e)
		}
	}
	for _, now := range nows {
		for _, d := range diffs {
			issued := time.Unix(now.Add(-d).Unix(), 0)
			if got, want := sessionAge(now, issued), now.Sub(issued); got != want {
				t.Errorf("now %v, issued %v: age %v, want %v", now, issued, got, want)
			}
		}
		for _, sec := range []int64{math.MinInt64, -1 << 40, -1 << 32, 1 << 32, 1 << 40, math.MaxInt64} {
			issued := time.Unix(sec, 0)
			if got, want := sessionAge(now, issued), now.Sub(issued); got != want {
				t.Errorf("now %v, issued at %d s: age %v, want %v", now, sec, got, want)
			}
		}
	}
}

// TestSessionAppendIDIsHex checks the session ID's text against the UUID
// form written with encoding/hex, for IDs of every byte value.
func TestSessionAppendIDIsHex(t *testing.T) {
	for v := range 256 {
		var s Session
		for i := range s.ID {
			s.ID[i] = byte(v + 37*i)
		}
		h := hex.EncodeToString(s.ID[:])
		want := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
		if got := string(s.AppendID([]byte("s:"))); got != "s:"+want {
			t.Fatalf("ID % x: %q, want %q", s.ID, got, "s:"+want)
		}
	}
}
