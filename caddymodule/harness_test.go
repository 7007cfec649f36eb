package caddymodule

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

// testCaddy is a Caddy running in this test process on loopback ports.
type testCaddy struct {
	t       testing.TB
	URL     string // http://127.0.0.1:port
	Admin   string // http://127.0.0.1:port of the admin API
	LogFile string // where Caddy's logs go
	dir     string
	port    int
	client  *http.Client
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCaddy runs a Caddy with one site on loopback whose body is site, and
// extra global options. It stops when the test ends.
func startCaddy(t testing.TB, globals, site string) *testCaddy {
	t.Helper()
	tc := &testCaddy{
		t:      t,
		dir:    t.TempDir(),
		port:   freePort(t),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
	}
	adminPort := freePort(t)
	tc.URL = fmt.Sprintf("http://127.0.0.1:%d", tc.port)
	tc.Admin = fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	tc.LogFile = filepath.Join(tc.dir, "caddy.log")
	tc.load(tc.caddyfile(adminPort, globals, site))
	t.Cleanup(func() {
		tc.client.CloseIdleConnections()
		if err := caddy.Load([]byte(`{"admin":{"disabled":true}}`), true); err != nil {
			t.Errorf("stopping caddy: %v", err)
		}
	})
	return tc
}

func (tc *testCaddy) caddyfile(adminPort int, globals, site string) string {
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	auto_https off
	skip_install_trust
	storage file_system %s
	log {
		output file %s
		level DEBUG
	}
%s
}
http://127.0.0.1:%d {
%s
}
`, adminPort, filepath.Join(tc.dir, "storage"), tc.LogFile, globals, tc.port, site)
}

// load adapts a Caddyfile and runs it in this process.
func (tc *testCaddy) load(caddyfile string) {
	tc.t.Helper()
	cfg := adapt(tc.t, caddyfile)
	if err := caddy.Load(cfg, true); err != nil {
		tc.t.Fatalf("loading config: %v\n%s", err, caddyfile)
	}
}

// reload replaces the running config through the admin API's /load route,
// keeping the ports.
func (tc *testCaddy) reload(globals, site string) {
	tc.t.Helper()
	var adminPort int
	fmt.Sscanf(tc.Admin, "http://127.0.0.1:%d", &adminPort)
	cfg := adapt(tc.t, tc.caddyfile(adminPort, globals, site))
	resp, err := tc.client.Post(tc.Admin+"/load", "application/json", bytes.NewReader(cfg))
	if err != nil {
		tc.t.Fatalf("posting /load: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		tc.t.Fatalf("/load answered %d: %s", resp.StatusCode, body)
	}
}

// get sends a GET for path with optional header pairs.
func (tc *testCaddy) get(path string, headers ...string) *http.Response {
	tc.t.Helper()
	req, err := http.NewRequest(http.MethodGet, tc.URL+path, nil)
	if err != nil {
		tc.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := tc.client.Do(req)
	if err != nil {
		tc.t.Fatalf("GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp
}

// status is get reduced to the status code.
func (tc *testCaddy) status(path string, headers ...string) int {
	tc.t.Helper()
	return tc.get(path, headers...).StatusCode
}

// body sends a GET and returns the status and body.
func (tc *testCaddy) body(path string, headers ...string) (int, string) {
	tc.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, tc.URL+path, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := tc.client.Do(req)
	if err != nil {
		tc.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// logs returns what Caddy logged so far.
func (tc *testCaddy) logs() string {
	b, _ := os.ReadFile(tc.LogFile)
	return string(b)
}

// adapt turns a Caddyfile into JSON or fails the test.
func adapt(t testing.TB, caddyfile string) []byte {
	t.Helper()
	cfg, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		t.Fatalf("adapting Caddyfile: %v\n%s", err, caddyfile)
	}
	for _, w := range warnings {
		if !strings.Contains(w.Message, "formatted") {
			t.Logf("adapt warning: %s", w.String())
		}
	}
	return cfg
}
