package fingerprint

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func mustIdentifier(t testing.TB, cfg Config) *Identifier {
	t.Helper()
	if cfg.Secrets == nil {
		cfg.Secrets = [][]byte{secretA}
	}
	x, err := NewIdentifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// chrome returns a request as a desktop Chrome sends it, for the given
// resource kind: the Accept and Accept-Encoding headers vary by kind.
func chrome(kind string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "https://example.com/"+kind, nil)
	r.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/142.0.0.0 Safari/537.36")
	r.Header.Set("Accept-Language", "en-GB,en;q=0.9")
	r.Header.Set("Sec-CH-UA", `"Chromium";v="142", "Google Chrome";v="142", "Not_A Brand";v="99"`)
	r.Header.Set("Sec-CH-UA-Mobile", "?0")
	r.Header.Set("Sec-CH-UA-Platform", `"Linux"`)
	switch kind {
	case "page":
		r.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
		r.Header.Set("Accept-Encoding", "gzip, deflate, br, zstd")
	case "image":
		r.Header.Set("Accept", "image/avif,image/webp,image/apng,*/*;q=0.8")
		r.Header.Set("Accept-Encoding", "gzip, deflate, br, zstd")
	case "video":
		r.Header.Set("Accept", "*/*")
		r.Header.Set("Accept-Encoding", "identity;q=1, *;q=0")
		r.Header.Set("Range", "bytes=0-")
	case "fetch":
		r.Header.Set("Accept", "application/json")
		r.Header.Set("Accept-Encoding", "gzip, deflate, br, zstd")
	}
	return r
}

func TestFingerprintIsStableAcrossOneBrowsersRequests(t *testing.T) {
	x := mustIdentifier(t, Config{})
	want := x.Identify(chrome("page"), "203.0.113.7", "", t0)
	for _, kind := range []string{"image", "video", "fetch"} {
		got := x.Identify(chrome(kind), "203.0.113.7", "", t0.Add(time.Minute))
		if got.Fingerprint != want.Fingerprint || got.ID() != want.ID() {
			t.Errorf("%s request: fingerprint %x, ID %s; the page had %x, %s", kind, got.Fingerprint, got.ID(), want.Fingerprint, want.ID())
		}
	}
}

func TestFingerprintSeparatesBrowsers(t *testing.T) {
	x := mustIdentifier(t, Config{})
	base := x.Identify(chrome("page"), "203.0.113.7", "", t0)
	for name, change := range map[string]func(r *http.Request){
		"user agent":        func(r *http.Request) { r.Header.Set("User-Agent", "curl/8.5.0") },
		"language":          func(r *http.Request) { r.Header.Set("Accept-Language", "de-DE") },
		"platform":          func(r *http.Request) { r.Header.Set("Sec-CH-UA-Platform", `"Windows"`) },
		"no client hints":   func(r *http.Request) { r.Header.Del("Sec-CH-UA") },
		"empty client hint": func(r *http.Request) { r.Header.Set("Sec-CH-UA", "") },
	} {
		r := chrome("page")
		change(r)
		if x.Identify(r, "203.0.113.7", "", t0).Fingerprint == base.Fingerprint {
			t.Errorf("changing the %s kept the fingerprint", name)
		}
	}
	if x.Identify(chrome("page"), "203.0.113.7", "t13d1516h2_8daaf6152771_d8a2da3f94cd", t0).Fingerprint == base.Fingerprint {
		t.Error("a JA4 fingerprint did not change the fingerprint")
	}
}

func TestFingerprintCostIsBoundedOnHugeHeaders(t *testing.T) {
	x := mustIdentifier(t, Config{})
	a, b := chrome("page"), chrome("page")
	long := strings.Repeat("x", MaxSignalLen)
	a.Header.Set("User-Agent", long+strings.Repeat("a", 1<<20))
	b.Header.Set("User-Agent", long+"b")
	// Only the first MaxSignalLen bytes count, so these two look alike.
	if x.Identify(a, "203.0.113.7", "", t0).Fingerprint != x.Identify(b, "203.0.113.7", "", t0).Fingerprint {
		t.Error("bytes past MaxSignalLen changed the fingerprint")
	}
}

