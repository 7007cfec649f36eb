package caddymodule

import (
	"net/http"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// TestHistoryKeepsAnHourInSteps steps the history through fixed instants:
// each step holds what the counters gained since the previous sample, a
// counter that started again counts whole, and only the last hour's steps
// are kept.
func TestHistoryKeepsAnHourInSteps(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	allowed := historySeries{seriesAllowed, "api", ""}
	byNetwork := historySeries{seriesDenied, "api", reasonNetwork}
	passed := historySeries{seriesChallenge, "", "passed"}
	var h history
	h.record(t0, map[historySeries]float64{allowed: 100}) // where counting starts
	if v := h.view(); len(v.Ends) != 0 {
		t.Fatalf("after the first sample: %d steps; want none", len(v.Ends))
	}
	h.record(t0.Add(adminapi.HistoryStep), map[historySeries]float64{allowed: 130, byNetwork: 4, passed: 2})
	h.record(t0.Add(2*adminapi.HistoryStep), map[historySeries]float64{allowed: 5, byNetwork: 4, passed: 3}) // api declared again
	v := h.view()
	if len(v.Ends) != 2 || v.Ends[0] != t0.Add(adminapi.HistoryStep).Unix() || v.StepSeconds != 10 {
		t.Fatalf("ends %v, step %d; want 2 steps of 10 s", v.Ends, v.StepSeconds)
	}
	if len(v.Zones) != 1 {
		t.Fatalf("zones %+v; want api", v.Zones)
	}
	api := v.Zones[0]
	if api.Allowed[0] != 30 || api.Allowed[1] != 5 || api.Denied[0] != 4 || api.Denied[1] != 0 ||
		api.DeniedBy[reasonNetwork][0] != 4 || api.DeniedBy[reasonClient][0] != 0 || len(api.DeniedBy[reasonBan]) != 2 {
		t.Errorf("api: %+v", api)
	}
	if c := v.Challenges["passed"]; len(c) != 2 || c[0] != 2 || c[1] != 1 {
		t.Errorf("challenges passed: %v; want [2 1]", c)
	}
	for i := range historyLen + 50 {
		h.record(t0.Add(time.Duration(i+3)*adminapi.HistoryStep), map[historySeries]float64{allowed: float64(6 + i)})
	}
	v = h.view()
	if len(v.Ends) != historyLen || historyLen != 360 {
		t.Fatalf("%d steps kept (of %d); want an hour, 360", len(v.Ends), historyLen)
	}
	if first := time.Unix(v.Ends[0], 0); v.Ends[len(v.Ends)-1]-v.Ends[0] != int64((historyLen-1)*10) || first.Before(t0) {
		t.Errorf("kept from %v to %v", first, time.Unix(v.Ends[len(v.Ends)-1], 0))
	}
}

// TestHistoryIsKeptBeforeAnyoneAsks: the node keeps its history whether or
// not anybody reads it; GET /tollgate/history then shows the traffic of
// steps that ended before it was asked, allowed and denied by reason.
func TestHistoryIsKeptBeforeAnyoneAsks(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone api {
			limit 3 1h
			key {http.request.header.X-API-Key}
		}
	}
	respond "ok"`)
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	app, err := runningApp()
	if err != nil {
		t.Fatal(err)
	}
	hist := app.state.history
	hist.sample(time.Now())
	for range 5 {
		srv.get("/", "X-API-Key", "k1")
	}
	hist.sample(time.Now())
	var v adminapi.History
	if status, body := adminDo(t, srv.Admin, http.MethodGet, adminapi.PathHistory, &v); status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", adminapi.PathHistory, status, body)
	}
	sum := func(xs []int64) (n int64) {
		for _, x := range xs {
			n += x
		}
		return n
	}
	var api *adminapi.ZoneHistory
	for i := range v.Zones {
		if v.Zones[i].Zone == "api" {
			api = &v.Zones[i]
		}
	}
	if api == nil || sum(api.Allowed) != 3 || sum(api.Denied) != 2 || sum(api.DeniedBy[reasonClient]) != 2 {
		t.Fatalf("history of api: %+v; want 3 allowed and 2 denied by the client's budget", v.Zones)
	}
}
