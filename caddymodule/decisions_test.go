package caddymodule

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/cluster"
)

// decisionSite has a zone for /api/ and one for every request, both keyed
// by the API key, with limits small enough to exhaust.
const decisionSite = `
	tollgate {
		zone api {
			limit 3 1h
			key {http.request.header.X-API-Key}
			match {
				path /api/*
			}
		}
		zone site {
			limit 6 1h
			key {http.request.header.X-API-Key}
		}
	}
	respond "ok {http.tollgate.source}"`

// decide posts a decision and fails the test unless it is made.
func decide(t *testing.T, srv *testCaddy, body string) adminapi.DecisionMade {
	t.Helper()
	var made adminapi.DecisionMade
	resp, got := adminRaw(t, srv.Admin, http.MethodPost, adminapi.PathDecisions, body)
	if resp.StatusCode != http.StatusCreated || json.Unmarshal([]byte(got), &made) != nil {
		t.Fatalf("POST %s %s: %d %s; want 201 with the decision", adminapi.PathDecisions, body, resp.StatusCode, got)
	}
	return made
}

// TestBlockDeniesThatKeyOnly blocks one key: its requests get the usual
// 429 with Retry-After until the block ends, in the zone it names only,
// counted as a denial by decision and logged without the key, while other
// keys pass; lifted, the key passes again.
func TestBlockDeniesThatKeyOnly(t *testing.T) {
	srv := startCaddy(t, "", decisionSite)
	key := func(k string) []string { return []string{"X-API-Key", k} }
	before := scrape(t, srv.Admin)

	made := decide(t, srv, `{"key": "mallory-7c1e", "action": "block", "duration": "1h", "reason": "scraping the catalogue"}`)
	if d := made.Decision; d.Key == "mallory-7c1e" || !strings.HasPrefix(d.Key, "h:") || d.Zone != "" || d.Reason != "scraping the catalogue" {
		t.Errorf("decision answered as %+v; want the hashed ID, every zone and the reason", d)
	}
	resp := srv.get("/page", key("mallory-7c1e")...)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("blocked key: %d; want 429", resp.StatusCode)
	}
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 3500 || ra > 3600 {
		t.Errorf("blocked key: Retry-After %q; want the hour the block lasts", resp.Header.Get("Retry-After"))
	}
	if status, body := srv.body("/page", key("alice")...); status != http.StatusOK || body != "ok owner" {
		t.Errorf("another key: %d %q; want 200 ok owner", status, body)
	}
	if status := srv.status("/page"); status != http.StatusOK {
		t.Errorf("a request without a key: %d; want 200", status)
	}
	after := scrape(t, srv.Admin)
	series := `tollgate_denials_total{reason="decision",scope="site",zone="site"}`
	if n := after[series] - before[series]; n != 1 {
		t.Errorf("%s grew by %g; want 1", series, n)
	}
	logs := srv.logs()
	if strings.Contains(logs, "mallory-7c1e") {
		t.Errorf("the raw key reached the log")
	}
	if !strings.Contains(logs, `"reason":"decision"`) || !strings.Contains(logs, made.Decision.Key) {
		t.Errorf("no denial by decision logged with the key's hashed ID %s", made.Decision.Key)
	}

	// In one zone only: the other zone's requests pass.
	decide(t, srv, `{"key": "mallory-7c1e", "action": "block", "zone": "api", "duration": 600}`)
	if status := srv.status("/api/items", key("mallory-7c1e")...); status != http.StatusTooManyRequests {
		t.Errorf("blocked in api, a request to api: %d; want 429", status)
	}
	if status := srv.status("/page", key("mallory-7c1e")...); status != http.StatusTooManyRequests {
		t.Errorf("the block in every zone still holds beside the one in api: %d; want 429", status)
	}
	var lifted adminapi.DecisionsLifted
	if status, body := adminDo(t, srv.Admin, http.MethodDelete, adminapi.PathDecision+made.Decision.Key+"?zone=&action=block", &lifted); status != http.StatusOK || len(lifted.Lifted) != 2 {
		t.Fatalf("DELETE the key's blocks: %d %s; want both lifted", status, body)
	}
	decide(t, srv, `{"key": "mallory-7c1e", "action": "block", "zone": "api"}`)
	if status := srv.status("/page", key("mallory-7c1e")...); status != http.StatusOK {
		t.Errorf("blocked in api only, a request outside api: %d; want 200", status)
	}
	if status := srv.status("/api/items", key("mallory-7c1e")...); status != http.StatusTooManyRequests {
		t.Errorf("blocked in api only, a request to api: %d; want 429", status)
	}

	// Lifted by the raw key: it passes again.
	if status, body := adminDo(t, srv.Admin, http.MethodDelete, adminapi.PathDecision+"mallory-7c1e", &lifted); status != http.StatusOK || len(lifted.Lifted) != 1 {
		t.Fatalf("DELETE by the raw key: %d %s; want the block lifted", status, body)
	}
	if status := srv.status("/api/items", key("mallory-7c1e")...); status != http.StatusOK {
		t.Errorf("lifted: %d; want 200", status)
	}
	var list adminapi.DecisionList
	if adminDo(t, srv.Admin, http.MethodGet, adminapi.PathDecisions, &list); len(list.Items) != 0 {
		t.Errorf("decisions after lifting every one: %+v; want none", list.Items)
	}
}

