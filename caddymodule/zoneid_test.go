package caddymodule

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testutil"
)

// loadSites replaces tc's config with one serving the given site blocks,
// in the given order, on tc's port (sites are told apart by host).
func (tc *testCaddy) loadSites(globals string, sites []string) {
	tc.t.Helper()
	var adminPort int
	fmt.Sscanf(tc.Admin, "http://127.0.0.1:%d", &adminPort)
	loads++
	marker := fmt.Sprintf("default %d", loads)
	cf := tc.caddyfile(adminPort, globals, fmt.Sprintf("respond %q", marker))
	cf += strings.Join(sites, "\n")
	resp, err := tc.client.Post(tc.Admin+"/load", "application/json", bytes.NewReader(adapt(tc.t, cf)))
	if err != nil {
		tc.t.Fatalf("posting /load: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		tc.t.Fatalf("/load answered %d: %s", resp.StatusCode, body)
	}
	// Connections to the old config's servers would still be served by
	// it while it drains: start afresh, until a request that counts in no
	// zone is answered by the new config, whose answer names this load.
	tc.client.CloseIdleConnections()
	testutil.Eventually(tc.t, 5*time.Second, "serving the new config", func() bool {
		resp, err := tc.client.Get(tc.URL + "/")
		if err != nil {
			return false
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != marker {
			tc.client.CloseIdleConnections()
			return false
		}
		return true
	})
}

// loads counts the configs loadSites has loaded, to tell them apart.
var loads int

// site returns a site block for host on tc's port.
func (tc *testCaddy) site(host, body string) string {
	return fmt.Sprintf("http://%s:%d {\n%s\n}\n", host, tc.port, body)
}

// getHost sends a GET to tc with the given Host and returns the status and
// the RateLimit header of the answer of the config loadSites loaded last.
func (tc *testCaddy) getHost(host string, headers ...string) (int, string) {
	tc.t.Helper()
	current := fmt.Sprintf("default %d", loads)
	for try := 0; ; try++ {
		req, _ := http.NewRequest(http.MethodGet, tc.URL+"/", nil)
		req.Host = host
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp := tc.do(req)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// The old config's servers share the listener while they drain:
		// a new connection one of them accepts is answered by the old
		// config, whose catch-all site counts in no zone. That answer is
		// not the new config's: ask again on a new connection.
		if old := string(body); strings.HasPrefix(old, "default") && old != current && try < 5 {
			tc.client.CloseIdleConnections()
			time.Sleep(time.Duration(try+1) * 20 * time.Millisecond)
			continue
		}
		return resp.StatusCode, resp.Header.Get("RateLimit")
	}
}

func apiZone(limit int) string {
	return fmt.Sprintf(`	tollgate {
		zone api {
			limit %d 1h
			key {http.request.header.X-User}
		}
	}
	respond "ok"`, limit)
}

// TestSameNamedZonesKeepTheirCountsAcrossShuffledReloads: two sites each
// with a zone "api" (limits 3 and 50) keep their own counts through 20
// reloads that shuffle the order of the sites and add or drop a third site
// with its own "api".
func TestSameNamedZonesKeepTheirCountsAcrossShuffledReloads(t *testing.T) {
	// Bob is denied on every reload: without reputation, those denials
	// do not shrink his limits, so the counts alone decide.
	const noReputation = "\ttollgate {\n\t\treputation off\n\t}"
	srv := startCaddy(t, noReputation, `respond "default"`)
	a, b, c := srv.site("a.test", apiZone(3)), srv.site("b.test", apiZone(50)), srv.site("c.test", apiZone(20))
	srv.loadSites(noReputation, []string{a, b})
	testutil.ClearOfWindowEdge(time.Hour, time.Minute)

	for i := range 3 {
		if s, _ := srv.getHost("a.test", "X-User", "bob"); s != http.StatusOK {
			t.Fatalf("a.test request %d: %d", i+1, s)
		}
	}
	if s, _ := srv.getHost("a.test", "X-User", "bob"); s != http.StatusTooManyRequests {
		t.Fatalf("a.test past its limit of 3: %d", s)
	}
	for range 4 {
		srv.getHost("b.test", "X-User", "bob")
	}
	left := 46 // of b's 50
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("shuffle seed %d", seed)
	for reload := range 20 {
		sites := []string{a, b}
		if reload%2 == 1 {
			sites = append(sites, c)
		}
		rng.Shuffle(len(sites), func(i, j int) { sites[i], sites[j] = sites[j], sites[i] })
		srv.loadSites(noReputation, sites)
		if s, rl := srv.getHost("a.test", "X-User", "bob"); s != http.StatusTooManyRequests {
			t.Fatalf("reload %d: a.test let bob in again (%d, RateLimit %q); its count was lost or swapped", reload+1, s, rl)
		}
		left--
		s, rl := srv.getHost("b.test", "X-User", "bob")
		if want := fmt.Sprintf(`"api";r=%d;`, left); s != http.StatusOK || !strings.HasPrefix(rl, want) {
			t.Fatalf("reload %d: b.test %d, RateLimit %q; want 200 with %s", reload+1, s, rl, want)
		}
		if reload%2 == 1 {
			if s, rl := srv.getHost("c.test", "X-User", "bob"); s != http.StatusOK || !strings.HasPrefix(rl, `"api";r=`) {
				t.Fatalf("reload %d: c.test %d, RateLimit %q; want 200 with its own api", reload+1, s, rl)
			}
		}
	}

	// Raising a.test's limit to 5 keeps bob's 3: exactly 2 more. Lowering
	// it to 4 leaves him denied.
	srv.loadSites(noReputation, []string{b, srv.site("a.test", apiZone(5))})
	for i := range 2 {
		if s, rl := srv.getHost("a.test", "X-User", "bob"); s != http.StatusOK {
			t.Fatalf("limit raised to 5: request %d %d (%q); want allowed", i+1, s, rl)
		}
	}
	if s, _ := srv.getHost("a.test", "X-User", "bob"); s != http.StatusTooManyRequests {
		t.Fatalf("limit raised to 5: a 6th request got %d", s)
	}
	srv.loadSites(noReputation, []string{srv.site("a.test", apiZone(4)), b})
	if s, _ := srv.getHost("a.test", "X-User", "bob"); s != http.StatusTooManyRequests {
		t.Fatalf("limit lowered to 4 with 5 spent: %d", s)
	}
}

// TestSharedZonesMustAgree: two declarations of one shared zone with
// different settings fail validation, naming the zone and both settings.
func TestSharedZonesMustAgree(t *testing.T) {
	shared := func(alg string) string {
		return fmt.Sprintf(`tollgate {
			zone x {
				limit 3 1m
				algorithm %s
				shared
			}
		}`, alg)
	}
	cfg := adapt(t, fmt.Sprintf(`{
	admin off
}
http://a.test:8080 {
	%s
	respond "a"
}
http://b.test:8080 {
	%s
	respond "b"
}
`, shared("sliding_window"), shared("token_bucket")))
	err := validateConfig(cfg)
	if err == nil {
		t.Fatal("validate accepted a shared zone declared as sliding_window and as token_bucket")
	}
	for _, want := range []string{`shared zone "x"`, "sliding_window", "token_bucket"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	// The same settings twice are fine.
	if err := validateConfig(adapt(t, fmt.Sprintf(`{
	admin off
}
http://a.test:8080 {
	%s
	respond "a"
}
http://b.test:8080 {
	%s
	respond "b"
}
`, shared("token_bucket"), shared("token_bucket")))); err != nil {
		t.Fatalf("validate refused identical shared zones: %v", err)
	}
}

// twoSharedSites is a config of two sites, each declaring the shared zone
// x with the given handler and zone lines.
func twoSharedSites(t *testing.T, handlerA, zoneA, handlerB, zoneB string) []byte {
	t.Helper()
	site := func(host, handler, zone string) string {
		return fmt.Sprintf(`http://%s:8080 {
	tollgate {
		%s
		zone x {
			shared
			%s
		}
	}
	respond "%s"
}
`, host, handler, zone, host)
	}
	return adapt(t, "{\n\tadmin off\n}\n"+site("a.test", handlerA, zoneA)+site("b.test", handlerB, zoneB))
}

// A trial declaration of a shared zone would spend the budget the other
// declarations enforce (the counter is one): a client's trial requests on
// one site would get it denied on the other. Such a config is refused.
func TestSharedZoneTrialInOnePlaceOnlyIsRefused(t *testing.T) {
	for _, c := range []struct{ name, handlerA, zoneA string }{
		{"zone dry_run", "", "limit 3 1m\n\t\t\tdry_run"},
		{"handler dry_run", "dry_run", "limit 3 1m"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := validateConfig(twoSharedSites(t, c.handlerA, c.zoneA, "", "limit 3 1m"))
			if err == nil {
				t.Fatal("validate accepted a shared zone that is a trial in one site and enforced in the other")
			}
			for _, want := range []string{`shared zone "x"`, "dry_run"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %s", err, want)
				}
			}
		})
	}
	// A trial everywhere is fine: no declaration enforces the counter.
	if err := validateConfig(twoSharedSites(t, "dry_run", "limit 3 1m", "", "limit 3 1m\n\t\t\tdry_run")); err != nil {
		t.Fatalf("validate refused a shared zone that is a trial everywhere: %v", err)
	}
}

// A token bucket's default burst is its limit: spelling it out changes
// nothing, so two declarations that differ only in that agree.
func TestSharedZoneExplicitDefaultBurstAgrees(t *testing.T) {
	tb := "limit 3 1m\n\t\t\talgorithm token_bucket"
	if err := validateConfig(twoSharedSites(t, "", tb, "", tb+"\n\t\t\tburst 3")); err != nil {
		t.Fatalf("validate refused burst 3 beside the default burst of limit 3: %v", err)
	}
	if err := validateConfig(twoSharedSites(t, "", tb, "", tb+"\n\t\t\tburst 4")); err == nil {
		t.Fatal("validate accepted burst 4 beside the default burst of limit 3")
	}
}

// Zones of one name in handlers that Caddy nests where the place walk does
// not go (a reverse_proxy's handle_response) are still told apart by
// place: two identical such handlers on two paths of a site keep their
// own counts, rather than being one zone because their content is.
func TestSameNamedZonesInHandleResponseKeepTheirOwnCounts(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer backend.Close()
	proxied := func(path, body string) string {
		return fmt.Sprintf(`handle %s* {
		reverse_proxy %s {
			@ok status 2xx
			handle_response @ok {
				tollgate {
					zone api {
						limit 2 1h
					}
				}
				respond "%s"
			}
		}
	}
	`, path, strings.TrimPrefix(backend.URL, "http://"), body)
	}
	srv := startCaddy(t, "", proxied("/a", "a")+proxied("/b", "b"))
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	for _, path := range []string{"/a", "/b"} {
		for i := range 3 {
			want := http.StatusOK
			if i == 2 {
				want = http.StatusTooManyRequests
			}
			if got := srv.status(path, "User-Agent", "nested"); got != want {
				t.Fatalf("%s request %d: %d, want %d (each path's zone api has its own limit of 2)", path, i+1, got, want)
			}
		}
	}
}
