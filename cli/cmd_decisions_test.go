package cli

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/testutil"
)

// TestCLIDecisions blocks and allows keys from the shell against a running
// Caddy: the blocked key is denied while another passes, the allowed key
// passes beyond its limit, the list shows reason and expiry by hashed ID,
// --remove and reset lift them, and no raw key reaches Caddy's log.
func TestCLIDecisions(t *testing.T) {
	testutil.TollgateBinary(t)
	srv := startCaddy(t, testutil.DocSite)
	addr := srv.Admin
	run := func(code int, want string, args ...string) string {
		t.Helper()
		out, errOut, got := testutil.CLI(t, append(args, "--address", addr)...)
		if got != code || !strings.Contains(out+errOut, want) {
			t.Errorf("tollgate %v: exit %d, %q; want exit %d with %q", args, got, out+errOut, code, want)
		}
		return out
	}
	const mallory, partner = "mallory-secret-83", "partner-secret-19"

	run(0, "blocked "+mallory+" (h:", "block", mallory, "--for", "1h", "--reason", "scraping the catalogue")
	if s := srv.get(t, "/api/x", "X-User", mallory); s != http.StatusTooManyRequests {
		t.Errorf("blocked key: %d; want 429", s)
	}
	if s := srv.get(t, "/api/x", "X-User", "alice"); s != http.StatusOK {
		t.Errorf("another key: %d; want 200", s)
	}
	out := run(0, "scraping the catalogue", "decisions")
	for _, w := range []string{"KEY", "ZONE", "ACTION", "EXPIRES", "REASON", "*", "block", "h:"} {
		if !strings.Contains(out, w) {
			t.Errorf("decisions lacks %q:\n%s", w, out)
		}
	}
	run(0, "replaced: block in every zone", "block", mallory, "--for", "2h")
	run(0, "in zone api", "block", mallory, "--zone", "api", "--for", "600")

	run(0, "allowed "+partner, "allow", partner, "--zone", "api", "--reason", "load test")
	for i := range 105 { // api allows 100 a minute
		if s := srv.get(t, "/api/x", "X-User", partner); s != http.StatusOK {
			t.Fatalf("allowed key, request %d: %d; want 200", i+1, s)
		}
	}
	run(0, "lifted the allow of "+partner+" in zone api", "allow", "--remove", partner)
	run(exitNotFound, "no decision holds", "allow", "--remove", partner)

	// --remove in one zone leaves the block in every zone.
	run(0, "lifted the block of "+mallory+" in zone api", "block", "--remove", mallory, "--zone", "api")
	if s := srv.get(t, "/api/x", "X-User", mallory); s != http.StatusTooManyRequests {
		t.Errorf("still blocked in every zone: %d; want 429", s)
	}
	// reset lifts it, though nothing is counted for the key.
	run(0, "lifted the block of "+mallory+" in every zone", "reset", mallory)
	if s := srv.get(t, "/api/x", "X-User", mallory); s != http.StatusOK {
		t.Errorf("after reset: %d; want 200", s)
	}
	run(0, "no decision holds now", "decisions")

	// A network, by the ID the denied list and the status page show.
	const office = "n:0123456789abcdef"
	run(0, "blocked "+office, "block", office, "--for", "1h", "--reason", "a scanner")
	run(0, office, "decisions")
	run(0, "lifted the block of "+office, "block", "--remove", office)

	run(exitRefused, `duration \"forever\"`, "block", "k", "--for", "forever")
	run(exitRefused, `unknown zone \"nosuch\"`, "block", "k", "--zone", "nosuch")
	run(exitUsage, "takes no --for", "block", "--remove", "k", "--for", "1h")
	run(exitUsage, "usage: caddy tollgate block <key>", "block")

	run(0, "", "block", "json-key", "--json")
	out, _, code := testutil.CLI(t, "decisions", "--json", "--address", addr)
	var v map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v["items"] == nil {
		t.Errorf("decisions --json: exit %d, %q; want the admin API's list", code, out)
	}

	logs, err := os.ReadFile(filepath.Join(srv.dir, "caddy.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(logs), "\n") {
		if strings.Contains(line, mallory) || strings.Contains(line, partner) {
			t.Errorf("Caddy's log has a raw key:\n%s", line)
		}
	}
}
