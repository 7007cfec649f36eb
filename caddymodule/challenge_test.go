package caddymodule

import (
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/testutil"
	"github.com/tollgate/tollgate/limiter"
)

// solve finds the answer to a challenge token at difficulty bits.
func solve(t testing.TB, token string, difficulty int) string {
	t.Helper()
	for n := uint64(0); n < 1<<30; n++ {
		a := strconv.FormatUint(n, 10)
		if leadingZeroBits(sha256.Sum256([]byte(token+":"+a))) >= difficulty {
			return a
		}
	}
	t.Fatal("no answer found")
	return ""
}

func TestChallengeCheck(t *testing.T) {
	c := newChallengerForTest(&ChallengeConfig{Type: challengePoW, Difficulty: 8}, []byte("0123456789abcdef0123456789abcdef"), limiter.NewHasher([]byte("k")))
	const net = 0x1234
	tok, err := c.token(net, challengeT0)
	if err != nil {
		t.Fatal(err)
	}
	answer := solve(t, tok, 8)
	if _, err := c.check(tok, answer, net, challengeT0.Add(time.Second)); err != nil {
		t.Fatalf("a good answer: %v", err)
	}
	// A wrong answer: the first counter that does not meet the difficulty.
	wrong := "0"
	for n := 0; ; n++ {
		a := strconv.Itoa(n)
		if leadingZeroBits(sha256.Sum256([]byte(tok+":"+a))) < 8 {
			wrong = a
			break
		}
	}
	raw := []byte(tok)
	raw[5] ^= 1 // another server nonce: not one this site signed
	other := newChallengerForTest(&ChallengeConfig{Type: challengePoW, Difficulty: 8}, []byte("another secret, another site....."), limiter.NewHasher([]byte("k")))
	otherTok, _ := other.token(net, challengeT0)
	for name, tc := range map[string]struct {
		token, answer string
		net           uint64
		at            time.Time
		want          error
	}{
		"wrong work":          {tok, wrong, net, challengeT0, errChallengeWork},
		"wrong nonce":         {string(raw), answer, net, challengeT0, errChallengeForged},
		"another site's":      {otherTok, solve(t, otherTok, 8), net, challengeT0, errChallengeForged},
		"expired":             {tok, answer, net, challengeT0.Add(challengeTTL + time.Second), errChallengeExpired},
		"from the future":     {tok, answer, net, challengeT0.Add(-2 * time.Minute), errChallengeExpired},
		"wrong network":       {tok, answer, net + 1, challengeT0, errChallengeNetwork},
		"not a number":        {tok, "x" + answer, net, challengeT0, errChallengeMalformed},
		"truncated token":     {tok[:20], answer, net, challengeT0, errChallengeMalformed},
		"answer out of range": {tok, strings.Repeat("9", 25), net, challengeT0, errChallengeMalformed},
	} {
		if _, err := c.check(tc.token, tc.answer, tc.net, tc.at); err != tc.want {
			t.Errorf("%s: %v; want %v", name, err, tc.want)
		}
	}
}

func BenchmarkChallengeCheck(b *testing.B) {
	c := newChallengerForTest(&ChallengeConfig{Type: challengePoW, Difficulty: 8}, []byte("0123456789abcdef0123456789abcdef"), limiter.NewHasher([]byte("k")))
	tok, _ := c.token(1, challengeT0)
	answer := solve(b, tok, 8)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.check(tok, answer, 1, challengeT0); err != nil {
			b.Fatal(err)
		}
	}
}

const challengeSite = `
	tollgate {
		zone site {
			limit 5 10m
		}
	}
	respond "{http.tollgate.client_kind} {http.request.uri}"`

var challengeFields = regexp.MustCompile(`name="token" value="([^"]+)"[\s\S]*name="return" value="([^"]+)"`)

