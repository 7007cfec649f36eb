package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testutil"
)

// series is one sample line of a scrape: its name{labels} and value.
type series struct {
	id    string
	value float64
}

// scrapeLines returns every tollgate sample line of a scrape, in order,
// duplicates included.
func scrapeLines(t testing.TB, admin string) []series {
	t.Helper()
	_, body := adminDo(t, admin, http.MethodGet, "/metrics", nil)
	line := regexp.MustCompile(`^(tollgate_[a-z_]+(?:\{[^}]*\})?) (\S+)$`)
	var out []series
	for _, l := range strings.Split(body, "\n") {
		if m := line.FindStringSubmatch(l); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			out = append(out, series{m[1], v})
		}
	}
	return out
}

// decisionsOf sums, by outcome, the decision series of zone api whose
// scope contains where.
func decisionsOf(lines []series, where string) map[string]float64 {
	out := map[string]float64{}
	outcome := regexp.MustCompile(`outcome="([a-z_]+)"`)
	for _, s := range lines {
		if strings.HasPrefix(s.id, "tollgate_decisions_total{") && strings.Contains(s.id, `zone="api"`) && strings.Contains(s.id, where) {
			out[outcome.FindStringSubmatch(s.id)[1]] += s.value
		}
	}
	return out
}

// TestMetricsOfSameNamedZonesNeverMerge runs a known sequence across two
// sites that each have a zone "api": each site's series has its own value,
// no series appears twice, absent cookies are counted, and a reload that
// removes a site drops its series.
func TestMetricsOfSameNamedZonesNeverMerge(t *testing.T) {
	srv := startCaddy(t, "", `respond "default"`)
	zone := func(limit string) string {
		return "\ttollgate {\n\t\tzone api {\n\t\t\tlimit " + limit + " 1h\n\t\t\tkey {http.request.header.X-User}\n\t\t}\n\t}\n\trespond \"ok\""
	}
	a, b := srv.site("a.test", zone("2")), srv.site("b.test", zone("3"))
	srv.loadSites("", []string{a, b})
	testutil.ClearOfWindowEdge(time.Hour, 20*time.Second)

	before := scrapeLines(t, srv.Admin)
	cookies := func(lines []series, status string) float64 {
		for _, s := range lines {
			if s.id == `tollgate_cookies_total{status="`+status+`"}` {
				return s.value
			}
		}
		return 0
	}
	for range 4 {
		srv.getHost("a.test", "X-User", "bob") // 2 allowed, 2 denied
	}
	srv.getHost("a.test", "X-User", "carol", "Cookie", "__tollgate=forged") // allowed; a malformed cookie
	for range 6 {
		srv.getHost("b.test", "X-User", "bob") // 3 allowed, 3 denied
	}
	after := scrapeLines(t, srv.Admin)

	seen := map[string]bool{}
	for _, s := range after {
		if seen[s.id] {
			t.Errorf("series %s appears twice", s.id)
		}
		seen[s.id] = true
	}
	for where, want := range map[string]map[string]float64{
		"a.test": {"allow": 3, "deny": 2},
		"b.test": {"allow": 3, "deny": 3},
	} {
		got, was := decisionsOf(after, where), decisionsOf(before, where)
		for outcome, n := range want {
			if d := got[outcome] - was[outcome]; d != n {
				t.Errorf("zone api of %s: %s rose by %v; want %v", where, outcome, d, n)
			}
		}
	}
	for status, want := range map[string]float64{"absent": 10, "malformed": 1, "valid": 0} {
		if d := cookies(after, status) - cookies(before, status); d != want {
			t.Errorf("cookies %s rose by %v; want %v", status, d, want)
		}
	}
	for _, s := range after {
		if strings.Contains(s.id, "cookie_status(") {
			t.Errorf("a cookie status without a name: %s", s.id)
		}
	}

	// Dropping site b: its series go; a's zone is now the only "api", known
	// by its name alone, and its old series go too.
	srv.loadSites("", []string{a})
	srv.getHost("a.test", "X-User", "dave")
	lines := scrapeLines(t, srv.Admin)
	for _, s := range lines {
		if strings.HasPrefix(s.id, "tollgate_decisions_total{") && (strings.Contains(s.id, "b.test") || strings.Contains(s.id, "a.test")) {
			t.Errorf("series of a zone no longer configured: %s", s.id)
		}
	}
	if got := decisionsOf(lines, `scope="api"`)["allow"]; got < 1 {
		t.Errorf("zone api, now unique, has no allow series under scope \"api\"")
	}
}

