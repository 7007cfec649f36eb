package caddymodule

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/tollgate/tollgate/internal/testutil"
)

func TestPrefersJSON(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                                     false,
		"*/*":                                  false,
		"text/html,application/xhtml+xml,*/*":  false,
		"application/json":                     true,
		"application/problem+json":             true,
		"application/json, text/plain;q=0.5":   true,
		"text/html, application/json;q=0.9":    false,
		"application/json;q=0":                 false,
		"APPLICATION/JSON":                     true,
		"application/*;q=0.8, text/*;q=0.2":    true,
		"text/plain;q=1, application/json;q=1": true,
	} {
		if got := prefersJSON(accept); got != want {
			t.Errorf("prefersJSON(%q) = %v, want %v", accept, got, want)
		}
	}
}

// A client that prefers JSON gets an RFC 9457 problem naming the zones
// that denied it; others get the usual empty 429; the headers parse with
// an RFC 9651 parser either way.
func TestDenialAsProblemJSON(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone api {
			limit 1 1h
		}
		zone site {
			limit 100 1h
		}
	}
	respond "ok"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	if s := srv.status("/"); s != http.StatusOK {
		t.Fatalf("first request: %d", s)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	req.Header.Set("Accept", "application/json")
	resp := srv.do(req)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("JSON client denied: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem body is not JSON: %v: %s", err, body)
	}
	if p["type"] != "https://iana.org/assignments/http-problem-types#quota-exceeded" || p["status"] != 429.0 ||
		p["title"] == "" || p["detail"] == "" {
		t.Fatalf("problem body: %s", body)
	}
	if v, ok := p["violated-policies"].([]any); !ok || len(v) != 1 || v[0] != "api" {
		t.Fatalf("violated-policies %v; want [api]", p["violated-policies"])
	}
	checkRateLimitHeaders(t, resp)

	status, text := srv.body("/", "Accept", "text/html")
	if status != http.StatusTooManyRequests || !strings.HasPrefix(text, "429 Too Many Requests: rate limit of zone api exceeded; retry in ") {
		t.Fatalf("a browser denied: %d %q; want a 429 with the short text body", status, text)
	}
}

// handle_errors shapes the denial of JSON clients too.
func TestHandleErrorsOverridesProblemJSON(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone api {
			limit 1 1h
		}
	}
	respond "ok"
	handle_errors 429 {
		respond "mine" 429
	}`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	srv.status("/")
	if status, body := srv.body("/", "Accept", "application/json"); status != http.StatusTooManyRequests || body != "mine" {
		t.Fatalf("with handle_errors: %d %q", status, body)
	}
}

// Draft -10: t on an allowed response is when more quota comes (a token
// bucket of 10 a minute: 6 s), not when it is all back; Retry-After on a
// 429 is never earlier than t.
func TestRateLimitTIsWhenMoreQuotaComes(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone api {
			limit 10 1m
			algorithm token_bucket
		}
	}
	respond "ok"`)
	var last *http.Response
	for range 4 {
		last = srv.get("/")
	}
	_, params := rateLimitOf(t, last, "api")
	if tv, _ := params.Get("t"); tv.(int64) < 1 || tv.(int64) > 6 {
		t.Fatalf("t after 4 of 10 a minute: %v; want at most 6 (one token every 6s), not the 24s to a full bucket", tv)
	}
	for range 10 {
		last = srv.get("/")
	}
	if last.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the 14th request: %d", last.StatusCode)
	}
	checkRateLimitHeaders(t, last)
}

// checkRateLimitHeaders parses RateLimit-Policy and RateLimit with an RFC
// 9651 parser, and checks Retry-After is not before any t.
func checkRateLimitHeaders(t *testing.T, resp *http.Response) {
	t.Helper()
	if _, err := httpsfv.UnmarshalList(resp.Header.Values("RateLimit-Policy")); err != nil {
		t.Fatalf("RateLimit-Policy %q: %v", resp.Header.Get("RateLimit-Policy"), err)
	}
	list, err := httpsfv.UnmarshalList(resp.Header.Values("RateLimit"))
	if err != nil {
		t.Fatalf("RateLimit %q: %v", resp.Header.Get("RateLimit"), err)
	}
	retry, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
	if resp.StatusCode == http.StatusTooManyRequests && err != nil {
		t.Fatalf("429 without Retry-After")
	}
	for _, m := range list {
		item := m.(httpsfv.Item)
		tv, ok := item.Params.Get("t")
		if !ok {
			t.Fatalf("RateLimit member %v without t", item.Value)
		}
		if r, _ := item.Params.Get("r"); resp.StatusCode == http.StatusTooManyRequests && r.(int64) == 0 && retry < tv.(int64) {
			t.Fatalf("Retry-After %d is earlier than t=%d of %v", retry, tv, item.Value)
		}
	}
}

// rateLimitOf returns the RateLimit member of zone.
func rateLimitOf(t *testing.T, resp *http.Response, zone string) (httpsfv.Item, *httpsfv.Params) {
	t.Helper()
	list, err := httpsfv.UnmarshalList(resp.Header.Values("RateLimit"))
	if err != nil {
		t.Fatalf("RateLimit %q: %v", resp.Header.Get("RateLimit"), err)
	}
	for _, m := range list {
		if item := m.(httpsfv.Item); item.Value == zone {
			return item, item.Params
		}
	}
	t.Fatalf("RateLimit %q has no member %s", resp.Header.Get("RateLimit"), zone)
	return httpsfv.Item{}, nil
}
