package caddymodule

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testutil"
)

const identitySite = `
	tollgate {
		zone site {
			limit 3 1h
		}
	}
	respond "{http.tollgate.client_kind} {http.tollgate.client_id}"`

func TestClientsBehindOneIPWithCookiesHaveSeparateBudgets(t *testing.T) {
	srv := startCaddy(t, trustLoopback, identitySite)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	alice := newClient(t, srv, "Firefox/140.0", "203.0.113.7", true)
	bob := newClient(t, srv, "Firefox/140.0", "203.0.113.7", true) // same browser, same address

	// Each gets a cookie on the first request, then counts on its session.
	for _, c := range []*client{alice, bob} {
		resp, body := c.get("/")
		if !strings.HasPrefix(body, "fingerprint f:") || !strings.Contains(resp.Header.Get("Set-Cookie"), "__tollgate=") {
			t.Fatalf("first request: %q, Set-Cookie %q; want a fingerprint ID and a cookie", body, resp.Header.Get("Set-Cookie"))
		}
		if _, body := c.get("/"); !strings.HasPrefix(body, "session s:") {
			t.Fatalf("second request: %q; want the session", body)
		}
	}
	_, a := alice.get("/")
	_, b := bob.get("/")
	if a == b {
		t.Fatalf("two cookies behind one IP gave one client ID: %s", a)
	}
	// Each session has its own budget of 3: two spent, one left each.
	if n := alice.allowed(3); n != 1 {
		t.Errorf("alice got %d more; want 1", n)
	}
	if n := bob.allowed(3); n != 1 {
		t.Errorf("bob got %d more; want 1 (alice's requests must not count)", n)
	}
}

func TestClientChangingIPKeepsItsBudget(t *testing.T) {
	srv := startCaddy(t, trustLoopback, identitySite)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	c := newClient(t, srv, "Firefox/140.0", "203.0.113.7", true)
	c.get("/") // fingerprint; gets the cookie
	_, first := c.get("/")
	c.ip = "198.51.100.20" // a new network, e.g. from Wi-Fi to mobile
	resp, second := c.get("/")
	if first != second || !strings.HasPrefix(second, "session ") {
		t.Fatalf("client ID changed with the IP: %q -> %q", first, second)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatal("second request on the session denied")
	}
	// The session's budget of 3 has one left, wherever the client is.
	if n := c.allowed(3); n != 1 {
		t.Fatalf("from the new IP the session got %d more; want 1", n)
	}
}

func TestCookieLessFingerprintsAreSeparateUntilIPPressure(t *testing.T) {
	// A network share large enough not to be reached, and sessions enough
	// for every client here that throws its cookies away: this is about each
	// fingerprint's own budget.
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		network_share 100
		cookie {
			issue_limit 100 1h
		}
		ip_pressure {
			threshold 4 10m
			squeeze 0.34
			duration 1h
		}
	}`, identitySite)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	testutil.ClearOfWindowEdge(10*time.Minute, 10*time.Second)

	// Four browsers behind one address, without cookies: four budgets of 3.
	for i := range 4 {
		c := newClient(t, srv, fmt.Sprintf("Browser/%d", i), "203.0.113.7", false)
		if n := c.allowed(4); n != 3 {
			t.Fatalf("browser %d got %d of 4; want 3 (a budget of its own)", i, n)
		}
	}
	// A fifth fingerprint from the same network tips it over: its
	// cookie-less clients now get a third of the limit (1 of 3).
	c := newClient(t, srv, "Browser/5", "203.0.113.7", false)
	resp, _ := c.get("/")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first request of a squeezed client: %d", resp.StatusCode)
	}
	if resp, _ := c.get("/"); resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(resp.Header.Get("RateLimit"), `"site";r=0`) {
		t.Fatalf("second request of a squeezed client: %d %q; want 429 (limit squeezed to 1)", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	// Another network is untouched.
	if n := newClient(t, srv, "Browser/5", "198.51.100.1", false).allowed(4); n != 3 {
		t.Fatalf("a client of another network got %d of 4; want 3", n)
	}
	// So is a client of the squeezed network that has a cookie.
	withCookie := newClient(t, srv, "Browser/6", "203.0.113.7", true)
	withCookie.get("/") // squeezed: 1 allowed, and it earns a cookie
	if n := withCookie.allowed(4); n != 3 {
		t.Fatalf("a client with a cookie in a squeezed network got %d of 4; want 3", n)
	}
}

func TestSqueezedPlaceholders(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		ip_pressure {
			threshold 1 10m
		}
	}`, `
	tollgate {
		zone site {
			limit 100 1h
		}
	}
	respond "{http.tollgate.ip_pressure} {http.tollgate.squeezed}"`)
	testutil.ClearOfWindowEdge(10*time.Minute, 10*time.Second)
	if _, body := newClient(t, srv, "A", "203.0.113.7", false).get("/"); body != "1 false" {
		t.Errorf("one fingerprint: %q", body)
	}
	if _, body := newClient(t, srv, "B", "203.0.113.7", false).get("/"); body != "2 true" {
		t.Errorf("two fingerprints over a threshold of 1: %q", body)
	}
}

func TestGeneratedSecretSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	srv := startCaddyWith(t, caddyOptions{dir: dir}, "", identitySite)
	c := newClient(t, srv, "Firefox/140.0", "", true)
	c.get("/")
	_, before := c.get("/")
	if !strings.HasPrefix(before, "session ") {
		t.Fatalf("no session: %q", before)
	}
	if !strings.Contains(srv.logs(), "generated one and stored it") {
		t.Error("generating the secret was not logged")
	}
	stored, err := os.ReadFile(filepath.Join(dir, "storage", "tollgate", "secret"))
	if err != nil || len(stored) < 32 {
		t.Fatalf("stored secret: %d bytes, %v", len(stored), err)
	}

	// A new Caddy on the same storage accepts the cookie.
	caddyStop(t)
	again := startCaddyWith(t, caddyOptions{dir: dir}, "", identitySite)
	c.srv = again
	if _, after := c.get("/"); after != before {
		t.Fatalf("after a restart: %q; want the same session %q", after, before)
	}
}

func TestSecretRotationKeepsSessions(t *testing.T) {
	const oldSecret = "old-secret-0123456789abcdef0123456789"
	const newSecret = "new-secret-0123456789abcdef0123456789"
	srv := startCaddy(t, "\ttollgate {\n\t\tsecret "+oldSecret+"\n\t}", identitySite)
	c := newClient(t, srv, "Firefox/140.0", "", true)
	c.get("/")
	_, before := c.get("/")

	srv.reload("\ttollgate {\n\t\tsecret "+newSecret+" "+oldSecret+"\n\t}", identitySite)
	resp, after := c.get("/")
	if after != before {
		t.Fatalf("after rotating: %q; want the same session %q", after, before)
	}
	if resp.Header.Get("Set-Cookie") == "" {
		t.Fatal("a cookie signed with the old secret was not issued again")
	}
	// With the old secret gone, the re-issued cookie still works.
	srv.reload("\ttollgate {\n\t\tsecret "+newSecret+"\n\t}", identitySite)
	if _, now := c.get("/"); now != before {
		t.Fatalf("after dropping the old secret: %q; want %q", now, before)
	}
}

func TestSecretFromEnvironment(t *testing.T) {
	t.Setenv("TOLLGATE_TEST_SECRET", "env-secret-0123456789abcdef0123456789")
	srv := startCaddy(t, "\ttollgate {\n\t\tsecret {env.TOLLGATE_TEST_SECRET}\n\t}", identitySite)
	c := newClient(t, srv, "Firefox/140.0", "", true)
	c.get("/")
	if _, body := c.get("/"); !strings.HasPrefix(body, "session ") {
		t.Fatalf("with a secret from the environment: %q", body)
	}

	t.Setenv("TOLLGATE_TEST_SECRET", "short")
	cfg := adapt(t, srv.caddyfile(freePort(t), "\ttollgate {\n\t\tsecret {env.TOLLGATE_TEST_SECRET}\n\t}", identitySite))
	if err := validateConfig(cfg); err == nil || !strings.Contains(err.Error(), "secret #1 is 5 bytes") {
		t.Fatalf("a short secret from the environment: %v", err)
	}
}
