package caddymodule

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// TestClientViewShowsTheKeysOwnLimit: GET /tollgate/clients/{id} shows the
// limit the key actually has, as the RateLimit headers do: its tier's
// (?tier=; the default tier's without it), scaled by its reputation, with
// what remains of that; the zone's configured limit stays beside it.
func TestClientViewShowsTheKeysOwnLimit(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		reputation {
			penalty 30
		}
	}`, `
	tollgate {
		tier_from {http.request.header.X-User-Tier}
		zone api {
			limit 20 1h
			key {http.request.header.X-API-Key}
			tier pro 200
			match {
				path /api
			}
		}
		zone strict {
			limit 1 1h
			match {
				path /strict
			}
		}
		zone site {
			limit 20 1h
			match {
				not path /api
			}
		}
	}
	respond "ok"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)

	srv.get("/api", "X-API-Key", "k-pro", "X-User-Tier", "pro")
	zoneOf := func(path string) adminapi.ZoneView {
		t.Helper()
		var view adminapi.ClientView
		if status, body := adminSend(t, srv.Admin, http.MethodGet, path, "", &view); status != http.StatusOK || len(view.Zones) != 1 {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		return view.Zones[0]
	}
	if z := zoneOf("/tollgate/clients/k-pro?zone=api&tier=pro"); z.Limit != 200 || z.Remaining != 199 || z.ZoneLimit != 20 {
		t.Errorf("pro key, asked as pro: limit %d, remaining %d, zone limit %d; want 200, 199, 20", z.Limit, z.Remaining, z.ZoneLimit)
	}
	if z := zoneOf("/tollgate/clients/k-pro?zone=api"); z.Limit != 20 || z.Remaining != 19 {
		t.Errorf("pro key, asked for the default tier: limit %d, remaining %d; want 20, 19", z.Limit, z.Remaining)
	}
	status, body := adminSend(t, srv.Admin, http.MethodGet, "/tollgate/clients/k-pro?tier=p%20p", "", nil)
	if status != http.StatusBadRequest || !strings.Contains(body, `tier name \"p p\"`) {
		t.Errorf("?tier=p p: %d %s; want 400 naming the tier", status, body)
	}

	// A client at reputation factor 0.6 has 12 of the site's 20, as its
	// headers say (see TestHeadersShowTheReputationScaledLimit).
	bad := newClient(t, srv, "bad", "203.0.113.10", false)
	bad.get("/strict")
	bad.get("/strict")
	bad.get("/")
	var denied adminapi.DeniedList
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/denied?zone=strict", &denied)
	if len(denied.Items) != 1 {
		t.Fatalf("denied in strict: %+v; want the bad client", denied.Items)
	}
	z := zoneOf("/tollgate/clients/" + denied.Items[0].Key + "?zone=site")
	if z.Limit != 12 || z.Remaining != 10 || z.ZoneLimit != 20 {
		t.Errorf("client at factor 0.6: limit %d, remaining %d, zone limit %d; want 12, 10, 20", z.Limit, z.Remaining, z.ZoneLimit)
	}
}
