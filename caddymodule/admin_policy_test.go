package caddymodule

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// TestGrantLocationNamesTheHashedID gives grants to keys that a raw
// Location would get wrong or leak: the Location names the hashed ID,
// following it finds the grant, and the raw key never reaches the URL
// that Caddy's admin log records.
func TestGrantLocationNamesTheHashedID(t *testing.T) {
	srv := startCaddy(t, "", testutil.AdminSite)
	app, err := runningApp()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"..", ".", "secret-key-4f1c", "a/b?c#d"} {
		body, _ := json.Marshal(adminapi.GrantRequest{Zone: "api", Key: key, Amount: 3, Duration: json.RawMessage(`3600`)})
		resp, got := adminRaw(t, srv.Admin, http.MethodPost, "/tollgate/grants", string(body))
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST grant for %q: %d %s", key, resp.StatusCode, got)
		}
		loc := resp.Header.Get("Location")
		want := "/tollgate/grants/api/" + adminapi.HashedID(app.keyHashOf(key))
		if loc != want {
			t.Errorf("key %q: Location %q; want %q", key, loc, want)
			continue
		}
		resp, got = adminRaw(t, srv.Admin, http.MethodGet, loc, "")
		var g adminapi.GrantView
		if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(got), &g) != nil || g.Amount != 3 || g.Zone != "api" {
			t.Errorf("key %q: GET %s: %d %s; want the grant", key, loc, resp.StatusCode, got)
		}
	}
	if logs := srv.logs(); strings.Contains(logs, "secret-key-4f1c") {
		t.Errorf("a raw key reached the logs:\n%s", logs)
	}
}

// TestTiersPutRefusesWhatIsNoTable sends PUT /tollgate/tiers bodies that
// are not a table of overrides: each gets a JSON 400 naming what was sent
// and what is expected, and the overrides in effect stay.
func TestTiersPutRefusesWhatIsNoTable(t *testing.T) {
	srv := startCaddy(t, "", tierSite)
	if status, body := adminSend(t, srv.Admin, http.MethodPut, "/tollgate/tiers", `{"credits": {"pro": 8}}`, nil); status != http.StatusOK {
		t.Fatalf("PUT tiers: %d %s", status, body)
	}
	for _, tc := range []struct{ body, want string }{
		{``, "body is empty"},
		{`null`, "DELETE /tollgate/tiers"},
		{`{}`, "DELETE /tollgate/tiers"},
		{`[]`, `body []: want an object of zone`},
		{`"credits"`, `want an object of zone`},
		{`5`, `want an object of zone`},
		{`{"credits": null}`, `zone "credits": null: want an object of tier`},
		{`{"credits": 5}`, `zone "credits": 5: want an object of tier`},
		{`{"credits": []}`, `zone "credits": []: want an object of tier`},
		{`{"credits": {}}`, `zone "credits": {} names no tier`},
		{`{"credits": {"pro": null}}`, `zone "credits": tier "pro": null: want a whole number`},
		{`{"credits": {"pro": "lots"}}`, `zone "credits": tier "pro": "lots": want a whole number`},
		{`{"credits": {"pro": 1.5}}`, `zone "credits": tier "pro": 1.5: want a whole number`},
		{`{"credits": {"pro": 0}}`, `tier pro 0: must be a whole number from 1`},
	} {
		resp, got := adminRaw(t, srv.Admin, http.MethodPut, "/tollgate/tiers", tc.body)
		msg := jsonError(t, "PUT "+tc.body, resp, got)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(msg, tc.want) {
			t.Errorf("PUT %s: %d %q; want 400 with %q", tc.body, resp.StatusCode, msg, tc.want)
		}
	}
	var view adminapi.TiersView
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/tiers", &view)
	if view.Zones["credits"].Overrides["pro"] != 8 {
		t.Fatalf("a refused PUT changed the overrides: %+v", view.Zones["credits"])
	}
}

const sharedNameSite = `
	route /a/* {
		tollgate {
			tier_from {http.request.header.X-User-Tier}
			zone api {
				limit 2 1h
				tier pro 20
			}
		}
	}
	route /b/* {
		tollgate {
			tier_from {http.request.header.X-User-Tier}
			zone api {
				limit 3 1h
				tier pro 30
			}
		}
	}
	respond "ok"`

