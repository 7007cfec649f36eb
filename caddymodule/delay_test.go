package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	tu "github.com/tollgate/tollgate/internal/testutil"
)

// arrivals is an upstream that notes when each request reached it.
type arrivals struct {
	*httptest.Server
	mu sync.Mutex
	at []time.Time
}

func newArrivals(t *testing.T) *arrivals {
	a := &arrivals{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.at = append(a.at, time.Now())
		a.mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *arrivals) times() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := slices.Clone(a.at)
	slices.SortFunc(out, func(x, y time.Time) int { return x.Compare(y) })
	return out
}

// 20 concurrent requests at 10 a second with delay 1s are all served, and
// none faster than the limit allows: no second (fixed window) holds more
// than 10 arrivals; no half second (token bucket: a burst of 10, then one
// every 100ms) more than 10 + 5.
func TestDelayServesABurstAtTheRate(t *testing.T) {
	for _, alg := range []string{"fixed_window", "token_bucket"} {
		t.Run(alg, func(t *testing.T) {
			up := newArrivals(t)
			srv := startCaddy(t, "", fmt.Sprintf(`
	tollgate {
		zone api {
			limit 10 1s
			algorithm %s
			delay 1s
		}
	}
	reverse_proxy %s`, alg, up.URL))
			tu.ClearOfWindowEdge(time.Second, 300*time.Millisecond)
			statuses := concurrently(20, 20, func() int { return srv.status("/") })
			if statuses[http.StatusOK] != 20 {
				t.Fatalf("statuses of 20 requests at 10/s with delay 1s: %v; want 20 × 200", statuses)
			}
			at := up.times()
			if alg == "fixed_window" {
				perSecond := map[int64]int{}
				for _, a := range at {
					perSecond[a.Unix()]++
				}
				for s, n := range perSecond {
					if n > 10 {
						t.Fatalf("%d requests reached the upstream in second %d; the limit is 10", n, s)
					}
				}
				return
			}
			for i, a := range at {
				n := 0
				for _, b := range at[i:] {
					if b.Sub(a) < 500*time.Millisecond {
						n++
					}
				}
				if n > 15 {
					t.Fatalf("%d requests reached the upstream within 500ms; a bucket of 10 refilled at 10/s allows 15", n)
				}
			}
		})
	}
}

// A waiting request whose client goes away gives its slot back: the next
// one waits for that slot instead of being denied.
func TestDelayedClientThatLeavesGivesItsSlotBack(t *testing.T) {
	up := newArrivals(t)
	srv := startCaddy(t, "", fmt.Sprintf(`
	tollgate {
		zone api {
			limit 1 2s
			algorithm fixed_window
			delay 2s
		}
	}
	reverse_proxy %s`, up.URL))
	tu.ClearOfWindowEdge(2*time.Second, 1500*time.Millisecond)
	if s := srv.status("/"); s != http.StatusOK {
		t.Fatalf("first request: %d", s)
	}
	waiting := func() float64 {
		initOutcomeMetrics()
		var m dto.Metric
		if err := outcomeMetrics.waiting.WithLabelValues("api", "api").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetGauge().GetValue()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	tu.Eventually(t, 2*time.Second, "the second request waiting for the next window", func() bool { return waiting() == 1 })
	cancel()
	<-done
	tu.Eventually(t, 2*time.Second, "the leaver no longer waiting", func() bool { return waiting() == 0 })
	// Its slot, in the next window, is free again: this one waits for it.
	// Had it not been given back, the next free slot would be two windows
	// on, beyond the delay: a 429 at once.
	if s := srv.status("/"); s != http.StatusOK {
		t.Fatalf("a request after the waiting one left: %d, want 200 (served in the freed slot)", s)
	}
	if n := len(up.times()); n != 2 {
		t.Fatalf("%d requests reached the upstream; want 2 (the leaver never did)", n)
	}
}

// Past delay_queue, requests of a key are denied at once instead of
// waiting.
func TestDelayQueueBoundsTheWaiters(t *testing.T) {
	up := newArrivals(t)
	srv := startCaddy(t, "", fmt.Sprintf(`
	tollgate {
		zone api {
			limit 2 2s
			algorithm fixed_window
			delay 2s
			delay_queue 1
		}
	}
	reverse_proxy %s`, up.URL))
	tu.ClearOfWindowEdge(2*time.Second, 1500*time.Millisecond)
	statuses := concurrently(6, 6, func() int { return srv.status("/") })
	// 2 now, then at most 1 waiting at a time: the next window's 2 slots
	// go to waiters only while one waits at once.
	if statuses[http.StatusOK] < 3 || statuses[http.StatusOK] > 4 || statuses[http.StatusOK]+statuses[http.StatusTooManyRequests] != 6 {
		t.Fatalf("statuses of 6 requests with 2 slots now, 2 next and a queue of 1: %v", statuses)
	}
}
