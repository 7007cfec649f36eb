package caddymodule

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// TestStatusStreamIsOneRequest: GET /tollgate/stream sends the status page
// what it shows (status, denied, reputation), one event a second, on one
// request, so an open page costs Caddy's admin log one line, not three a
// second; and it ends after its lifetime, for the browser to open it again.
func TestStatusStreamIsOneRequest(t *testing.T) {
	srv := startCaddy(t, "", testutil.AdminSite)
	srv.get("/") // something counted
	req, _ := http.NewRequest(http.MethodGet, srv.Admin+adminapi.PathStream, nil)
	req.Header.Set("Origin", srv.Admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %d %s", adminapi.PathStream, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	events := 0
	for events < 3 && sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var u adminapi.StreamUpdate
		if err := json.Unmarshal([]byte(data), &u); err != nil {
			t.Fatalf("event %d: %v\n%s", events, err, data)
		}
		if u.Status.Cluster.Node == "" || u.Denied.Items == nil || u.Reputation.Buckets == nil {
			t.Fatalf("event %d lacks what the page shows: %s", events, data)
		}
		// The hour's history comes in the first event, then only when a
		// step has ended since (every 10 s): not 360 steps a second.
		if events == 0 && (u.History == nil || u.History.StepSeconds != 10) {
			t.Fatalf("the first event has no history: %.300s", data)
		}
		if events == 1 && u.History != nil && len(u.History.Ends) > 0 && u.History.Ends[len(u.History.Ends)-1] < time.Now().Add(-2*time.Second).Unix() {
			t.Errorf("event %d sends a history it sent already", events)
		}
		events++
	}
	if events != 3 {
		t.Fatalf("read %d events: %v", events, sc.Err())
	}
	lines := 0
	for _, l := range strings.Split(srv.logs(), "\n") {
		if strings.Contains(l, `"received request"`) && strings.Contains(l, `"uri":"/tollgate/`) {
			lines++
		}
	}
	if lines != 1 {
		t.Errorf("three updates cost %d admin log lines; want 1", lines)
	}
}

// TestStatusStreamEnds: a stream ends after its lifetime, at fixed
// instants, so an open page never holds a request forever.
func TestStatusStreamEnds(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	if streamOver(t0, t0.Add(adminapi.StreamLifetime-time.Millisecond)) {
		t.Error("the stream ended before its lifetime")
	}
	if !streamOver(t0, t0.Add(adminapi.StreamLifetime)) {
		t.Error("the stream outlived its lifetime")
	}
}