func TestBlendKeepsClientsApart(t *testing.T) {
	x := mustIdentifier(t, Config{})
	ids := make(map[string]bool)
	for i := range 100 {
		r := chrome("page")
		r.Header.Set("User-Agent", fmt.Sprintf("Client/%d", i))
		ids[x.Identify(r, "203.0.113.7", "", t0).ID()] = true
	}
	if len(ids) != 100 {
		t.Fatalf("100 fingerprints behind one IP gave %d client IDs", len(ids))
	}
	// One fingerprint from many networks is as many clients...
	nets := make(map[string]bool)
	for i := range 100 {
		nets[x.Identify(chrome("page"), fmt.Sprintf("198.51.100.%d", i), "", t0).ID()] = true
	}
	if len(nets) != 100 {
		t.Fatalf("one fingerprint from 100 IPs gave %d client IDs", len(nets))
	}
	// ...but addresses in one IPv6 /64 are one network.
	a := x.Identify(chrome("page"), "2001:db8:1:2::1", "", t0)
	b := x.Identify(chrome("page"), "2001:db8:1:2:ffff::9", "", t0)
	if a.ID() != b.ID() {
		t.Error("two addresses of one /64 gave two client IDs")
	}
}

func TestSessionCookieDecidesTheClientID(t *testing.T) {
	x := mustIdentifier(t, Config{CookieMaxAge: 24 * time.Hour})
	sess := mustSession(t, t0)
	cookie := x.Cookie(sess, t0, true)
	if !cookie.HttpOnly || !cookie.Secure || cookie.SameSite != http.SameSiteLaxMode || cookie.Path != "/" ||
		cookie.MaxAge != 86400 || cookie.Name != DefaultCookieName {
		t.Fatalf("cookie attributes %+v", cookie)
	}
	if x.Cookie(sess, t0, false).Secure {
		t.Error("Secure set on a cookie for a plain HTTP connection")
	}

	withCookie := func(ip string) Identity {
		r := chrome("page")
		r.AddCookie(cookie)
		return x.Identify(r, ip, "", t0.Add(time.Hour))
	}
	a, b := withCookie("203.0.113.7"), withCookie("198.51.100.99")
	if a.Kind != KindSession || a.ID() != "s:"+string(sess.AppendID(nil)) {
		t.Fatalf("identity with a valid cookie: %v %s", a.Kind, a.ID())
	}
	if a.ID() != b.ID() {
		t.Error("one session from two IPs gave two client IDs")
	}
	if a.Reissue {
		t.Error("a fresh cookie asked to be issued again")
	}

	r := chrome("page")
	r.AddCookie(cookie)
	late := x.Identify(r, "203.0.113.7", "", t0.Add(13*time.Hour))
	if late.Kind != KindSession || !late.Reissue {
		t.Errorf("a cookie past half its max age: kind %v, reissue %v; want session, reissue", late.Kind, late.Reissue)
	}

	r = chrome("page")
	r.AddCookie(&http.Cookie{Name: DefaultCookieName, Value: "forged"})
	forged := x.Identify(r, "203.0.113.7", "", t0)
	if forged.Kind != KindFingerprint || forged.Cookie != CookieMalformed || !strings.HasPrefix(forged.ID(), "f:") {
		t.Errorf("identity with a forged cookie: %v %v %s", forged.Kind, forged.Cookie, forged.ID())
	}
	if n := x.CookieCounts()[CookieMalformed]; n != 1 {
		t.Errorf("malformed cookies counted %d; want 1", n)
	}
}

func TestIdentityHoldsNoIP(t *testing.T) {
	x := mustIdentifier(t, Config{})
	id := x.Identify(chrome("page"), "203.0.113.7", "", t0)
	if s := fmt.Sprintf("%+v %s", id, id.ID()); strings.Contains(s, "203.0.113.7") || strings.Contains(s, "cb007100") {
		t.Fatalf("identity shows the IP: %s", s)
	}
	other := mustIdentifier(t, Config{Secrets: [][]byte{secretB}})
	if other.Identify(chrome("page"), "203.0.113.7", "", t0).Network == id.Network {
		t.Error("the network hash does not depend on the secret")
	}
}

func TestRotationKeepsClientIDs(t *testing.T) {
	before := mustIdentifier(t, Config{Secrets: [][]byte{secretA}})
	after := mustIdentifier(t, Config{Secrets: [][]byte{secretB, secretA}}) // new secret in front
	a := before.Identify(chrome("page"), "203.0.113.7", "", t0)
	b := after.Identify(chrome("page"), "203.0.113.7", "", t0)
	if a.ID() != b.ID() {
		t.Fatalf("rotating a secret in changed the client ID: %s -> %s", a.ID(), b.ID())
	}
}

func TestNewIdentifierRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Secrets: [][]byte{[]byte("short")}}, "secret #1 is 5 bytes"},
		{Config{Secrets: [][]byte{secretA}, CookieName: "bad name"}, `cookie name "bad name"`},
		{Config{Secrets: [][]byte{secretA}, CookieMaxAge: time.Second}, "cookie max age 1s"},
		{Config{Secrets: [][]byte{secretA}, Prefixes: Prefixes{IPv4: 40}}, "IPv4 prefix length 40"},
	} {
		if _, err := NewIdentifier(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error = %v; want one containing %q", err, tc.want)
		}
	}
}

// BenchmarkIdentify derives a client ID: without a cookie, with one, and
// with a forged one. The target is at most 2µs.
func BenchmarkIdentify(b *testing.B) {
	x := mustIdentifier(b, Config{})
	cookie := x.Cookie(mustSession(b, t0), t0, false)
	for name, setup := range map[string]func(*http.Request){
		"fingerprint": func(*http.Request) {},
		"session":     func(r *http.Request) { r.AddCookie(cookie) },
		"forged": func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: DefaultCookieName, Value: cookie.Value[:75] + "A"})
		},
	} {
		b.Run(name, func(b *testing.B) {
			r := chrome("page")
			setup(r)
			b.ReportAllocs()
			for b.Loop() {
				id := x.Identify(r, "2001:db8:1234:5678::1", "t13d1516h2_8daaf6152771_d8a2da3f94cd", t0)
				_ = id.ID()
			}
		})
	}
}

func TestCookieValue(t *testing.T) {
	for _, tc := range []struct {
		headers []string
		want    string
		ok      bool
	}{
		{nil, "", false},
		{[]string{"a=1; __tollgate=abc; b=2"}, "abc", true},
		{[]string{"a=1", "__tollgate=xyz"}, "xyz", true},
		{[]string{`__tollgate="quoted"`}, "quoted", true},
		{[]string{"x__tollgate=no; __tollgatex=no"}, "", false},
		{[]string{"__tollgate=first; __tollgate=second"}, "first", true},
		{[]string{"__tollgate="}, "", true},
	} {
		got, ok := cookieValue(http.Header{"Cookie": tc.headers}, DefaultCookieName)
		if got != tc.want || ok != tc.ok {
			t.Errorf("cookieValue(%q) = %q, %v; want %q, %v", tc.headers, got, ok, tc.want, tc.ok)
		}
	}
}

// TestSetCookieIsTheCookieRendered: the Set-Cookie header built by hand is
// byte for byte what net/http renders of the Cookie, secure or not, with a
// custom name and max age, and it carries a session that decodes.
func TestSetCookieIsTheCookieRendered(t *testing.T) {
	for _, cfg := range []Config{{}, {CookieName: "tg_s", CookieMaxAge: 36 * time.Hour}} {
		x := mustIdentifier(t, cfg)
		sess := mustSession(t, t0)
		for _, secure := range []bool{false, true} {
			got, want := x.SetCookie(sess, t0.Add(90*time.Second), secure), x.Cookie(sess, t0.Add(90*time.Second), secure).String()
			if got != want {
				t.Errorf("config %+v, secure %v:\n got %s\nwant %s", cfg, secure, got, want)
			}
		}
		header := http.Header{"Set-Cookie": {x.SetCookie(sess, t0, false)}}
		cookies := (&http.Response{Header: header}).Cookies()
		if len(cookies) != 1 {
			t.Fatalf("%q parses as %d cookies", header.Get("Set-Cookie"), len(cookies))
		}
		r := chrome("page")
		r.AddCookie(cookies[0])
		if id := x.Identify(r, "192.0.2.1", "", t0); id.Kind != KindSession || id.Session.ID != sess.ID {
			t.Errorf("the cookie set identifies %+v; want the session", id)
		}
	}
}

// A fingerprint's client ID is "f:" and the 16 hex digits of its digest,
// as encoding/hex writes them: every digit in every position.
func TestFingerprintIDIsTheDigestInHex(t *testing.T) {
	digests := []uint64{0, 1, 0xdeadbeef, 0x0123456789abcdef, 0xfedcba9876543210, ^uint64(0)}
	for n := range uint64(16) {
		for pos := range 16 {
			digests = append(digests, n<<(4*pos), n<<(4*pos)|0x9999999999999999&^(15<<(4*pos)))
		}
	}
	for _, d := range digests {
		id := Identity{Kind: KindFingerprint, Digest: d}
		if got, want := id.ID(), fmt.Sprintf("f:%016x", d); got != want {
			t.Errorf("ID of digest %x: %q; want %q", d, got, want)
		}
	}
}
