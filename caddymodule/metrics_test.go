package caddymodule

import (
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
