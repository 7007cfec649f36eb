package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// TestCLIStatusCountsEveryDeniedKey denies more keys than one page of
// GET /tollgate/denied holds: `caddy tollgate status` counts them all.
func TestCLIStatusCountsEveryDeniedKey(t *testing.T) {
	srv := startCaddy(t, `
	tollgate {
		zone api {
			limit 1 1h
			key {http.request.header.X-API-Key}
		}
	}
	respond "ok"`)
	const keys = adminapi.MaxDeniedPage + adminapi.MaxDeniedPage/2
	// A key's denial in the one-hour window lasts until the hour ends: the
	// requests and the count below keep clear of its edge.
	testutil.ClearOfWindowEdge(time.Hour, 30*time.Second)
	// Each key's second request is denied: its one denial.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer hc.CloseIdleConnections()
	var wg sync.WaitGroup
	failed := make(chan string, keys)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < keys; k += 8 {
				for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
					req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
					req.Header.Set("X-API-Key", fmt.Sprintf("key-%d", k))
					resp, err := hc.Do(req)
					if err != nil {
						failed <- fmt.Sprintf("key-%d request %d: %v", k, i+1, err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != want {
						failed <- fmt.Sprintf("key-%d request %d: %d; want %d", k, i+1, resp.StatusCode, want)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(failed)
	for f := range failed {
		t.Fatal(f)
	}
	var out bytes.Buffer
	c := invocationFor(t, srv.Admin, true, &out)
	if code, err := runStatus(c, nil); code != exitOK {
		t.Fatalf("status: exit %d, %v", code, err)
	}
	var got struct {
		Zones []zoneDenials `json:"zones_by_denials"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out.String())
	}
	if len(got.Zones) != 1 || got.Zones[0].KeysDenied != keys || got.Zones[0].Denials != keys {
		t.Errorf("status counted %+v; want api with %d keys denied once each", got.Zones, keys)
	}
}
