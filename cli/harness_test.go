package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/cobra"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	"github.com/tollgate/tollgate/internal/testutil"
)

// The commands are a client of the admin API: these tests run them against
// Caddy processes built from this repository, as an operator would.

// testCaddy is a Caddy process with Tollgate, on loopback ports.
type testCaddy struct {
	Admin  string // the admin endpoint's address, as --address takes it
	URL    string // http://127.0.0.1:port of the site
	dir    string // storage, logs and the Caddyfile
	client *http.Client
}

// startCaddy runs a Caddy whose one site has the body site, with its admin
// endpoint on a loopback port. It stops when the test ends.
func startCaddy(t testing.TB, site string) *testCaddy {
	t.Helper()
	admin, port := testutil.FreePort(t), testutil.FreePort(t)
	srv := &testCaddy{Admin: fmt.Sprintf("127.0.0.1:%d", admin), URL: fmt.Sprintf("http://127.0.0.1:%d", port), dir: t.TempDir()}
	srv.run(t, fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	auto_https off
	storage file_system %s
	log {
		output file %s
	}
}
http://127.0.0.1:%d {
%s
}
`, admin, filepath.Join(srv.dir, "storage"), filepath.Join(srv.dir, "caddy.log"), port, site))
	return srv
}

// run starts the Caddy process with a whole Caddyfile and waits until its
// site answers.
func (srv *testCaddy) run(t testing.TB, caddyfile string) {
	t.Helper()
	srv.client = &http.Client{Timeout: 10 * time.Second}
	cfgPath := filepath.Join(srv.dir, "Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(caddyfile), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.TollgateBinary(t), "run", "--config", cfgPath, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+srv.dir, "XDG_CONFIG_HOME="+srv.dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	exited := testutil.Start(t, cmd)
	t.Cleanup(srv.client.CloseIdleConnections) // first: cleanups run last in, first out
	testutil.Eventually(t, 20*time.Second, "Caddy serving its site", func() bool {
		select {
		case <-exited:
			t.Fatalf("Caddy exited:\n%s", out.String())
		default:
		}
		resp, err := srv.client.Get(srv.URL + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
}

// get sends a GET for path to the site, with header pairs.
func (srv *testCaddy) get(t testing.TB, path string, headers ...string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := srv.client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// adminGet sends a GET for path to the admin endpoint and decodes a JSON
// answer into out, if not nil; it returns the status and the body.
func (srv *testCaddy) adminGet(t testing.TB, path string, out any) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+srv.Admin+path, nil)
	resp, err := srv.client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("GET %s: %v\n%s", path, err, body)
		}
	}
	return resp.StatusCode, string(body)
}

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

// invocationFor is the invocation of a subcommand with --address address
// (and --json), writing to out.
func invocationFor(t *testing.T, address string, json bool, out io.Writer) *invocation {
	t.Helper()
	c, err := newInvocation(cliFlags(t, address, json), out)
	if err != nil {
		t.Fatalf("--address %s: %v", address, err)
	}
	return c
}
