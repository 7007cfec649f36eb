package caddymodule

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

const banSite = `
	tollgate {
		zone login {
			limit 2 1s
			algorithm fixed_window
			key {http.request.header.X-User}
			ban 1h
		}
	}
	respond "ok"`

// A key that trips the limit stays out for the ban, across a window
// boundary and a reload, with Retry-After the ban's remaining time; the
// admin API shows the ban and lifts it. Other keys are never banned.
func TestBanKeepsATrippedKeyOut(t *testing.T) {
	srv := startCaddy(t, "", banSite)
	testutil.ClearOfWindowEdge(time.Second, 300*time.Millisecond)
	user := func(name string) int { return srv.status("/", "X-User", name) }
	for i := range 2 {
		if s := user("mallory"); s != http.StatusOK {
			t.Fatalf("request %d within the limit: %d", i+1, s)
		}
	}
	if s := user("mallory"); s != http.StatusTooManyRequests {
		t.Fatalf("the request over the limit: %d, want 429", s)
	}
	// The next window: the limit alone would let it through.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))
	resp := srv.get("/", "X-User", "mallory")
	retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || retry < 3500 || retry > 3600 {
		t.Fatalf("a banned key in the next window: %d, Retry-After %q; want 429 with the ban's ~3600s", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Another key in good standing is not touched.
	if s := user("alice"); s != http.StatusOK {
		t.Fatalf("another key: %d", s)
	}
	// A reload keeps the ban.
	srv.reload("", banSite)
	if s := user("mallory"); s != http.StatusTooManyRequests {
		t.Fatalf("the banned key after a reload: %d, want 429", s)
	}
	if !containsAll(srv.logs(), `"reason":"banned"`) {
		t.Fatal("the log does not say the denial was a ban")
	}
	// The admin API shows it and lifts it.
	var view adminapi.ClientView
	if code, body := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/mallory", &view); code != http.StatusOK || view.Zones[0].BannedFor < 3500 {
		t.Fatalf("client view of the banned key: %d %s", code, body)
	}
	if code, body := adminDo(t, srv.Admin, http.MethodDelete, "/tollgate/clients/mallory", nil); code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if s := user("mallory"); s != http.StatusOK {
		t.Fatalf("the key after DELETE lifted the ban: %d, want 200", s)
	}
	var lifted adminapi.ClientView
	if code, _ := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/mallory", &lifted); code != http.StatusOK || lifted.Zones[0].BannedFor != 0 {
		t.Fatalf("client view after the lift: banned for %d s", lifted.Zones[0].BannedFor)
	}
}

// TestBanDenialsHaveTheirOwnReason: a request refused by a zone's ban is
// counted in tollgate_denials_total with reason ban, not client, so the
// status page and dashboards tell a ban from a spent budget.
func TestBanDenialsHaveTheirOwnReason(t *testing.T) {
	srv := startCaddy(t, "", strings.Replace(banSite, "limit 2 1s", "limit 2 1h", 1))
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	for range 5 { // 2 allowed, the third denied by the limit (and banned), 2 by the ban
		srv.status("/", "X-User", "mallory")
	}
	m := scrape(t, srv.Admin)
	client := m[`tollgate_denials_total{reason="client",scope="login",zone="login"}`]
	ban := m[`tollgate_denials_total{reason="ban",scope="login",zone="login"}`]
	if client != 1 || ban != 2 {
		t.Errorf("denials: client %v, ban %v; want 1 by the limit and 2 by the ban", client, ban)
	}
}
