package caddymodule

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

// testCaddy is a Caddy running in this test process on loopback ports.
type testCaddy struct {
	t        testing.TB
	URL      string // http(s)://127.0.0.1:port
	Admin    string // http://127.0.0.1:port of the admin API
	LogFile  string // where Caddy's logs go
	dir      string // storage and logs
	port     int
	tls      bool
	logLevel string
	client   *http.Client
}

// caddyOptions are the less common settings of a test Caddy.
type caddyOptions struct {
	tls      bool   // serve the site over HTTPS with Caddy's internal CA
	dir      string // reuse this storage and log directory (a restart)
	logLevel string // of the default log; DEBUG if empty
}

// A port is handed out once per test run: it is free when chosen but not
// held, so two choices in a row could otherwise pick it twice.
var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// freePort returns a loopback TCP port that was free a moment ago, and
// that no other caller of freePort or stablePort in this run was given.
func freePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("finding a free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !portsGiven[port] {
			portsGiven[port] = true
			return port
		}
	}
	t.Fatal("no free port that was not given out already")
	return 0
}

// startCaddy runs a Caddy with one site on loopback whose body is site, and
// extra global options. It stops when the test ends.
func startCaddy(t testing.TB, globals, site string) *testCaddy {
	t.Helper()
	return startCaddyWith(t, caddyOptions{}, globals, site)
}

// startCaddyWith is startCaddy with options.
func startCaddyWith(t testing.TB, opts caddyOptions, globals, site string) *testCaddy {
	t.Helper()
	tc := &testCaddy{
		t:        t,
		dir:      opts.dir,
		port:     freePort(t),
		tls:      opts.tls,
		logLevel: opts.logLevel,
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: 64,
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true},
		}},
	}
	if tc.dir == "" {
		tc.dir = t.TempDir()
	}
	if tc.logLevel == "" {
		tc.logLevel = "DEBUG"
	}
	scheme := "http"
	if tc.tls {
		scheme = "https"
	}
	tc.LogFile = filepath.Join(tc.dir, "caddy.log")
	// A port found free can be taken by someone else before Caddy binds it
	// (a client's ephemeral port, say): try again with new ports.
	for attempt := 1; ; attempt++ {
		adminPort := freePort(t)
		tc.URL = fmt.Sprintf("%s://127.0.0.1:%d", scheme, tc.port)
		tc.Admin = fmt.Sprintf("http://127.0.0.1:%d", adminPort)
		err := caddy.Load(adapt(t, tc.caddyfile(adminPort, globals, site)), true)
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("loading config: %v", err)
		}
		tc.port = freePort(t)
	}
	if tc.tls {
		tc.awaitCertificate()
	}
	t.Cleanup(func() {
		tc.client.CloseIdleConnections()
		caddyStop(t)
	})
	return tc
}

