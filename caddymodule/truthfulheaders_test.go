package caddymodule

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testutil"
)

// The RateLimit headers tell each client the limit it actually has: the
// q of RateLimit-Policy is the limit r counts down from.

// TestHeadersShowTheTiersLimit: a pro key's first request shows the pro
// limit with one spent; a key of no tier shows the zone's own.
func TestHeadersShowTheTiersLimit(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		tier_from {http.request.header.X-User-Tier}
		zone api {
			limit 20 1h
			key {http.request.header.X-API-Key}
			tier pro 200
		}
	}
	respond "ok"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)

	resp := srv.get("/", "X-API-Key", "k-pro", "X-User-Tier", "pro")
	if got := resp.Header.Get("RateLimit-Policy"); got != `"api";q=200;w=3600` {
		t.Errorf("pro key: RateLimit-Policy %q; want q=200, its tier's limit", got)
	}
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"api";r=199;`) {
		t.Errorf("pro key: RateLimit %q; want r=199", got)
	}
	resp = srv.get("/", "X-API-Key", "k-free")
	if got := resp.Header.Get("RateLimit-Policy"); got != `"api";q=20;w=3600` {
		t.Errorf("key of no tier: RateLimit-Policy %q; want the zone's q=20", got)
	}
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"api";r=19;`) {
		t.Errorf("key of no tier: RateLimit %q; want r=19", got)
	}
}

// TestHeadersShowTheReputationScaledLimit: a client whose reputation has
// scaled its limits by 0.6 is told q=12 under a limit of 20, with r
// counting down from it; a client in good standing is told 20.
func TestHeadersShowTheReputationScaledLimit(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		reputation {
			penalty 30
		}
	}`, `
	tollgate {
		zone strict {
			limit 1 1h
			match {
				path /strict
			}
		}
		zone site {
			limit 20 1h
		}
	}
	respond "ok"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)

	// Clients without sessions, so that one key counts them throughout.
	bad := newClient(t, srv, "bad", "203.0.113.10", false)
	bad.get("/strict")
	if resp, _ := bad.get("/strict"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second /strict: %d; want 429 (the denial that costs 30 points)", resp.StatusCode)
	}
	resp, _ := bad.get("/")
	if got := resp.Header.Get("RateLimit-Policy"); got != `"site";q=12;w=3600` {
		t.Errorf("client at factor 0.6: RateLimit-Policy %q; want q=12", got)
	}
	// 2 spent in site: the first /strict and this one (a denial spends
	// nothing).
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"site";r=10;`) {
		t.Errorf("client at factor 0.6: RateLimit %q; want r=10 of q=12", got)
	}
	good := newClient(t, srv, "good", "203.0.113.11", false)
	resp, _ = good.get("/")
	if got := resp.Header.Get("RateLimit-Policy"); got != `"site";q=20;w=3600` {
		t.Errorf("client in good standing: RateLimit-Policy %q; want q=20", got)
	}
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"site";r=19;`) {
		t.Errorf("client in good standing: RateLimit %q; want r=19", got)
	}
}

