package caddymodule

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"golang.org/x/crypto/bcrypt"

	"github.com/tollgate/tollgate/internal/testutil"
)

// TestKeysWithoutPlaceholdersAreRejected: a key that would put every request
// in one budget by mistake fails to adapt and to validate, naming the zone;
// `key global` says so on purpose.
func TestKeysWithoutPlaceholdersAreRejected(t *testing.T) {
	for key, want := range map[string]string{
		"X-API-Key":                          `zone "api": key "X-API-Key" has no placeholder, so every request would share one budget: use a placeholder such as {http.request.header.X-API-Key}, or write ` + "`key global`",
		"{http.request.header.X-API-Key":     `zone "api": key "{http.request.header.X-API-Key" has unbalanced braces`,
		"http.request.header.X-API-Key}":     `zone "api": key "http.request.header.X-API-Key}" has unbalanced braces`,
		"tenant-{http.request.header.X-Org}": "",
		"global":                             "",
	} {
		caddyfile := fmt.Sprintf("http://localhost:8080 {\n\ttollgate {\n\t\tzone api {\n\t\t\tlimit 10 1m\n\t\t\tkey %s\n\t\t}\n\t}\n}\n", key)
		_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
		switch {
		case want == "" && err != nil:
			t.Errorf("key %s: %v", key, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("key %s: adapt error %v; want one containing %q", key, err, want)
		}
		// The same key written in JSON fails `caddy validate`.
		cfg := fmt.Sprintf(`{"admin":{"disabled":true},"apps":{"tollgate":{"secrets":["0123456789abcdef0123456789abcdef"]},"http":{"servers":{"s":{"listen":["127.0.0.1:0"],"routes":[{"handle":[{"handler":"tollgate","zones":[{"name":"api","limit":10,"window":"1m","key":%q}]}]}]}}}}}`, key)
		err = validateConfig([]byte(cfg))
		switch {
		case want == "" && err != nil:
			t.Errorf("key %s in JSON: %v", key, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("key %s in JSON: validate error %v; want one containing %q", key, err, want)
		}
	}
}

// TestKeyRenderingEmptyFallsBackToTheClient keys a zone by the
// authenticated user on a site with basic_auth. With the default order,
// tollgate runs before authentication, so the user renders empty: each
// client is counted by its own ID (not one budget for everyone), the
// fallback is counted and logged once. In a route after basic_auth, the
// user's budget is shared by all of that user's clients.
func TestKeyRenderingEmptyFallsBackToTheClient(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("open sesame"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	srv := startCaddy(t, trustLoopback, fmt.Sprintf(`
	tollgate {
		zone users {
			limit 2 1h
			key {http.auth.user.id}
		}
	}
	basic_auth /private* {
		alice %[1]s
	}
	route /after/* {
		basic_auth {
			alice %[1]s
		}
		tollgate {
			zone after {
				limit 2 1h
				key {http.auth.user.id}
			}
		}
		respond "after"
	}
	respond "ok"`, hash))
	testutil.ClearOfWindowEdge(time.Hour, 30*time.Second)

	statuses := func(ip, path string, n int, auth bool) []int {
		var out []int
		for range n {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
			req.Header.Set("X-Forwarded-For", ip)
			req.Header.Set("User-Agent", "Browser/"+ip)
			if auth {
				req.SetBasicAuth("alice", "open sesame")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			out = append(out, resp.StatusCode)
		}
		return out
	}
	// Before authentication: two clients, each with its own budget of 2.
	if got := fmt.Sprint(statuses("203.0.113.100", "/private", 3, true)); got != "[200 200 429]" {
		t.Fatalf("first client before authentication: %s; want [200 200 429]", got)
	}
	if got := fmt.Sprint(statuses("198.51.100.100", "/private", 3, false)); got != "[401 401 429]" {
		t.Fatalf("second client before authentication: %s; want its own budget, [401 401 429]", got)
	}
	metrics := adminGet(t, srv.Admin+"/metrics")
	if !strings.Contains(metrics, `tollgate_empty_keys_total{scope="users",zone="users"} 6`) {
		t.Errorf("empty keys not counted in the metrics:\n%s", grepLines(metrics, "empty_keys"))
	}
	if n := strings.Count(srv.logs(), "rendered empty"); n != 1 {
		t.Errorf("the empty key was logged %d times; want once per zone", n)
	}

	// After authentication (a route): alice's budget is shared by her
	// clients on two networks; the users zone still counts each client.
	a := statuses("203.0.113.101", "/after/x", 2, true)
	b := statuses("198.51.100.101", "/after/x", 1, true)
	if fmt.Sprint(a, b) != "[200 200] [429]" {
		t.Fatalf("alice after authentication from two networks: %v %v; want [200 200] [429]", a, b)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
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
