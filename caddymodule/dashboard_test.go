package caddymodule

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

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
