package caddymodule

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

func TestReputationThroughCaddy(t *testing.T) {
	srv := startCaddy(t, `	tollgate {
		reputation {
			penalty 20
			recovery 1
		}
	}`, `
	tollgate {
		zone api {
			limit 2 1h
			key {http.request.header.X-User}
		}
	}
	respond "{http.tollgate.client_id} {http.tollgate.reputation}"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	var clientID string
	for range 2 {
		_, body := srv.body("/", "X-User", "gus")
		clientID, _, _ = strings.Cut(body, " ")
	}
	for range 2 {
		srv.get("/", "X-User", "gus") // two denials: 100 → 60
	}
	var rv adminapi.ReputationView
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/reputation", &rv)
	if !rv.Enabled || len(rv.Buckets) != 4 || rv.Buckets[1].Clients != 1 || rv.Buckets[1].From != 50 {
		t.Fatalf("reputation view %+v; want one client in the 50–74 bucket", rv)
	}
	// Reputation belongs to the client (its client ID), whatever the
	// zones count by.
	var cv adminapi.ClientView
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/"+clientID, &cv)
	if cv.Reputation == nil || *cv.Reputation != 60 {
		t.Fatalf("client %s reputation %v; want 60", clientID, cv.Reputation)
	}
	m := scrape(t, srv.Admin)
	if m[`tollgate_reputation_clients{bucket="50"}`] != 1 {
		t.Errorf("reputation metric: %v", m[`tollgate_reputation_clients{bucket="50"}`])
	}
	// Resetting the client clears its reputation with its counters.
	if status, body := adminDo(t, srv.Admin, http.MethodDelete, "/tollgate/clients/"+clientID, nil); status != http.StatusOK {
		t.Fatalf("DELETE client: %d %s", status, body)
	}
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/"+clientID, &cv)
	if cv.Reputation == nil || *cv.Reputation != 100 {
		t.Fatalf("reputation after a reset: %v; want 100", cv.Reputation)
	}
}
