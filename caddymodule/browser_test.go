package caddymodule

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/testutil"
)

// TestChallengeInARealBrowser loads a page in headless Chromium with the
// proof-of-work challenge on: the challenge page loads, solves, gets the
// session cookie, lands on the URL first asked for, and the next request
// is counted by the session.
func TestChallengeInARealBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	srv := startCaddy(t, `	tollgate {
		cookie {
			challenge pow 12
		}
	}`, `
	tollgate {
		zone site {
			limit 5 10m
			match {
				not path /favicon.ico
			}
		}
	}
	header Content-Type text/plain
	respond "{http.tollgate.client_kind} {http.request.uri} {http.tollgate.remaining}"`)
	testutil.ClearOfWindowEdge(10*time.Minute, 60*time.Second)

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	defer cancelTimeout()

	page := srv.URL + "/page?x=1"
	var body, location string
	if err := chromedp.Run(ctx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("loading the page in Chromium: %v", err)
	}
	// The page solves and navigates on its own: read it until it shows
	// the session (a read during a navigation fails and is retried).
	testutil.Eventually(t, 45*time.Second, "the challenge solved in Chromium", func() bool {
		err := chromedp.Run(ctx,
			chromedp.Evaluate(`document.body ? document.body.innerText : ""`, &body),
			chromedp.Location(&location),
		)
		return err == nil && strings.HasPrefix(body, "session ")
	})
	// The challenge page was the first request (1 of 5 spent by the
	// fingerprint); the session has its own budget: 4 left after this one.
	if location != page || strings.TrimSpace(body) != "session /page?x=1 4" {
		t.Fatalf("after the challenge: at %q showing %q; want %q showing the session", location, body, page)
	}
	if err := chromedp.Run(ctx,
		chromedp.Reload(),
		chromedp.Evaluate(`document.body.innerText`, &body),
	); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(body) != "session /page?x=1 3" {
		t.Fatalf("next request: %q; want it counted by the session (3 left)", body)
	}
}
