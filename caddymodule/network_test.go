package caddymodule

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// networkSite is the issue's reference site: the default key, limit 5 10m.
const networkSite = `
	tollgate {
		zone site {
			limit 5 10m
		}
	}
	respond "{http.tollgate.client_kind}"`

// script sends requests from addresses addr(i), rotating every signal the
// fingerprint reads on each request. With keepCookies it reuses each
// session cookie it is given for as long as it is admitted, then starts
// over without one.
type script struct {
	t           *testing.T
	srv         *testCaddy
	addr        func(i int) string
	keepCookies bool
}

// run sends n requests and returns how many were admitted and how many
// sessions the script was given.
func (s script) run(n int) (admitted, sessions int) {
	s.t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	var cookie string
	for i := range n {
		req, _ := http.NewRequest(http.MethodGet, s.srv.URL+"/", nil)
		req.Header.Set("X-Forwarded-For", s.addr(i))
		req.Header.Set("User-Agent", fmt.Sprintf("Mozilla/5.0 (Script %d)", i))
		req.Header.Set("Accept-Language", fmt.Sprintf("x-%d", i))
		req.Header.Set("Sec-Ch-Ua", fmt.Sprintf(`"Brand";v="%d"`, i))
		req.Header.Set("Sec-Ch-Ua-Mobile", fmt.Sprintf("?%d", i%2))
		req.Header.Set("Sec-Ch-Ua-Platform", fmt.Sprintf(`"OS %d"`, i))
		req.Header.Set("Accept", fmt.Sprintf("text/html;q=0.%d", i%10))
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := hc.Do(req)
		if err != nil {
			s.t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			admitted++
		} else {
			cookie = ""
		}
		for _, c := range resp.Cookies() {
			if c.Name == "__tollgate" && s.keepCookies {
				cookie = c.Name + "=" + c.Value
				sessions++
			}
		}
	}
	return admitted, sessions
}

// TestScriptsOnOneNetworkGetABoundedMultiple runs the scripts of the issue
// against the defaults (network_share 4, 30 sessions per network per hour):
// rotating every signal without cookies, one address gets at most 4 × 5;
// keeping the cookies it is given, at most (30 + 4) × 5; the same from
// addresses rotating inside one IPv6 /64.
func TestScriptsOnOneNetworkGetABoundedMultiple(t *testing.T) {
	const limit, share, mint = 5, DefaultNetworkShare, defaultIssueLimit
	for _, tc := range []struct {
		name        string
		addr        func(i int) string
		keepCookies bool
		bound       int
	}{
		{"ipv4 without cookies", func(int) string { return "203.0.113.50" }, false, share * limit},
		{"ipv4 keeping cookies", func(int) string { return "203.0.113.51" }, true, (mint + share) * limit},
		{"ipv6 /64 without cookies", func(i int) string { return fmt.Sprintf("2001:db8:50:1::%x", i+1) }, false, share * limit},
		{"ipv6 /64 keeping cookies", func(i int) string { return fmt.Sprintf("2001:db8:51:1:%x::1", i+1) }, true, (mint + share) * limit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startCaddy(t, trustLoopback, networkSite)
			testutil.ClearOfWindowEdge(10*time.Minute, 30*time.Second)
			admitted, sessions := script{t: t, srv: srv, addr: tc.addr, keepCookies: tc.keepCookies}.run(200)
			t.Logf("admitted %d of 200, %d sessions (bound %d)", admitted, sessions, tc.bound)
			if admitted > tc.bound || admitted == 0 {
				t.Fatalf("admitted %d of 200; want 1 to %d", admitted, tc.bound)
			}
			if sessions > mint {
				t.Fatalf("%d sessions minted for one network; the bound is %d", sessions, mint)
			}
			metrics := adminGet(t, srv.Admin+"/metrics")
			if !strings.Contains(metrics, `tollgate_denials_total{reason="network",scope="site",zone="site"}`) {
				t.Errorf("no network denials in the metrics")
			}
		})
	}
}

