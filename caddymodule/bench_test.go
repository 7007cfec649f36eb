package caddymodule

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/tollgate/tollgate/fingerprint"
)

// BenchmarkServe runs requests through Caddy's whole HTTP pipeline in
// process, without the network, from 10,000 clients on as many IPs, each
// with a browser's headers: a plain `respond` site; the same site behind a
// tollgate zone that never triggers, with clients that keep their session
// cookie (browsers) and clients that never do (the worst case: every request
// is fingerprinted, watched for IP pressure and, on a client's first visits
// of the hour, offered a new session), the same once each of them has had
// every session it may start this hour (refused: the steady state); one
// client that never keeps a cookie, on one address (wrk, curl, a script);
// and, for reference, behind a middleware that only calls the next handler
// (pass: the floor of any middleware in Tollgate's place) and behind `vars`
// (about the cheapest middleware Caddy ships). The ratio
// of plain to tollgate is the share of Caddy's throughput Tollgate keeps
// before any network cost; bench/load.sh measures it with the network.
func BenchmarkServe(b *testing.B) {
	plainPort, gatedPort, varsPort, passPort := freePort(b), freePort(b), freePort(b), freePort(b)
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
http://127.0.0.1:%d {
	vars x y
	respond "ok"
}
http://127.0.0.1:%d {
	tollgate_test_pass
	respond "ok"
}
`, plainPort, gatedPort, varsPort, passPort))
	servers, identifier := loadInProcess(b, cfg)
	for _, run := range []struct {
		name    string
		port    int
		cookies bool
		clients int
		refused bool // each client has had every session it may start this hour
	}{
		{"plain", plainPort, false, benchClients, false},
		{"pass", passPort, false, benchClients, false},
		{"vars", varsPort, false, benchClients, false},
		{"tollgate", gatedPort, true, benchClients, false},
		{"tollgate_cookieless", gatedPort, false, benchClients, false},
		{"tollgate_cookieless_refused", gatedPort, false, benchClients, true},
		{"tollgate_cookieless_one", gatedPort, false, 1, false},
	} {
		srv := serverOn(b, servers, run.port)
		b.Run(run.name, func(b *testing.B) {
			reqs := make([]*http.Request, run.clients)
			for i := range reqs {
				r := httptest.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", run.port), nil)
				r.RemoteAddr = fmt.Sprintf("198.51.%d.%d:40000", i/256, i%256)
				r.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:140.0) Gecko/20100101 Firefox/140.0")
				r.Header.Set("Accept-Language", "en-GB,en;q=0.5")
				if run.cookies {
					sess, _ := fingerprint.NewSession(time.Now())
					r.AddCookie(identifier.Cookie(sess, time.Now(), false))
				}
				reqs[i] = r
			}
			w := &discardWriter{header: make(http.Header)}
			if run.refused {
				// A client that never keeps its cookie is offered its
				// fingerprint's sessions, then refused until the hour is
				// over: from then on it is what this case measures. The
				// sessions are spent outside the pipeline, so that what
				// bench/serve_instructions.sh counts inside it is the
				// measured requests alone.
				spendSessions(b, reqs)
				clear(w.header)
				srv.ServeHTTP(w, reqs[0])
				if w.header.Get("Set-Cookie") != "" {
					b.Fatal("a client offered a session after its fingerprint's were spent")
				}
			}
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

// loadInProcess runs cfg in this process and returns its HTTP servers
// and the tollgate app's client identifier, for benchmarks and
// allocation counts that call a server's handler directly.
//
// Its storage is a directory of its own: in Caddy's default storage a run
// would start from the secret and the snapshot of the counters an earlier
// run left (the same clients' sessions spent, their budgets used), and runs
// would not measure the same thing.
func loadInProcess(tb testing.TB, cfg []byte) (map[string]*caddyhttp.Server, *fingerprint.Identifier) {
	tb.Helper()
	var config map[string]any
	if err := json.Unmarshal(cfg, &config); err != nil {
		tb.Fatal(err)
	}
	config["storage"] = map[string]any{"module": "file_system", "root": tb.TempDir()}
	cfg, err := json.Marshal(config)
	if err != nil {
		tb.Fatal(err)
	}
	if err := caddy.Load(cfg, true); err != nil {
		tb.Fatal(err)
	}
	appIface, err := caddy.ActiveContext().App("http")
	if err != nil {
		tb.Fatal(err)
	}
	tgIface, err := caddy.ActiveContext().App("tollgate")
	if err != nil {
		tb.Fatal(err)
	}
	return appIface.(*caddyhttp.App).Servers, tgIface.(*App).identifier
}

// spendSessions starts, for the client of each request, every session its
// fingerprint may start this hour, and one more, which is refused.
func spendSessions(b *testing.B, reqs []*http.Request) {
	app, err := runningApp()
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for _, r := range reqs {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		id := app.identifier.Identify(r, host, "", now)
		for range fingerprintSessions(defaultIssueLimit) + 1 {
			app.sessions.mint(&id, 1, now)
		}
	}
}

// serverOn returns the server that listens on port.
func serverOn(b testing.TB, servers map[string]*caddyhttp.Server, port int) *caddyhttp.Server {
	b.Helper()
	for _, s := range servers {
		for _, l := range s.Listen {
			if l == fmt.Sprintf("127.0.0.1:%d", port) || l == fmt.Sprintf(":%d", port) {
				return s
			}
		}
	}
	b.Fatalf("no server listens on %d", port)
	return nil
}

// discardWriter is the cheapest http.ResponseWriter: it keeps the status.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }

// benchClients is the number of client IPs BenchmarkServe spreads over.
const benchClients = 10000
