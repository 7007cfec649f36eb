package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"

	"github.com/tollgate/tollgate/internal/testutil"
)

func TestConcurrentRequestsThroughCaddyAreExact(t *testing.T) {
	for _, tc := range []struct{ name, zone string }{
		{"sliding_window", "limit 100 1h"},
		{"fixed_window", "limit 100 1h\nalgorithm fixed_window"},
		{"token_bucket", "limit 100 24h\nalgorithm token_bucket"}, // refills one per 864s
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startCaddy(t, "", fmt.Sprintf(`
	tollgate {
		zone api {
			%s
		}
	}
	respond "ok"`, tc.zone))
			testutil.ClearOfWindowEdge(time.Hour, 20*time.Second)

			const n = 500
			statuses := make([]*http.Response, n)
			var start, done sync.WaitGroup
			start.Add(1)
			for i := range n {
				done.Go(func() {
					start.Wait()
					resp, err := http.Get(srv.URL + "/")
					if err != nil {
						t.Errorf("request %d: %v", i, err)
						return
					}
					resp.Body.Close()
					statuses[i] = resp
				})
			}
			start.Done()
			done.Wait()

			var ok, limited int
			for _, resp := range statuses {
				switch {
				case resp == nil:
				case resp.StatusCode == http.StatusOK:
					ok++
					if resp.Header.Get("RateLimit-Policy") != `"api";q=100;w=`+policyWindow(tc.zone) {
						t.Errorf("allowed response RateLimit-Policy = %q", resp.Header.Get("RateLimit-Policy"))
					}
				case resp.StatusCode == http.StatusTooManyRequests:
					limited++
					retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
					if err != nil || retry < 1 {
						t.Errorf("429 with Retry-After %q", resp.Header.Get("Retry-After"))
					}
					if !regexp.MustCompile(`^"api";r=0;t=\d+$`).MatchString(resp.Header.Get("RateLimit")) {
						t.Errorf("429 with RateLimit %q", resp.Header.Get("RateLimit"))
					}
				default:
					t.Errorf("unexpected status %d", resp.StatusCode)
				}
			}
			if ok != 100 || limited != n-100 {
				t.Fatalf("%d concurrent requests against a limit of 100: %d allowed, %d limited", n, ok, limited)
			}
		})
	}
}

func policyWindow(zone string) string {
	if strings.Contains(zone, "24h") {
		return "86400"
	}
	return "3600"
}

func TestAllowedResponsesCarryHeadersAndPlaceholders(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone api {
			limit 3 1h
		}
	}
	respond "{http.tollgate.decision} {http.tollgate.zone} {http.tollgate.remaining} {http.tollgate.reset}"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)

	for want := 2; want >= 0; want-- {
		status, body := srv.body("/")
		if status != http.StatusOK {
			t.Fatalf("request with %d left: status %d", want+1, status)
		}
		var decision, zone string
		var remaining, reset int
		if _, err := fmt.Sscanf(body, "%s %s %d %d", &decision, &zone, &remaining, &reset); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		if decision != "allow" || zone != "api" || remaining != want || reset < 1 || reset > 3600 {
			t.Errorf("placeholders %q; want allow api %d <reset in 1..3600>", body, want)
		}
	}
	resp := srv.get("/")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("4th request: status %d, want 429", resp.StatusCode)
	}
}

