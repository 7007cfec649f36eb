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
		!strings.Contains(string(body), `concurrency limit of zone streams reached`) {
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
