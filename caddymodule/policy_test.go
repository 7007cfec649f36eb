package caddymodule

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

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

func allowedOf(srv *testCaddy, n int, headers ...string) int {
	ok := 0
	for range n {
		if srv.status("/", headers...) == http.StatusOK {
			ok++
		}
	}
	return ok
}

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

// slowUpstream is a backend whose requests wait until released, and that
// counts how many are in flight at once.
type slowUpstream struct {
	*httptest.Server
	inFlight, peak atomic.Int64
	release        chan struct{}
}

func newSlowUpstream(t *testing.T) *slowUpstream {
	u := &slowUpstream{release: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.inFlight.Add(1)
		for {
			p := u.peak.Load()
			if n <= p || u.peak.CompareAndSwap(p, n) {
				break
			}
		}
		select {
		case <-u.release:
		case <-r.Context().Done():
		}
		u.inFlight.Add(-1)
		fmt.Fprint(w, "done")
	}))
	t.Cleanup(u.Close)
	return u
}

// proxiedLeaseSite is a site with one lease zone, streams, whose settings
// are zone, in front of the upstream at url; after follows the proxy.
func proxiedLeaseSite(url, zone, after string) string {
	return fmt.Sprintf(`
	tollgate {
		zone streams {
			%s
		}
	}
	reverse_proxy %s
	%s`, zone, strings.TrimPrefix(url, "http://"), after)
}

func TestLeasesCapConcurrentRequests(t *testing.T) {
	up := newSlowUpstream(t)
	srv := startCaddy(t, "", proxiedLeaseSite(up.URL, "concurrent 5\nkey {http.request.header.X-User}", ""))

	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	for range 50 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
			req.Header.Set("X-User", "eve")
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				admitted.Add(1)
			} else if resp.StatusCode == http.StatusTooManyRequests {
				denied.Add(1)
			}
		})
	}
	testutil.Eventually(t, 5*time.Second, "5 requests in flight and 45 denied", func() bool {
		return up.inFlight.Load() == 5 && denied.Load() == 45
	})
	close(up.release)
	wg.Wait()
	if up.peak.Load() != 5 || admitted.Load() != 5 {
		t.Fatalf("peak in flight %d, admitted %d; want 5 and 5", up.peak.Load(), admitted.Load())
	}
	// All slots are free again once the responses ended.
	if got := allowedOf(srv, 5, "X-User", "eve"); got != 5 {
		t.Fatalf("after the long requests ended: %d of 5 allowed", got)
	}
}

