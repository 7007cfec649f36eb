package caddymodule

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

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

// cliFlags builds the flags a `caddy tollgate` subcommand reads.
func cliFlags(t *testing.T, address string, json bool) caddycmd.Flags {
	t.Helper()
	fs := (&cobra.Command{}).Flags()
	fs.String("address", "", "")
	fs.String("config", "", "")
	fs.String("adapter", "", "")
	fs.Bool("json", false, "")
	fs.String("zone", "", "")
	args := []string{"--address", address}
	if json {
		args = append(args, "--json")
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return caddycmd.Flags{FlagSet: fs}
}

// TestUIRelayNeverLeavesTheClientRoute sends the relay of `caddy tollgate
// ui` resets whose path climbs out of /tollgate/clients/, raw or escaped:
// none may reach another admin route (the config, say), and an escaped
// "/" or "." in a key stays part of the key.
func TestUIRelayNeverLeavesTheClientRoute(t *testing.T) {
	srv := startCaddy(t, "", adminSite)
	c, err := newCLIContext(cliFlags(t, strings.TrimPrefix(srv.Admin, "http://"), false), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	relay := httptest.NewUnstartedServer(nil)
	relay.Config.Handler = &uiRelay{c: c, self: relay.Listener.Addr().String()}
	relay.Start()
	defer relay.Close()
	config := func() string {
		_, body := adminDo(t, srv.Admin, http.MethodGet, "/config/", nil)
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
			var res ResetResult
			if err := json.Unmarshal(body, &res); err != nil || res.ID != tc.id {
				t.Errorf("DELETE %s through the relay reset %q (%s); want %q", tc.path, res.ID, body, tc.id)
			}
		}
		if after := config(); after != before {
			t.Fatalf("DELETE %s through the relay changed Caddy's config:\n%s\nwas\n%s", tc.path, after, before)
		}
	}
}

// TestCLIKeysOfDotsAndUnixSockets looks up keys "." and ".." (which a
// path would take for a move up) and talks to an admin endpoint on a unix
// socket with permission bits, as the admin option allows.
func TestCLIKeysOfDotsAndUnixSockets(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "admin.sock")
	port := freePort(t)
	cfg := adapt(t, fmt.Sprintf(`{
	admin "unix/%s|0600"
	persist_config off
	auto_https off
	storage file_system %s
}
http://127.0.0.1:%d {
	tollgate {
		zone api {
			limit 5 1h
		}
	}
	respond "ok"
}
`, sock, filepath.Join(dir, "storage"), port))
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("loading config: %v", err)
	}
	t.Cleanup(func() { caddyStop(t) })
	for _, address := range []string{"unix/" + sock, "unix/" + sock + "|0600"} {
		for _, tc := range []struct {
			what string
			run  cliRun
			args []string
			want string
		}{
			{"status", cliStatus, nil, `"standalone": true`},
			{"client", cliClient, []string{".."}, `"id": ".."`},
			{"client", cliClient, []string{"."}, `"id": "."`},
			{"reset", cliReset, []string{".."}, `"id": ".."`},
			{"grant show", cliGrantShow, []string{"api", ".."}, ""},
		} {
			var out bytes.Buffer
			c, err := newCLIContext(cliFlags(t, address, true), &out)
			if err != nil {
				t.Fatalf("--address %s: %v", address, err)
			}
			code, err := tc.run(c, tc.args)
			if tc.want == "" { // no grant: a clean not found
				if code != exitNotFound || err == nil || !strings.Contains(err.Error(), "no grant") {
					t.Errorf("--address %s %s %v: exit %d, %v; want %d and no grant", address, tc.what, tc.args, code, err, exitNotFound)
				}
				continue
			}
			if code != exitOK && code != exitNotFound || !strings.Contains(out.String(), tc.want) {
				t.Errorf("--address %s %s %v: exit %d, %v, %s; want %s", address, tc.what, tc.args, code, err, out.String(), tc.want)
			}
		}
	}
}

// TestCLIWrongCommandLinesExitTwo checks the documented exit code of a
// wrong command line where cobra, not a subcommand, finds it wrong.
func TestCLIWrongCommandLinesExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"bogus"},
		{"status", "--bogus"},
		{"grant", "add", "api", "alice", "10", "-5"},
		{"grant", "show", "--zone", "api"},
	} {
		_, errOut, code := tollgateCLI(t, append(args, "--address", "127.0.0.1:1")...)
		if code != exitUsage || !strings.Contains(errOut, "usage") && !strings.Contains(errOut, "subcommand") {
			t.Errorf("caddy tollgate %v: exit %d %s; want %d and the usage", args, code, errOut, exitUsage)
		}
	}
}

