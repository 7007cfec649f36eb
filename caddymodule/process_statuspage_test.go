package caddymodule

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// TestStatusPageInABrowser opens /tollgate/ui of a three-process cluster
// in headless Chromium: it shows the three members, its charts move after
// traffic, a reset from the page asks first, and once confirmed lets a
// denied client through on every node; the page reports no error.
func TestStatusPageInABrowser(t *testing.T) {
	b := startBrowser(t)
	procs := startCluster(t, 3, 2)
	admin := fmt.Sprintf("http://127.0.0.1:%d", procs[0].admin)

	resp, body := adminRaw(t, admin, http.MethodGet, "/tollgate/ui", "")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /tollgate/ui: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if m := regexp.MustCompile(`(?i)(src|href)="(https?:)?//`).FindString(body); m != "" {
		t.Errorf("the page loads an external asset: %s", m)
	}

	// A browser cannot open the admin endpoint itself (Caddy refuses a
	// navigation, which has no Origin): the page is opened through the
	// relay `caddy tollgate ui` serves.
	relay := testutil.StartUIRelay(t, strings.TrimPrefix(admin, "http://"))
	b.run("opening the page", chromedp.Navigate(relay+"/"))
	b.until("the three members shown", `document.querySelectorAll("#members tr.member").length === 3`)
	var shown []string
	b.eval(`[...document.querySelectorAll("#members tr.member")].map(r => r.dataset.name).sort()`, &shown)
	for _, p := range procs {
		if name := p.status().Cluster.Node; !strings.Contains(strings.Join(shown, " "), name) {
			t.Errorf("member %s not shown; the page shows %v", name, shown)
		}
	}
	b.until("the ring shown as agreed", `document.querySelector("#ring").textContent === "agreed"`)
	b.until("the members section shown on a cluster", `document.getElementById("members-section").hidden === false`)

	// Traffic through node0: allowed and denied requests of zone api.
	b.until("a first reading of the counters", `document.querySelector(".chart") !== null || document.querySelector("#charts .empty") !== null`)
	for i := range 10 {
		procs[0].get("/", fmt.Sprintf("ui-ok-%d", i))
	}
	for range 4 {
		procs[0].get("/", "ui-denied")
	}
	b.until("the api chart moved", `(() => { const c = document.querySelector('.chart[data-zone="api"]');
		return c !== null && Number(c.dataset.sum) > 0 && c.querySelector("polyline.series-denied") !== null; })()`)

	// The hour is the cluster's: requests through the other two nodes are
	// counted in the same charts, 12 allowed and 2 denied through node0,
	// 3 and 2 allowed through node1 and node2.
	for i := range 3 {
		procs[1].get("/", fmt.Sprintf("ui-node1-%d", i))
	}
	for i := range 2 {
		procs[2].get("/", fmt.Sprintf("ui-node2-%d", i))
	}
	// Each node counts them in its next 10 s step, and the page gets the
	// sum at the serving node's next step after that: up to 20 s, more on
	// a loaded machine.
	b.untilWithin(60*time.Second, "the api chart counting every node's requests", `(() => { const c = document.querySelector('.chart[data-zone="api"]');
		return c !== null && Number(c.dataset.sum) === 19; })()`)
	var scope string
	b.eval(`document.querySelector(".hour-scope").textContent`, &scope)
	if scope != "across the cluster (3 nodes)" {
		t.Errorf("the hour is shown %q; want across the cluster (3 nodes)", scope)
	}
	var hour adminapi.History
	adminDo(t, fmt.Sprintf("http://127.0.0.1:%d", procs[1].admin), http.MethodGet, adminapi.PathHistory+"?nodes=all", &hour)
	var own adminapi.History
	adminDo(t, fmt.Sprintf("http://127.0.0.1:%d", procs[1].admin), http.MethodGet, adminapi.PathHistory, &own)
	if len(hour.Nodes) != 3 || len(hour.Unanswered) != 0 || own.Nodes != nil || historyTotal(own, "api") != 3 {
		t.Errorf("node1's history: every node's names %v (unanswered %v), its own names %v with %d requests of api; want 3 nodes, and node1's own 3",
			hour.Nodes, hour.Unanswered, own.Nodes, historyTotal(own, "api"))
	}

	// The denied key, hashed as the log prints it, with a reset button.
	var hashed string
	testutil.Eventually(t, 10*time.Second, "the denial logged", func() bool {
		m := regexp.MustCompile(`"key_hash":"(h:[0-9a-f]{16})"`).FindStringSubmatch(procs[0].logs())
		if m != nil {
			hashed = m[1]
		}
		return m != nil
	})
	row := fmt.Sprintf(`#denied tr.denied[data-key=%q][data-zone="api"]`, hashed)
	b.until("the denied key listed", fmt.Sprintf(`document.querySelector(%q) !== null`, row))

	b.screenshot("tollgate-status-page-denied.png")

	// Cancelled, the reset does nothing.
	b.accept.Store(false)
	b.run("clicking reset, then cancel", chromedp.Evaluate(fmt.Sprintf(`document.querySelector(%q).click()`, row+" button.reset"), nil))
	testutil.Eventually(t, 10*time.Second, "the confirmation asked", func() bool { return b.asked.Load() == 1 })
	if status, _, _ := procs[0].get("/", "ui-denied"); status != http.StatusTooManyRequests {
		t.Fatalf("after a cancelled reset: %d; want still denied", status)
	}
	// Confirmed, it lets the client through, on every node.
	b.accept.Store(true)
	b.run("clicking reset, then OK", chromedp.Evaluate(fmt.Sprintf(`document.querySelector(%q).click()`, row+" button.reset"), nil))
	b.until("the reset key off the list", fmt.Sprintf(`document.querySelector(%q) === null`, row))
	if b.asked.Load() != 2 {
		t.Errorf("the reset asked %d times; want once per click", b.asked.Load())
	}
	for _, p := range []*proc{procs[0], procs[2]} { // the limit is 2
		if status, _, _ := p.get("/", "ui-denied"); status != http.StatusOK {
			t.Errorf("after the reset from the page, through %s: %d; want let through", p.name, status)
		}
	}

	b.screenshot("tollgate-status-page.png")

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		t.Errorf("the page reported: %s", e)
	}
}

// historyTotal returns the requests zone counted in h, allowed and denied.
func historyTotal(h adminapi.History, zone string) (n int64) {
	for _, z := range h.Zones {
		if z.Zone == zone {
			for i := range z.Allowed {
				n += z.Allowed[i] + z.Denied[i]
			}
		}
	}
	return n
}