// TestDocsClusterAgreementQuery checks the query the docs give for "do all
// nodes agree on the cluster" against a real scrape: it names a metric the
// node exports, and it counts distinct values, so it answers 1 when the
// nodes agree and more when they don't (the old query always answered 1).
func TestDocsClusterAgreementQuery(t *testing.T) {
	const query = `count(count_values("ring", tollgate_ring_fingerprint))`
	for _, doc := range []string{"../docs/metrics.md", "../docs/operations.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), query) {
			t.Errorf("%s does not give the agreement query %s", doc, query)
		}
		if strings.Contains(string(b), "count by (value)") {
			t.Errorf("%s still has the query that always answers 1", doc)
		}
	}
	srv := startCaddy(t, "", "\ttollgate {\n\t\tzone api {\n\t\t\tlimit 5 1m\n\t\t}\n\t}\n\trespond \"ok\"")
	var ring []float64
	for _, s := range scrapeLines(t, srv.Admin) {
		if s.id == "tollgate_ring_fingerprint" {
			ring = append(ring, s.value)
		}
	}
	if len(ring) != 1 || ring[0] == 0 {
		t.Fatalf("tollgate_ring_fingerprint samples %v; want one, non-zero", ring)
	}
	// count(count_values("ring", m)) is the number of distinct values of m
	// across the scraped nodes.
	countValues := func(samples ...float64) int {
		distinct := map[float64]bool{}
		for _, v := range samples {
			distinct[v] = true
		}
		return len(distinct)
	}
	if n := countValues(ring[0], ring[0], ring[0]); n != 1 {
		t.Errorf("three agreeing nodes: %d; want 1", n)
	}
	if n := countValues(ring[0], ring[0], ring[0]+1); n != 2 {
		t.Errorf("one node on another ring: %d; want 2", n)
	}
}

// scrape returns the admin endpoint's metrics as name{labels} → value.
func scrape(t testing.TB, admin string) map[string]float64 {
	t.Helper()
	_, body := adminDo(t, admin, http.MethodGet, "/metrics", nil)
	out := make(map[string]float64)
	line := regexp.MustCompile(`^(tollgate_[a-z_]+(?:\{[^}]*\})?) (\S+)$`)
	for _, l := range strings.Split(body, "\n") {
		if m := line.FindStringSubmatch(l); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			out[m[1]] = v
		}
	}
	return out
}

func TestMetricsCountAKnownSequence(t *testing.T) {
	srv := startCaddy(t, "", apiSite("3 1h"))
	testutil.ClearOfWindowEdge(time.Hour, 10*time.Second)
	// The counters are the process's: earlier tests in this process have
	// counted too, so compare with a scrape taken before.
	before := scrape(t, srv.Admin)
	for range 5 {
		srv.get("/", "X-API-Key", "alice") // 3 allowed, 2 denied
	}
	srv.get("/", "X-API-Key", "bob", "Cookie", "__tollgate=forged")
	m := scrape(t, srv.Admin)
	for name, want := range map[string]float64{
		`tollgate_decisions_total{outcome="allow",scope="api",source="owner",zone="api"}`: 4,
		`tollgate_decisions_total{outcome="deny",scope="api",source="owner",zone="api"}`:  2,
		`tollgate_cookies_total{status="malformed"}`:                                      1,
	} {
		if got := m[name] - before[name]; got != want {
			t.Errorf("%s rose by %v; want %v", name, got, want)
		}
	}
	for name, want := range map[string]float64{
		`tollgate_cluster_members`:   1,
		`tollgate_peers_in_fallback`: 0,
		`tollgate_keys_max`:          1 << 20,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v); want %v", name, got, ok, want)
		}
	}
	if m[`tollgate_keys_held`] < 2 {
		t.Errorf("tollgate_keys_held = %v", m[`tollgate_keys_held`])
	}
	for name := range m {
		if strings.Contains(name, "alice") || strings.Contains(name, "127.0.0.1") {
			t.Errorf("a metric label carries a key or an address: %s", name)
		}
	}

	// A reload keeps the metrics working (no duplicate registration).
	srv.reload("", `
	tollgate {
		zone api {
			limit 4 1h
			key {http.request.header.X-API-Key}
		}
	}
	respond "reloaded"`)
	// The old config's servers drain beside the new ones for a moment: ask
	// (with keys of their own) until the new config answers.
	testutil.Eventually(t, 5*time.Second, "the new config answering", func() bool {
		_, body := srv.body("/", "X-API-Key", fmt.Sprintf("probe-%d", time.Now().UnixNano()))
		return body == "reloaded"
	})
	allowed := `tollgate_decisions_total{outcome="allow",scope="api",source="owner",zone="api"}`
	mid := scrape(t, srv.Admin)
	if got := mid[allowed] - before[allowed]; got < 5 {
		t.Errorf("after a reload, allowed rose by %v; want at least 5 (4 before it, the probes after)", got)
	}
	if _, body := srv.body("/", "X-API-Key", "alice"); body != "reloaded" {
		t.Errorf("alice's fourth request after the limit rose to 4: %q; want allowed by the new config", body)
	}
	if got := scrape(t, srv.Admin)[allowed] - mid[allowed]; got != 1 {
		t.Errorf("after a reload, alice's request raised allowed by %v; want 1 (counting on)", got)
	}
}

