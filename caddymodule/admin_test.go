package caddymodule

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// adminDo sends a request to the admin API and decodes a JSON answer into
// out (if not nil), returning the status and the raw body.
func adminDo(t testing.TB, base, method, path string, out any) (int, string) {
	t.Helper()
	return adminSend(t, base, method, path, "", out)
}

// adminSend is adminDo with a request body; out is filled from a 200 or a
// 201.
func adminSend(t testing.TB, base, method, path, body string, out any) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if out != nil && (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated) {
		if err := json.Unmarshal(got, out); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, got)
		}
	}
	return resp.StatusCode, string(got)
}

const adminSite = `
	tollgate {
		zone api {
			limit 5 1h
			key {http.request.header.X-API-Key}
		}
		zone site {
			limit 100 1h
		}
	}
	respond "{http.tollgate.client_id}"`

func TestAdminClientRoutes(t *testing.T) {
	srv := startCaddy(t, "", adminSite)
	clearOfWindowEdge(time.Hour, 10*time.Second)
	for range 3 {
		srv.get("/", "X-API-Key", "alice")
	}

	var view ClientView
	if status, body := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/alice?zone=api", &view); status != http.StatusOK {
		t.Fatalf("GET client: %d %s", status, body)
	}
	if len(view.Zones) != 1 || view.Zones[0].Zone != "api" || view.Zones[0].Remaining != 2 || view.Zones[0].Exhausted ||
		view.Zones[0].Limit != 5 || view.Zones[0].Algorithm != "sliding_window" || view.Owner == "" {
		t.Fatalf("client view %+v; want api with 2 of 5 left", view)
	}
	for range 3 {
		srv.get("/", "X-API-Key", "alice")
	}
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/alice?zone=api", &view)
	if !view.Zones[0].Exhausted || view.Zones[0].Remaining != 0 || view.Zones[0].Reset < 1 {
		t.Fatalf("after the limit: %+v; want exhausted with a reset", view.Zones[0])
	}

	// The default key is the client ID, as the placeholder shows it.
	status, clientID := srv.body("/", "X-API-Key", "bob")
	if status != http.StatusOK || !strings.HasPrefix(clientID, "f:") {
		t.Fatalf("client ID %q", clientID)
	}
	var byID ClientView
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/"+url.PathEscape(clientID)+"?zone=site", &byID)
	if len(byID.Zones) != 1 || byID.Zones[0].Remaining != 100-6 {
		// alice's and bob's requests came from this test client: one
		// fingerprint, one address, so one client ID in zone site, where
		// alice's 5 allowed requests and bob's 1 were counted (her denied
		// one spent nothing).
		t.Fatalf("client %s in zone site: %+v; want 94 left", clientID, byID.Zones)
	}

	// Reset unblocks.
	var reset ResetResult
	if status, body := adminDo(t, srv.Admin, http.MethodDelete, "/tollgate/clients/alice?zone=api", &reset); status != http.StatusOK {
		t.Fatalf("DELETE: %d %s", status, body)
	}
	if len(reset.ZonesReset) != 1 || reset.ZonesReset[0] != "api" {
		t.Fatalf("reset %+v", reset)
	}
	if s := srv.status("/", "X-API-Key", "alice"); s != http.StatusOK {
		t.Fatalf("after the reset: %d", s)
	}
	// Without ?zone, every zone is reset.
	adminDo(t, srv.Admin, http.MethodDelete, "/tollgate/clients/"+url.PathEscape(clientID), &reset)
	if len(reset.ZonesReset) != 2 {
		t.Errorf("a reset without a zone reset %v; want both zones", reset.ZonesReset)
	}
}