func TestDisconnectFreesItsSlot(t *testing.T) {
	up := newSlowUpstream(t)
	defer close(up.release)
	srv := startCaddy(t, "", proxiedLeaseSite(up.URL, "concurrent 1", `handle_errors 429 {
		respond "{http.error.message}" 429
	}`))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/", nil)
		http.DefaultClient.Do(req)
	}()
	testutil.Eventually(t, 5*time.Second, "the first request holding the slot", func() bool { return up.inFlight.Load() == 1 })
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(string(body), `concurrency limit of zone "streams" reached`) {
		t.Fatalf("a second request while the slot is held: %d, Retry-After %q, %q; want 429, 1 and the reason",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	cancel() // the client goes away
	testutil.Eventually(t, 5*time.Second, "the slot freed by the disconnect", func() bool {
		ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel2()
		req, _ := http.NewRequestWithContext(ctx2, http.MethodGet, srv.URL+"/", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return up.inFlight.Load() == 1 // admitted, and now waiting upstream
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func TestNamedLeasesReconnectAtTheCapAndExpire(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone rooms {
			concurrent 2
			key {http.request.header.X-User}
			lease {http.request.header.X-Room}
			ttl 1s
		}
	}
	respond "ok"`)
	room := func(name string) int { return srv.status("/", "X-User", "fay", "X-Room", name) }
	if room("a") != 200 || room("b") != 200 {
		t.Fatal("two rooms under a cap of 2 denied")
	}
	if s := room("c"); s != http.StatusTooManyRequests {
		t.Fatalf("a third room: %d; want 429", s)
	}
	if s := room("a"); s != http.StatusOK {
		t.Fatalf("reconnecting to a held room at the cap: %d; want 200", s)
	}
	// Not refreshed, the leases expire and their slots free themselves.
	testutil.Eventually(t, 5*time.Second, "room c admitted once the leases expired", func() bool { return room("c") == http.StatusOK })
	var cv adminapi.ClientView
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/fay?zone=rooms", &cv)
	if len(cv.Zones) != 1 || len(cv.Zones[0].Leases) < 1 || cv.Zones[0].Limit != 2 {
		t.Fatalf("client view of the lease zone: %+v", cv.Zones)
	}
}

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

func TestStateSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	site := `
	tollgate {
		zone api {
			limit 5 1h
			key {http.request.header.X-User}
		}
		zone rooms {
			concurrent 1
			key {http.request.header.X-User}
			lease {http.request.header.X-Room}
		}
	}
	respond "{http.tollgate.client_id}"`
	srv := startCaddyWith(t, caddyOptions{dir: dir}, "", site)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	for range 7 {
		srv.get("/", "X-User", "hal") // 5 allowed, 2 denials
	}
	_, clientID := srv.body("/", "X-User", "ivy")
	srv.get("/", "X-User", "hal", "X-Room", "lobby")
	postGrant(t, srv, `{"zone":"api","key":"ivy","amount":3,"duration":"1h"}`)

	caddyStop(t) // writes the snapshot
	srv = startCaddyWith(t, caddyOptions{dir: dir}, "", site)
	if s := srv.status("/", "X-User", "hal"); s != http.StatusTooManyRequests {
		t.Errorf("hal after a restart: %d; want still limited", s)
	}
	var cv adminapi.ClientView
	adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/"+clientID, &cv)
	if cv.Reputation == nil || *cv.Reputation > 98 {
		t.Errorf("the client's reputation after a restart: %v; want the denials remembered", cv.Reputation)
	}
	if s := srv.status("/", "X-User", "hal", "X-Room", "kitchen"); s != http.StatusTooManyRequests {
		t.Errorf("a second room after a restart: %d; want the lease on lobby kept", s)
	}
	var g adminapi.GrantView
	if status, body := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/grants/api/ivy", &g); status != http.StatusOK || g.Amount != 3 {
		t.Errorf("ivy's grant after a restart: %d %s", status, body)
	}
}

// upgradeUpstream is a backend that switches every request to an echo
// protocol and keeps the connection until the client closes it.
func upgradeUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		buf.Flush()
		io.Copy(conn, buf)
	}))
	t.Cleanup(up.Close)
	return up
}

func TestAnUpgradedConnectionHoldsItsSlotUntilItCloses(t *testing.T) {
	up := upgradeUpstream(t)
	srv := startCaddy(t, "", proxiedLeaseSite(up.URL, "concurrent 1\nkey {http.request.header.X-User}", ""))
	addr := strings.TrimPrefix(srv.URL, "http://")

	// open sends an upgrade request and returns the connection and the
	// status line's code.
	open := func() (net.Conn, int) {
		t.Helper()
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "GET /socket HTTP/1.1\r\nHost: %s\r\nX-User: gus\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", addr)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		return conn, resp.StatusCode
	}
	first, status := open()
	if status != http.StatusSwitchingProtocols {
		t.Fatalf("the first upgrade: %d", status)
	}
	// The tunnel works, and holds the only slot.
	fmt.Fprint(first, "ping")
	got := make([]byte, 4)
	if _, err := io.ReadFull(first, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo through the tunnel: %q %v", got, err)
	}
	second, status := open()
	second.Close()
	if status != http.StatusTooManyRequests {
		t.Fatalf("a second upgrade while the first is open: %d; want 429", status)
	}
	first.Close()
	testutil.Eventually(t, 5*time.Second, "the slot freed when the tunnel closed", func() bool {
		conn, status := open()
		conn.Close()
		return status == http.StatusSwitchingProtocols
	})
}

func TestALongRequestKeepsItsSlotPastTheTTL(t *testing.T) {
	up := newSlowUpstream(t)
	srv := startCaddy(t, "", proxiedLeaseSite(up.URL, "concurrent 1\nttl 1s", ""))
	done := make(chan int, 1)
	go func() { done <- srv.status("/") }()
	testutil.Eventually(t, 5*time.Second, "the first request holding the slot", func() bool { return up.inFlight.Load() == 1 })
	// Three TTLs on, the lease has been renewed while the request lives.
	time.Sleep(3 * time.Second)
	if s := srv.status("/"); s != http.StatusTooManyRequests {
		t.Fatalf("a second request three TTLs into the first: %d; want 429", s)
	}
	close(up.release)
	if s := <-done; s != http.StatusOK {
		t.Fatalf("the long request: %d", s)
	}
	if s := srv.status("/"); s != http.StatusOK {
		t.Fatalf("after the long request ended: %d; want its slot free", s)
	}
}