// TestTiersShowEveryScopeOfAName runs two handlers that each declare a
// zone api: GET /tollgate/tiers and `caddy tollgate tiers` show both, and
// an override set by name reaches both.
func TestTiersShowEveryScopeOfAName(t *testing.T) {
	srv := startCaddy(t, "", sharedNameSite)
	var view adminapi.TiersView
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/tiers", &view)
	defaults := map[int64]string{}
	for scope, tv := range view.Zones {
		if tv.Zone != "api" {
			t.Errorf("scope %q: zone %q; want api", scope, tv.Zone)
		}
		defaults[tv.Default] = scope
	}
	// The scopes' metric series would outlive this Caddy in the process's
	// registry, and their place names the site's listener, which
	// TestMetricsCountAKnownSequence refuses in a label.
	t.Cleanup(func() {
		for scope, tv := range view.Zones {
			deleteDecisionSeries(tv.Zone, scope)
		}
	})
	if len(view.Zones) != 2 || defaults[2] == "" || defaults[3] == "" {
		t.Fatalf("tiers view %+v; want both zones api, defaults 2 and 3", view.Zones)
	}
	if view.Zones[defaults[2]].Caddyfile["pro"] != 20 || view.Zones[defaults[3]].Caddyfile["pro"] != 30 {
		t.Errorf("tiers view %+v; want pro 20 and 30", view.Zones)
	}

	addr := strings.TrimPrefix(srv.Admin, "http://")
	out, errOut, code := testutil.CLI(t, "tiers", "set", "api", "pro=40", "--address", addr)
	if code != 0 {
		t.Fatalf("tiers set api pro=40: exit %d, %s\n%s", code, errOut, out)
	}
	for _, scope := range []string{defaults[2], defaults[3]} {
		if !strings.Contains(out, scope+" ") {
			t.Errorf("tiers set: no row for %s:\n%s", scope, out)
		}
	}
	if strings.Count(out, " 40\n") != 2 {
		t.Errorf("tiers set: want pro 40 in effect in both scopes:\n%s", out)
	}
	// A PUT by scope says to use the name.
	resp, got := adminRaw(t, srv.Admin, http.MethodPut, "/tollgate/tiers", `{"`+defaults[2]+`": {"pro": 1}}`)
	if msg := jsonError(t, "PUT by scope", resp, got); resp.StatusCode != http.StatusBadRequest || !strings.Contains(msg, `use "api"`) {
		t.Errorf("PUT by scope %s: %d %q; want 400 saying to use the name", defaults[2], resp.StatusCode, msg)
	}
	// The CLI sends the table back by zone name, so a second set works.
	if out, errOut, code := testutil.CLI(t, "tiers", "set", "api", "pro=50", "--address", addr); code != 0 {
		t.Fatalf("a second tiers set: exit %d, %s\n%s", code, errOut, out)
	}
}

// TestTiersConditionalUpdate changes the tier table with If-Match: a
// stale version gets a 412 and changes nothing, the current one works, and
// of two updates made from the same read only one lands.
func TestTiersConditionalUpdate(t *testing.T) {
	srv := startCaddy(t, "", tierSite)
	var v0 adminapi.TiersView
	resp, got := adminRaw(t, srv.Admin, http.MethodGet, "/tollgate/tiers", "")
	if err := json.Unmarshal([]byte(got), &v0); err != nil {
		t.Fatal(err)
	}
	if etag := resp.Header.Get("ETag"); etag != `"`+strconv.FormatInt(v0.OverridesVersion, 10)+`"` {
		t.Errorf("GET tiers: ETag %q; want the overrides_version %d quoted", etag, v0.OverridesVersion)
	}
	match := strconv.FormatInt(v0.OverridesVersion, 10)

	var v1 adminapi.TiersView
	resp, got = adminRaw(t, srv.Admin, http.MethodPut, "/tollgate/tiers", `{"credits": {"pro": 8}}`, "If-Match", `"`+match+`"`)
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(got), &v1) != nil || v1.OverridesVersion == v0.OverridesVersion {
		t.Fatalf("PUT with the current version: %d %s", resp.StatusCode, got)
	}
	for _, tc := range []struct{ method, body string }{
		{http.MethodPut, `{"credits": {"pro": 9}}`},
		{http.MethodDelete, ``},
	} {
		resp, got = adminRaw(t, srv.Admin, tc.method, "/tollgate/tiers", tc.body, "If-Match", `"`+match+`"`)
		msg := jsonError(t, tc.method+" stale", resp, got)
		if resp.StatusCode != http.StatusPreconditionFailed || !strings.Contains(msg, match) ||
			!strings.Contains(msg, strconv.FormatInt(v1.OverridesVersion, 10)) {
			t.Errorf("%s with a stale If-Match: %d %q; want 412 naming both versions", tc.method, resp.StatusCode, msg)
		}
	}
	for _, bad := range []string{"soon", `"12`, `W/"12"`, "-1", "+12", `"1", "2"`} {
		resp, got = adminRaw(t, srv.Admin, http.MethodPut, "/tollgate/tiers", `{"credits": {"pro": 9}}`, "If-Match", bad)
		if msg := jsonError(t, "bad If-Match", resp, got); resp.StatusCode != http.StatusBadRequest ||
			!strings.Contains(msg, "If-Match "+strconv.Quote(bad)) || !strings.Contains(msg, "overrides_version") {
			t.Errorf("PUT with If-Match %s: %d %q; want 400 naming the header, the value and what it takes", bad, resp.StatusCode, msg)
		}
	}
	var view adminapi.TiersView
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/tiers", &view)
	if view.Zones["credits"].Overrides["pro"] != 8 {
		t.Fatalf("a refused update changed the table: %+v", view.Zones["credits"])
	}

	// Two operators read the same version and write at once: one wins.
	match = `"` + strconv.FormatInt(view.OverridesVersion, 10) + `"`
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _ := adminRaw(t, srv.Admin, http.MethodPut, "/tollgate/tiers", `{"credits": {"pro": `+strconv.Itoa(10+i)+`}}`, "If-Match", match)
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	won := 0
	for _, c := range codes {
		if c == http.StatusOK {
			won++
		} else if c != http.StatusPreconditionFailed {
			t.Errorf("concurrent conditional PUT: %d", c)
		}
	}
	if won != 1 {
		t.Errorf("%d of %d updates made from one read landed; want 1 (%v)", won, len(codes), codes)
	}
	// A bare version and * are taken too; no If-Match applies whatever.
	resp, _ = adminRaw(t, srv.Admin, http.MethodGet, "/tollgate/tiers", "")
	bare := strings.Trim(resp.Header.Get("ETag"), `"`)
	for _, h := range [][]string{{"If-Match", bare}, {"If-Match", "*"}, nil} {
		if resp, got := adminRaw(t, srv.Admin, http.MethodPut, "/tollgate/tiers", `{"credits": {"pro": 20}}`, h...); resp.StatusCode != http.StatusOK {
			t.Errorf("PUT with %q: %d %s", h, resp.StatusCode, got)
		}
	}
}

