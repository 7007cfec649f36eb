package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/adminapi"
)

// defaultUIListen is where `caddy tollgate ui` serves the page: not 2020
// or 2021, which are the admin addresses of a second and third Caddy on a
// host (as in docs/examples/cluster).
const defaultUIListen = "127.0.0.1:2099"

// runUI serves the status page on a loopback address and relays the
// page's requests to the admin endpoint.
//
// Caddy's admin endpoint refuses what a browser sends when a person opens
// a URL (a navigation carries neither Origin nor Referer, and Caddy takes
// that for a cross-site request), so a browser cannot open /tollgate/ui
// there directly. This relay can: it answers only on loopback, only to
// requests addressed to it and not sent from another site, only on the
// routes the page uses, and talks to the admin endpoint as the other
// commands do, so Caddy's admin access control still applies.
func runUI(c *invocation, _ []string) (int, error) {
	host, _, err := net.SplitHostPort(c.listen)
	if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
		return exitUsage, fmt.Errorf("--listen %q: want a loopback address, e.g. 127.0.0.1:2099: the page can reset clients, so it is served to this machine only", c.listen)
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return exitRefused, fmt.Errorf("listening on %s: %v; choose another address with --listen", c.listen, err)
	}
	// Check now that the admin endpoint is there and has Tollgate: its
	// status is JSON, where a site's page, say, is not.
	var st adminapi.Status
	if _, err := c.call(http.MethodGet, adminapi.PathStatus, nil, &st); err != nil {
		ln.Close()
		return exitFor(err), err
	}
	srv := &http.Server{Handler: &uiRelay{c: c, self: ln.Addr().String()}, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(c.out, "Tollgate status page: http://%s/ (relaying to the admin endpoint at %s); Ctrl-C stops it\n", ln.Addr(), c.addr)
	// Ctrl-C (or SIGTERM) shuts the relay down gracefully; if it stops on
	// its own, the goroutine that waits for the signal ends with it.
	signals, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	shutDown := make(chan struct{})
	go func() {
		defer close(shutDown)
		<-signals.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	err = srv.Serve(ln)
	stopSignals()
	<-shutDown
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return exitRefused, err
	}
	return exitOK, nil
}

// uiRelay serves the status page and relays its requests.
type uiRelay struct {
	c    *invocation
	self string // the address it listens on
}

// relayed reports whether the page may make this request.
func relayed(method, path string) bool {
	switch {
	case method == http.MethodGet && (path == adminapi.PathUI || path == adminapi.PathStatus || path == adminapi.PathDenied ||
		path == adminapi.PathReputation || path == adminapi.PathStream || path == adminapi.PathDecisions || path == adminapi.PathHistory ||
		path == "/metrics"):
		return true
	case method == http.MethodGet || method == http.MethodDelete:
		// A client's counters (the lookup box) and its reset: one
		// segment, as sent (escaped), never a move up the path.
		id, ok := strings.CutPrefix(path, adminapi.PathClients)
		return ok && id != "" && id != "." && id != ".." && !strings.Contains(id, "/")
	case method == http.MethodPost:
		return path == adminapi.PathHash // the lookup box: a key's hashed ID, the key in the body
	}
	return false
}

// maxRelayedBody bounds the body of a relayed request: a key to hash.
const maxRelayedBody = 4096

// ServeHTTP serves the page's requests, relaying them to the admin
// endpoint, and refuses any other.
func (u *uiRelay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, port, _ := net.SplitHostPort(u.self)
	if r.Host != u.self && r.Host != "localhost:"+port {
		http.Error(w, "not this relay's address", http.StatusForbidden) // DNS rebinding
		return
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		http.Error(w, "requests from other sites are refused", http.StatusForbidden)
		return
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
		http.Error(w, "requests from other origins are refused", http.StatusForbidden)
		return
	}
	// The path as sent, escaped: a key's escaped "/" or "." stays so on
	// the way to the admin endpoint.
	path := r.URL.EscapedPath()
	if path == "/" {
		path = adminapi.PathUI
	}
	if !relayed(r.Method, path) {
		relayError(w, http.StatusNotFound, "the status page relay does not serve "+r.Method+" "+path)
		return
	}
	var body io.Reader
	if r.Method == http.MethodPost {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxRelayedBody+1))
		if err != nil || len(b) > maxRelayedBody {
			relayError(w, http.StatusRequestEntityTooLarge, "the status page relay takes a body of at most 4096 bytes")
			return
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, u.c.origin+path+queryOf(r), body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if u.c.originHeader != "" {
		req.Header.Set("Origin", u.c.originHeader)
	}
	hc := u.c.client
	if path == adminapi.PathStream { // lives a minute: no whole-answer timeout
		streaming := *hc
		streaming.Timeout = 0
		hc = &streaming
	}
	resp, err := hc.Do(req)
	if err != nil {
		relayError(w, http.StatusBadGateway, "cannot reach Caddy's admin endpoint at "+u.c.addr)
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Cache-Control", "Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	copyFlushing(w, resp.Body)
}

// copyFlushing copies an answer to w, flushing each read, so that the
// events of a stream reach the page as they come.
func copyFlushing(w http.ResponseWriter, body io.Reader) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// queryOf is r's query, with its "?", or nothing.
func queryOf(r *http.Request) string {
	if r.URL.RawQuery == "" {
		return ""
	}
	return "?" + r.URL.RawQuery
}

// relayError answers with an error as the admin API does: adminapi.Error.
func relayError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, "{\"error\": %q}\n", msg)
}
