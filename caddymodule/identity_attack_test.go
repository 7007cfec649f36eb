package caddymodule

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// TestSessionFloodCannotShutOutNewcomers floods a small key table from one
// address that holds a session cookie, with distinct values of a header the
// zone is keyed by, spending each one: the flooding network may hold only
// its share of the table, so a newcomer from another address, with a
// session or without, still gets its full limit, and the flood's exhausted
// keys stay denied.
func TestSessionFloodCannotShutOutNewcomers(t *testing.T) {
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		max_keys 1024
	}`, `
	tollgate {
		zone api {
			limit 2 10m
			key {http.request.header.X-Key}
		}
	}
	respond "ok"`)

	cookieFrom := func(addr string) string {
		resp := srv.get("/", "X-Forwarded-For", addr, "X-Key", "hello "+addr, "User-Agent", "a")
		for _, c := range resp.Cookies() {
			if c.Name == "__tollgate" {
				return c.Name + "=" + c.Value
			}
		}
		t.Fatalf("no session cookie for %s", addr)
		return ""
	}
	attacker := cookieFrom("10.0.0.1")
	const keys = 50 * 1024 / 16 // 3200 distinct keys, each spent
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < keys; k += 4 {
				for range 2 {
					srv.status("/", "X-Forwarded-For", "10.0.0.1", "Cookie", attacker, "X-Key", fmt.Sprintf("flood %d", k))
				}
			}
		}()
	}
	wg.Wait()
	if got := srv.status("/", "X-Forwarded-For", "10.0.0.1", "Cookie", attacker, "X-Key", "flood 0"); got != http.StatusTooManyRequests {
		t.Errorf("a spent key of the flood answered %d after the flood, want 429", got)
	}

	for i, addr := range []string{"10.0.0.2", "10.0.0.3"} {
		newcomer := cookieFrom(addr)
		var got []int
		for range 3 {
			got = append(got, srv.status("/", "X-Forwarded-For", addr, "Cookie", newcomer, "X-Key", fmt.Sprintf("newcomer %d", i)))
		}
		if want := []int{200, 200, 429}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("a newcomer with a session from %s got %v, want %v", addr, got, want)
		}
		got = got[:0]
		for range 3 {
			got = append(got, srv.status("/", "X-Forwarded-For", addr, "User-Agent", "b", "X-Key", fmt.Sprintf("cookie-less newcomer %d", i)))
		}
		if want := []int{200, 200, 429}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("a cookie-less newcomer from %s got %v, want %v", addr, got, want)
		}
	}
}
