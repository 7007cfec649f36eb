package cli

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// TestCLIAgainstARunningCaddy runs every subcommand against a Caddy with
// the doc's zones, as a table and as JSON, and checks the exit codes and
// the advice of a bad address and an unknown client.
func TestCLIAgainstARunningCaddy(t *testing.T) {
	testutil.TollgateBinary(t) // build first, outside the window the test watches
	srv := startCaddy(t, testutil.DocSite)
	testutil.ClearOfWindowEdge(time.Hour, 30*time.Second)
	// api counts a minute: alice's denial lasts until the minute ends, and
	// the denied list and the status table below must see it.
	testutil.ClearOfWindowEdge(time.Minute, 10*time.Second)
	for range 101 {
		srv.get(t, "/api/x", "X-User", "alice")
	}
	addr := srv.Admin
	// alice is the one key denied: the list names her by her hashed ID.
	var denied adminapi.DeniedList
	if status, body := srv.adminGet(t, "/tollgate/denied?zone=api", &denied); status != http.StatusOK || len(denied.Items) != 1 {
		t.Fatalf("GET /tollgate/denied: %d %s; want alice's key alone", status, body)
	}
	aliceHash := denied.Items[0].Key

	type step struct {
		args     []string
		code     int
		out      []string // in the output, in a table
		errWords string   // in the error output
	}
	for _, s := range []step{
		{[]string{"status"}, 0, []string{"standalone", "ZONE  KEYS  NETWORKS  DENIALS", "api   1     0         1"}, ""},
		{[]string{"client", "alice", "--zone", "api"}, 0, []string{"ZONE", "api", "sliding_window", "100", "yes"}, ""},
		{[]string{"client", aliceHash}, 0, []string{"api", "sliding_window", "100"}, ""},
		{[]string{"client", "nobody-seen"}, exitNotFound, nil, "nothing is counted for nobody-seen"},
		{[]string{"client", "alice", "--zone", "nosuch"}, exitNotFound, nil, `no zone \"nosuch\"`},
		{[]string{"tiers"}, 0, []string{"credits", "premium", "50000", "rooms", "32"}, ""},
		{[]string{"tiers", "set", "credits", "pro=12000"}, 0, []string{"credits", "pro", "10000", "12000"}, ""},
		{[]string{"tiers", "set", "credits", "gold=1"}, exitRefused, nil, `unknown tier \"gold\"`},
		{[]string{"tiers", "set", "credits", "pro"}, exitUsage, nil, "want <tier>=<limit>"},
		{[]string{"tiers", "clear"}, 0, []string{"credits", "pro", "10000"}, ""},
		{[]string{"grant", "add", "credits", "alice", "500", "168h"}, 0, []string{"credits", "alice", "500"}, ""},
		{[]string{"grant", "add", "credits", "bob", "5", "3600"}, 0, []string{"bob", "5"}, ""},
		{[]string{"grant", "add", "credits", "bob", "6", "3600"}, 0, []string{"replaced the grant of bob in credits: 5 of 5 left"}, ""},
		{[]string{"grant", "add", "credits", "bob", "lots", "1h"}, exitUsage, nil, `amount \"lots\"`},
		{[]string{"grant", "show", "credits", "alice"}, 0, []string{"alice", "500"}, ""},
		{[]string{"grant", "show"}, 0, []string{"credits", aliceHash, "500"}, ""},
		{[]string{"grant", "revoke", "credits", "alice"}, 0, []string{"revoked"}, ""},
		{[]string{"grant", "revoke", "credits", "alice"}, exitNotFound, nil, "no grant"},
		{[]string{"grant", "show", "credits"}, exitUsage, nil, "give a zone and a key"},
		{[]string{"reset", aliceHash, "--zone", "api"}, 0, []string{"reset " + aliceHash + " in api"}, ""},
		{[]string{"reset", "nobody-seen"}, exitNotFound, nil, "nothing is counted for nobody-seen"},
		{[]string{"client"}, exitUsage, nil, "usage: caddy tollgate client <id>"},
		{[]string{}, exitUsage, nil, "name a subcommand"},
	} {
		out, errOut, code := testutil.CLI(t, append(s.args, "--address", addr)...)
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
	// The default tier changes at run time like any other, shown on the
	// zone's (default) row.
	out, errOut, code := testutil.CLI(t, "tiers", "set", "credits", "default=500", "--address", addr)
	if code != 0 || !regexp.MustCompile(`credits\s+limit\s+\(default\)\s+1000\s+500\s+500\n`).MatchString(out) ||
		regexp.MustCompile(`(?m)^credits\s+limit\s+default\s`).MatchString(out) {
		t.Errorf("tiers set credits default=500: exit %d; want the (default) row overridden to 500, and no tier named default:\n%s%s", code, out, errOut)
	}
	testutil.CLI(t, "tiers", "clear", "--address", addr)
	if out, _, _ := testutil.CLI(t, "status", "--address", addr); strings.Contains(out, "MEMBER") {
		t.Errorf("a single node's status has cluster rows:\n%s", out)
	}
	// A key seen in api only: its table has no row of the zones that never saw it.
	srv.get(t, "/api/x", "X-User", "dave")
	if out, _, _ := testutil.CLI(t, "client", "dave", "--address", addr); !strings.Contains(out, "api") || strings.Contains(out, "credits") || strings.Contains(out, "rooms") {
		t.Errorf("client dave, seen in api only:\n%s", out)
	}
	if out, _, _ := testutil.CLI(t, "grant", "show", "--address", addr); strings.Contains(out, "SCOPE") {
		t.Errorf("grant show of zones with unique names has a SCOPE column:\n%s", out)
	}
	if s := srv.get(t, "/api/x", "X-User", "alice"); s != http.StatusOK {
		t.Errorf("after tollgate reset, alice: %d; want let through", s)
	}

	// --json prints what the admin API answers, for every subcommand.
	srv.get(t, "/api/x", "X-User", "carol")
	for _, args := range [][]string{
		{"status"}, {"client", "carol"}, {"reset", "carol"}, {"tiers"}, {"tiers", "set", "credits", "pro=11000"},
		{"tiers", "clear"}, {"grant", "add", "credits", "carol", "7", "1h"}, {"grant", "show", "credits", "carol"},
		{"grant", "show"}, {"grant", "revoke", "credits", "carol"},
	} {
		out, errOut, code := testutil.CLI(t, append(args, "--json", "--address", addr)...)
		var v map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil || len(v) == 0 {
			t.Errorf("tollgate %v --json: exit %d, not a JSON object:\n%s%s", args, code, out, errOut)
		}
	}
	out, _, code = testutil.CLI(t, "client", "nobody-seen", "--json", "--address", addr)
	if code != exitNotFound || json.Unmarshal([]byte(out), new(adminapi.ClientView)) != nil {
		t.Errorf("an unknown client with --json: exit %d, %q; want 4 and the view", code, out)
	}

	// A bad address says what to do.
	_, errOut, code = testutil.CLI(t, "status", "--address", "127.0.0.1:1")
	if code != exitUnreachable || !strings.Contains(errOut, "is Caddy running?") || !strings.Contains(errOut, "--address") {
		t.Errorf("a bad address: exit %d, %q; want 3 and advice", code, errOut)
	}
	_, errOut, code = testutil.CLI(t, "status", "--address", "not an address")
	if code != exitUsage || !regexp.MustCompile(`--address .* is not an admin address`).MatchString(errOut) {
		t.Errorf("a malformed address: exit %d, %q; want 2 and advice", code, errOut)
	}
	// An admin endpoint without Tollgate's routes: another Caddy, say.
	_, errOut, code = testutil.CLI(t, "status", "--address", strings.TrimPrefix(srv.URL, "http://"))
	if code == 0 || !strings.Contains(errOut, "--address") {
		t.Errorf("a site address instead of the admin one: exit %d, %q; want a failure naming --address", code, errOut)
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
		_, errOut, code := testutil.CLI(t, append(args, "--address", "127.0.0.1:1")...)
		if code != exitUsage || !strings.Contains(errOut, "usage") && !strings.Contains(errOut, "subcommand") {
			t.Errorf("caddy tollgate %v: exit %d %s; want %d and the usage", args, code, errOut, exitUsage)
		}
	}
}

// TestCLIKeepsRawKeysOutOfCaddysLog: looking a key up, resetting it and
// showing or revoking its grant put no raw key into the URLs Caddy's admin
// log records; the answers still name the key as it was given.
func TestCLIKeepsRawKeysOutOfCaddysLog(t *testing.T) {
	testutil.TollgateBinary(t)
	srv := startCaddy(t, testutil.DocSite)
	const key = "k1-secret-api-key"
	srv.get(t, "/api/x", "X-User", key)
	addr := srv.Admin
	for _, args := range [][]string{
		{"client", key, "--zone", "api"},
		{"client", key},
		{"grant", "add", "credits", key, "5", "1h"},
		{"grant", "show", "credits", key},
		{"grant", "revoke", "credits", key},
		{"reset", key},
	} {
		out, errOut, code := testutil.CLI(t, append(args, "--address", addr)...)
		if code != 0 {
			t.Fatalf("tollgate %v: exit %d\n%s%s", args, code, out, errOut)
		}
		if args[0] == "client" && !strings.Contains(out, key) {
			t.Errorf("tollgate %v: the table does not name the key as given:\n%s", args, out)
		}
	}
	logs, err := os.ReadFile(filepath.Join(srv.dir, "caddy.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(logs), "\n") {
		if strings.Contains(line, key) {
			t.Errorf("Caddy's log has the raw key:\n%s", line)
		}
	}
	if !strings.Contains(string(logs), "/tollgate/clients/h:") {
		t.Error("the log shows no lookup by hashed ID; did the CLI call the admin API?")
	}
}
