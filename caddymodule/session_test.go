package caddymodule

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// TestSessionFloodCannotShutOutNewcomers floods a small key table from one
// address that holds a session cookie, with distinct values of a header the
// zone is keyed by, spending each one: the flooding network may hold only
// its share of the table, so a newcomer from another address, with a
// session or without, still gets its full limit, and the flood's exhausted
// keys stay denied.
func TestSessionFloodCannotShutOutNewcomers(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		max_keys 1024
	}`, `
	tollgate {
		zone api {
			limit 2 10m
			key {http.request.header.X-Key}
		}
	}
	respond "ok"`)

	cookieFrom := func(addr string) string {
		resp := srv.get("/", "X-Forwarded-For", addr, "X-Key", "hello "+addr, "User-Agent", "a")
		for _, c := range resp.Cookies() {
			if c.Name == "__tollgate" {
				return c.Name + "=" + c.Value
			}
		}
		t.Fatalf("no session cookie for %s", addr)
		return ""
	}
	attacker := cookieFrom("10.0.0.1")
	const keys = 50 * 1024 / 16 // 3200 distinct keys, each spent
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < keys; k += 4 {
				for range 2 {
					srv.status("/", "X-Forwarded-For", "10.0.0.1", "Cookie", attacker, "X-Key", fmt.Sprintf("flood %d", k))
				}
			}
		}()
	}
	wg.Wait()
	if got := srv.status("/", "X-Forwarded-For", "10.0.0.1", "Cookie", attacker, "X-Key", "flood 0"); got != http.StatusTooManyRequests {
		t.Errorf("a spent key of the flood answered %d after the flood, want 429", got)
	}

	// A newcomer is never shut out: its first two requests pass. Its third
	// is denied, unless the full table evicted its counter meanwhile (one
	// spent, not exhausted: the engine's documented bound lets an evicted
	// counter start afresh, regaining less than one quota).
	evicted := func() uint64 {
		var st adminapi.Status
		if status, body := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/status", &st); status != http.StatusOK {
			t.Fatalf("status: %d %s", status, body)
		}
		return st.Keys.Evicted
	}
	check := func(who string, send func() int) {
		before := evicted()
		var got []int
		for range 3 {
			got = append(got, send())
		}
		want := []int{200, 200, 429}
		if evicted() > before && fmt.Sprint(got) == "[200 200 200]" {
			return // its counter was evicted: within the documented bound
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s got %v, want %v", who, got, want)
		}
	}
	for i, addr := range []string{"10.0.0.2", "10.0.0.3"} {
		newcomer := cookieFrom(addr)
		check("a newcomer with a session from "+addr, func() int {
			return srv.status("/", "X-Forwarded-For", addr, "Cookie", newcomer, "X-Key", fmt.Sprintf("newcomer %d", i))
		})
		check("a cookie-less newcomer from "+addr, func() int {
			return srv.status("/", "X-Forwarded-For", addr, "User-Agent", "b", "X-Key", fmt.Sprintf("cookie-less newcomer %d", i))
		})
	}
}

// TestChallengeProofsAreSqueezedByIPPressure has a script on one address,
// showing a new fingerprint on every request (so its network is squeezed),
// collect challenge pages, then post a proof for each: its network is given
// no more new sessions than its squeezed issue limit, as without the
// challenge.
func TestChallengeProofsAreSqueezedByIPPressure(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		cookie {
			issue_limit 10 1h
			challenge pow 4
		}
		ip_pressure {
			threshold 2 10m
			squeeze 0.5
		}
	}`, `
	tollgate {
		zone site {
			limit 100 10m
		}
	}
	respond "{http.tollgate.client_kind}"`)
	noRedirect := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, ua string, form url.Values) (*http.Response, string) {
		var body io.Reader
		path := "/page"
		if form != nil {
			body, path = strings.NewReader(form.Encode()), ChallengePath
		}
		req, _ := http.NewRequest(method, srv.URL+path, body)
		req.Header.Set("X-Forwarded-For", "203.0.113.77")
		req.Header.Set("User-Agent", ua)
		req.Header.Set("Accept", "text/html")
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
	// First the pages, while the network may still start sessions; then
	// every proof.
	tokens := map[string]string{}
	for i := range 30 {
		ua := fmt.Sprintf("Script/%d", i)
		_, page := do(http.MethodGet, ua, nil)
		if m := challengeFields.FindStringSubmatch(page); m != nil {
			tokens[ua] = m[1]
		}
	}
	if len(tokens) == 0 {
		t.Fatal("no challenge page served")
	}
	sessions := 0
	for ua, tok := range tokens {
		resp, _ := do(http.MethodPost, ua, url.Values{"token": {tok}, "answer": {solve(t, tok, 4)}, "return": {"/page"}})
		for _, c := range resp.Cookies() {
			if c.Name == "__tollgate" {
				sessions++
			}
		}
	}
	if sessions > 5 {
		t.Errorf("a squeezed network was given %d sessions through the challenge; want at most 5 (issue_limit 10 × squeeze 0.5)", sessions)
	}
}