// TestPolicyErrorsNameFieldValueAndWhatIsAllowed sends the grant and tier
// routes wrong requests: every answer is a JSON error whose message names
// the field, the value sent and what is allowed.
func TestPolicyErrorsNameFieldValueAndWhatIsAllowed(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		tier_from {http.request.header.X-User-Tier}
		zone credits {
			limit 3 1h
			tier pro 5
		}
		zone rooms {
			concurrent 2
			key {http.request.header.X-Room}
		}
	}
	respond "ok"`)
	for _, tc := range []struct {
		method, path, body string
		status             int
		want               []string
	}{
		{"POST", "/tollgate/grants", `{"key": "a", "amount": 1, "duration": 60}`, 400, []string{"zone is required", "credits"}},
		{"POST", "/tollgate/grants", `{"zone": "nope", "key": "a", "amount": 1, "duration": 60}`, 400, []string{`"nope"`, "credits, rooms"}},
		{"POST", "/tollgate/grants", `{"zone": "rooms", "key": "a", "amount": 1, "duration": 60}`, 400, []string{`"rooms"`, "concurrent", "credits"}},
		{"POST", "/tollgate/grants", `{"zone": 5, "key": "a", "amount": 1, "duration": 60}`, 400, []string{`field "zone"`, "number", "a string"}},
		{"POST", "/tollgate/grants", `{"zone": "credits", "key": "a", "amount": "five", "duration": 60}`, 400, []string{`field "amount"`, "string", "a whole number"}},
		{"POST", "/tollgate/grants", `{"zone": "credits", "key": "a", "amount": 1, "duration": 60, "extra": 1}`, 400, []string{`"extra"`, `"zone"`, `"duration"`}},
		{"POST", "/tollgate/grants", `{"zone": "credits", "key": "a", "amount": 0, "duration": 60}`, 400, []string{"amount 0", "from 1 to"}},
		{"POST", "/tollgate/grants", `{"zone": "credits", "key": "a", "amount": 1, "duration": "soon"}`, 400, []string{`duration "soon"`, "168h"}},
		{"POST", "/tollgate/grants", `{"zone": "credits", "key": "", "amount": 1, "duration": 60}`, 400, []string{"key is required"}},
		{"GET", "/tollgate/grants/nope/a", "", 404, []string{`"nope"`, "credits, rooms"}},
		{"PUT", "/tollgate/tiers", `{"nope": {"pro": 1}}`, 400, []string{`"nope"`, "credits, rooms"}},
		{"PUT", "/tollgate/tiers", `{"credits": {"gold": 1}}`, 400, []string{`"credits"`, `"gold"`, "pro"}},
		{"PUT", "/tollgate/tiers", `{"credits": {"pro": 99999999999}}`, 400, []string{`"credits"`, "pro", "99999999999", "from 1 to"}},
		{"PUT", "/tollgate/tiers", `{"rooms": {"pro": 999}}`, 400, []string{`"rooms"`, "pro", "999", "from 1 to"}},
		{"PATCH", "/tollgate/tiers", "", 405, []string{"PATCH", "GET, PUT, DELETE"}},
	} {
		resp, got := adminRaw(t, srv.Admin, tc.method, tc.path, tc.body)
		msg := jsonError(t, tc.method+" "+tc.path+" "+tc.body, resp, got)
		ok := resp.StatusCode == tc.status
		for _, w := range tc.want {
			ok = ok && strings.Contains(msg, w)
		}
		if !ok {
			t.Errorf("%s %s %s: %d %q; want %d naming %q", tc.method, tc.path, tc.body, resp.StatusCode, msg, tc.status, tc.want)
		}
	}
}

func postGrant(t *testing.T, srv *testCaddy, body string) (int, adminapi.GrantView, string) {
	t.Helper()
	var g adminapi.GrantView
	status, got := adminSend(t, srv.Admin, http.MethodPost, "/tollgate/grants", body, &g)
	return status, g, got
}

func TestGrantsThroughTheAdminAPI(t *testing.T) {
	srv := startCaddy(t, "", tierSite)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	if got := allowedOf(srv, 5, "X-User", "dan"); got != 3 {
		t.Fatalf("before the grant: %d", got)
	}
	status, g, body := postGrant(t, srv, `{"zone":"credits","key":"dan","amount":2,"duration":"168h"}`)
	if status != http.StatusCreated || g.Amount != 2 || g.Remaining != 2 || len(g.Version) != 36 {
		t.Fatalf("POST grant: %d %s", status, body)
	}
	if got := allowedOf(srv, 5, "X-User", "dan"); got != 2 {
		t.Fatalf("with a grant of 2 after the base was spent: %d allowed; want 2", got)
	}
	var got adminapi.GrantView
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/grants/credits/dan", &got)
	if got.Used != 2 || got.Remaining != 0 || got.Version != g.Version {
		t.Fatalf("GET grant %+v", got)
	}
	// A new grant replaces the old and starts fresh.
	_, g2, _ := postGrant(t, srv, `{"zone":"credits","key":"dan","amount":4,"duration":"1h"}`)
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/grants/credits/dan", &got)
	if got.Version != g2.Version || got.Used != 0 || got.Remaining != 4 {
		t.Fatalf("after a new grant: %+v; want the new one untouched", got)
	}
	// The client view shows it.
	var cv adminapi.ClientView
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/dan?zone=credits", &cv)
	if len(cv.Zones) != 1 || cv.Zones[0].Grant == nil || cv.Zones[0].Grant.Remaining != 4 {
		t.Fatalf("client view %+v", cv)
	}
	// Revoked.
	if status, _ := adminDo(t, srv.Admin, http.MethodDelete, "/tollgate/grants/credits/dan", nil); status != http.StatusOK {
		t.Fatalf("DELETE grant: %d", status)
	}
	if status, _ := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/grants/credits/dan", nil); status != http.StatusNotFound {
		t.Fatalf("GET after DELETE: %d", status)
	}
	if got := allowedOf(srv, 2, "X-User", "dan"); got != 0 {
		t.Fatalf("after revoking: %d allowed", got)
	}

	for body, want := range map[string]string{
		`{"zone":"credits","key":"x","amount":-5,"duration":"1h"}`:      "amount -5",
		`{"zone":"credits","key":"x","amount":0,"duration":"1h"}`:       "amount 0",
		`{"zone":"nosuch","key":"x","amount":5,"duration":"1h"}`:        `unknown zone \"nosuch\"`,
		`{"zone":"credits","key":"","amount":5,"duration":"1h"}`:        "key is required",
		`{"zone":"credits","key":"x","amount":5,"duration":"-1h"}`:      `duration \"-1h\"`,
		`{"zone":"credits","key":"x","amount":5,"duration":"400d"}`:     `duration \"400d\"`,
		`{"zone":"credits","key":"x","amount":5,"duration":"soon"}`:     `duration \"soon\"`,
		`{"zone":"credits","key":"x","amount":5,"duration":"1h","a":1}`: "unknown field",
		`{"zone":"credits"`: "malformed JSON body",
		`{"zone":"credits","key":"x","amount":"five","duration":"1h"}`:     `field \"amount\": got a JSON string, want a whole number`,
		`{"zone":"credits","key":"x","amount":3000000000,"duration":"1h"}`: "amount 3000000000",
	} {
		status, _, got := postGrant(t, srv, body)
		if status != http.StatusBadRequest || !strings.Contains(got, want) {
			t.Errorf("POST %s: %d %s; want 400 with %q", body, status, got, want)
		}
	}
	if status, _ := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/grants/credits/x", nil); status != http.StatusNotFound {
		t.Errorf("a rejected POST left a grant behind: GET answered %d", status)
	}
	if status, _ := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/grants/x/dan", nil); status != http.StatusNotFound {
		t.Errorf("GET a grant of an unknown zone: %d", status)
	}
}