// TestChallengeEndToEnd plays a browser in Go: a page load without a session
// gets the challenge page, the proof earns a session and goes back to the
// page, the session counts the next request; the proof cannot be replayed
// or used from another network; non-browser clients are not challenged.
func TestChallengeEndToEnd(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		cookie {
			challenge pow 8
		}
	}`, challengeSite)
	testutil.ClearOfWindowEdge(10*time.Minute, 30*time.Second)
	noRedirect := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path, ip, accept string, form url.Values, cookie string) (*http.Response, string) {
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, _ := http.NewRequest(method, srv.URL+path, body)
		req.Header.Set("X-Forwarded-For", ip)
		req.Header.Set("User-Agent", "Browser/1")
		req.Header.Set("Accept", accept)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	const html = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"

	// An API client is not challenged, and gets no session.
	resp, body := do(http.MethodGet, "/api", "203.0.113.120", "application/json", nil, "")
	if body != "fingerprint /api" || resp.Header.Get("Set-Cookie") != "" {
		t.Fatalf("API client: %q, Set-Cookie %q; want the response, no session", body, resp.Header.Get("Set-Cookie"))
	}

	resp, body = do(http.MethodGet, "/page?x=1", "203.0.113.121", html, nil, "")
	m := challengeFields.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil || resp.Header.Get("Set-Cookie") != "" {
		t.Fatalf("browser without a session: %d %q; want the challenge page", resp.StatusCode, body)
	}
	if strings.Contains(body, "src=") || strings.Contains(body, "href=") {
		t.Error("the challenge page loads external assets")
	}
	token, ret := m[1], strings.ReplaceAll(m[2], "&amp;", "&")
	form := url.Values{"token": {token}, "answer": {solve(t, token, 8)}, "return": {ret}}

	// From another network the proof is refused, and does not spend it.
	if resp, _ := do(http.MethodPost, ChallengePath, "198.51.100.121", html, form, ""); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("proof from another network: %d; want 403", resp.StatusCode)
	}
	resp, _ = do(http.MethodPost, ChallengePath, "203.0.113.121", html, form, "")
	cookie := ""
	for _, c := range resp.Cookies() {
		if c.Name == "__tollgate" {
			cookie = c.Name + "=" + c.Value
		}
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/page?x=1" || cookie == "" {
		t.Fatalf("proof: %d to %q, cookie %q; want 303 to /page?x=1 with a session", resp.StatusCode, resp.Header.Get("Location"), cookie)
	}
	if _, body := do(http.MethodGet, "/page?x=1", "203.0.113.121", html, nil, cookie); body != "session /page?x=1" {
		t.Fatalf("back on the page with the session: %q", body)
	}
	// The same proof again is a replay.
	if resp, _ := do(http.MethodPost, ChallengePath, "203.0.113.121", html, form, ""); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Set-Cookie") != "" {
		t.Fatalf("replayed proof: %d; want 403 and no session", resp.StatusCode)
	}
	// A return URL off the site is not followed.
	tok2 := challengeFields.FindStringSubmatch(func() string { _, b := do(http.MethodGet, "/", "203.0.113.122", html, nil, ""); return b }())[1]
	resp, _ = do(http.MethodPost, ChallengePath, "203.0.113.122", html, url.Values{"token": {tok2}, "answer": {solve(t, tok2, 8)}, "return": {"//evil.example/"}}, "")
	if resp.Header.Get("Location") != "/" {
		t.Fatalf("return to another site: Location %q; want /", resp.Header.Get("Location"))
	}
}

// challengeT0 is the fixed instant the challenge unit tests start at.
var challengeT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newChallengerForTest(cfg *ChallengeConfig, secret []byte, h limiter.Hasher) *challenger {
	c, err := newChallenger(caddy.Context{}, cfg, secret, h)
	if err != nil {
		panic(err)
	}
	return c
}

// TestChallengeExceptions: requests the owner's matchers select are never
// challenged, even page loads; others still are.
func TestChallengeExceptions(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		cookie {
			challenge pow 8 {
				except {
					path /api/*
				}
			}
		}
	}`, challengeSite)
	testutil.ClearOfWindowEdge(10*time.Minute, 30*time.Second)
	get := func(path string) string {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("X-Forwarded-For", "203.0.113.140")
		req.Header.Set("Accept", "text/html")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if body := get("/api/x"); body != "fingerprint /api/x" {
		t.Fatalf("an excepted path was challenged: %q", body)
	}
	if body := get("/page"); !challengeFields.MatchString(body) {
		t.Fatalf("a page load outside the exception was not challenged: %q", body)
	}
}

