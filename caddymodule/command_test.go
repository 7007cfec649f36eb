package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// tollgateCLI runs `caddy tollgate args…` with the built binary and returns
// its output, its error output and its exit code.
func tollgateCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(tollgateBinary(t), append([]string{"tollgate"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("running tollgate %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// TestCLIAgainstARunningCaddy runs every subcommand against a Caddy with
// the doc's zones, as a table and as JSON, and checks the exit codes and
// the advice of a bad address and an unknown client.
func TestCLIAgainstARunningCaddy(t *testing.T) {
	tollgateBinary(t) // build first, outside the window the test watches
	srv := startCaddy(t, "", docSite)
	clearOfWindowEdge(time.Hour, 30*time.Second)
	for range 101 {
		srv.get("/api/x", "X-User", "alice")
	}
	addr := strings.TrimPrefix(srv.Admin, "http://")
	app, _ := runningApp()
	aliceHash := hashedID(app.keyHashOf("alice"))

	type step struct {
		args     []string
		code     int
		out      []string // in the output, in a table
		errWords string   // in the error output
	}
	for _, s := range []step{
		{[]string{"status"}, 0, []string{"standalone", "MEMBER", "local", "self", "ZONE", "api"}, ""},
		{[]string{"client", "alice", "--zone", "api"}, 0, []string{"ZONE", "api", "sliding_window", "100", "yes"}, ""},
		{[]string{"client", aliceHash}, 0, []string{"api", "credits", "rooms"}, ""},
		{[]string{"client", "nobody-seen"}, exitNotFound, nil, "nothing is counted for nobody-seen"},
		{[]string{"client", "alice", "--zone", "nosuch"}, exitNotFound, nil, `no zone \"nosuch\"`},
		{[]string{"tiers"}, 0, []string{"credits", "premium", "50000", "rooms", "32"}, ""},
		{[]string{"tiers", "set", "credits", "pro=12000"}, 0, []string{"credits", "pro", "10000", "12000"}, ""},
		{[]string{"tiers", "set", "credits", "gold=1"}, exitRefused, nil, `unknown tier \"gold\"`},
		{[]string{"tiers", "set", "credits", "pro"}, exitUsage, nil, "want <tier>=<limit>"},
		{[]string{"tiers", "clear"}, 0, []string{"credits", "pro", "10000"}, ""},
		{[]string{"grant", "add", "credits", "alice", "500", "168h"}, 0, []string{"credits", "alice", "500"}, ""},
		{[]string{"grant", "add", "credits", "bob", "5", "3600"}, 0, []string{"bob", "5"}, ""},
		{[]string{"grant", "add", "credits", "bob", "lots", "1h"}, exitUsage, nil, `amount \"lots\"`},
		{[]string{"grant", "show", "credits", "alice"}, 0, []string{"alice", "500"}, ""},
		{[]string{"grant", "show"}, 0, []string{"credits", aliceHash, "500"}, ""},
		{[]string{"grant", "revoke", "credits", "alice"}, 0, []string{"revoked"}, ""},
		{[]string{"grant", "revoke", "credits", "alice"}, exitNotFound, nil, "no grant"},
		{[]string{"grant", "show", "credits"}, exitUsage, nil, "give a zone and a key"},
		{[]string{"reset", aliceHash, "--zone", "api"}, 0, []string{"reset " + aliceHash + " in api"}, ""},
		{[]string{"client"}, exitUsage, nil, "usage: caddy tollgate client <id>"},
		{[]string{}, exitUsage, nil, "name a subcommand"},
	} {
		out, errOut, code := tollgateCLI(t, append(s.args, "--address", addr)...)
		if code != s.code {
			t.Errorf("tollgate %v: exit %d; want %d\n%s%s", s.args, code, s.code, out, errOut)
			continue
		}
		for _, w := range s.out {
			if !strings.Contains(out, w) {
				t.Errorf("tollgate %v: output lacks %q:\n%s", s.args, w, out)
			}
		}
		if s.errWords != "" && !strings.Contains(errOut, s.errWords) {
			t.Errorf("tollgate %v: error output lacks %q:\n%s", s.args, s.errWords, errOut)
		}
	}
	if s := srv.status("/api/x", "X-User", "alice"); s != http.StatusOK {
		t.Errorf("after tollgate reset, alice: %d; want let through", s)
	}

	// --json prints what the admin API answers, for every subcommand.
	srv.get("/api/x", "X-User", "carol")
	for _, args := range [][]string{
		{"status"}, {"client", "carol"}, {"reset", "carol"}, {"tiers"}, {"tiers", "set", "credits", "pro=11000"},
		{"tiers", "clear"}, {"grant", "add", "credits", "carol", "7", "1h"}, {"grant", "show", "credits", "carol"},
		{"grant", "show"}, {"grant", "revoke", "credits", "carol"},
	} {
		out, errOut, code := tollgateCLI(t, append(args, "--json", "--address", addr)...)
		var v map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil || len(v) == 0 {
			t.Errorf("tollgate %v --json: exit %d, not a JSON object:\n%s%s", args, code, out, errOut)
		}
	}
	out, _, code := tollgateCLI(t, "client", "nobody-seen", "--json", "--address", addr)
	if code != exitNotFound || json.Unmarshal([]byte(out), new(ClientView)) != nil {
		t.Errorf("an unknown client with --json: exit %d, %q; want 4 and the view", code, out)
	}

	// A bad address says what to do.
	_, errOut, code := tollgateCLI(t, "status", "--address", "127.0.0.1:1")
	if code != exitUnreachable || !strings.Contains(errOut, "is Caddy running?") || !strings.Contains(errOut, "--address") {
		t.Errorf("a bad address: exit %d, %q; want 3 and advice", code, errOut)
	}
	_, errOut, code = tollgateCLI(t, "status", "--address", "not an address")
	if code != exitUsage || !regexp.MustCompile(`--address .* is not an admin address`).MatchString(errOut) {
		t.Errorf("a malformed address: exit %d, %q; want 2 and advice", code, errOut)
	}
	// An admin endpoint without Tollgate's routes: another Caddy, say.
	_, errOut, code = tollgateCLI(t, "status", "--address", strings.TrimPrefix(srv.URL, "http://"))
	if code == 0 || !strings.Contains(errOut, "--address") {
		t.Errorf("a site address instead of the admin one: exit %d, %q; want a failure naming --address", code, errOut)
	}
}

// TestCLIUIRelayServesOnlyThePage runs `caddy tollgate ui` against a real
// Caddy: it serves the page and the routes the page reads, and refuses
// other sites, other Host names, other routes and a non-loopback address.
func TestCLIUIRelayServesOnlyThePage(t *testing.T) {
	tollgateBinary(t)
	srv := startCaddy(t, "", adminSite)
	relay := startUIRelay(t, strings.TrimPrefix(srv.Admin, "http://"))
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
	_, errOut, code := tollgateCLI(t, "ui", "--address", strings.TrimPrefix(srv.Admin, "http://"), "--listen", "0.0.0.0:0")
	if code != exitUsage || !strings.Contains(errOut, "loopback") {
		t.Errorf("ui --listen 0.0.0.0:0: exit %d %s; want 2 and why", code, errOut)
	}
}
