package caddymodule

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// TestDecisionsByNetwork: an operator blocks a network by the ID the status
// page and the denied list show (n:…, {http.tollgate.network}): every
// request from it is denied, whatever its key, while other networks pass;
// lifted, it passes again. A network allowed in one zone skips that zone's
// limit. Only the network's hashed ID is kept.
func TestDecisionsByNetwork(t *testing.T) {
	srv := startCaddy(t, trustLoopback, strings.Replace(decisionSite, `respond "ok {http.tollgate.source}"`,
		`respond "ok {http.tollgate.source} {http.tollgate.network}"`, 1))
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	from := func(ip, key, path string) (int, string) {
		return srv.body(path, "X-Forwarded-For", ip, "X-API-Key", key)
	}
	_, body := from("203.0.113.50", "k1", "/page")
	netA := body[strings.LastIndex(body, " ")+1:]
	if _, ok := adminapi.ParseNetworkID(netA); !ok {
		t.Fatalf("the network placeholder rendered %q", body)
	}

	withSession := newClient(t, srv, "Browser/1", "203.0.113.50", true)
	if resp, _ := withSession.get("/page"); resp.Header.Get("Set-Cookie") == "" {
		t.Fatal("the browser got no session")
	}

	made := decide(t, srv, `{"key": "`+netA+`", "action": "block", "reason": "a scanner's network"}`)
	if made.Decision.Key != netA {
		t.Errorf("the decision names %q; want the network %s", made.Decision.Key, netA)
	}
	for _, key := range []string{"k1", "k2", ""} {
		if status, body := from("203.0.113.50", key, "/page"); status != http.StatusTooManyRequests {
			t.Errorf("key %q from the blocked network: %d %q; want 429", key, status, body)
		}
	}
	if resp, _ := withSession.get("/page"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a session from the blocked network: %d; want 429", resp.StatusCode)
	}
	if status, body := from("198.51.100.7", "k1", "/page"); status != http.StatusOK {
		t.Errorf("k1 from another network: %d %q; want 200", status, body)
	}
	var list adminapi.DecisionList
	adminDo(t, srv.Admin, http.MethodGet, adminapi.PathDecisions, &list)
	if len(list.Items) != 1 || list.Items[0].Key != netA || list.Items[0].Reason != "a scanner's network" {
		t.Errorf("decisions: %+v; want the network's block", list.Items)
	}
	if status, body := adminSend(t, srv.Admin, http.MethodDelete, adminapi.PathDecision+netA, "", nil); status != http.StatusOK {
		t.Fatalf("DELETE the network's decision: %d %s", status, body)
	}
	if status, body := from("203.0.113.50", "k2", "/page"); status != http.StatusOK {
		t.Errorf("after the block is lifted: %d %q; want 200", status, body)
	}

	// An office allowed in api: its requests there skip the limit of 3.
	decide(t, srv, `{"key": "`+netA+`", "action": "allow", "zone": "api", "reason": "the office"}`)
	for i := range 5 {
		if status, body := from("203.0.113.50", "k3", "/api/x"); status != http.StatusOK {
			t.Fatalf("request %d of the allowed network in api: %d %q; want 200", i+1, status, body)
		}
	}
	denied := 0
	for range 5 {
		if status, _ := from("198.51.100.7", "k4", "/api/x"); status == http.StatusTooManyRequests {
			denied++
		}
	}
	if denied != 2 {
		t.Errorf("k4 from another network: %d of 5 denied; want 2 (api's limit is 3)", denied)
	}
	if strings.Contains(srv.logs(), "203.0.113.50") {
		t.Error("the raw address reached the log")
	}
}