// TestHouseholdBehindOneAddressKeepsItsBudgets: five clients behind one
// address that each keep their cookie each get their full limit.
func TestHouseholdBehindOneAddressKeepsItsBudgets(t *testing.T) {
	srv := startCaddy(t, trustLoopback, networkSite)
	testutil.ClearOfWindowEdge(10*time.Minute, 30*time.Second)
	for i := range 5 {
		c := newClient(t, srv, fmt.Sprintf("Browser/%d", i), "203.0.113.60", true)
		if resp, body := c.get("/"); resp.StatusCode != http.StatusOK || body != "fingerprint" {
			t.Fatalf("client %d's first request: %d %q", i, resp.StatusCode, body)
		}
		if n := c.allowed(6); n != 5 {
			t.Fatalf("client %d's session got %d of 6; want its full 5", i, n)
		}
	}
}

// TestNetworkBudgetIsNotShown: a cookie-less client's RateLimit header shows
// its own budget, not its network's; a denial by the network shows r=0
// (see TestNetworkDenialShowsNothingLeft) and spends nothing of the
// client's own budget.
func TestNetworkBudgetIsNotShown(t *testing.T) {
	srv := startCaddy(t, trustLoopback, `
	tollgate {
		zone site {
			limit 5 10m
			network_share 1
		}
	}
	respond "ok"`)
	testutil.ClearOfWindowEdge(10*time.Minute, 30*time.Second)
	a := newClient(t, srv, "A", "203.0.113.70", false)
	resp, _ := a.get("/")
	resp, _ = a.get("/")
	if got := resp.Header.Get("RateLimit"); got != `"site";r=3;t=600` && !strings.HasPrefix(got, `"site";r=3;`) {
		t.Fatalf("RateLimit %q; want the client's own 3 left", got)
	}
	// B spends the rest of the network's 5; A is then denied by the network
	// with 3 of its own left, and is told nothing is left.
	b := newClient(t, srv, "B", "203.0.113.70", false)
	if n := b.allowed(5); n != 3 {
		t.Fatalf("B got %d; want the network's 3 left", n)
	}
	resp, _ = a.get("/")
	if resp.StatusCode != http.StatusTooManyRequests || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"site";r=0;`) {
		t.Fatalf("A after the network is spent: %d %q; want 429 showing nothing left", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	if !strings.Contains(srv.logs(), `"budget":"network"`) {
		t.Error("the denial log does not say the network's budget denied")
	}
}

func adminGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestSessionsAreMintedPerNetwork: with a network budget too large to
// matter, a script keeping the cookies it is given still gets at most
// issue_limit sessions for its network, whatever fingerprints it shows.
func TestSessionsAreMintedPerNetwork(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		network_share 1000
	}`, networkSite)
	testutil.ClearOfWindowEdge(10*time.Minute, 30*time.Second)
	testutil.ClearOfWindowEdge(time.Hour, 30*time.Second)
	_, sessions := script{t: t, srv: srv, addr: func(int) string { return "203.0.113.80" }, keepCookies: true}.run(200)
	if sessions == 0 || sessions > defaultIssueLimit {
		t.Fatalf("%d sessions for one network; want 1 to %d", sessions, defaultIssueLimit)
	}
}

// TestNetworkPlaceholderAndAdminView: {http.tollgate.network} is the same
// for a session and a cookie-less client of one network, differs across
// networks, and the admin API shows that network's budget under it.
func TestNetworkPlaceholderAndAdminView(t *testing.T) {
	srv := startCaddy(t, trustLoopback, `
	tollgate {
		zone site {
			limit 5 10m
		}
	}
	respond "{http.tollgate.network}"`)
	testutil.ClearOfWindowEdge(10*time.Minute, 30*time.Second)
	c := newClient(t, srv, "A", "203.0.113.90", true)
	_, cookieLess := c.get("/")
	resp, withSession := c.get("/")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(cookieLess, "n:") || len(cookieLess) != 18 || withSession != cookieLess {
		t.Fatalf("network placeholder %q without a session, %q with one; want the same n:<16 hex>", cookieLess, withSession)
	}
	if _, other := newClient(t, srv, "A", "203.0.113.91", false).get("/"); other == cookieLess {
		t.Fatalf("two networks render the same placeholder %q", other)
	}
	var view adminapi.ClientView
	if status, body := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/"+cookieLess, &view); status != http.StatusOK {
		t.Fatalf("GET network: %d %s", status, body)
	}
	if len(view.Zones) != 1 || view.Zones[0].Limit != 5*DefaultNetworkShare || view.Zones[0].Remaining != 5*DefaultNetworkShare-1 {
		t.Fatalf("network view %+v; want site with %d of %d left", view, 5*DefaultNetworkShare-1, 5*DefaultNetworkShare)
	}
}

