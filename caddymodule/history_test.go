package caddymodule

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

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
	srv := startCaddy(t, "", apiSite("3 1h"))
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

// TestSumHistoriesAddsEveryNodesStepsByTime: nodes sample on their own
// phases; each node's step is counted in the step of the sum that ends at
// or after it, zones and challenge results every node or only some saw are
// all summed, and the sum keeps an hour.
func TestSumHistoriesAddsEveryNodesStepsByTime(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Unix()
	none := func(n int) []int64 { return make([]int64, n) }
	a := adminapi.History{StepSeconds: 10, Ends: []int64{t0 + 3, t0 + 13},
		Zones: []adminapi.ZoneHistory{{Zone: "api", Allowed: []int64{5, 7}, Denied: []int64{1, 0},
			DeniedBy: map[string][]int64{reasonClient: {1, 0}, reasonNetwork: none(2), reasonBan: none(2), reasonDecision: none(2)}}},
		Challenges: map[string][]int64{"passed": {2, 0}}}
	b := adminapi.History{StepSeconds: 10, Ends: []int64{t0 + 7, t0 + 17, t0 + 27},
		Zones: []adminapi.ZoneHistory{
			{Zone: "api", Allowed: []int64{1, 1, 1}, Denied: []int64{0, 4, 0},
				DeniedBy: map[string][]int64{reasonClient: none(3), reasonNetwork: {0, 4, 0}, reasonBan: none(3), reasonDecision: none(3)}},
			{Zone: "login", Allowed: []int64{0, 0, 9}, Denied: none(3), DeniedBy: map[string][]int64{}}},
		Challenges: map[string][]int64{"work": {0, 3, 0}}}
	sum := sumHistories(map[string]adminapi.History{"b": b, "a": a})
	if !slices.Equal(sum.Nodes, []string{"a", "b"}) || !slices.Equal(sum.Ends, []int64{t0 + 10, t0 + 20, t0 + 30}) || sum.StepSeconds != 10 {
		t.Fatalf("nodes %v, ends %v, step %d; want a and b, steps ending at :10, :20, :30", sum.Nodes, sum.Ends, sum.StepSeconds)
	}
	if len(sum.Zones) != 2 || sum.Zones[0].Zone != "api" || sum.Zones[1].Zone != "login" {
		t.Fatalf("zones %+v; want api and login", sum.Zones)
	}
	api, login := sum.Zones[0], sum.Zones[1]
	if !slices.Equal(api.Allowed, []int64{6, 8, 1}) || !slices.Equal(api.Denied, []int64{1, 4, 0}) ||
		!slices.Equal(api.DeniedBy[reasonClient], []int64{1, 0, 0}) || !slices.Equal(api.DeniedBy[reasonNetwork], []int64{0, 4, 0}) {
		t.Errorf("api summed: %+v", api)
	}
	if !slices.Equal(login.Allowed, []int64{0, 0, 9}) || len(login.DeniedBy[reasonBan]) != 3 {
		t.Errorf("login summed: %+v", login)
	}
	if !slices.Equal(sum.Challenges["passed"], []int64{2, 0, 0}) || !slices.Equal(sum.Challenges["work"], []int64{0, 3, 0}) {
		t.Errorf("challenges summed: %v", sum.Challenges)
	}

	long := adminapi.History{StepSeconds: 10, Zones: []adminapi.ZoneHistory{{Zone: "api", DeniedBy: map[string][]int64{}}}}
	for i := range historyLen + 40 {
		long.Ends = append(long.Ends, t0+int64(i)*10)
		long.Zones[0].Allowed = append(long.Zones[0].Allowed, 1)
		long.Zones[0].Denied = append(long.Zones[0].Denied, 0)
	}
	sum = sumHistories(map[string]adminapi.History{"a": long, "b": b})
	if len(sum.Ends) != historyLen || sum.Ends[len(sum.Ends)-1] != long.Ends[len(long.Ends)-1] {
		t.Fatalf("%d steps kept, the last ending at %d; want the hour up to %d", len(sum.Ends), sum.Ends[len(sum.Ends)-1], long.Ends[len(long.Ends)-1])
	}
}

// TestHistoryOfEveryNodeOnASingleNode: ?nodes=all on a node alone is its
// own history; any other value is refused, naming it and what is allowed.
func TestHistoryOfEveryNodeOnASingleNode(t *testing.T) {
	srv := startCaddy(t, "", apiSite("3 1h"))
	var v adminapi.History
	if status, body := adminDo(t, srv.Admin, http.MethodGet, adminapi.PathHistory+"?nodes=all", &v); status != http.StatusOK || v.Nodes != nil {
		t.Fatalf("GET ?nodes=all alone: %d %s; want this node's history, naming no nodes", status, body)
	}
	status, body := adminDo(t, srv.Admin, http.MethodGet, adminapi.PathHistory+"?nodes=some", nil)
	if status != http.StatusBadRequest || !strings.Contains(body, `\"some\"`) || !strings.Contains(body, `want \"all\"`) {
		t.Fatalf("GET ?nodes=some: %d %s; want 400 naming the value and what is allowed", status, body)
	}
}

// TestHistoryCountsFromTheMomentTheStateStarts: what the node counts right
// after it started is in the history's first step, however late the
// background work gets its first turn: start takes the baseline itself,
// before it returns.
func TestHistoryCountsFromTheMomentTheStateStarts(t *testing.T) {
	s, err := newState(0)
	if err != nil {
		t.Fatal(err)
	}
	s.start(zap.NewNop())
	t.Cleanup(func() { s.Destruct() })
	allowed := newDecisionCounters("history-from-start", "history-from-start")
	allowed[0][0].Add(3) // counted before the background work took its first sample
	s.history.sample(time.Now())
	v := s.history.view()
	var sum int64
	for _, z := range v.Zones {
		if z.Zone == "history-from-start" {
			for _, n := range z.Allowed {
				sum += n
			}
		}
	}
	if sum != 3 {
		t.Errorf("the zone's allowed requests in the history: %d in %d steps; want the 3 counted after start", sum, len(v.Ends))
	}
}
