package caddymodule

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/internal/testutil"
)

// loginUpstream answers 200 to the right password and 401 to any other,
// counting what reached it; X-Cost, if the request asks for it, is
// reported back as the cost.
type loginUpstream struct {
	*httptest.Server
	failures, successes atomic.Int64
}

func newLoginUpstream(t *testing.T) *loginUpstream {
	u := &loginUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c := r.Header.Get("X-Report-Cost"); c != "" {
			w.Header().Set("X-Cost", c)
		}
		if r.Header.Get("X-Password") != "right" {
			u.failures.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		u.successes.Add(1)
		fmt.Fprint(w, "welcome")
	}))
	t.Cleanup(u.Close)
	return u
}

func loginSite(upstream, zone string) string {
	return fmt.Sprintf(`
	tollgate {
		zone login {
			limit 5 15m
			key {http.request.header.X-User}
			count_response {
				status 401 403
			}
			%s
		}
	}
	reverse_proxy %s`, zone, upstream)
}

// login sends one login of user with password, and returns the status.
func login(t *testing.T, srv *testCaddy, user, password string) int {
	t.Helper()
	return srv.status("/login", "X-User", user, "X-Password", password)
}

// Only failed logins count: a user's successful logins never spend its
// budget, however many, while concurrent failures reach the upstream
// exactly as often as the limit allows.
func TestCountResponseCountsOnlyFailedLogins(t *testing.T) {
	up := newLoginUpstream(t)
	srv := startCaddy(t, "", loginSite(up.URL, ""))

	for i := range 4 {
		if s := login(t, srv, "alice", "wrong"); s != http.StatusUnauthorized {
			t.Fatalf("failed login %d: %d, want 401", i+1, s)
		}
	}
	// 4 of 5 spent: 50 successful logins in between are never denied.
	for i := range 50 {
		if s := login(t, srv, "alice", "right"); s != http.StatusOK {
			t.Fatalf("successful login %d after 4 failures: %d, want 200", i+1, s)
		}
	}
	// 16 more failures at concurrency 10: exactly one more reaches it.
	statuses := concurrently(16, 10, func() int { return login(t, srv, "alice", "wrong") })
	if got := up.failures.Load(); got != 5 {
		t.Fatalf("failed logins that reached the upstream: %d, want exactly 5 (statuses %v)", got, statuses)
	}
	if statuses[http.StatusTooManyRequests] != 15 {
		t.Fatalf("statuses of 16 concurrent failures with 1 unit left: %v; want 15 × 429", statuses)
	}
	// Another user is untouched.
	if s := login(t, srv, "bob", "right"); s != http.StatusOK {
		t.Fatalf("another user's login: %d", s)
	}
	if up.successes.Load() != 51 {
		t.Fatalf("successful logins served: %d, want 51", up.successes.Load())
	}
}

// 20 failed logins at concurrency 10 against a fresh key: exactly 5 reach
// the upstream, none of the refused ones slips through.
func TestCountResponseConcurrentFailuresAreExact(t *testing.T) {
	up := newLoginUpstream(t)
	srv := startCaddy(t, "", loginSite(up.URL, ""))
	statuses := concurrently(20, 10, func() int { return login(t, srv, "carol", "wrong") })
	if got := up.failures.Load(); got != 5 {
		t.Fatalf("failed logins that reached the upstream: %d, want exactly 5 (statuses %v)", got, statuses)
	}
	if statuses[http.StatusUnauthorized] != 5 || statuses[http.StatusTooManyRequests] != 15 {
		t.Fatalf("statuses %v; want 5 × 401 and 15 × 429", statuses)
	}
}

// A request whose upstream fails is settled by the status Caddy answers
// (502): it matches count_response only if the zone asks for it.
func TestCountResponseSettlesByTheErrorStatus(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // nothing listens: reverse_proxy answers 502
	for _, tc := range []struct {
		status   string
		denied   bool
		describe string
	}{
		{"401", false, "502s do not match 401: every one is given back"},
		{"5xx", true, "502s match 5xx: the second is denied"},
	} {
		t.Run(tc.status, func(t *testing.T) {
			srv := startCaddy(t, "", fmt.Sprintf(`
	tollgate {
		zone api {
			limit 1 1h
			count_response {
				status %s
			}
		}
	}
	reverse_proxy %s`, tc.status, down.URL))
			testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
			var got []int
			for range 3 {
				got = append(got, srv.status("/"))
			}
			denied := got[1] == http.StatusTooManyRequests
			if got[0] != http.StatusBadGateway || denied != tc.denied {
				t.Fatalf("%s; statuses %v", tc.describe, got)
			}
		})
	}
}

// cost 3 against a limit of 10 admits 3 requests, not 10 and not 1.
func TestCostSpendsItsUnits(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone search {
			limit 10 1h
			cost 3
		}
	}
	respond "ok"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	if n := allowedOf(srv, 10); n != 3 {
		t.Fatalf("requests of cost 3 admitted under a limit of 10: %d, want 3", n)
	}
}

