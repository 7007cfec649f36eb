package cli

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/testutil"
)

// TestCLIRefusesAddressesThatAreNoAdminAddress checks that an address the
// CLI cannot dial is a wrong command line, not an admin endpoint that did
// not answer.
func TestCLIRefusesAddressesThatAreNoAdminAddress(t *testing.T) {
	for _, addr := range []string{"http://localhost:2019", "https://localhost:2019", "udp/localhost:2019", "localhost:2019-2020"} {
		if _, err := newInvocation(cliFlags(t, addr, false), io.Discard); err == nil || !strings.Contains(err.Error(), "not an admin address") {
			t.Errorf("--address %s: %v; want it refused as no admin address", addr, err)
		}
	}
	for _, addr := range []string{"localhost:2019", "127.0.0.1:2019", "[::1]:2019", "tcp/localhost:2019", "unix//run/caddy.sock", "unix//run/caddy.sock|0660"} {
		if _, err := newInvocation(cliFlags(t, addr, false), io.Discard); err != nil {
			t.Errorf("--address %s: %v; want it taken", addr, err)
		}
	}
}

// TestCLIKeysOfDotsAndUnixSockets looks up keys "." and ".." (which a
// path would take for a move up) and talks to an admin endpoint on a unix
// socket with permission bits, as the admin option allows.
func TestCLIKeysOfDotsAndUnixSockets(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "admin.sock")
	port := testutil.FreePort(t)
	srv := &testCaddy{URL: fmt.Sprintf("http://127.0.0.1:%d", port), dir: dir}
	srv.run(t, fmt.Sprintf(`{
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
	for _, address := range []string{"unix/" + sock, "unix/" + sock + "|0600"} {
		for _, tc := range []struct {
			what string
			run  subcommand
			args []string
			want string
		}{
			{"status", runStatus, nil, `"standalone": true`},
			// A raw key is looked up by its hashed ID: "." and ".." never
			// reach a path.
			{"client", runClient, []string{".."}, `"id": "h:`},
			{"client", runClient, []string{"."}, `"id": "h:`},
			{"reset", runReset, []string{".."}, `"id": "h:`},
			{"grant show", runGrantShow, []string{"api", ".."}, ""},
		} {
			var out bytes.Buffer
			c := invocationFor(t, address, true, &out)
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