// TestDashboardUsesRealMetrics checks that docs/grafana-dashboard.json is a
// dashboard Grafana can import and that every metric its queries name is one
// Tollgate exports.
func TestDashboardUsesRealMetrics(t *testing.T) {
	raw, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct{ Name, Type string } `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatal("a dashboard needs a title, a uid and panels")
	}
	if len(dash.Templating.List) == 0 || dash.Templating.List[0].Type != "datasource" {
		t.Error("the first variable should pick the Prometheus data source, so the dashboard imports as is")
	}

	srv := startCaddy(t, "", `
	tollgate {
		zone api {
			limit 1 1h
		}
	}
	respond "ok"`)
	srv.get("/")
	srv.get("/")
	// Vectors without a series are not exported at all: give the ones this
	// single node does not use one each.
	metrics.peerCall.WithLabelValues("ok")
	metrics.cookies.WithLabelValues("forged")
	metrics.challenge.WithLabelValues("passed")
	metrics.emptyKeys.WithLabelValues("api", "api")
	_, body := adminDo(t, srv.Admin, "GET", "/metrics", nil)
	exported := make(map[string]bool)
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (tollgate_\w+) (\w+)`).FindAllStringSubmatch(body, -1) {
		exported[m[1]] = true
		if m[2] == "histogram" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				exported[m[1]+suffix] = true
			}
		}
	}
	// Issue 19 asks for these three: why requests were denied, how the
	// challenge went, and requests whose zone key rendered empty.
	for _, want := range []string{
		`sum by (reason) (rate(tollgate_denials_total`,
		`sum by (result) (rate(tollgate_challenges_total`,
		`sum by (zone) (rate(tollgate_empty_keys_total`,
	} {
		found := false
		for _, p := range dash.Panels {
			for _, target := range p.Targets {
				found = found || strings.HasPrefix(target.Expr, want)
			}
		}
		if !found {
			t.Errorf("no panel queries %s...)", want)
		}
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			for _, name := range regexp.MustCompile(`tollgate_\w+`).FindAllString(target.Expr, -1) {
				if !exported[name] {
					t.Errorf("panel %q queries %s, which Tollgate does not export (it exports %s)", p.Title, name, strings.Join(keys(exported), ", "))
				}
			}
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestCookieStatusesMatchTheDocs compares the cookie statuses /metrics
// exports with the ones docs/metrics.md lists.
func TestCookieStatusesMatchTheDocs(t *testing.T) {
	raw, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `tollgate_cookies_total` \\| counter \\| `status` \\(([^)]*)\\)").FindStringSubmatch(string(raw))
	if row == nil {
		t.Fatal("docs/metrics.md has no row for tollgate_cookies_total")
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(row[1], -1) {
		documented[m[1]] = true
	}
	srv := startCaddy(t, "", `
	tollgate {
		zone api {
			limit 10 1h
		}
	}
	respond "ok"`)
	srv.get("/", "Cookie", "__tollgate=forged")
	_, body := adminDo(t, srv.Admin, "GET", "/metrics", nil)
	exported := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^tollgate_cookies_total\{status="([^"]*)"\}`).FindAllStringSubmatch(body, -1) {
		exported[m[1]] = true
	}
	for s := range exported {
		if !documented[s] {
			t.Errorf("/metrics exports cookie status %q, which docs/metrics.md does not list", s)
		}
	}
	for s := range documented {
		if !exported[s] {
			t.Errorf("docs/metrics.md lists cookie status %q, which /metrics does not export", s)
		}
	}
}