func TestAdminRejectsBadRequests(t *testing.T) {
	srv := startCaddy(t, "", adminSite)
	for _, tc := range []struct {
		method, path string
		status       int
		message      string
	}{
		{http.MethodGet, "/tollgate/clients/", http.StatusBadRequest, "want /tollgate/clients/{id}"},
		{http.MethodGet, "/tollgate/clients/a/b", http.StatusBadRequest, "URL-escaped"},
		{http.MethodGet, "/tollgate/clients/alice?zone=nosuch", http.StatusNotFound, `no zone \"nosuch\"`},
		{http.MethodPost, "/tollgate/clients/alice", http.StatusMethodNotAllowed, "use GET or DELETE"},
		{http.MethodPost, "/tollgate/status", http.StatusMethodNotAllowed, "use GET"},
	} {
		status, body := adminDo(t, srv.Admin, tc.method, tc.path, nil)
		if status != tc.status || !strings.Contains(body, tc.message) || !strings.Contains(body, `"error"`) {
			t.Errorf("%s %s: %d %s; want %d with %q", tc.method, tc.path, status, body, tc.status, tc.message)
		}
	}
}

func TestAdminStatusOfASingleNode(t *testing.T) {
	srv := startCaddy(t, "", adminSite)
	srv.get("/", "X-API-Key", "alice")
	var st Status
	if status, body := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/status", &st); status != http.StatusOK {
		t.Fatalf("%d %s", status, body)
	}
	if !st.Cluster.Standalone || len(st.Cluster.Members) != 1 || st.Keys.Held < 2 || st.Keys.Max != 1<<20 || st.Memory.CounterBytes <= 0 {
		t.Fatalf("status %+v", st)
	}
}

// scrape returns the admin endpoint's metrics as name{labels} → value.
func scrape(t testing.TB, admin string) map[string]float64 {
	t.Helper()
	_, body := adminDo(t, admin, http.MethodGet, "/metrics", nil)
	out := make(map[string]float64)
	line := regexp.MustCompile(`^(tollgate_[a-z_]+(?:\{[^}]*\})?) (\S+)$`)
	for _, l := range strings.Split(body, "\n") {
		if m := line.FindStringSubmatch(l); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			out[m[1]] = v
		}
	}
	return out
}

func TestMetricsCountAKnownSequence(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone api {
			limit 3 1h
			key {http.request.header.X-API-Key}
		}
	}
	respond "ok"`)
	clearOfWindowEdge(time.Hour, 10*time.Second)
	// The counters are the process's: earlier tests in this process have
	// counted too, so compare with a scrape taken before.
	before := scrape(t, srv.Admin)
	for range 5 {
		srv.get("/", "X-API-Key", "alice") // 3 allowed, 2 denied
	}
	srv.get("/", "X-API-Key", "bob", "Cookie", "__tollgate=forged")
	m := scrape(t, srv.Admin)
	for name, want := range map[string]float64{
		`tollgate_decisions_total{outcome="allow",scope="api",source="owner",zone="api"}`: 4,
		`tollgate_decisions_total{outcome="deny",scope="api",source="owner",zone="api"}`:  2,
		`tollgate_cookies_total{status="malformed"}`:                                      1,
	} {
		if got := m[name] - before[name]; got != want {
			t.Errorf("%s rose by %v; want %v", name, got, want)
		}
	}
	for name, want := range map[string]float64{
		`tollgate_cluster_members`:   1,
		`tollgate_peers_in_fallback`: 0,
		`tollgate_keys_max`:          1 << 20,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v); want %v", name, got, ok, want)
		}
	}
	if m[`tollgate_keys_held`] < 2 {
		t.Errorf("tollgate_keys_held = %v", m[`tollgate_keys_held`])
	}
	for name := range m {
		if strings.Contains(name, "alice") || strings.Contains(name, "127.0.0.1") {
			t.Errorf("a metric label carries a key or an address: %s", name)
		}
	}

	// A reload keeps the metrics working (no duplicate registration).
	srv.reload("", `
	tollgate {
		zone api {
			limit 4 1h
			key {http.request.header.X-API-Key}
		}
	}
	respond "ok"`)
	srv.get("/", "X-API-Key", "alice")
	allowed := `tollgate_decisions_total{outcome="allow",scope="api",source="owner",zone="api"}`
	if got := scrape(t, srv.Admin)[allowed] - before[allowed]; got != 5 {
		t.Errorf("after a reload, allowed rose by %v; want 5 (counting on)", got)
	}
}
