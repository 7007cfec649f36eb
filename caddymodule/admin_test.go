package caddymodule

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

func TestAdminClientRoutes(t *testing.T) {
	srv := startCaddy(t, "", testutil.AdminSite)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	for range 3 {
		srv.get("/", "X-API-Key", "alice")
	}

	var view adminapi.ClientView
	if status, body := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/alice?zone=api", &view); status != http.StatusOK {
		t.Fatalf("GET client: %d %s", status, body)
	}
	if len(view.Zones) != 1 || view.Zones[0].Zone != "api" || view.Zones[0].Remaining != 2 || view.Zones[0].Exhausted ||
		view.Zones[0].Limit != 5 || view.Zones[0].Algorithm != "sliding_window" || view.Owner == "" || view.Replica != "" {
		t.Fatalf("client view %+v; want api with 2 of 5 left, counted here, no replica", view)
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
	var byID adminapi.ClientView
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/"+url.PathEscape(clientID)+"?zone=site", &byID)
	if len(byID.Zones) != 1 || byID.Zones[0].Remaining != 100-6 {
		// alice's and bob's requests came from this test client: one
		// fingerprint, one address, so one client ID in zone site, where
		// alice's 5 allowed requests and bob's 1 were counted (her denied
		// one spent nothing).
		t.Fatalf("client %s in zone site: %+v; want 94 left", clientID, byID.Zones)
	}

	// Reset unblocks.
	var reset adminapi.ResetResult
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
	srv := startCaddy(t, "", testutil.AdminSite)
	for _, tc := range []struct {
		method, path string
		status       int
		message      string
	}{
		{http.MethodGet, "/tollgate/clients/", http.StatusBadRequest, "want /tollgate/clients/{id}"},
		{http.MethodGet, "/tollgate/clients/a/b", http.StatusBadRequest, "URL-escaped"},
		{http.MethodGet, "/tollgate/clients/alice?zone=nosuch", http.StatusNotFound, `no zone \"nosuch\"`},
		{http.MethodPost, "/tollgate/clients/alice", http.StatusMethodNotAllowed, "use GET, DELETE"},
		{http.MethodPost, "/tollgate/status", http.StatusMethodNotAllowed, "use GET"},
	} {
		status, body := adminDo(t, srv.Admin, tc.method, tc.path, nil)
		if status != tc.status || !strings.Contains(body, tc.message) || !strings.Contains(body, `"error"`) {
			t.Errorf("%s %s: %d %s; want %d with %q", tc.method, tc.path, status, body, tc.status, tc.message)
		}
	}
}

func TestAdminStatusOfASingleNode(t *testing.T) {
	srv := startCaddy(t, "", testutil.AdminSite)
	srv.get("/", "X-API-Key", "alice")
	var st adminapi.Status
	if status, body := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/status", &st); status != http.StatusOK {
		t.Fatalf("%d %s", status, body)
	}
	if !st.Cluster.Standalone || len(st.Cluster.Members) != 1 || st.Keys.Held < 2 || st.Keys.Max != 1<<20 || st.Memory.CounterBytes <= 0 {
		t.Fatalf("status %+v", st)
	}
}

// TestAdminConventions checks every route against the HTTP conventions:
// a wrong method gets 405 with Allow, every error is JSON, nothing under
// /tollgate/ redirects.
func TestAdminConventions(t *testing.T) {
	srv := startCaddy(t, "", testutil.AdminSite)
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodPost, "/tollgate/status", 405, "GET"},
		{http.MethodPut, "/tollgate/clients/alice", 405, "GET, DELETE"},
		{http.MethodDelete, "/tollgate/denied", 405, "GET"},
		{http.MethodPost, "/tollgate/tiers", 405, "GET, PUT, DELETE"},
		{http.MethodDelete, "/tollgate/grants", 405, "GET, POST"},
		{http.MethodPost, "/tollgate/grants/api/alice", 405, "GET, DELETE"},
		{http.MethodPatch, "/tollgate/reputation", 405, "GET"},
		{http.MethodGet, "/tollgate/x", 404, ""},
		{http.MethodGet, "/tollgate", 404, ""},
		{http.MethodGet, "/tollgate/", 404, ""},
		{http.MethodGet, "/tollgate/clients", 404, ""},
		{http.MethodGet, "/tollgate/statusx", 404, ""},
		{http.MethodGet, "/tollgate/grants/api", 400, ""},
		{http.MethodGet, "/tollgate/clients/", 400, ""},
		{http.MethodGet, "/tollgate/clients/nobody?zone=nosuch", 404, ""},
		{http.MethodGet, "/tollgate/denied?zone=nosuch", 404, ""},
		{http.MethodGet, "/tollgate/denied?limit=0", 400, ""},
		{http.MethodGet, "/tollgate/denied?limit=1001", 400, ""},
		{http.MethodGet, "/tollgate/denied?cursor=nonsense", 400, ""},
		{http.MethodGet, "/tollgate/grants?limit=101", 400, ""},
	} {
		resp, body := adminRaw(t, srv.Admin, tc.method, tc.path, "")
		var e struct {
			Error string `json:"error"`
		}
		if resp.StatusCode != tc.status || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %d %s %q; want %d with a JSON error", tc.method, tc.path, resp.StatusCode,
				resp.Header.Get("Content-Type"), body, tc.status)
		}
		if got := resp.Header.Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q; want %q", tc.method, tc.path, got, tc.allow)
		}
	}
	// Keys with slashes and dots, escaped, are keys: no redirect.
	for _, path := range []string{"/tollgate/clients/a%2F..%2Fb", "/tollgate/clients/https:%2F%2Fx%2F", "/tollgate/grants/api/.%2F."} {
		resp, body := adminRaw(t, srv.Admin, http.MethodGet, path, "")
		if resp.StatusCode/100 == 3 || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
	}
}