// TestNetworkDenialShowsNothingLeft: a client denied by its network's
// budget is told r=0 in the zone that denied, with the wait of that budget
// in t and Retry-After, and never the network's own numbers; a client of
// the same network with a session is not denied.
func TestNetworkDenialShowsNothingLeft(t *testing.T) {
	srv := startCaddy(t, trustLoopback, `
	tollgate {
		zone site {
			limit 5 10m
			network_share 1
		}
	}
	respond "ok"`)
	testutil.ClearOfWindowEdge(10*time.Minute, 30*time.Second)
	withSession := newClient(t, srv, "S", "203.0.113.70", true)
	withSession.get("/") // gets its session, spending 1 of the network's 5
	a := newClient(t, srv, "A", "203.0.113.70", false)
	if n := a.allowed(2); n != 2 {
		t.Fatalf("A got %d of 2", n)
	}
	b := newClient(t, srv, "B", "203.0.113.70", false)
	if n := b.allowed(5); n != 2 {
		t.Fatalf("B got %d; want the network's 2 left", n)
	}
	resp, _ := a.get("/")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("A after the network is spent: %d; want 429", resp.StatusCode)
	}
	got := resp.Header.Get("RateLimit")
	m := regexp.MustCompile(`^"site";r=0;t=(\d+)$`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("A's 429: RateLimit %q; want \"site\";r=0;t=<the network's wait>", got)
	}
	if ra := resp.Header.Get("Retry-After"); ra != m[1] || ra == "0" {
		t.Errorf("A's 429: Retry-After %q, t=%s; want the network budget's wait in both", ra, m[1])
	}
	if p := resp.Header.Get("RateLimit-Policy"); p != `"site";q=5;w=600` {
		t.Errorf("A's 429: RateLimit-Policy %q; want the client's own q=5, never the network's 5×share", p)
	}
	if resp, _ := withSession.get("/"); resp.StatusCode != http.StatusOK {
		t.Errorf("a session on the same network: %d; want 200 (it has its own budget)", resp.StatusCode)
	}
}

// TestTrialZonesAreNotAnnounced: a dry_run zone never appears in the
// RateLimit headers (a client that follows them would slow to a limit not
// enforced), while its would-be denial still reaches the placeholders and
// the log; a dry-run handler sends no RateLimit header at all.
func TestTrialZonesAreNotAnnounced(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone api_trial {
			limit 1 1h
			dry_run
		}
		zone site {
			limit 10 1h
		}
	}
	respond "{http.tollgate.decision} {http.tollgate.zone}"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)

	for i := range 2 {
		resp := srv.get("/")
		if p := resp.Header.Get("RateLimit-Policy"); p != `"site";q=10;w=3600` {
			t.Errorf("request %d: RateLimit-Policy %q; want only the enforced site", i, p)
		}
		if r := resp.Header.Get("RateLimit"); strings.Contains(r, "api_trial") || !strings.HasPrefix(r, `"site";r=`) {
			t.Errorf("request %d: RateLimit %q; want only the enforced site", i, r)
		}
	}
	if _, body := srv.body("/"); body != "dry_run_deny api_trial" {
		t.Errorf("placeholders %q; want the trial's would-be denial", body)
	}
	if !strings.Contains(srv.logs(), `"zone":"api_trial"`) {
		t.Error("the trial's would-be denial was not logged")
	}

	srv.reload("", `
	tollgate {
		dry_run
		zone site {
			limit 1 1h
		}
	}
	respond "ok"`)
	resp := srv.get("/")
	if resp.Header.Get("RateLimit-Policy") != "" || resp.Header.Get("RateLimit") != "" {
		t.Errorf("dry-run handler: RateLimit-Policy %q, RateLimit %q; want neither", resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"))
	}
}

// TestHeadersShowTheFallbackLimit: a node that cannot reach a key's owner
// (here: its only seed never answers, so for its first seconds it
// decides every key by fallback) counts the key against its fallback
// share, fallback_ratio × the limit; the headers say so, with r counting
// down from that q, never from the configured limit.
func TestHeadersShowTheFallbackLimit(t *testing.T) {
	srv := startCaddy(t, fmt.Sprintf(`
	tollgate {
		secret %s
		cluster {
			bind 127.0.0.1:%d
			peer_listen 127.0.0.1:%d
			join 127.0.0.1:%d
		}
		fallback_ratio 0.4
	}`, processSecret, freePort(t), freePort(t), freePort(t)), apiSite("20 1h"))
	testutil.ClearOfWindowEdge(time.Hour, 30*time.Second)

	resp := srv.get("/", "X-API-Key", "k1")
	if got := resp.Header.Get("RateLimit-Policy"); got != `"api";q=8;w=3600` {
		t.Errorf("decided by fallback: RateLimit-Policy %q; want q=8 (0.4 × 20)", got)
	}
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"api";r=7;`) {
		t.Errorf("decided by fallback: RateLimit %q; want r=7 of q=8", got)
	}
}