// awaitCertificate waits until the site's certificate, which Caddy's
// internal CA issues in the background, is served.
func (tc *testCaddy) awaitCertificate() {
	tc.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(tc.URL, "https://"), &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			tc.t.Fatalf("no certificate served: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (tc *testCaddy) caddyfile(adminPort int, globals, site string) string {
	scheme, autoHTTPS, tlsSite := "http", "off", ""
	if tc.tls {
		scheme, autoHTTPS, tlsSite = "https", "disable_redirects", "\ttls internal\n"
	}
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	auto_https %s
	skip_install_trust
	storage file_system %s
	log {
		output file %s
		level %s
	}
%s
}
%s://127.0.0.1:%d {
%s%s
}
`, adminPort, autoHTTPS, filepath.Join(tc.dir, "storage"), tc.LogFile, tc.logLevel, globals, scheme, tc.port, tlsSite, site)
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
	tc.awaitOldServersClosed()
	tc.client.CloseIdleConnections() // those are the old config's servers'
}

// awaitOldServersClosed waits until the replaced config's server has
// closed its listener on the site's port. /load returns once the old
// servers' shutdowns have been started, not once they have closed their
// listeners (Caddy shuts each down in a goroutine of its own), and each
// config binds the port with SO_REUSEPORT: until the old socket closes,
// the kernel may hand a new connection to the old server, which serves it
// with the old config.
func (tc *testCaddy) awaitOldServersClosed() {
	tc.t.Helper()
	addr := fmt.Sprintf(":%d", tc.port) // a site of 127.0.0.1 listens on every interface
	deadline := time.Now().Add(10 * time.Second)
	for caddy.ListenerUsage("tcp", addr) > 1 {
		if time.Now().After(deadline) {
			tc.t.Fatalf("10 s after /load, %d servers still listen on %s; want the new config's alone",
				caddy.ListenerUsage("tcp", addr), addr)
		}
		time.Sleep(time.Millisecond)
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
	resp := tc.do(req)
	resp.Body.Close()
	return resp
}

// do sends req, again on a new connection if the first fails: a reload's
// old servers drain in the background and close the idle connections they
// accepted, and a GET such a connection refused never reached a handler.
func (tc *testCaddy) do(req *http.Request) *http.Response {
	tc.t.Helper()
	return sendAgainOnDrain(tc.t, tc.client, req)
}

// sendAgainOnDrain is do for any client of a test Caddy.
func sendAgainOnDrain(t testing.TB, hc *http.Client, req *http.Request) *http.Response {
	t.Helper()
	var resp *http.Response
	var err error
	for try := range 5 {
		if resp, err = hc.Do(req); err == nil {
			return resp
		}
		hc.CloseIdleConnections()
		// The old servers share the listener while they drain: a new
		// connection they accept is closed unanswered. Give them a moment.
		time.Sleep(time.Duration(try+1) * 20 * time.Millisecond)
	}
	t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	return nil
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
	resp := tc.do(req)
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

// caddyStop stops the Caddy running in this process, as a test's cleanup
// would, so the next start is a fresh process state but for the pool.
func caddyStop(t testing.TB) {
	t.Helper()
	if err := caddy.Load([]byte(`{"admin":{"disabled":true,"config":{"persist":false}}}`), true); err != nil {
		t.Fatalf("stopping caddy: %v", err)
	}
}

// validateConfig runs what `caddy validate` does on a JSON config.
func validateConfig(cfgJSON []byte) error {
	var cfg caddy.Config
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		return err
	}
	return caddy.Validate(&cfg)
}

// adminDo sends a request to the admin API and decodes a JSON answer into
// out (if not nil), returning the status and the raw body.
func adminDo(t testing.TB, base, method, path string, out any) (int, string) {
	t.Helper()
	return adminSend(t, base, method, path, "", out)
}

// adminSend is adminDo with a request body; out is filled from a 200 or a
// 201.
func adminSend(t testing.TB, base, method, path, body string, out any) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if out != nil && (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated) {
		if err := json.Unmarshal(got, out); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, got)
		}
	}
	return resp.StatusCode, string(got)
}

// adminRaw sends a request without following redirects and returns the
// whole response, body read; headers are more header names and values.
func adminRaw(t testing.TB, base, method, path, body string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return resp, string(got)
}

// jsonError reads an admin error answer; it fails the test when the answer
// is not a JSON error.
func jsonError(t *testing.T, what string, resp *http.Response, body string) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
		t.Errorf("%s: %d %s %q; want a JSON error", what, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	return e.Error
}

// trustLoopback makes Caddy take the client IP from X-Forwarded-For, so
// tests can play clients at any address.
const trustLoopback = `	servers {
		trusted_proxies static 127.0.0.0/8
	}`

// client is one test browser: its own cookie jar, headers and address.
type client struct {
	t       testing.TB
	srv     *testCaddy
	http    *http.Client
	ua      string
	ip      string // sent as X-Forwarded-For when set
	cookies bool
}

func newClient(t testing.TB, srv *testCaddy, ua, ip string, keepCookies bool) *client {
	c := &client{t: t, srv: srv, ua: ua, ip: ip, cookies: keepCookies,
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		}}}
	if keepCookies {
		c.http.Jar, _ = cookiejar.New(nil)
	}
	return c
}

// get sends a GET and returns the response with its body read.
func (c *client) get(path string) (*http.Response, string) {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.srv.URL+path, nil)
	req.Header.Set("User-Agent", c.ua)
	req.Header.Set("Accept-Language", "en-GB")
	if c.ip != "" {
		req.Header.Set("X-Forwarded-For", c.ip)
	}
	resp := sendAgainOnDrain(c.t, c.http, req)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// allowed counts how many of n requests pass.
func (c *client) allowed(n int) int {
	c.t.Helper()
	ok := 0
	for range n {
		if resp, _ := c.get("/"); resp.StatusCode == http.StatusOK {
			ok++
		}
	}
	return ok
}

func allowedOf(srv *testCaddy, n int, headers ...string) int {
	ok := 0
	for range n {
		if srv.status("/", headers...) == http.StatusOK {
			ok++
		}
	}
	return ok
}

// apiSite is a site whose zone api lets each X-API-Key through limit
// (count and window, as the Caddyfile writes them), answering "ok".
func apiSite(limit string) string {
	return `
	tollgate {
		zone api {
			limit ` + limit + `
			key {http.request.header.X-API-Key}
		}
	}
	respond "ok"`
}
