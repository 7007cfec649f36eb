package caddymodule

import (
	"fmt"
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
// is fingerprinted, watched for IP pressure and may ask for a cookie); one
// client that never keeps a cookie, on one address (wrk, curl, a script);
// and, for reference, behind `vars` (about the cheapest Caddy middleware). The ratio
// of plain to tollgate is the share of Caddy's throughput Tollgate keeps
// before any network cost; bench/load.sh measures it with the network.
func BenchmarkServe(b *testing.B) {
	plainPort, gatedPort, varsPort := freePort(b), freePort(b), freePort(b)
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
`, plainPort, gatedPort, varsPort))
	servers, identifier := loadInProcess(b, cfg)
	for _, run := range []struct {
		name    string
		port    int
		cookies bool
		clients int
	}{
		{"plain", plainPort, false, benchClients},
		{"vars", varsPort, false, benchClients},
		{"tollgate", gatedPort, true, benchClients},
		{"tollgate_cookieless", gatedPort, false, benchClients},
		{"tollgate_cookieless_one", gatedPort, false, 1},
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

// serverOn returns the server that listens on port.
// loadInProcess runs cfg in this process and returns its HTTP servers
// and the tollgate app's client identifier, for benchmarks and
// allocation counts that call a server's handler directly.
func loadInProcess(tb testing.TB, cfg []byte) (map[string]*caddyhttp.Server, *fingerprint.Identifier) {
	tb.Helper()
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