// A fingerprint that has started all the sessions it may (4 of 6) is not
// challenged again: a proof would earn it no session, and it would be sent
// round from the page to the challenge and back. It is served on the
// cookie-less path, though its network may still start sessions.
func TestNoChallengeForAFingerprintOutOfSessions(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		cookie {
			issue_limit 6 1h
			challenge pow 8
		}
	}`, strings.Replace(challengeSite, "limit 5 10m", "limit 10 10m", 1)) // a page load and a proof each count
	testutil.ClearOfWindowEdge(10*time.Minute, 30*time.Second)
	noRedirect := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	const html = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"
	do := func(method, path string, form url.Values) (*http.Response, string) {
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, _ := http.NewRequest(method, srv.URL+path, body)
		req.Header.Set("X-Forwarded-For", "203.0.113.140")
		req.Header.Set("User-Agent", "Browser/1")
		req.Header.Set("Accept", html)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for i := range fingerprintSessions(6) { // each session thrown away
		_, body := do(http.MethodGet, "/page", nil)
		m := challengeFields.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("page load %d without a session: %q; want the challenge page", i, body)
		}
		form := url.Values{"token": {m[1]}, "answer": {solve(t, m[1], 8)}, "return": {m[2]}}
		if resp, _ := do(http.MethodPost, ChallengePath, form); resp.Header.Get("Set-Cookie") == "" {
			t.Fatalf("proof %d earned no session: %d", i, resp.StatusCode)
		}
	}
	if _, body := do(http.MethodGet, "/page", nil); body != "fingerprint /page" {
		t.Fatalf("a fingerprint out of sessions: %.60q…; want the page on the cookie-less path, no challenge", body)
	}
}

// TestChallengeInARealBrowser loads a page in headless Chromium with the
// proof-of-work challenge on: the challenge page loads, solves, gets the
// session cookie, lands on the URL first asked for, and the next request
// is counted by the session.
func TestChallengeInARealBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	srv := startCaddy(t, `	tollgate {
		cookie {
			challenge pow 12
		}
	}`, `
	tollgate {
		zone site {
			limit 5 10m
			match {
				not path /favicon.ico
			}
		}
	}
	header Content-Type text/plain
	respond "{http.tollgate.client_kind} {http.request.uri} {http.tollgate.remaining}"`)
	testutil.ClearOfWindowEdge(10*time.Minute, 60*time.Second)

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	defer cancelTimeout()

	page := srv.URL + "/page?x=1"
	var body, location string
	if err := chromedp.Run(ctx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("loading the page in Chromium: %v", err)
	}
	// The page solves and navigates on its own: read it until it shows
	// the session (a read during a navigation fails and is retried).
	testutil.Eventually(t, 45*time.Second, "the challenge solved in Chromium", func() bool {
		err := chromedp.Run(ctx,
			chromedp.Evaluate(`document.body ? document.body.innerText : ""`, &body),
			chromedp.Location(&location),
		)
		return err == nil && strings.HasPrefix(body, "session ")
	})
	// The challenge page was the first request (1 of 5 spent by the
	// fingerprint); the session has its own budget: 4 left after this one.
	if location != page || strings.TrimSpace(body) != "session /page?x=1 4" {
		t.Fatalf("after the challenge: at %q showing %q; want %q showing the session", location, body, page)
	}
	if err := chromedp.Run(ctx,
		chromedp.Reload(),
		chromedp.Evaluate(`document.body.innerText`, &body),
	); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(body) != "session /page?x=1 3" {
		t.Fatalf("next request: %q; want it counted by the session (3 left)", body)
	}
}

// TestSafeReturnStaysOnTheSite: a return URL a browser would read as
// another host (a TAB, a newline or a backslash where "//" is, a scheme)
// sends the client to "/"; a path of the site, query included, is kept.
func TestSafeReturnStaysOnTheSite(t *testing.T) {
	for _, s := range []string{
		"//evil.example", "/\\evil.example", "/\t/evil.example", "/\n/evil.example", "/\r/evil.example",
		"\t//evil.example", "/\x00/evil.example", "https://evil.example/", "evil.example", "", "/%09/evil.example\t",
		"/ /evil.example", "/\x7f/evil.example",
	} {
		if got := safeReturn(s); got != "/" {
			t.Errorf("safeReturn(%q) = %q; want /", s, got)
		}
	}
	for _, s := range []string{"/", "/shop/basket?item=3&q=a%20b", "/a//b", "/%2F%2Fevil.example", "/café"} {
		if got := safeReturn(s); got != s {
			t.Errorf("safeReturn(%q) = %q; want it kept", s, got)
		}
	}
}