// TestAllowSkipsTheLimits lets one key skip the limits: it passes far
// beyond them while another key is denied at its limit; allowed in one
// zone, the other zone still counts it.
func TestAllowSkipsTheLimits(t *testing.T) {
	srv := startCaddy(t, "", decisionSite)
	decide(t, srv, `{"key": "partner-31", "action": "allow", "reason": "load test"}`)
	for i := range 20 {
		if status := srv.status("/api/items", "X-API-Key", "partner-31"); status != http.StatusOK {
			t.Fatalf("allowed key, request %d: %d; want 200", i+1, status)
		}
	}
	denied := 0
	for range 6 {
		if srv.status("/api/items", "X-API-Key", "stranger-9") == http.StatusTooManyRequests {
			denied++
		}
	}
	if denied != 3 {
		t.Errorf("another key, 6 requests to a zone of 3: %d denied; want 3", denied)
	}

	// Allowed in api only: site (6 an hour) counts it and denies the 7th.
	decide(t, srv, `{"key": "partner-32", "action": "allow", "zone": "api"}`)
	for i := range 6 {
		if status := srv.status("/api/items", "X-API-Key", "partner-32"); status != http.StatusOK {
			t.Fatalf("allowed in api, request %d: %d; want 200", i+1, status)
		}
	}
	if status := srv.status("/api/items", "X-API-Key", "partner-32"); status != http.StatusTooManyRequests {
		t.Errorf("allowed in api only, 7th request: %d; want 429 from site", status)
	}

	// A block wins over an allow.
	decide(t, srv, `{"key": "partner-31", "action": "block", "zone": "api"}`)
	if status := srv.status("/api/items", "X-API-Key", "partner-31"); status != http.StatusTooManyRequests {
		t.Errorf("allowed everywhere, blocked in api: %d; want 429", status)
	}
}

