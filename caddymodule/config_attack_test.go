package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testutil"
)

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

// snapshot_interval has one rule wherever it comes from: the Caddyfile's
// "at least 1s, or off" holds for JSON too.
func TestSnapshotIntervalInJSONHasTheCaddyfileRule(t *testing.T) {
	for _, every := range []int64{1, int64(500 * time.Millisecond)} {
		cfg := withHandler(t, func(_, app map[string]any) { app["snapshot_interval"] = every })
		if err := validateConfig(cfg); err == nil || !strings.Contains(err.Error(), "snapshot_interval") {
			t.Errorf("snapshot_interval %s: got %v, want an error naming snapshot_interval", time.Duration(every), err)
		}
	}
	for _, every := range []int64{-1, int64(time.Second)} {
		cfg := withHandler(t, func(_, app map[string]any) { app["snapshot_interval"] = every })
		if err := validateConfig(cfg); err != nil {
			t.Errorf("snapshot_interval %s refused: %v", time.Duration(every), err)
		}
	}
}

// max_keys has the Caddyfile's bounds in JSON too.
func TestMaxKeysInJSONHasTheCaddyfileBounds(t *testing.T) {
	cfg := withHandler(t, func(_, app map[string]any) { app["max_keys"] = int64(1) << 50 })
	if err := validateConfig(cfg); err == nil || !strings.Contains(err.Error(), "max_keys") {
		t.Errorf("max_keys 2^50: got %v, want an error naming max_keys", err)
	}
	cfg = withHandler(t, func(_, app map[string]any) { app["max_keys"] = int64(1) << 40 })
	if err := validateConfig(cfg); err != nil {
		t.Errorf("max_keys 2^40 refused: %v", err)
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

// A request whose zone key rendered empty counts once in
// tollgate_empty_keys_total, denied or not (a denial renders the key again
// for its log line and the denied list).
func TestEmptyKeyCountsOncePerRequest(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone anonymous {
			limit 1 1h
			key {http.request.header.X-User}
		}
	}
	respond "ok"`)
	series := `tollgate_empty_keys_total{scope="anonymous",zone="anonymous"} `
	counted := func() int { // the counters are the process's: compare
		var n int
		if l := grepLines(adminGet(t, srv.Admin+"/metrics"), series); l != "" {
			fmt.Sscanf(strings.TrimPrefix(l, series), "%d", &n)
		}
		return n
	}
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	before := counted()
	var got []int
	for range 3 {
		got = append(got, srv.status("/", "User-Agent", "nobody"))
	}
	if fmt.Sprint(got) != "[200 429 429]" {
		t.Fatalf("statuses %v; want [200 429 429]", got)
	}
	if n := counted() - before; n != 3 {
		t.Errorf("3 requests with an empty key, 2 of them denied, counted %d times; want 3", n)
	}
}