func TestThrowingCookiesAwayMintsNoFreshBudgets(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		cookie {
			issue_limit 2 1h
		}
	}`, identitySite)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	// A client that never keeps its cookie is given at most 2.
	c := newClient(t, srv, "Bot/1", "203.0.113.7", false)
	issued := 0
	for range 3 {
		if resp, _ := c.get("/"); resp.Header.Get("Set-Cookie") != "" {
			issued++
		}
	}
	if issued != 2 {
		t.Fatalf("%d cookies issued to one cookie-less client; want 2 (the issue limit)", issued)
	}
}

func TestCookieIssuedOnlyWhenTheUpstreamSaysSo(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		cookie {
			issue header X-Tollgate-Human
		}
	}`, `
	tollgate {
		zone site {
			limit 100 1h
		}
	}
	header /passed X-Tollgate-Human yes
	respond "ok"`)
	c := newClient(t, srv, "Firefox/140.0", "203.0.113.7", true)
	if resp, _ := c.get("/"); resp.Header.Get("Set-Cookie") != "" {
		t.Fatal("a cookie was issued without the upstream's header")
	}
	resp, _ := c.get("/passed")
	if !strings.Contains(resp.Header.Get("Set-Cookie"), "__tollgate=") {
		t.Fatal("no cookie although the upstream set the issuing header")
	}
	if resp.Header.Get("X-Tollgate-Human") != "" {
		t.Error("the issuing header reached the client")
	}
}

func TestCookieAttributes(t *testing.T) {
	srv := startCaddyWith(t, caddyOptions{tls: true}, `	tollgate {
		cookie {
			name sid
			max_age 2h
		}
	}`, identitySite)
	resp, _ := newClient(t, srv, "Firefox/140.0", "", false).get("/")
	got := resp.Header.Get("Set-Cookie")
	for _, want := range []string{"sid=", "Path=/", "Max-Age=7200", "HttpOnly", "Secure", "SameSite=Lax"} {
		if !strings.Contains(got, want) {
			t.Errorf("Set-Cookie %q lacks %s", got, want)
		}
	}
}

// demoSite is the README demo's site zone: 60 a minute per client.
const demoSite = `
	tollgate {
		zone site {
			limit 60 1m
		}
	}
	respond "ok"`

// TestIdenticalBrowsersBehindOneAddressEachGetASession: an office of 20
// identical fresh browsers behind one address (one fingerprint) each get a
// session on their first page load and load a page of 31 assets without a
// 429, under the default cookie settings and the demo's limit; a client
// that never keeps its cookie, with that same fingerprint, still cannot
// take every session of its network.
func TestIdenticalBrowsersBehindOneAddressEachGetASession(t *testing.T) {
	srv := startCaddy(t, trustLoopback, demoSite)
	testutil.ClearOfWindowEdge(time.Minute, 20*time.Second)
	const ua = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36"
	for i := range 20 {
		b := newClient(t, srv, ua, "198.51.100.20", true)
		resp, _ := b.get("/")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Set-Cookie") == "" {
			t.Fatalf("browser %d's page: %d, Set-Cookie %q; want 200 and a session", i+1, resp.StatusCode, resp.Header.Get("Set-Cookie"))
		}
		for a := range 31 {
			if resp, _ := b.get(fmt.Sprintf("/asset-%d.png", a)); resp.StatusCode != http.StatusOK {
				t.Fatalf("browser %d's asset %d: %d; want 200", i+1, a, resp.StatusCode)
			}
		}
	}

	// Another network: a client that throws every cookie away gets at most
	// the fingerprint's share of the network's 30 sessions, and a browser
	// of another fingerprint there still gets one.
	bot := newClient(t, srv, ua, "198.51.100.21", false)
	minted := 0
	for range 40 {
		if resp, _ := bot.get("/"); resp.Header.Get("Set-Cookie") != "" {
			minted++
		}
	}
	if want := fingerprintSessions(defaultIssueLimit); minted != int(want) || want >= defaultIssueLimit {
		t.Errorf("a client keeping no cookie was given %d sessions; want %d, fewer than the network's %d", minted, want, defaultIssueLimit)
	}
	other := newClient(t, srv, "Other/1", "198.51.100.21", true)
	if resp, _ := other.get("/"); resp.Header.Get("Set-Cookie") == "" {
		t.Error("after it, a browser of another fingerprint on that network got no session")
	}
}