// A cost from a placeholder: a number spends that many units, a cost
// above the limit is denied (never admitted), a cost that is no number
// counts 1, and 0 counts nothing.
func TestCostFromAPlaceholder(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone api {
			limit 10 1h
			key {http.request.header.X-Key}
			cost {http.request.header.X-Cost}
		}
	}
	respond "ok"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	resp := srv.get("/", "X-Key", "a", "X-Cost", "11")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a request costing 11 under a limit of 10: %d, want 429", resp.StatusCode)
	}
	if s := srv.status("/", "X-Key", "a", "X-Cost", "7"); s != http.StatusOK {
		t.Fatalf("a request costing 7 on a fresh key: %d", s)
	}
	for i := range 5 {
		if s := srv.status("/", "X-Key", "a", "X-Cost", "0"); s != http.StatusOK {
			t.Fatalf("free request %d: %d", i, s)
		}
	}
	for i, c := range []string{"abc", "-4", "1"} {
		if s := srv.status("/", "X-Key", "a", "X-Cost", c); s != http.StatusOK {
			t.Fatalf("request %d (cost %q) with %d left: %d", i, c, 3-i, s)
		}
	}
	// 7 + 1 + 1 + 1 = 10: nothing left, not even for a bad cost.
	if s := srv.status("/", "X-Key", "a", "X-Cost", "abc"); s != http.StatusTooManyRequests {
		t.Fatalf("a request with the budget spent: %d, want 429", s)
	}
	if !containsAll(srv.logs(), `"reason":"cost_exceeds_limit"`, "cost rendered something else than a whole number") {
		t.Fatalf("the log does not say why: %s", srv.logs())
	}
}

// cost_header settles the cost the upstream reports: less is given back,
// more is charged, and what the key has left is what the admin API shows.
func TestCostHeaderRefundsAndCharges(t *testing.T) {
	up := newLoginUpstream(t)
	srv := startCaddy(t, "", fmt.Sprintf(`
	tollgate {
		zone api {
			limit 10 1h
			key {http.request.header.X-User}
			cost 3
			cost_header X-Cost
		}
	}
	reverse_proxy %s`, up.URL))
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	remaining := func() int64 {
		var view adminapi.ClientView
		if code, body := adminDo(t, srv.Admin, http.MethodGet, "/tollgate/clients/dave", &view); code != http.StatusOK {
			t.Fatalf("client view: %d %s", code, body)
		}
		return view.Zones[0].Remaining
	}
	send := func(cost string) int {
		return srv.status("/", "X-User", "dave", "X-Password", "right", "X-Report-Cost", cost)
	}
	for _, step := range []struct {
		report string
		left   int64
	}{
		{"1", 9},  // 3 taken, 2 given back
		{"3", 6},  // as taken
		{"5", 1},  // 3 taken, 2 more charged
		{"", 1},   // (not sent: a request of cost 3 with 1 left is denied)
		{"40", 0}, // not sent either
	} {
		if step.report == "" {
			if s := send("1"); s != http.StatusTooManyRequests {
				t.Fatalf("a request of cost 3 with 1 left: %d, want 429", s)
			}
			continue
		}
		if step.report == "40" {
			break
		}
		if s := send(step.report); s != http.StatusOK {
			t.Fatalf("request reporting cost %s: %d", step.report, s)
		}
		if got := remaining(); got != step.left {
			t.Fatalf("after a request reporting cost %s: %d left, want %d", step.report, got, step.left)
		}
	}
	// A charge beyond what remains leaves the key exhausted, not owing
	// more than the charge: a fresh key charged 40 at a limit of 10.
	if s := srv.status("/", "X-User", "erin", "X-Password", "right", "X-Report-Cost", "40"); s != http.StatusOK {
		t.Fatalf("first request of erin: %d", s)
	}
	if s := srv.status("/", "X-User", "erin", "X-Password", "right", "X-Report-Cost", "1"); s != http.StatusTooManyRequests {
		t.Fatalf("erin after a charge past the limit: %d, want 429", s)
	}
}

// concurrently runs f n times, at most par at once, and counts the
// statuses it returned.
func concurrently(n, par int, f func() int) map[int]int {
	var mu sync.Mutex
	got := map[int]int{}
	sem := make(chan struct{}, par)
	var start, wg sync.WaitGroup
	start.Add(1)
	for range n {
		wg.Go(func() {
			start.Wait()
			sem <- struct{}{}
			s := f()
			<-sem
			mu.Lock()
			got[s]++
			mu.Unlock()
		})
	}
	start.Done()
	wg.Wait()
	return got
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// BenchmarkServeCountResponse runs requests with session cookies through
// Caddy in process, as BenchmarkServe does, against a zone that counts
// every request and the same zone with count_response (every response a
// 200 that does not match: every request is given back), so the cost of
// settling shows beside the default path: allocations must be equal.
func BenchmarkServeCountResponse(b *testing.B) {
	plainPort, settledPort := freePort(b), freePort(b)
	startCaddy(b, "", `respond "ok"`) // admin, storage and logs
	cfg := adapt(b, fmt.Sprintf(`{
	admin off
	persist_config off
	auto_https off
	log {
		output discard
	}
}
http://127.0.0.1:%d {
	tollgate {
		zone site {
			limit 1000000000 1h
		}
	}
	respond "ok"
}
http://127.0.0.1:%d {
	tollgate {
		zone site {
			limit 1000000000 1h
			count_response {
				status 401
			}
		}
	}
	respond "ok"
}
`, plainPort, settledPort))
	servers, identifier := loadInProcess(b, cfg)
	for _, run := range []struct {
		name string
		port int
	}{{"counted", plainPort}, {"count_response", settledPort}} {
		srv := serverOn(b, servers, run.port)
		b.Run(run.name, func(b *testing.B) {
			reqs := make([]*http.Request, benchClients)
			for i := range reqs {
				r := httptest.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", run.port), nil)
				r.RemoteAddr = fmt.Sprintf("198.51.%d.%d:40000", i/256, i%256)
				r.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:140.0) Gecko/20100101 Firefox/140.0")
				sess, _ := fingerprint.NewSession(time.Now())
				r.AddCookie(identifier.Cookie(sess, time.Now(), false))
				reqs[i] = r
			}
			w := &discardWriter{header: make(http.Header)}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				clear(w.header)
				srv.ServeHTTP(w, reqs[i%len(reqs)])
				i++
			}
			if w.status != http.StatusOK {
				b.Fatalf("last status %d", w.status)
			}
		})
	}
}
