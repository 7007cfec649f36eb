// Package testutil holds what the tests of several packages share: waiting
// for a condition, keeping clear of a window's edge, the Caddy binary built
// from this repository and the status page relay it runs.
package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Eventually retries cond every 50ms until it holds, and fails the test
// if it does not within the given time; what says what was awaited.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: did not happen within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ClearOfWindowEdge waits, if the wall clock is within margin of the end of
// a window of length w (windows aligned to the Unix epoch), until that
// window ends, so that a test's requests fall in one window.
func ClearOfWindowEdge(w, margin time.Duration) {
	if toEdge := w - time.Duration(time.Now().UnixNano()%int64(w)); toEdge < margin {
		time.Sleep(toEdge)
	}
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// TollgateBinary builds cmd/tollgate (Caddy with its standard modules and
// Tollgate, as xcaddy.sh builds it) once per test run and returns its path.
// Tests that need it are skipped with -short.
func TollgateBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs Caddy processes")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tollgate-bin")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "tollgate")
		cmd := exec.Command("go", "build", "-o", builtBin, "github.com/tollgate/tollgate/cmd/tollgate")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartUIRelay runs `caddy tollgate ui` for the admin address and returns
// the URL it serves on; it stops with the test.
func StartUIRelay(t testing.TB, adminAddr string) string {
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	cmd := exec.Command(TollgateBinary(t), "tollgate", "ui", "--address", adminAddr, "--listen", listen)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	Start(t, cmd)
	url := "http://" + listen
	Eventually(t, 10*time.Second, "the relay serving", func() bool {
		resp, err := http.Get(url + "/tollgate/status")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	return url
}

// Start starts cmd, a process that runs until told to stop, and stops it
// when the test ends: SIGTERM, then SIGKILL if it has not exited within
// 30 seconds. The channel closes when it has exited.
func Start(t testing.TB, cmd *exec.Cmd) <-chan struct{} {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	return exited
}

// CLI runs `caddy tollgate args…` with the built binary and returns its
// output, its error output and its exit code.
func CLI(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(TollgateBinary(t), append([]string{"tollgate"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("running tollgate %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}
