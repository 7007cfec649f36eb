package caddymodule

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	cdpage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
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
	b.untilWithin(30*time.Second, what, expr)
}

// untilWithin is until with its own deadline, for what waits on the nodes'
// 10 s history steps.
func (b *browser) untilWithin(d time.Duration, what, expr string) {
	b.t.Helper()
	var ok bool
	if err := chromedp.Run(b.ctx, chromedp.Poll(expr, &ok, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		b.t.Fatalf("%s: did not happen within %v: %v", what, d, err)
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
	var svg string
	b.eval(snapshotSVG, &svg)
	svgPath := strings.TrimSuffix(path, ".png") + ".svg"
	if err := os.WriteFile(svgPath, []byte(svg), 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s, and as text: %s", path, svgPath)
}

// snapshotSVG renders the page as it is now into an SVG image that holds
// the page's own markup and styles (a foreignObject), without its scripts:
// a screenshot that is text, which the docs can show and a diff can read.
// A <noscript> is left out where the page ran its scripts.
const snapshotSVG = `(() => {
	const page = document.documentElement.cloneNode(true);
	page.querySelectorAll("script").forEach(e => e.remove());
	if (document.querySelector("script") !== null) page.querySelectorAll("noscript").forEach(e => e.remove());
	const from = document.querySelectorAll("input, progress"), to = page.querySelectorAll("input, progress");
	from.forEach((e, i) => to[i].setAttribute("value", e.value));
	const w = document.documentElement.scrollWidth, h = document.documentElement.scrollHeight;
	return '<svg xmlns="http://www.w3.org/2000/svg" width="' + w + '" height="' + h + '" viewBox="0 0 ' + w + ' ' + h + '">' +
		'<foreignObject x="0" y="0" width="' + w + '" height="' + h + '">' + new XMLSerializer().serializeToString(page) +
		'</foreignObject></svg>\n';
})()`

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
