package caddymodule

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testutil"
)

// TestChallengePostsAreCountedByTheirZones: a proof posted to the
// challenge is a request like any other, counted by the zones that match
// it: a script that floods the challenge with proofs is denied (429) once
// its limit is spent, instead of costing a check and a log line each time
// for ever; zones that do not match the challenge's path do not count it.
func TestChallengePostsAreCountedByTheirZones(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		cookie {
			challenge pow 8
		}
	}`, `
	tollgate {
		zone site {
			limit 3 10m
		}
		zone login {
			limit 100 10m
			match {
				path /login
			}
		}
	}
	respond "ok"`)
	testutil.ClearOfWindowEdge(10*time.Minute, 30*time.Second)
	post := func(ip string) *http.Response {
		form := url.Values{"token": {"forged"}, "answer": {"0"}, "return": {"/"}}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+ChallengePath, strings.NewReader(form.Encode()))
		req.Header.Set("X-Forwarded-For", ip)
		req.Header.Set("User-Agent", "Script/1")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	var statuses []int
	for range 6 {
		statuses = append(statuses, post("203.0.113.90").StatusCode)
	}
	want := []int{403, 403, 403, 429, 429, 429}
	for i := range want {
		if statuses[i] != want[i] {
			t.Fatalf("6 forged proofs under a limit of 3: %v; want %v", statuses, want)
		}
	}
	m := scrape(t, srv.Admin)
	if n := m[`tollgate_decisions_total{outcome="deny",scope="site",source="owner",zone="site"}`]; n != 3 {
		t.Errorf("site counted %v denials of proofs; want 3", n)
	}
	for k, n := range m {
		if strings.HasPrefix(k, "tollgate_decisions_total{") && strings.Contains(k, `zone="login"`) && n != 0 {
			t.Errorf("login, which does not match the challenge's path, counted %s = %v", k, n)
		}
	}
	// Another address still has its own allowance.
	if s := post("198.51.100.90").StatusCode; s != http.StatusForbidden {
		t.Errorf("a forged proof from another address: %d; want 403 (checked, not denied)", s)
	}
}
