package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// TestCLIUIRelayServesOnlyThePage runs `caddy tollgate ui` against a real
// Caddy: it serves the page and the routes the page reads, and refuses
// other sites, other Host names, other routes and a non-loopback address.
func TestCLIUIRelayServesOnlyThePage(t *testing.T) {
	testutil.TollgateBinary(t)
	srv := startCaddy(t, testutil.AdminSite)
	relay := testutil.StartUIRelay(t, srv.Admin)
	send := func(method, path string, headers ...string) (int, string) {
		req, _ := http.NewRequest(method, relay+path, nil)
		for i := 0; i+1 < len(headers); i += 2 {
			if headers[i] == "Host" {
				req.Host = headers[i+1]
			} else {
				req.Header.Set(headers[i], headers[i+1])
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b := new(bytes.Buffer)
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	for _, tc := range []struct {
		method, path string
		headers      []string
		status       int
	}{
		{"GET", "/", nil, 200},
		{"GET", "/tollgate/status", nil, 200},
		{"GET", "/tollgate/denied?limit=5", nil, 200},
		{"GET", "/metrics", nil, 200},
		{"DELETE", "/tollgate/clients/alice", []string{"Origin", relay, "Sec-Fetch-Site", "same-origin"}, 200},
		{"DELETE", "/tollgate/clients/alice", []string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, 403},
		{"DELETE", "/tollgate/clients/alice", []string{"Origin", "http://evil.example"}, 403},
		{"GET", "/tollgate/status", []string{"Host", "evil.example:80"}, 403},
		{"PUT", "/tollgate/tiers", nil, 404},
		{"POST", "/load", nil, 404},
		{"GET", "/config/", nil, 404},
	} {
		if status, body := send(tc.method, tc.path, tc.headers...); status != tc.status {
			t.Errorf("%s %s %v through the relay: %d %s; want %d", tc.method, tc.path, tc.headers, status, body, tc.status)
		}
	}
	if _, body := send("GET", "/"); !strings.Contains(body, "<title>Tollgate status</title>") {
		t.Errorf("the relay's page: %.200s", body)
	}
	_, errOut, code := testutil.CLI(t, "ui", "--address", srv.Admin, "--listen", "0.0.0.0:0")
	if code != exitUsage || !strings.Contains(errOut, "loopback") {
		t.Errorf("ui --listen 0.0.0.0:0: exit %d %s; want 2 and why", code, errOut)
	}
}

// TestUIRelayNeverLeavesTheClientRoute sends the relay of `caddy tollgate
// ui` resets whose path climbs out of /tollgate/clients/, raw or escaped:
// none may reach another admin route (the config, say), and an escaped
// "/" or "." in a key stays part of the key.
func TestUIRelayNeverLeavesTheClientRoute(t *testing.T) {
	srv := startCaddy(t, testutil.AdminSite)
	c := invocationFor(t, srv.Admin, false, io.Discard)
	relay := httptest.NewUnstartedServer(nil)
	relay.Config.Handler = &uiRelay{c: c, self: relay.Listener.Addr().String()}
	relay.Start()
	defer relay.Close()
	config := func() string {
		_, body := srv.adminGet(t, "/config/", nil)
		return body
	}
	before := config()
	for _, tc := range []struct {
		path   string
		status int
		id     string // the key reset, when the relay lets it through
	}{
		{"/tollgate/clients/../../config/", http.StatusNotFound, ""},
		{"/tollgate/clients/../../load", http.StatusNotFound, ""},
		{"/tollgate/clients/..", http.StatusNotFound, ""},
		{"/tollgate/clients/.", http.StatusNotFound, ""},
		{"/tollgate/clients/a/b", http.StatusNotFound, ""},
		{"/tollgate/clients/..%2F..%2Fconfig%2F", http.StatusOK, "../../config/"},
		{"/tollgate/clients/%2E%2E", http.StatusOK, ".."},
		{"/tollgate/clients/a%2Fb", http.StatusOK, "a/b"},
		{"/tollgate/clients/alice", http.StatusOK, "alice"},
	} {
		req, err := http.NewRequest(http.MethodDelete, relay.URL+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("DELETE %s: %v", tc.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("DELETE %s through the relay: %d %s; want %d", tc.path, resp.StatusCode, body, tc.status)
			continue
		}
		if tc.id != "" {
			var res adminapi.ResetResult
			if err := json.Unmarshal(body, &res); err != nil || res.ID != tc.id {
				t.Errorf("DELETE %s through the relay reset %q (%s); want %q", tc.path, res.ID, body, tc.id)
			}
		}
		if after := config(); after != before {
			t.Fatalf("DELETE %s through the relay changed Caddy's config:\n%s\nwas\n%s", tc.path, after, before)
		}
	}
}

// TestUIListensWhereNoExampleAdminIs checks that `caddy tollgate ui`, run
// as the docs say next to the example cluster, does not ask for the port
// of one of its admin endpoints.
func TestUIListensWhereNoExampleAdminIs(t *testing.T) {
	_, port, _ := net.SplitHostPort(defaultUIListen)
	files, _ := filepath.Glob("../docs/examples/cluster/*.caddyfile")
	if len(files) == 0 {
		t.Fatal("no example cluster in docs/examples/cluster")
	}
	for _, f := range append(files, "../Caddyfile.example") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			if len(fields) == 2 && fields[0] == "admin" && strings.HasSuffix(fields[1], ":"+port) {
				t.Errorf("%s: admin %s takes the port caddy tollgate ui listens on by default (%s)", f, fields[1], defaultUIListen)
			}
		}
	}
}

// TestUIRefusesAnAddressThatIsNoAdminEndpoint runs `caddy tollgate ui`
// against a site, not an admin endpoint: it says so and stops, instead of
// serving a page that can only show errors.
func TestUIRefusesAnAddressThatIsNoAdminEndpoint(t *testing.T) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("Hello from a site\n"))
	}))
	defer site.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	listen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	cmd := exec.CommandContext(ctx, testutil.TollgateBinary(t), "tollgate", "ui", "--address", strings.TrimPrefix(site.URL, "http://"), "--listen", listen)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("caddy tollgate ui served a site as the admin endpoint:\n%s", out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitRefused || !strings.Contains(string(out), "admin endpoint") {
		t.Errorf("caddy tollgate ui against a site: %v\n%s; want exit %d saying it is no admin endpoint", err, out, exitRefused)
	}
}

