package caddymodule

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/testutil"
)

// demoGlobal and demoPage are Caddyfile.example's global tollgate options
// and site zones, in front of a page of 31 images (the page a new user
// tried, issue 19).
const demoGlobal = `	tollgate {
		max_keys 100000
		cookie {
			max_age 720h
		}
		ip_pressure {
			threshold 20 10m
			squeeze 0.5
		}
	}`

var demoPage = func() string {
	var imgs strings.Builder
	for i := range 31 {
		fmt.Fprintf(&imgs, "<img src='/asset-%d.svg' width='8' height='8'>", i)
	}
	return `
	tollgate {
		zone site {
			limit 60 1m
		}
		zone api {
			limit 5 10s
			match {
				path /api/*
			}
		}
	}
	@asset path /asset-*
	header @asset Content-Type image/svg+xml
	respond @asset "<svg xmlns='http://www.w3.org/2000/svg' width='8' height='8'><rect width='8' height='8'/></svg>"
	@page not path /asset-*
	header @page Content-Type text/html
	respond "<!DOCTYPE html><title>office</title>` + imgs.String() + `"`
}()

// TestTwentyIdenticalChromiumProfilesBehindOneAddress: an office of 20
// fresh Chromium profiles, identical (one browser, so one fingerprint),
// behind one public address, each opens a page of 31 images under the
// demo's config: each gets a session and every image loads, none refused
// with a 429 (issue 19, finding 6: with two sessions per fingerprint, the
// fourth visitor in a minute got broken images).
func TestTwentyIdenticalChromiumProfilesBehindOneAddress(t *testing.T) {
	chromium := chromiumPath(t)
	srv := startCaddy(t, trustLoopback+"\n"+demoGlobal, demoPage)
	testutil.ClearOfWindowEdge(time.Minute, 30*time.Second)

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	defer cancelAlloc()
	root, cancelRoot := chromedp.NewContext(alloc)
	defer cancelRoot()
	if err := chromedp.Run(root); err != nil { // the browser itself
		t.Fatalf("starting chromium: %v", err)
	}
	deadline, cancelDeadline := context.WithTimeout(root, 2*time.Minute)
	defer cancelDeadline()

	for i := range 20 {
		// A fresh profile: its own browser context (no cookie, no cache),
		// in a window of its own (Chromium opens no tab of a new context
		// in another's window).
		var tab target.ID
		var profile cdp.BrowserContextID
		if err := chromedp.Run(root, chromedp.ActionFunc(func(ctx context.Context) error {
			ctx = cdp.WithExecutor(ctx, chromedp.FromContext(ctx).Browser) // browser-wide commands
			var err error
			if profile, err = target.CreateBrowserContext().Do(ctx); err != nil {
				return err
			}
			tab, err = target.CreateTarget("about:blank").WithBrowserContextID(profile).WithNewWindow(true).Do(ctx)
			return err
		})); err != nil {
			t.Fatalf("profile %d: %v", i+1, err)
		}
		ctx, cancel := chromedp.NewContext(deadline, chromedp.WithTargetID(tab))
		var loaded, broken int
		var cookies []*network.Cookie
		err := chromedp.Run(ctx,
			network.Enable(),
			// The office's NAT address, as the proxy in front reports it.
			network.SetExtraHTTPHeaders(network.Headers{"X-Forwarded-For": "198.51.100.30"}),
			chromedp.Navigate(srv.URL+"/"),
			chromedp.Poll(`[...document.images].every(i => i.complete)`, nil, chromedp.WithPollingTimeout(20*time.Second)),
			chromedp.Evaluate(`[...document.images].filter(i => i.naturalWidth > 0).length`, &loaded),
			chromedp.Evaluate(`[...document.images].filter(i => i.naturalWidth === 0).length`, &broken),
			chromedp.ActionFunc(func(ctx context.Context) error {
				var err error
				cookies, err = network.GetCookies().WithURLs([]string{srv.URL + "/"}).Do(ctx)
				return err
			}),
		)
		cancel()
		chromedp.Run(root, chromedp.ActionFunc(func(ctx context.Context) error {
			return target.DisposeBrowserContext(profile).Do(cdp.WithExecutor(ctx, chromedp.FromContext(ctx).Browser))
		}))
		if err != nil {
			t.Fatalf("profile %d: %v", i+1, err)
		}
		session := false
		for _, c := range cookies {
			session = session || c.Name == "__tollgate"
		}
		if loaded != 31 || broken != 0 || !session {
			t.Fatalf("profile %d of 20: %d of 31 images loaded, %d broken, session cookie %v; want all 31 and a session", i+1, loaded, broken, session)
		}
	}
	for k, n := range scrape(t, srv.Admin) {
		if strings.HasPrefix(k, "tollgate_denials_total{") && n != 0 {
			t.Errorf("%s = %v; want no denial", k, n)
		}
	}
}
