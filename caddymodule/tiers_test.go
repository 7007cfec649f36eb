package caddymodule

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/internal/testutil"
)

// Tables from other nodes are ordered by the shared value's version, the
// one every node agrees on, whatever the clock of the node that made them.
func TestTierTablesFollowTheSharedVersion(t *testing.T) {
	var s state
	arrived := s.sharedArrived(zap.NewNop())
	arrived(tiersSharedName, cluster.SharedValue{Value: []byte(`{"api": {"pro": 5}}`), Version: 100, Origin: "a"})
	if n, ok := s.tiers.load().get("api", "pro"); !ok || n != 5 {
		t.Fatalf("first table: %d %v", n, ok)
	}
	// A node whose clock is behind made the next change: the shared layer
	// still gave it a later version, and that is what orders it.
	next := (&tierTable{Zones: map[string]map[string]int64{"api": {"pro": 9}}, Version: 101, Origin: "b"}).sharedValue()
	arrived(tiersSharedName, next)
	if n, _ := s.tiers.load().get("api", "pro"); n != 9 {
		t.Fatalf("a newer shared version was not put in effect: pro is %d", n)
	}
	// An older one arriving late changes nothing.
	arrived(tiersSharedName, cluster.SharedValue{Value: []byte(`{"api": {"pro": 1}}`), Version: 99, Origin: "c"})
	if n, _ := s.tiers.load().get("api", "pro"); n != 9 {
		t.Fatalf("an older shared version replaced a newer one: pro is %d", n)
	}
}

const tierSite = `
	tollgate {
		tier_from {http.request.header.X-User-Tier}
		zone credits {
			limit 3 1h
			key {http.request.header.X-User}
			tier pro 5
		}
	}
	respond "{http.tollgate.tier} {http.tollgate.remaining}"`

func TestTiersGiveTheirLimits(t *testing.T) {
	srv := startCaddy(t, "", tierSite)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	for _, tc := range []struct {
		user, tier string
		want       int
	}{
		{"ann", "pro", 5},
		{"bob", "", 3},
		{"cat", "platinum", 3}, // unknown tier: the zone's own limit
	} {
		if got := allowedOf(srv, 8, "X-User", tc.user, "X-User-Tier", tc.tier); got != tc.want {
			t.Errorf("tier %q: %d of 8 allowed; want %d", tc.tier, got, tc.want)
		}
	}
}

