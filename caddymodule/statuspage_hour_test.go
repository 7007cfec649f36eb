package caddymodule

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/testutil"
)

// TestStatusPageShowsTheHourBeforeItOpened opens the status page in
// headless Chromium after traffic the node counted before anybody looked:
// the page charts it at once from the hour the node keeps (not from the
// moment it opened), with a time axis labelled every 10 minutes, a value
// axis with its unit, at a readable size; the zones table gives the last
// hour's totals and deny ratio beside the zone's settings; denials are
// split by reason (client, ban); challenge outcomes are counted. A
// screenshot is kept as a test artifact.
func TestStatusPageShowsTheHourBeforeItOpened(t *testing.T) {
	b := startBrowser(t)
	srv := startCaddy(t, trustLoopback+`
	tollgate {
		cookie {
			challenge pow 8
		}
	}`, `
	tollgate {
		tier_from {http.request.header.X-User-Tier}
		zone api {
			limit 3 1h
			key {http.request.header.X-API-Key}
			tier pro 50
			ban 1h
			match {
				path /api
			}
		}
	}
	respond "ok"`)
	testutil.ClearOfWindowEdge(time.Hour, 20*time.Second)
	app, err := runningApp()
	if err != nil {
		t.Fatal(err)
	}
	for range 6 { // 3 allowed, 1 denied by the limit (and banned), 2 by the ban
		srv.get("/api", "X-API-Key", "k1")
	}
	for range 4 {
		srv.get("/api", "X-API-Key", "k2", "X-User-Tier", "pro")
	}
	form := url.Values{"token": {"forged"}, "answer": {"0"}, "return": {"/"}}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+ChallengePath, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a made-up proof: %v %v; want 403", resp, err)
	}
	app.state.history.sample(time.Now()) // the step ends before the page opens

	relay := testutil.StartUIRelay(t, strings.TrimPrefix(srv.Admin, "http://"))
	b.run("opening the page", chromedp.Navigate(relay+"/"))
	b.until("the api chart with the hour's traffic at once", `(() => { const c = document.querySelector('.chart[data-zone="api"]');
		return c !== null && c.dataset.sum === "10" && c.querySelector("polyline.series-allowed") !== null
			&& c.querySelector("polyline.series-denied") !== null && c.querySelector("polyline.series-ban") !== null; })()`)
	b.until("axes with time and values, at a readable size", `(() => { const c = document.querySelector('.chart[data-zone="api"]');
		const svg = c.querySelector("svg"), w = svg.getBoundingClientRect().width;
		const times = [...svg.querySelectorAll("text.tick-x")].map(e => e.textContent);
		const values = [...svg.querySelectorAll("text.tick-y")];
		const tick = values[0].getBoundingClientRect().height;
		return w >= 500 && times.length >= 5 && times.every(s => /^\d\d:\d\d$/.test(s)) && values.length === 5
			&& svg.textContent.includes("requests per second") && svg.textContent.includes("last hour") && tick >= 11; })()`)
	b.until("the zone's settings and the hour's totals", `(() => { const r = document.querySelector('#zones tr.zone[data-zone="api"]');
		return r !== null && r.querySelector(".limit").textContent === "3 / 3600 s" && r.textContent.includes("pro 50")
			&& r.querySelector(".allowed").textContent === "7" && r.querySelector(".denied").textContent === "3"
			&& r.querySelector(".ratio").textContent === "30.0 %"; })()`)
	b.until("denials by reason in the hour", `(() => { const r = document.querySelector('#reasons tr.reason[data-zone="api"]');
		return r !== null && r.querySelector(".client").textContent === "1" && r.querySelector(".ban").textContent === "2"
			&& r.querySelector(".total").textContent === "3"; })()`)
	b.until("the challenge's outcomes", `(() => { const r = document.querySelector('#challenges tr.challenge[data-result="malformed"]');
		return r !== null && r.querySelector(".hour").textContent === "1" && document.querySelector('.chart[data-challenges]') !== null; })()`)
	b.screenshot("tollgate-status-page-hour.png")
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		t.Errorf("the page reported: %s", e)
	}
}
