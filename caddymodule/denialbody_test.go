package caddymodule

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testutil"
)

// TestDenialHasABodyWithoutHandleErrors: a site with no handle_errors
// answers a 429 with a short text saying which zone and how long to wait,
// and a Content-Type; the headers stay.
func TestDenialHasABodyWithoutHandleErrors(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone api {
			limit 1 1h
		}
	}
	respond "ok"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	srv.get("/")
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	resp := srv.do(req)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	body := string(b)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second request: %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("429 Content-Type %q; want text/plain", ct)
	}
	ra := resp.Header.Get("Retry-After")
	if !strings.Contains(body, "api") || ra == "" || !strings.Contains(body, ra) {
		t.Errorf("429 body %q (Retry-After %s); want the zone and the wait", body, ra)
	}
	if resp.Header.Get("RateLimit") == "" {
		t.Error("the 429 lost its RateLimit header")
	}
}

// TestErrorMessageBuildsValidJSON: {http.error.message}, as the docs show
// it, can be put in a JSON string in handle_errors.
func TestErrorMessageBuildsValidJSON(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone api {
			limit 1 1h
		}
	}
	respond "ok"
	handle_errors 429 {
		header Content-Type application/json
		respond `+"`"+`{"error": "{http.error.message}", "zone": "{http.tollgate.zone}", "retry_after": {http.tollgate.retry_after}}`+"`"+` 429
	}`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	srv.get("/")
	status, body := srv.body("/")
	var v map[string]any
	if status != http.StatusTooManyRequests || json.Unmarshal([]byte(body), &v) != nil {
		t.Fatalf("429 body %q is not JSON", body)
	}
	if v["error"] != "rate limit of zone api exceeded" || v["zone"] != "api" {
		t.Errorf("429 body %v", v)
	}
}