func TestTiersChangeAtRunTimeAndWinOverReloads(t *testing.T) {
	srv := startCaddy(t, "", tierSite)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	allowedOf(srv, 5, "X-User", "ann", "X-User-Tier", "pro") // ann spends 5 of 5

	put := func(body string) (int, string) {
		return adminSend(t, srv.Admin, http.MethodPut, "/tollgate/tiers", body, nil)
	}
	if status, body := put(`{"credits": {"pro": 8}}`); status != http.StatusOK {
		t.Fatalf("PUT tiers: %d %s", status, body)
	}
	if got := allowedOf(srv, 5, "X-User", "ann", "X-User-Tier", "pro"); got != 3 {
		t.Fatalf("after raising pro to 8 with 5 spent: %d more allowed; want 3", got)
	}
	var view adminapi.TiersView
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/tiers", &view)
	credits := view.Zones["credits"]
	if credits.Caddyfile["pro"] != 5 || credits.Overrides["pro"] != 8 || credits.Effective["pro"] != 8 || credits.Default != 3 {
		t.Fatalf("tiers view %+v", credits)
	}

	// Bad input changes nothing.
	for body, want := range map[string]string{
		`{"nosuch": {"pro": 1}}`:        `unknown zone \"nosuch\"`,
		`{"credits": {"pro": -2}}`:      "tier pro -2: must be a whole number",
		`{"credits": {"p p": 2}}`:       `tier name \"p p\"`,
		`{"credits": {"gold": 2}}`:      `unknown tier \"gold\": the config names pro`,
		`{"credits": {"pro": "lots"}}`:  "want a whole number",
		`{"credits": `:                  "malformed JSON body",
		`{"credits": {"pro": 9}} extra`: "malformed JSON body",
	} {
		if status, got := put(body); status != http.StatusBadRequest || !strings.Contains(got, want) {
			t.Errorf("PUT %s: %d %s; want 400 with %q", body, status, got, want)
		}
	}
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/tiers", &view)
	if view.Zones["credits"].Effective["pro"] != 8 {
		t.Fatalf("a rejected PUT changed the tiers: %+v", view.Zones["credits"])
	}

	// A reload of the Caddyfile does not undo it, and says so in the log.
	// (An identical config is not reloaded at all, so change the response.)
	srv.reload("", strings.Replace(tierSite, `respond "`, `respond "reloaded `, 1))
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/tiers", &view)
	if view.Zones["credits"].Effective["pro"] != 8 {
		t.Fatalf("a reload undid the run-time tier: %+v", view.Zones["credits"])
	}
	if !strings.Contains(srv.logs(), "a tier limit set through the admin API overrides the config") {
		t.Errorf("the reload did not warn about the override:\n%s", srv.logs())
	}
	// DELETE returns to the Caddyfile's.
	adminDo(t, srv.Admin, http.MethodDelete, "/tollgate/tiers", &view)
	if view.Zones["credits"].Effective["pro"] != 5 || len(view.Zones["credits"].Overrides) != 0 {
		t.Fatalf("after DELETE: %+v", view.Zones["credits"])
	}
}

// A tier table with a limit below 1 is refused wherever it enters from
// another node or from storage: no engine ever sees a limit of 0.
func TestTierTablesWithALimitBelowOneAreRefused(t *testing.T) {
	for _, raw := range []string{`{"api":{"pro":0}}`, `{"api":{"pro":-3}}`, `not json`} {
		if err := checkSharedValue(tiersSharedName, []byte(raw)); err == nil {
			t.Errorf("%s accepted", raw)
		}
	}
	if err := checkSharedValue(tiersSharedName, []byte(`{"api":{"pro":1}}`)); err != nil {
		t.Errorf("a limit of 1 refused: %v", err)
	}
}

// The default tier (requests with no tier, or one the zone does not list)
// is changed at run time as `default`, like any tier; the Caddyfile cannot
// declare a tier of that name.
func TestTheDefaultTierChangesAtRunTime(t *testing.T) {
	srv := startCaddy(t, "", tierSite)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	status, body := adminSend(t, srv.Admin, http.MethodPut, "/tollgate/tiers", `{"credits": {"default": 6}}`, nil)
	if status != http.StatusOK {
		t.Fatalf("PUT the default tier: %d %s", status, body)
	}
	for _, tc := range []struct {
		user, tier string
		want       int
	}{
		{"ann", "pro", 5},      // a listed tier keeps its own
		{"bob", "", 6},         // no tier
		{"cat", "platinum", 6}, // unknown tier
	} {
		if got := allowedOf(srv, 8, "X-User", tc.user, "X-User-Tier", tc.tier); got != tc.want {
			t.Errorf("tier %q with default=6: %d of 8 allowed; want %d", tc.tier, got, tc.want)
		}
	}
	var view adminapi.TiersView
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/tiers", &view)
	if c := view.Zones["credits"]; c.Default != 3 || c.Overrides["default"] != 6 || c.Effective["default"] != 6 {
		t.Errorf("tiers view after default=6: %+v", c)
	}
	// An unknown name says how the default is set.
	_, body = adminSend(t, srv.Admin, http.MethodPut, "/tollgate/tiers", `{"credits": {"free": 6}}`, nil)
	if !strings.Contains(body, `unknown tier \"free\"`) || !strings.Contains(body, "default=") {
		t.Errorf("PUT an unknown tier: %s; want it to name the default", body)
	}
}