// TestCLIStatusCountsEveryDeniedKey denies more keys than one page of
// GET /tollgate/denied holds: `caddy tollgate status` counts them all.
func TestCLIStatusCountsEveryDeniedKey(t *testing.T) {
	srv := startCaddy(t, "", adminSite)
	app, err := runningApp()
	if err != nil {
		t.Fatal(err)
	}
	z := app.zonesNamed("api")[0]
	now := time.Now()
	const keys = maxPageSize + maxPageSize/2
	for k := range keys {
		app.state.ops.denied.record(z.Name, z.scope, uint64(k+1), now.Add(time.Hour), now)
	}
	t.Cleanup(func() { // the record outlives this Caddy
		d := &app.state.ops.denied
		d.mu.Lock()
		d.m = nil
		d.mu.Unlock()
	})
	var out bytes.Buffer
	c, err := newCLIContext(cliFlags(t, strings.TrimPrefix(srv.Admin, "http://"), true), &out)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := cliStatus(c, nil); code != exitOK {
		t.Fatalf("status: exit %d, %v", code, err)
	}
	var got struct {
		Zones []ZoneDenials `json:"zones_by_denials"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out.String())
	}
	if len(got.Zones) != 1 || got.Zones[0].KeysDenied != keys || got.Zones[0].Denials != keys {
		t.Errorf("status counted %+v; want api with %d keys denied once each", got.Zones, keys)
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
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.CommandContext(ctx, tollgateBinary(t), "tollgate", "ui", "--address", strings.TrimPrefix(site.URL, "http://"), "--listen", listen)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("caddy tollgate ui served a site as the admin endpoint:\n%s", out)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitRefused || !strings.Contains(string(out), "admin endpoint") {
		t.Errorf("caddy tollgate ui against a site: %v\n%s; want exit %d saying it is no admin endpoint", err, out, exitRefused)
	}
}

// TestCLIRefusesAddressesThatAreNoAdminAddress checks that an address the
// CLI cannot dial is a wrong command line, not an admin endpoint that did
// not answer.
func TestCLIRefusesAddressesThatAreNoAdminAddress(t *testing.T) {
	for _, addr := range []string{"http://localhost:2019", "https://localhost:2019", "udp/localhost:2019", "localhost:2019-2020"} {
		if _, err := newCLIContext(cliFlags(t, addr, false), io.Discard); err == nil || !strings.Contains(err.Error(), "not an admin address") {
			t.Errorf("--address %s: %v; want it refused as no admin address", addr, err)
		}
	}
	for _, addr := range []string{"localhost:2019", "127.0.0.1:2019", "[::1]:2019", "tcp/localhost:2019", "unix//run/caddy.sock", "unix//run/caddy.sock|0660"} {
		if _, err := newCLIContext(cliFlags(t, addr, false), io.Discard); err != nil {
			t.Errorf("--address %s: %v; want it taken", addr, err)
		}
	}
}

// TestCLIGrantsOfZonesSharingAName gives a grant in a zone name two
// handlers use: the API answers one grant per zone, and the CLI shows both
// instead of taking the answer for a foreign one after the grant was given.
func TestCLIGrantsOfZonesSharingAName(t *testing.T) {
	srv := startCaddy(t, "", `
	route /a/* {
		tollgate {
			zone api {
				limit 2 1h
			}
		}
	}
	route /b/* {
		tollgate {
			zone api {
				limit 3 1h
			}
		}
	}
	respond "ok"`)
	addr := strings.TrimPrefix(srv.Admin, "http://")
	for _, tc := range []struct {
		what string
		run  cliRun
		args []string
	}{
		{"grant add", cliGrantAdd, []string{"api", "bob", "5", "3600"}},
		{"grant show", cliGrantShow, []string{"api", "bob"}},
	} {
		var out bytes.Buffer
		c, err := newCLIContext(cliFlags(t, addr, false), &out)
		if err != nil {
			t.Fatal(err)
		}
		code, err := tc.run(c, tc.args)
		if code != exitOK || strings.Count(out.String(), "bob") != 2 || !strings.Contains(out.String(), "/0.0/0.0/0") || !strings.Contains(out.String(), "/0.1/0.0/0") { // both route blocks' scopes
			t.Errorf("%s %v: exit %d, %v\n%s; want both zones' grants", tc.what, tc.args, code, err, out.String())
		}
	}
}

// TestCLIWarnsOfANearlyHashedID resets an ID copied from the logs a digit
// short: the API takes it for a raw key, and the CLI says so, instead of a
// bare success that lets nobody through.
func TestCLIWarnsOfANearlyHashedID(t *testing.T) {
	tollgateBinary(t)
	srv := startCaddy(t, "", adminSite)
	addr := strings.TrimPrefix(srv.Admin, "http://")
	for _, tc := range []struct {
		args []string
		warn bool
	}{
		{[]string{"reset", "h:9f86d081884c7d6"}, true},
		{[]string{"reset", "h:9f86d081884c7d6z"}, true},
		{[]string{"client", "h:zz"}, true},
		{[]string{"grant", "revoke", "api", "h:1"}, true},
		{[]string{"reset", "h:9f86d081884c7d65"}, false},
		{[]string{"reset", "alice"}, false},
	} {
		_, errOut, _ := tollgateCLI(t, append(tc.args, "--address", addr)...)
		if got := strings.Contains(errOut, "is not a hashed ID"); got != tc.warn {
			t.Errorf("caddy tollgate %v: warned %v (%s); want %v", tc.args, got, errOut, tc.warn)
		}
	}
}
