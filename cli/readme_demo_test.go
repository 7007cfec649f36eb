package cli

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testutil"
)

// TestReadmeDemoStepsInOrder runs Caddyfile.example (on free ports) and
// follows the README's demo and the example's own comments in order, as
// curl would (its User-Agent and Accept), checking that each step behaves
// as written: headers on the first answer, 5 API answers then a 429, the
// status table, the login zone's 3 then a 429, and a cookie jar that turns
// the client ID from f:… to s:….
func TestReadmeDemoStepsInOrder(t *testing.T) {
	testutil.TollgateBinary(t)
	raw, err := os.ReadFile("../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	admin, site, upstream := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
	cfg := strings.NewReplacer("localhost:2019", fmt.Sprintf("127.0.0.1:%d", admin),
		"localhost:8080", fmt.Sprintf("127.0.0.1:%d", site), "localhost:9080", fmt.Sprintf("127.0.0.1:%d", upstream)).Replace(string(raw))
	dir := t.TempDir()
	srv := &testCaddy{Admin: fmt.Sprintf("127.0.0.1:%d", admin), URL: fmt.Sprintf("http://127.0.0.1:%d", site), dir: dir}
	cfg = strings.Replace(cfg, "\tauto_https off\n", "\tauto_https off\n\tstorage file_system "+filepath.Join(dir, "storage")+"\n", 1)
	srv.run(t, cfg)
	testutil.ClearOfWindowEdge(time.Minute, 25*time.Second)

	jar, _ := cookiejar.New(nil)
	curl := func(method, path string, keepCookies bool) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		req.Header.Set("User-Agent", "curl/8.5.0")
		req.Header.Set("Accept", "*/*")
		c := &http.Client{Timeout: 10 * time.Second}
		if keepCookies {
			c.Jar = jar
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}

	// README: curl -i localhost:8080/
	resp, _ := curl(http.MethodGet, "/", false)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit-Policy") == "" || resp.Header.Get("RateLimit") == "" {
		t.Errorf("curl -i /: %d, RateLimit-Policy %q, RateLimit %q; want 200 with both headers", resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"))
	}
	// README: 6 × /api/hello: 5 answers, then a 429.
	var codes []int
	for range 6 {
		resp, _ := curl(http.MethodGet, "/api/hello", false)
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
			t.Error("the API's 429 has no Retry-After")
		}
	}
	if fmt.Sprint(codes) != "[200 200 200 200 200 429]" {
		t.Errorf("6 × /api/hello: %v; want 5 × 200, then 429", codes)
	}
	// README: ./caddy tollgate status
	out, errOut, code := testutil.CLI(t, "status", "--address", srv.Admin)
	if code != 0 || !strings.Contains(out, "ZONE") || !strings.Contains(out, "api") {
		t.Errorf("tollgate status: exit %d\n%s%s", code, out, errOut)
	}
	// Caddyfile.example: 4 × POST /login: 3 at once, then a 429.
	codes = nil
	for range 4 {
		resp, _ := curl(http.MethodPost, "/login", false)
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes) != "[200 200 200 429]" {
		t.Errorf("4 × POST /login: %v; want 3 × 200, then 429", codes)
	}
	// Caddyfile.example: curl -c jar -b jar / twice: f:… then s:….
	_, first := curl(http.MethodGet, "/", true)
	_, second := curl(http.MethodGet, "/", true)
	if !regexp.MustCompile(`client f:`).MatchString(first) || !regexp.MustCompile(`client s:`).MatchString(second) {
		t.Errorf("the cookie jar: first %q, then %q; want the client ID to go from f:… to s:…", first, second)
	}
}