// TestSecureCookieBehindATrustedProxy: behind a proxy that terminates TLS
// and is in trusted_proxies, X-Forwarded-Proto: https makes the session
// cookie Secure; the same header from a client that is not a trusted proxy
// does not.
func TestSecureCookieBehindATrustedProxy(t *testing.T) {
	cookieOf := func(srv *testCaddy, ua, proto string) string {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		req.Header.Set("User-Agent", ua)
		if proto != "" {
			req.Header.Set("X-Forwarded-Proto", proto)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("Set-Cookie")
	}
	behindProxy := startCaddy(t, trustLoopback, networkSite)
	if got := cookieOf(behindProxy, "A", "https"); !strings.Contains(got, "; Secure") {
		t.Errorf("behind a trusted proxy over TLS: Set-Cookie %q lacks Secure", got)
	}
	if got := cookieOf(behindProxy, "B", "http"); got == "" || strings.Contains(got, "Secure") {
		t.Errorf("behind a trusted proxy over plain HTTP: Set-Cookie %q", got)
	}
	caddyStop(t)
	direct := startCaddy(t, "", networkSite)
	if got := cookieOf(direct, "C", "https"); got == "" || strings.Contains(got, "Secure") {
		t.Errorf("X-Forwarded-Proto from an untrusted client: Set-Cookie %q; want no Secure", got)
	}
}

// TestIPPressureSqueezesTheNetworkBudget: once a network shows more
// fingerprints than the pressure threshold, its network budget is squeezed
// too, not only each new fingerprint's.
func TestIPPressureSqueezesTheNetworkBudget(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		ip_pressure {
			threshold 2 10m
			squeeze 0.5
		}
	}`, networkSite)
	testutil.ClearOfWindowEdge(10*time.Minute, 30*time.Second)
	admitted, _ := script{t: t, srv: srv, addr: func(int) string { return "203.0.113.130" }}.run(100)
	// Unsqueezed the network could spend 4 × 5 = 20; squeezed, 10.
	if admitted > 10 || admitted < 3 {
		t.Fatalf("admitted %d of 100 from a squeezed network; want 3 to 10 (its budget halved)", admitted)
	}
}

// TestOmittingTheKeyHeaderDoesNotDodgeTheNetworkBudget keys a zone by a
// header: a script that leaves the header out is counted by its client ID
// (never one budget for everyone), and, without a session, by its
// network's budget too, as in a zone keyed by the client ID; so rotating
// every fingerprint signal gets network_share × limit, not a budget per
// fingerprint.
func TestOmittingTheKeyHeaderDoesNotDodgeTheNetworkBudget(t *testing.T) {
	srv := startCaddy(t, trustLoopback, `
	tollgate {
		zone api {
			limit 5 10m
			key {http.request.header.X-API-Key}
		}
	}
	respond "{http.tollgate.client_kind}"`)
	testutil.ClearOfWindowEdge(10*time.Minute, 30*time.Second)
	admitted, _ := script{t: t, srv: srv, addr: func(int) string { return "203.0.113.90" }}.run(200)
	if want := DefaultNetworkShare * 5; admitted > want {
		t.Errorf("without the key header, rotating fingerprints: %d of 200 admitted; want at most %d", admitted, want)
	}
	// With the header, a key is its own budget, not the network's (which
	// the script spent); IP pressure still squeezes it, to 2 of 5.
	var got []int
	for range 3 {
		got = append(got, srv.status("/", "X-Forwarded-For", "203.0.113.90", "X-API-Key", "k1"))
	}
	if want := "[200 200 429]"; fmt.Sprint(got) != want {
		t.Errorf("with the key header after the script: %v; want %s", got, want)
	}
}

// TestNetworkDenialsAreListed: a denial by a network's budget is listed in
// GET /tollgate/denied as the network's entry (n:…, budget network, as
// {http.tollgate.network} names it), under the zone's name, while the
// client it denied, which spent nothing of its own, is not listed as
// denied; a client denied by its own budget is listed by its hashed ID.
func TestNetworkDenialsAreListed(t *testing.T) {
	srv := startCaddy(t, trustLoopback, `
	tollgate {
		zone site {
			limit 2 10m
			network_share 1
		}
	}
	respond "{http.tollgate.network}"`)
	testutil.ClearOfWindowEdge(10*time.Minute, 30*time.Second)
	a := newClient(t, srv, "A", "203.0.113.80", false)
	_, netID := a.get("/")
	b := newClient(t, srv, "B", "203.0.113.80", false)
	b.get("/") // the network's 2 are spent
	if resp, _ := b.get("/"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("B's second request: %d; want 429 by the network", resp.StatusCode)
	}
	var list adminapi.DeniedList
	if code, body := adminDo(t, srv.Admin, http.MethodGet, adminapi.PathDenied+"?zone=site", &list); code != http.StatusOK {
		t.Fatalf("GET /tollgate/denied: %d %s", code, body)
	}
	if len(list.Items) != 1 {
		t.Fatalf("denied list %+v; want exactly the network's entry", list.Items)
	}
	it := list.Items[0]
	if it.Budget != adminapi.BudgetNetwork || it.Key != netID || it.Zone != "site" || it.Denials != 1 || it.RetryAfter < 1 {
		t.Errorf("entry %+v; want zone site, budget network, key %s, 1 denial, a wait", it, netID)
	}

	// Another address: a client denied by its own budget is listed as the client.
	c := newClient(t, srv, "C", "198.51.100.9", false)
	c.allowed(3)
	adminDo(t, srv.Admin, http.MethodGet, adminapi.PathDenied, &list)
	var clients, networks int
	for _, it := range list.Items {
		switch it.Budget {
		case adminapi.BudgetClient:
			clients++
			if !strings.HasPrefix(it.Key, adminapi.HashedPrefix) {
				t.Errorf("client entry %+v; want a hashed ID", it)
			}
		case adminapi.BudgetNetwork:
			networks++
		}
	}
	if clients != 1 || networks != 1 {
		t.Errorf("denied list %+v; want one client entry and one network entry", list.Items)
	}

	// A reset of the network lets its clients through again and lists it no more.
	if code, body := adminDo(t, srv.Admin, http.MethodDelete, adminapi.ClientPath(netID), nil); code != http.StatusOK {
		t.Fatalf("DELETE the network: %d %s", code, body)
	}
	if resp, _ := b.get("/"); resp.StatusCode != http.StatusOK {
		t.Errorf("B after its network was reset: %d; want 200", resp.StatusCode)
	}
	adminDo(t, srv.Admin, http.MethodGet, adminapi.PathDenied, &list)
	if len(list.Items) != 1 || list.Items[0].Budget != adminapi.BudgetClient {
		t.Errorf("denied list after the reset: %+v; want C's entry only", list.Items)
	}
}

// TestUnixSocketListenerIsWarnedOf: a site served on a unix socket puts
// every client in one network (one budget, one session allowance): the
// config is accepted, with a warning that says so.
func TestUnixSocketListenerIsWarnedOf(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "site.sock")
	srv := startCaddy(t, "", `
	bind unix/`+sock+` 127.0.0.1
	tollgate {
		zone site {
			limit 5 1m
		}
	}
	respond "ok"`)
	if !strings.Contains(srv.logs(), "unix socket") || !strings.Contains(srv.logs(), "one network") {
		t.Error("no warning that a unix socket listener puts every client in one network")
	}
	plain := startCaddyWith(t, caddyOptions{}, "", `
	tollgate {
		zone site {
			limit 5 1m
		}
	}
	respond "ok"`)
	if strings.Contains(plain.logs(), "unix socket") {
		t.Error("a TCP-only site was warned of a unix socket")
	}
}