// timeFields are the answer fields that hold instants; every other
// time is a number of seconds in a field named *_seconds.
var timeFields = map[string]bool{"created": true, "expires": true, "denied_until": true, "last_ring_change": true}

// checkTimeFormat walks a JSON answer: instants are RFC 3339, durations
// numbers of seconds, and no string looks like a Go duration.
func checkTimeFormat(t *testing.T, where string, v any) {
	t.Helper()
	goDuration := regexp.MustCompile(`^[0-9.]+(ns|us|µs|ms|s|m|h)([0-9.]+(ns|us|µs|ms|s|m|h))*$`)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				switch {
				case timeFields[k]:
					s, ok := x.(string)
					if _, err := time.Parse(time.RFC3339, s); !ok || err != nil || strings.Contains(s, ".") {
						t.Errorf("%s: %s.%s = %v; want an RFC 3339 instant in whole seconds", where, path, k, x)
					}
				case strings.HasSuffix(k, "_seconds"):
					if _, ok := x.(float64); !ok {
						t.Errorf("%s: %s.%s = %v; want a number of seconds", where, path, k, x)
					}
				}
				walk(path+"."+k, x)
			}
		case []any:
			for _, x := range v {
				walk(path+"[]", x)
			}
		case string:
			if goDuration.MatchString(v) {
				t.Errorf("%s: %s = %q looks like a Go duration; durations are numbers of seconds", where, path, v)
			}
		case float64:
			if strings.HasSuffix(path, "reputation") && v != float64(int(v)) {
				t.Errorf("%s: %s = %v; a reputation is shown whole", where, path, v)
			}
		}
	}
	walk("", v)
}

const listSite = `
	tollgate {
		zone api {
			limit 1 1h
			key {http.request.header.X-API-Key}
		}
		zone site {
			limit 100 1h
		}
	}
	respond "ok"`

