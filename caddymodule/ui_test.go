package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	cdpage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/testutil"
)

// chromiumPath finds Chromium; without it the browser test skips, unless
// CI is set: there it must run.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed, and CI is set: .ci/run installs it (apt-get install chromium)")
	}
	t.Skip("chromium is not installed")
	return ""
}

// browser is a headless Chromium driven by the test, collecting the
// errors its pages report.
type browser struct {
	t      *testing.T
	ctx    context.Context
	mu     sync.Mutex
	errors []string
	accept atomic.Bool // how the next confirm() is answered
	asked  atomic.Int32
}

func startBrowser(t *testing.T) *browser {
	t.Helper()
	exe := chromiumPath(t)
	profile, err := os.MkdirTemp("", "tollgate-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
		os.RemoveAll(profile) // Chromium may still be writing: best effort
	})
	b := &browser{t: t, ctx: ctx}
	chromedp.ListenTarget(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError || ev.Type == runtime.APITypeAssert {
				b.fail("console.%s: %s", ev.Type, consoleArgs(ev.Args))
			}
		case *runtime.EventExceptionThrown:
			b.fail("exception: %s", ev.ExceptionDetails.Error())
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.LevelError {
				b.fail("%s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
			}
		case *cdpage.EventJavascriptDialogOpening:
			b.asked.Add(1)
			accept := b.accept.Load()
			go chromedp.Run(ctx, cdpage.HandleJavaScriptDialog(accept))
		}
	})
	if err := chromedp.Run(ctx, log.Enable(), runtime.Enable()); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return b
}

func consoleArgs(args []*runtime.RemoteObject) string {
	var parts []string
	for _, a := range args {
		if a.Value != nil {
			parts = append(parts, string(a.Value))
		} else {
			parts = append(parts, a.Description)
		}
	}
	return strings.Join(parts, " ")
}

func (b *browser) fail(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errors = append(b.errors, fmt.Sprintf(format, args...))
}

func (b *browser) run(what string, actions ...chromedp.Action) {
	b.t.Helper()
	if err := chromedp.Run(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// until waits for a JavaScript expression to be true on the page.
func (b *browser) until(what, expr string) {
	b.t.Helper()
	var ok bool
	if err := chromedp.Run(b.ctx, chromedp.Poll(expr, &ok, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		b.t.Fatalf("%s: did not happen: %v", what, err)
	}
}

func (b *browser) eval(expr string, out any) {
	b.t.Helper()
	b.run("evaluating "+expr, chromedp.Evaluate(expr, out))
}

// screenshot keeps the page as it is now as a test artifact.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	var shot []byte
	b.run("screenshot", chromedp.FullScreenshot(&shot, 100)) // quality 100: a PNG
	path := filepath.Join(artifactDir(b.t), name)
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

// artifactDir is where a test keeps what a person may want to look at:
// $TOLLGATE_ARTIFACTS, or the test's temporary directory.
func artifactDir(t *testing.T) string {
	if dir := os.Getenv("TOLLGATE_ARTIFACTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

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

	// Traffic through node0: allowed and denied requests of zone api.
	b.until("a first reading of the counters", `document.querySelector(".chart") !== null || document.querySelector("#charts .empty") !== null`)
	for i := range 10 {
		procs[0].get("/", fmt.Sprintf("ui-ok-%d", i))
	}
	for range 4 {
		procs[0].get("/", "ui-denied")
	}
	b.until("the api chart moved", `(() => { const c = document.querySelector('.chart[data-zone="api"]');
		return c !== null && Number(c.dataset.sum) > 0 && c.querySelector("polyline.series-deny") !== null; })()`)

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