func TestHandleErrorsShapesTheDenial(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone login {
			limit 1 1h
		}
	}
	respond "welcome"
	handle_errors 429 {
		respond "slow down: {http.tollgate.zone}, retry in {http.tollgate.retry_after}s ({http.tollgate.decision})" 429
	}`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)

	if status, _ := srv.body("/"); status != http.StatusOK {
		t.Fatalf("first request: %d", status)
	}
	status, body := srv.body("/")
	if status != http.StatusTooManyRequests || !regexp.MustCompile(`^slow down: login, retry in \d+s \(deny\)$`).MatchString(body) {
		t.Fatalf("denied request: %d %q", status, body)
	}
	if resp := srv.get("/"); resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit") == "" {
		t.Errorf("shaped 429 lost its headers: %v", resp.Header)
	}
}

func TestDeniedRequestSpendsNothingInOtherZones(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone all {
			limit 5 1h
		}
		zone strict {
			limit 2 1h
			match {
				path /strict/*
			}
		}
	}
	respond "ok"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)

	for i := range 2 {
		if s := srv.status("/strict/x"); s != http.StatusOK {
			t.Fatalf("strict request %d: %d", i, s)
		}
	}
	for i := range 3 {
		resp := srv.get("/strict/x")
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("strict request past its limit: %d", resp.StatusCode)
		}
		if got := resp.Header.Get("RateLimit"); got != `"all";r=3;t=`+tSuffix(got) || !strings.Contains(got, `"strict";r=0`) {
			t.Errorf("denied request %d: RateLimit %q; want all with 3 left", i, got)
		}
	}
	// The three denials took nothing from "all": 3 more pass there.
	for i := range 3 {
		if s := srv.status("/other"); s != http.StatusOK {
			t.Fatalf("request %d in zone all after strict denials: %d", i, s)
		}
	}
	if s := srv.status("/other"); s != http.StatusTooManyRequests {
		t.Fatalf("zone all past its limit: %d", s)
	}
}

// tSuffix returns the part of a RateLimit value after the first ";t=" up
// to the next list member, so tests can compare the rest exactly.
func tSuffix(v string) string {
	_, after, _ := strings.Cut(v, ";t=")
	before, _, _ := strings.Cut(after, ",")
	return before + strings.TrimPrefix(after, before)
}

func TestKeyPlaceholderSeparatesBudgets(t *testing.T) {
	srv := startCaddy(t, "", apiSite("2 1h"))
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)

	for _, key := range []string{"alice", "bob"} {
		for i := range 2 {
			if s := srv.status("/", "X-API-Key", key); s != http.StatusOK {
				t.Fatalf("%s request %d: %d", key, i, s)
			}
		}
		if s := srv.status("/", "X-API-Key", key); s != http.StatusTooManyRequests {
			t.Fatalf("%s past the limit: %d", key, s)
		}
	}
}

func TestDryRunNeverBlocks(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone api {
			limit 2 1h
		}
		dry_run
	}
	respond "{http.tollgate.decision}"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)

	var last string
	for i := range 5 {
		status, body := srv.body("/")
		if status != http.StatusOK {
			t.Fatalf("dry run request %d: %d", i, status)
		}
		last = body
	}
	if last != "dry_run_deny" {
		t.Errorf("decision after the limit in dry run = %q; want dry_run_deny", last)
	}
	if resp := srv.get("/"); resp.Header.Get("RateLimit") != "" {
		t.Errorf("dry run RateLimit = %q; want none: a trial is not announced to clients", resp.Header.Get("RateLimit"))
	}
	if !strings.Contains(srv.logs(), `"dry_run":true`) {
		t.Error("dry run denial was not logged")
	}
}

func TestReloadKeepsCountsAndAppliesNewLimits(t *testing.T) {
	site := func(limit int) string {
		return fmt.Sprintf(`
	tollgate {
		zone api {
			limit %d 1h
		}
	}
	respond "ok"`, limit)
	}
	srv := startCaddy(t, "", site(10))
	testutil.ClearOfWindowEdge(time.Hour, 20*time.Second)

	for range 6 {
		srv.get("/")
	}
	srv.reload("", site(10)) // the same config
	if got := srv.get("/").Header.Get("RateLimit"); !strings.HasPrefix(got, `"api";r=3;`) {
		t.Fatalf("after reloading the same config: RateLimit %q; want 3 left of 10 (7 spent)", got)
	}
	srv.reload("", site(8)) // a lower limit applies to the spent count at once
	if got := srv.get("/").Header.Get("RateLimit"); !strings.HasPrefix(got, `"api";r=0;`) {
		t.Fatalf("after lowering the limit to 8: RateLimit %q; want 0 left (8 spent)", got)
	}
	if s := srv.status("/"); s != http.StatusTooManyRequests {
		t.Fatalf("past the lowered limit: %d", s)
	}
	srv.reload("", site(20))
	if got := srv.get("/").Header.Get("RateLimit"); !strings.HasPrefix(got, `"api";r=11;`) {
		t.Fatalf("after raising the limit to 20: RateLimit %q; want 11 left (9 spent)", got)
	}
}

func TestZonesAreScopedToTheirHandlerUnlessShared(t *testing.T) {
	srv := startCaddy(t, "", `
	handle /a/* {
		tollgate {
			zone api {
				limit 2 1h
			}
			zone global {
				limit 3 1h
				shared
			}
		}
		respond "a"
	}
	handle /b/* {
		tollgate {
			zone api {
				limit 2 1h
			}
			zone global {
				limit 3 1h
				shared
			}
		}
		respond "b"
	}`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)

	// Two in /a spend a's "api" and two of the three shared "global".
	for range 2 {
		if s := srv.status("/a/x"); s != http.StatusOK {
			t.Fatalf("/a: %d", s)
		}
	}
	// /b has an "api" zone of its own, but only one "global" unit is left.
	resp := srv.get("/b/x")
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("RateLimit"), `"api";r=1;`) {
		t.Fatalf("/b first request: %d %q; want 200 with its own api budget", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	if s := srv.status("/b/x"); s != http.StatusTooManyRequests {
		t.Fatalf("/b past the shared zone: %d", s)
	}
}

func TestDenialEmitsEvent(t *testing.T) {
	srv := startCaddy(t, `	events {
		on tollgate_denied tollgate_test_recorder
	}`, `
	tollgate {
		zone api {
			limit 1 1h
		}
	}
	respond "ok"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	recorded.reset()

	srv.get("/")
	srv.get("/")
	events := recorded.all()
	if len(events) != 1 {
		t.Fatalf("recorded %d events; want 1", len(events))
	}
	if events[0].Name() != "tollgate_denied" || events[0].Data["zone"] != "api" {
		t.Errorf("event %s %v", events[0].Name(), events[0].Data)
	}
	if _, leaked := events[0].Data["key"]; leaked {
		t.Error("the event carries the key")
	}
}

// eventRecorder is an event handler that keeps the events it is given.
type eventRecorder struct{}

var recorded recording

type recording struct {
	mu     sync.Mutex
	events []caddy.Event
}

func (r *recording) reset() { r.mu.Lock(); r.events = nil; r.mu.Unlock() }
func (r *recording) all() []caddy.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]caddy.Event(nil), r.events...)
}

func init() { caddy.RegisterModule(eventRecorder{}) }

func (eventRecorder) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "events.handlers.tollgate_test_recorder",
		New: func() caddy.Module { return new(eventRecorder) },
	}
}

func (eventRecorder) Handle(_ context.Context, e caddy.Event) error {
	recorded.mu.Lock()
	recorded.events = append(recorded.events, e)
	recorded.mu.Unlock()
	return nil
}

func (*eventRecorder) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	return nil
}

var _ caddyevents.Handler = eventRecorder{}

func TestHeadersOption(t *testing.T) {
	for _, tc := range []struct {
		mode                string
		onAllowed, onDenied bool
	}{
		{"always", true, true},
		{"denied", false, true},
		{"off", false, false},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			srv := startCaddy(t, "", fmt.Sprintf(`
	tollgate {
		zone api {
			limit 1 1h
		}
		headers %s
	}
	respond "ok"`, tc.mode))
			testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
			allowed, denied := srv.get("/"), srv.get("/")
			if denied.StatusCode != http.StatusTooManyRequests || denied.Header.Get("Retry-After") == "" {
				t.Fatalf("second request: %d, Retry-After %q; want 429 with Retry-After", denied.StatusCode, denied.Header.Get("Retry-After"))
			}
			if got := allowed.Header.Get("RateLimit") != ""; got != tc.onAllowed {
				t.Errorf("RateLimit on an allowed response: %v, want %v", got, tc.onAllowed)
			}
			if got := denied.Header.Get("RateLimit-Policy") != ""; got != tc.onDenied {
				t.Errorf("RateLimit-Policy on a 429: %v, want %v", got, tc.onDenied)
			}
		})
	}
}

// withHandler adapts a one-site Caddyfile and lets edit change the
// tollgate handler's and the app's JSON, as a config sent to /load could.
func withHandler(t *testing.T, edit func(handler, app map[string]any)) []byte {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(adapt(t, `{
	admin off
}
:8080 {
	tollgate {
		zone z {
			limit 3 1m
		}
	}
	respond "ok"
}
`), &cfg); err != nil {
		t.Fatal(err)
	}
	apps := cfg["apps"].(map[string]any)
	route := apps["http"].(map[string]any)["servers"].(map[string]any)["srv0"].(map[string]any)["routes"].([]any)[0].(map[string]any)
	app, _ := apps["tollgate"].(map[string]any)
	if app == nil {
		app = map[string]any{}
		apps["tollgate"] = app
	}
	edit(route["handle"].([]any)[0].(map[string]any), app)
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A null among a handler's zones, in JSON sent to /load, is refused with
// an error rather than a panic while provisioning.
func TestNullZoneInJSONIsRefusedWithoutPanicking(t *testing.T) {
	for _, zones := range [][]any{{nil}, {map[string]any{"name": "z", "limit": 3, "window": int64(time.Minute)}, nil}} {
		cfg := withHandler(t, func(h, _ map[string]any) { h["zones"] = zones })
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("validating zones %v panicked: %v", zones, p)
				}
			}()
			err = validateConfig(cfg)
		}()
		if err == nil || !strings.Contains(err.Error(), "empty zone") {
			t.Errorf("zones %v: got %v, want an error about an empty zone", zones, err)
		}
	}
}

// The RateLimit header's counts are written as strconv writes them.
func TestAppendCountIsAppendInt(t *testing.T) {
	counts := []int64{math.MinInt64, -100, -1, math.MaxInt64, 1<<53 + 1, 999_999_999, 1_000_000_000}
	for n := int64(0); n < 1_000; n++ {
		counts = append(counts, n)
	}
	for p := int64(10); p > 0 && p < math.MaxInt64/10; p *= 10 {
		counts = append(counts, p-1, p, p+1, 3*p+7)
	}
	x := uint64(0x9e3779b97f4a7c15)
	for range 20000 { // every number of digits, each digit in every place
		x = x*6364136223846793005 + 1442695040888963407
		counts = append(counts, int64(x>>(1+x%63)))
	}
	for _, n := range counts {
		want := string(strconv.AppendInt([]byte("r="), n, 10))
		if got := string(appendCount([]byte("r="), n)); got != want { // no spare capacity
			t.Errorf("appendCount(%d) = %q, want %q", n, got, want)
		}
		if got := string(appendCount(append(make([]byte, 0, 32), "r="...), n)); got != want {
			t.Errorf("appendCount(%d), with room = %q, want %q", n, got, want)
		}
	}
}
