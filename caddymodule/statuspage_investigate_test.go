package caddymodule

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// TestStatusPageToInvestigateWith opens the status page of a single node
// in headless Chromium after a key was denied by its limit and another
// blocked by an operator: the page shows the zones with their settings and
// totals, counts denials by reason, lists the
// decision with its reason, and its lookup box finds a client by its raw
// key (hashed in a request body) with its counters and its decision. No
// raw key reaches Caddy's log. A screenshot is kept as a test artifact.
func TestStatusPageToInvestigateWith(t *testing.T) {
	b := startBrowser(t)
	srv := startCaddy(t, "", testutil.AdminSite)
	app, err := runningApp()
	if err != nil {
		t.Fatal(err)
	}
	const alice, mallory = "alice-secret-55", "mallory-secret-56"
	aliceID, malloryID := adminapi.HashedID(app.keyHashOf(alice)), adminapi.HashedID(app.keyHashOf(mallory))
	if status, body := adminSend(t, srv.Admin, http.MethodPost, adminapi.PathDecisions,
		`{"key": "`+mallory+`", "action": "block", "reason": "card testing"}`, nil); status != http.StatusCreated {
		t.Fatalf("POST decision: %d %s", status, body)
	}
	// The hour the page shows is kept in 10 s steps; a step is taken here
	// before and after the traffic, so that the page opens on a step that
	// holds it rather than waiting for the node's next one.
	app.state.history.sample(time.Now())
	for range 7 { // api allows 5 an hour
		srv.get("/", "X-API-Key", alice)
	}
	srv.get("/", "X-API-Key", mallory)
	app.state.history.sample(time.Now())

	relay := testutil.StartUIRelay(t, strings.TrimPrefix(srv.Admin, "http://"))
	b.run("opening the page", chromedp.Navigate(relay+"/"))
	b.until("the decision listed", fmt.Sprintf(`(() => { const r = document.querySelector('#decisions tr.decision[data-key=%q]');
		return r !== null && r.dataset.action === "block" && r.textContent.includes("card testing") && r.textContent.includes("every zone"); })()`, malloryID))
	b.until("no cluster section on a single node", `document.getElementById("members-section").hidden === true`)
	b.until("the zones with their settings and totals", `(() => { const r = document.querySelector('#zones tr.zone[data-zone="api"]');
		return r !== null && r.querySelector(".limit").textContent === "5 / 3600 s" && r.textContent.includes("{http.request.header.X-API-Key}")
			&& Number(r.querySelector(".allowed").textContent) >= 5 && Number(r.querySelector(".denied").textContent) >= 2
			&& r.querySelector(".ratio").textContent.endsWith(" %"); })()`)
	b.until("denials counted by reason", `(() => { const r = document.querySelector('#reasons tr.reason[data-zone="api"]');
		return r !== null && Number(r.querySelector(".client").textContent) >= 2 && Number(r.querySelector(".decision").textContent) >= 1; })()`)
	b.until("the denied key listed as a key", fmt.Sprintf(`(() => { const r = document.querySelector('#denied tr.denied[data-key=%q]');
		return r !== null && r.dataset.budget === "client"; })()`, aliceID))

	lookup := func(key string) {
		b.run("looking up "+key, chromedp.SetValue("#lookup-key", key, chromedp.ByID), chromedp.Click(`#lookup button`, chromedp.ByQuery))
	}
	lookup(alice)
	b.until("alice found by her raw key", fmt.Sprintf(`(() => { const id = document.getElementById("lookup-id");
		const api = document.querySelector('#lookup-result tr.lookup-zone[data-zone="api"]');
		return id !== null && id.textContent === %q && api !== null && api.textContent.includes("denied"); })()`, aliceID))
	b.screenshot("tollgate-status-page-investigate.png")
	lookup(mallory)
	b.until("mallory's block shown", fmt.Sprintf(`(() => { const id = document.getElementById("lookup-id");
		const d = document.querySelector("#lookup-result li.lookup-decision");
		return id !== null && id.textContent === %q && d !== null && d.textContent.startsWith("block in every zone until") && d.textContent.includes("card testing"); })()`, malloryID))
	lookup("nobody-looked-up")
	b.until("an unseen key shown with no counters", `document.querySelector("#lookup-result .empty") !== null`)

	if logs := srv.logs(); strings.Contains(logs, alice) || strings.Contains(logs, mallory) {
		t.Errorf("a raw key reached Caddy's log")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		t.Errorf("the page reported: %s", e)
	}
}
