package caddymodule

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/tollgate/tollgate/fingerprint"
)

// passThrough is the least a Caddy middleware can be: it calls the next
// handler. Caddy wraps every middleware of a route in a closure for each
// request, so any handler, this one included, costs one allocation more
// than a route without it; TestServeAllocations measures Tollgate against
// it, so that the count is Tollgate's own.
type passThrough struct{}

func init() {
	caddy.RegisterModule(passThrough{})
	httpcaddyfile.RegisterHandlerDirective("tollgate_test_pass", func(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
		h.Next()
		return passThrough{}, nil
	})
	httpcaddyfile.RegisterDirectiveOrder("tollgate_test_pass", httpcaddyfile.Before, "respond")
}

func (passThrough) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.tollgate_test_pass",
		New: func() caddy.Module { return passThrough{} },
	}
}

func (passThrough) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	return next.ServeHTTP(w, r)
}

func (passThrough) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	return nil
}

// TestServeAllocations pins what a request that a zone lets through
// allocates on the heap, against the same site behind the cheapest
// middleware Caddy can run, in the same process: Tollgate's own share is
// the verdict that serves the {http.tollgate.*} placeholders, and nothing
// else, for a client that keeps its session cookie and for one that keeps
// none. The counts are Go's own (testing.AllocsPerRun), not times.
func TestServeAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Caddy")
	}
	if raceDetector {
		t.Skip("the race detector's sync.Pool drops what is put back: the counts would not be the program's")
	}
	plainPort, passPort, gatedPort := freePort(t), freePort(t), freePort(t)
	startCaddy(t, "", `respond "ok"`) // admin, storage and logs, as BenchmarkServe
	cfg := adapt(t, fmt.Sprintf(`{
	admin off
	persist_config off
	auto_https off
	log {
		output discard
	}
}
http://127.0.0.1:%d {
	respond "ok"
}
http://127.0.0.1:%d {
	tollgate_test_pass
	respond "ok"
}
http://127.0.0.1:%d {
	tollgate {
		zone site {
			limit 1000000000 1h
		}
	}
	respond "ok"
}
`, plainPort, passPort, gatedPort))
	servers, identifier := loadInProcess(t, cfg)

	allocs := func(port int, withSession bool) float64 {
		t.Helper()
		srv := serverOn(t, servers, port)
		r := httptest.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", port), nil)
		r.RemoteAddr = "198.51.100.7:40000"
		r.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:140.0) Gecko/20100101 Firefox/140.0")
		r.Header.Set("Accept-Language", "en-GB,en;q=0.5")
		if withSession {
			sess, _ := fingerprint.NewSession(time.Now())
			r.AddCookie(identifier.Cookie(sess, time.Now(), false))
		}
		w := &discardWriter{header: make(http.Header)}
		serve := func() {
			clear(w.header)
			srv.ServeHTTP(w, r)
		}
		// A client without a cookie is given sessions until its minting
		// budget refuses it; from then on it is the wrk-like client, which
		// is what is measured.
		for range 100 {
			serve()
		}
		n := testing.AllocsPerRun(1000, serve)
		if w.status != http.StatusOK {
			t.Fatalf("port %d: status %d", port, w.status)
		}
		return n
	}
	// offered counts the second visits of cookie-less clients, each on an
	// address of its own: each is offered a new session again (their
	// first visits made their counters, which any new client costs).
	offered := func() float64 {
		t.Helper()
		srv := serverOn(t, servers, gatedPort)
		reqs := make([]*http.Request, 1001) // AllocsPerRun's warm-up, then 1000
		for i := range reqs {
			reqs[i] = httptest.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", gatedPort), nil)
			reqs[i].RemoteAddr = fmt.Sprintf("203.0.%d.%d:40000", i/256, i%256)
			reqs[i].Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:140.0) Gecko/20100101 Firefox/140.0")
		}
		w := &discardWriter{header: make(http.Header)}
		for _, r := range reqs {
			srv.ServeHTTP(w, r)
		}
		next, withCookie := 0, 0
		n := testing.AllocsPerRun(1000, func() {
			clear(w.header)
			srv.ServeHTTP(w, reqs[next])
			next++
			if w.header.Get("Set-Cookie") != "" {
				withCookie++
			}
		})
		if withCookie != len(reqs) {
			t.Fatalf("%d of %d second visits offered a session; want all", withCookie, len(reqs))
		}
		return n
	}
	plain, pass := allocs(plainPort, false), allocs(passPort, false)
	session, cookieless := allocs(gatedPort, true), allocs(gatedPort, false)
	newSession := offered()
	t.Logf("allocations per request: plain %.0f, a pass-through middleware %.0f, tollgate with a session %.0f, tollgate without a cookie %.0f, offered a session %.0f",
		plain, pass, session, cookieless, newSession)
	if newSession > pass+2 {
		t.Errorf("a request offered a new session allocates %.0f times, %.0f more than behind a pass-through middleware; want at most 2 (the verdict and the Set-Cookie value)", newSession, newSession-pass)
	}
	const own = 1 // the verdict
	if session > pass+own {
		t.Errorf("a request with a session allocates %.0f times, %.0f more than behind a pass-through middleware; want at most %d", session, session-pass, own)
	}
	if cookieless > pass+own {
		t.Errorf("a request without a cookie allocates %.0f times, %.0f more than behind a pass-through middleware; want at most %d", cookieless, cookieless-pass, own)
	}
}