// TestAdminHashedIDsListsAndTimes follows an operator: a denial in the
// log, the key looked up by the hashed ID the log printed, the list of
// keys denied now, its pages, a reset by hashed ID, and a grant with its
// Location and in the grant list; every answer in one time format.
func TestAdminHashedIDsListsAndTimes(t *testing.T) {
	srv := startCaddy(t, "", listSite)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	for _, k := range []string{"k1", "k2", "k3"} {
		srv.get("/", "X-API-Key", k)
		if s := srv.status("/", "X-API-Key", k); s != http.StatusTooManyRequests {
			t.Fatalf("second request of %s: %d; want 429", k, s)
		}
	}
	// The log prints hashed IDs; the API looks them up.
	var logged []string
	testutil.Eventually(t, 5*time.Second, "three denials logged", func() bool {
		logs3(srv, &logged)
		return len(logged) >= 3
	})
	for _, line := range strings.Split(srv.logs(), "\n") {
		if strings.Contains(line, "request denied") && strings.Contains(line, "k1") {
			t.Fatalf("a denial log line carries a raw key: %s", line)
		}
	}
	var byHash, byRaw adminapi.ClientView
	if status, body := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/"+logged[0]+"?zone=api", &byHash); status != 200 {
		t.Fatalf("GET by hashed ID: %d %s", status, body)
	}
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/k1?zone=api", &byRaw)
	if !byHash.Zones[0].Exhausted || !byRaw.Zones[0].Exhausted {
		t.Fatalf("by hash %+v, by raw key %+v; want both exhausted", byHash.Zones, byRaw.Zones)
	}
	// The denied list: three keys, in pages of two, hashed.
	var p1, p2 adminapi.DeniedList
	if status, body := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/denied?zone=api&limit=2", &p1); status != 200 {
		t.Fatalf("GET /tollgate/denied: %d %s", status, body)
	}
	if len(p1.Items) != 2 || p1.NextCursor == "" {
		t.Fatalf("first page %+v; want 2 items and a cursor", p1)
	}
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/denied?zone=api&limit=2&cursor="+p1.NextCursor, &p2)
	if len(p2.Items) != 1 || p2.NextCursor != "" {
		t.Fatalf("second page %+v; want the last item and no cursor", p2)
	}
	seen := map[string]bool{}
	for _, it := range append(p1.Items, p2.Items...) {
		if seen[it.Key] || !strings.HasPrefix(it.Key, "h:") || it.Zone != "api" || it.RetryAfter < 1 || it.Denials != 1 {
			t.Errorf("denied item %+v", it)
		}
		seen[it.Key] = true
	}
	for _, h := range logged[:3] {
		if !seen[h] {
			t.Errorf("the logged %s is not in the denied list %v", h, seen)
		}
	}

	// A reset by hashed ID lets the key through and takes it off the list.
	if status, body := adminDo(t, srv.Admin, http.MethodDelete, "/tollgate/clients/"+logged[0]+"?zone=api", nil); status != 200 {
		t.Fatalf("DELETE by hashed ID: %d %s", status, body)
	}
	var after adminapi.DeniedList
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/denied?zone=api", &after)
	if len(after.Items) != 2 {
		t.Errorf("after a reset the list has %d keys; want 2", len(after.Items))
	}
	for _, it := range after.Items {
		if it.Key == logged[0] {
			t.Errorf("the reset key is still listed")
		}
	}

	// A grant answers 201 with a Location where it is, by hashed ID.
	app, err := runningApp()
	if err != nil {
		t.Fatal(err)
	}
	resp, body := adminRaw(t, srv.Admin, http.MethodPost, "/tollgate/grants", `{"zone":"api","key":"k2","amount":3,"duration":3600}`)
	if resp.StatusCode != 201 || resp.Header.Get("Location") != "/tollgate/grants/api/"+adminapi.HashedID(app.keyHashOf("k2")) {
		t.Fatalf("POST grant: %d Location %q %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	var g adminapi.GrantView
	if status, _ := adminDo(t, srv.Admin, http.MethodGet, resp.Header.Get("Location"), &g); status != 200 || g.Amount != 3 {
		t.Fatalf("GET Location: %d %+v", status, g)
	}
	var grants adminapi.GrantList
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/grants?zone=api", &grants)
	if len(grants.Items) != 1 || !strings.HasPrefix(grants.Items[0].Key, "h:") || grants.Items[0].Amount != 3 {
		t.Fatalf("grant list %+v", grants)
	}
	adminDo(t, srv.Admin, http.MethodDelete, "/tollgate/grants/api/"+grants.Items[0].Key, nil)
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/grants", &grants)
	if len(grants.Items) != 0 {
		t.Fatalf("grant list after the revoke %+v", grants)
	}
	adminSend(t, srv.Admin, http.MethodPost, "/tollgate/grants", `{"zone":"api","key":"k3","amount":3,"duration":"1h"}`, nil)

	// One time format everywhere.
	for _, path := range []string{"/tollgate/status", "/tollgate/clients/k3", "/tollgate/denied", "/tollgate/grants",
		"/tollgate/grants/api/k3", "/tollgate/tiers", "/tollgate/reputation", "/tollgate/clients/k1"} {
		var v any
		if status, body := adminDo(t, srv.Admin, http.MethodGet, path, &v); status != 200 {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		checkTimeFormat(t, path, v)
	}
	// A single node has no fallback to show.
	var st map[string]map[string]any
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/status", &st)
	for _, k := range []string{"fallback_mode", "fallback_ratio"} {
		if _, ok := st["cluster"][k]; ok {
			t.Errorf("a standalone status shows %s: %v", k, st["cluster"][k])
		}
	}
}

// logs3 fills out with the distinct key hashes logged, in order.
func logs3(srv *testCaddy, out *[]string) {
	*out = (*out)[:0]
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`"zone":"api".*?"key_hash":"(h:[0-9a-f]{16})"`).FindAllStringSubmatch(srv.logs(), -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			*out = append(*out, m[1])
		}
	}
}

// TestAdminBodiesOverTheLimitAreTooLarge sends bodies past the limit to
// every route that reads one, with a Content-Length and chunked: the
// answer says the body is too large and what the limit is, not that the
// JSON is malformed.
func TestAdminBodiesOverTheLimitAreTooLarge(t *testing.T) {
	srv := startCaddy(t, "", tierSite)
	big := strings.Repeat("a", adminapi.MaxBody+10)
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPut, "/tollgate/tiers", `{"credits": {"` + big + `": 5}}`},
		{http.MethodPost, "/tollgate/grants", `{"zone": "credits", "key": "` + big + `", "amount": 1, "duration": 60}`},
		{http.MethodPost, "/tollgate/grants", big},
	} {
		for _, chunked := range []bool{false, true} {
			var body io.Reader = strings.NewReader(tc.body)
			if chunked {
				body = io.MultiReader(body) // no length known: sent chunked
			}
			req, _ := http.NewRequest(tc.method, srv.Admin+tc.path, body)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			what := fmt.Sprintf("%s %s with %d bytes (chunked %v)", tc.method, tc.path, len(tc.body), chunked)
			msg := jsonError(t, what, resp, string(got))
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "too large") ||
				!strings.Contains(msg, strconv.Itoa(adminapi.MaxBody)) {
				t.Errorf("%s: %d %q; want 413 naming the limit", what, resp.StatusCode, msg)
			}
		}
	}
}