// TestUIRelayServesTheLookupBox: the relay passes the lookup box's
// requests (a key hashed from the body, a client's counters, the
// decisions) and nothing beside them: no other POST, no body over 4 KiB,
// no client path that moves up.
func TestUIRelayServesTheLookupBox(t *testing.T) {
	srv := startCaddy(t, testutil.AdminSite)
	c := invocationFor(t, srv.Admin, false, io.Discard)
	relay := httptest.NewUnstartedServer(nil)
	relay.Config.Handler = &uiRelay{c: c, self: relay.Listener.Addr().String()}
	relay.Start()
	defer relay.Close()
	send := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, relay.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body := send(http.MethodPost, adminapi.PathHash, `{"key": "alice"}`)
	var ans adminapi.HashAnswer
	if status != http.StatusOK || json.Unmarshal([]byte(body), &ans) != nil || !strings.HasPrefix(ans.ID, "h:") {
		t.Fatalf("POST %s through the relay: %d %s; want alice's hashed ID", adminapi.PathHash, status, body)
	}
	for _, tc := range []struct {
		method, path, body string
		status             int
	}{
		{http.MethodGet, adminapi.ClientPath(ans.ID), "", http.StatusOK},
		{http.MethodGet, adminapi.PathDecisions, "", http.StatusOK},
		{http.MethodPost, adminapi.PathHash, `{"key": "` + strings.Repeat("x", 5000) + `"}`, http.StatusRequestEntityTooLarge},
		{http.MethodPost, adminapi.PathDecisions, `{"key": "alice", "action": "block"}`, http.StatusNotFound},
		{http.MethodPost, "/load", `{}`, http.StatusNotFound},
		{http.MethodGet, "/tollgate/clients/../../config/", "", http.StatusNotFound},
		{http.MethodGet, "/config/", "", http.StatusNotFound},
	} {
		if status, body := send(tc.method, tc.path, tc.body); status != tc.status {
			t.Errorf("%s %s through the relay: %d %.200s; want %d", tc.method, tc.path, status, body, tc.status)
		}
	}
	var list adminapi.DecisionList
	if _, body := srv.adminGet(t, adminapi.PathDecisions, &list); len(list.Items) != 0 {
		t.Errorf("a decision was made through the relay: %s", body)
	}
}