// TestExpiredDecisionNoLongerHolds steps through the instants around a
// decision's expiry, and puts an expired block in effect in a running
// Caddy: it denies nothing and is not listed.
func TestExpiredDecisionNoLongerHolds(t *testing.T) {
	made := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	expires := made.Add(time.Hour)
	tbl := &decisionTable{Records: []opDecision{
		{Key: adminapi.HashedID(7), Action: adminapi.ActionBlock, Created: made.UnixNano(), Expires: expires.UnixNano()},
		{Key: adminapi.HashedID(7), Zone: "api", Action: adminapi.ActionAllow, Created: made.UnixNano(), Expires: expires.Add(time.Hour).UnixNano()},
	}}
	if err := tbl.vet(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		at         time.Time
		zone, want string
	}{
		{made, "site", adminapi.ActionBlock},
		{expires.Add(-time.Nanosecond), "site", adminapi.ActionBlock},
		{expires.Add(-time.Nanosecond), "api", adminapi.ActionBlock}, // a block wins over an allow
		{expires, "site", ""},
		{expires, "api", adminapi.ActionAllow},
		{expires.Add(time.Hour), "api", ""},
	} {
		got := ""
		if d := tbl.lookup(7, 0, tc.zone, tc.at); d != nil {
			got = d.Action
		}
		if got != tc.want {
			t.Errorf("at %s in %s: %q; want %q", tc.at.Sub(made), tc.zone, got, tc.want)
		}
		if d := tbl.lookup(8, 0, tc.zone, tc.at); d != nil {
			t.Errorf("at %s, another key: %s; want none", tc.at.Sub(made), d.Action)
		}
	}
	if n := len(tbl.held(expires)); n != 1 {
		t.Errorf("held at the block's expiry: %d; want 1 (the allow)", n)
	}

	srv := startCaddy(t, "", decisionSite)
	app, err := runningApp()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	_, err = app.changeDecisions(now, func([]opDecision) ([]opDecision, error) {
		return []opDecision{{Key: adminapi.HashedID(app.keyHashOf("late")), Action: adminapi.ActionBlock,
			Created: now.Add(-2 * time.Hour).UnixNano(), Expires: now.Add(-time.Hour).UnixNano()}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if status := srv.status("/page", "X-API-Key", "late"); status != http.StatusOK {
		t.Errorf("a block that expired an hour ago: %d; want 200", status)
	}
	var list adminapi.DecisionList
	if adminDo(t, srv.Admin, http.MethodGet, adminapi.PathDecisions, &list); len(list.Items) != 0 {
		t.Errorf("expired decisions listed: %+v", list.Items)
	}
}

// TestDecisionErrorsNameTheFieldValueAndWhatIsAllowed sends decisions
// that cannot be made: each is a 400 saying what was sent and what is
// allowed, and nothing changes.
func TestDecisionErrorsNameTheFieldValueAndWhatIsAllowed(t *testing.T) {
	srv := startCaddy(t, "", decisionSite)
	for _, tc := range []struct{ body, want string }{
		{`{"action": "block"}`, "key is required"},
		{`{"key": "k", "action": "ban"}`, `action "ban": must be block or allow`},
		{`{"key": "k", "action": "block", "zone": "nope"}`, `unknown zone "nope": the running config has api, site`},
		{`{"key": "k", "action": "block", "duration": "forever"}`, `duration "forever": must be a duration from 1s to 366d`},
		{`{"key": "k", "action": "block", "duration": 0}`, `duration 0: must be from 1 to 31622400 seconds`},
		{`{"key": "k", "action": "block", "duration": "400d"}`, `duration "400d"`},
		{`{"key": "k", "action": "block", "reason": "two\nlines"}`, `has a control character`},
		{`{"key": "k", "action": "block", "reason": "` + strings.Repeat("x", 201) + `"}`, "reason of 201 characters; at most 200"},
		{`{"key": "k", "action": "block", "until": "x"}`, `unknown field`},
	} {
		resp, got := adminRaw(t, srv.Admin, http.MethodPost, adminapi.PathDecisions, tc.body)
		msg := jsonError(t, "POST "+tc.body, resp, got)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(msg, tc.want) {
			t.Errorf("POST %.60s: %d %q; want 400 with %q", tc.body, resp.StatusCode, msg, tc.want)
		}
	}
	for _, tc := range []struct {
		path   string
		status int
		want   string
	}{
		{adminapi.PathDecision + "nobody", http.StatusNotFound, "no decision holds for h:"},
		{adminapi.PathDecision + "k?action=ban", http.StatusBadRequest, `action "ban": must be block or allow`},
	} {
		resp, got := adminRaw(t, srv.Admin, http.MethodDelete, tc.path, "")
		if msg := jsonError(t, "DELETE "+tc.path, resp, got); resp.StatusCode != tc.status || !strings.Contains(msg, tc.want) {
			t.Errorf("DELETE %s: %d %q; want %d with %q", tc.path, resp.StatusCode, msg, tc.status, tc.want)
		}
	}
	var list adminapi.DecisionList
	if adminDo(t, srv.Admin, http.MethodGet, adminapi.PathDecisions, &list); len(list.Items) != 0 {
		t.Errorf("decisions after refused requests: %+v", list.Items)
	}
}

// TestDecisionsFromAnotherNode hands the node decision tables as the
// cluster delivers them: a newer one is put in effect, an older one is
// not, and one that does not check is refused before it is kept.
func TestDecisionsFromAnotherNode(t *testing.T) {
	srv := startCaddy(t, "", decisionSite)
	app, err := runningApp()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	record := func(key, action string) []byte {
		b, _ := json.Marshal([]opDecision{{Key: adminapi.HashedID(app.keyHashOf(key)), Action: action,
			Created: now.UnixNano(), Expires: now.Add(time.Hour).UnixNano(), Origin: "node-b"}})
		return b
	}
	arrive := app.state.sharedArrived(zap.NewNop())
	arrive(decisionsSharedName, cluster.SharedValue{Value: record("remote-1", "block"), Version: now.UnixNano(), Origin: "node-b"})
	if status := srv.status("/page", "X-API-Key", "remote-1"); status != http.StatusTooManyRequests {
		t.Errorf("blocked on another node: %d; want 429", status)
	}
	arrive(decisionsSharedName, cluster.SharedValue{Value: record("remote-2", "block"), Version: now.UnixNano() - 1, Origin: "node-c"})
	if status := srv.status("/page", "X-API-Key", "remote-1"); status != http.StatusTooManyRequests {
		t.Errorf("an older table replaced a newer one: remote-1 %d; want 429", status)
	}
	if status := srv.status("/page", "X-API-Key", "remote-2"); status != http.StatusOK {
		t.Errorf("an older table was put in effect: remote-2 %d; want 200", status)
	}
	for _, bad := range []string{
		`[{"key": "alice", "action": "block", "created": 1, "expires": 2}]`,
		`[{"key": "h:0000000000000007", "action": "ban", "created": 1, "expires": 2}]`,
		`[{"key": "h:0000000000000007", "action": "block", "created": 2, "expires": 1}]`,
		`{"records": []}`,
	} {
		if err := checkSharedValue(decisionsSharedName, []byte(bad)); err == nil {
			t.Errorf("shared decisions %s: checked; want refused", bad)
		}
	}
	if err := checkSharedValue(decisionsSharedName, record("x", "allow")); err != nil {
		t.Errorf("a good decision table: %v", err)
	}
}

// TestAllowInZonesPastTheInlineArray allows a key in the first and the
// tenth of ten zones: checkDecisions remembers eight zones inline and
// looks the others up again.
func TestAllowInZonesPastTheInlineArray(t *testing.T) {
	var site strings.Builder
	site.WriteString("tollgate {\n")
	for i := range 10 {
		limit := 100
		if i == 0 || i == 9 {
			limit = 1
		}
		site.WriteString("zone z" + strconv.Itoa(i) + " {\nlimit " + strconv.Itoa(limit) + " 1h\nkey {http.request.header.X-API-Key}\n}\n")
	}
	site.WriteString("}\nrespond ok")
	srv := startCaddy(t, "", site.String())
	decide(t, srv, `{"key": "wide", "action": "allow", "zone": "z0"}`)
	decide(t, srv, `{"key": "wide", "action": "allow", "zone": "z9"}`)
	for i := range 5 {
		if status := srv.status("/", "X-API-Key", "wide"); status != http.StatusOK {
			t.Fatalf("allowed in z0 and z9, request %d: %d; want 200", i+1, status)
		}
	}
	decide(t, srv, `{"key": "narrow", "action": "allow", "zone": "z0"}`)
	srv.status("/", "X-API-Key", "narrow")
	if status := srv.status("/", "X-API-Key", "narrow"); status != http.StatusTooManyRequests {
		t.Errorf("allowed in z0 only, 2nd request: %d; want 429 from z9", status)
	}
}

// TestZonesListTheirSettings: GET /tollgate/zones shows each zone's
// limit, window, algorithm and key, a trial zone as one, and the tier
// limits in effect with a run-time override applied.
func TestZonesListTheirSettings(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		tier_from {http.request.header.X-Tier}
		zone api {
			limit 10 1m
			key {http.request.header.X-API-Key}
			tier pro 100
			tier gold 500
		}
		zone trial {
			limit 3 1h
			algorithm token_bucket
			dry_run
		}
	}
	respond ok`)
	if status, body := adminSend(t, srv.Admin, http.MethodPut, adminapi.PathTiers, `{"api": {"pro": 150}}`, nil); status != http.StatusOK {
		t.Fatalf("PUT tiers: %d %s", status, body)
	}
	var list adminapi.ZoneList
	if status, body := adminDo(t, srv.Admin, http.MethodGet, adminapi.PathZones, &list); status != http.StatusOK || len(list.Items) != 2 {
		t.Fatalf("GET %s: %d %s; want two zones", adminapi.PathZones, status, body)
	}
	api, trial := list.Items[0], list.Items[1]
	if api.Zone != "api" || api.Kind != "rate" || api.Limit != 10 || api.Window != 60 || api.Algorithm != "sliding_window" ||
		api.Key != "{http.request.header.X-API-Key}" || api.Trial ||
		len(api.Tiers) != 2 || api.Tiers[0] != (adminapi.TierLimit{Tier: "gold", Limit: 500}) || api.Tiers[1] != (adminapi.TierLimit{Tier: "pro", Limit: 150}) {
		t.Errorf("api: %+v", api)
	}
	if trial.Zone != "trial" || !trial.Trial || trial.Algorithm != "token_bucket" || trial.Key != "{http.tollgate.client_id}" || trial.Tiers != nil {
		t.Errorf("trial: %+v", trial)
	}
}
