package caddymodule

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/tollgate/tollgate/internal/testutil"
)

// ownChallengePage is an owner's challenge page: their words, the check
// included.
const ownChallengePage = `<!doctype html><html><head><title>Shop check</title></head><body>
<h1>Welcome to the Shop at {{.Host}}</h1>
{{template "tollgate_challenge" .}}
<footer>Quote {{.Reference}} to support@shop.example</footer>
</body></html>`

// TestChallengeTemplateMustIncludeTheCheck: an owner's page without the
// check, one that does not parse, and a file that cannot be read are each
// refused when the config loads, naming the directive, the value and what
// is allowed; the Caddyfile takes template with one file only.
func TestChallengeTemplateMustIncludeTheCheck(t *testing.T) {
	if _, err := parseChallengePage("own", ownChallengePage); err != nil {
		t.Fatalf("a page with the check: %v", err)
	}
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ file, want string }{
		{write("nocheck.html", `<h1>Hello {{.Host}}</h1>`), `does not include {{template "tollgate_challenge" .}}`},
		{write("broken.html", `<h1>{{.Host</h1>`), "parsing:"},
		{write("unknown.html", `{{.Nope}} {{template "tollgate_challenge" .}}`), "rendering:"},
		{filepath.Join(dir, "missing.html"), "want a readable file holding an HTML template"},
	} {
		cfg := adapt(t, `{
	tollgate {
		cookie {
			challenge pow 8 {
				template `+tc.file+`
			}
		}
	}
}
http://127.0.0.1:1 {
	tollgate {
		zone site {
			limit 5 1m
		}
	}
}`)
		err := validateConfig(cfg)
		if err == nil || !strings.Contains(err.Error(), "cookie challenge template \""+tc.file+"\"") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("template %s: %v; want the directive, the file and %q", filepath.Base(tc.file), err, tc.want)
		}
	}
	for input, want := range map[string]string{
		"tollgate {\n cookie {\n challenge pow 8 {\n template\n }\n }\n}":                `challenge template "": takes one argument, the file of the page`,
		"tollgate {\n cookie {\n challenge pow 8 {\n template a b\n }\n }\n}":            `challenge template "a b": takes one argument`,
		"tollgate {\n cookie {\n challenge pow 8 {\n template a\n template b\n }\n }\n}": "template is set twice",
		"tollgate {\n cookie {\n challenge pow 8 {\n page a\n }\n }\n}":                  `unknown setting "page" (allowed: except { <request matchers> }, template <file>)`,
	} {
		if _, err := parseApp(caddyfile.NewTestDispenser(input), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want %q", input, err, want)
		}
	}
	v, err := parseApp(caddyfile.NewTestDispenser("tollgate {\n cookie {\n challenge pow 8 {\n template /etc/caddy/challenge.html\n }\n }\n}"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var app App
	if err := json.Unmarshal(v.(httpcaddyfile.App).Value, &app); err != nil || app.Cookie.Challenge.Template != "/etc/caddy/challenge.html" {
		t.Fatalf("parsed %s (%v)", v.(httpcaddyfile.App).Value, err)
	}
}

var challengeReference = regexp.MustCompile(`id="tollgate-reference">([0-9a-f]{12})<`)

// TestChallengePageNamesTheSiteAndItsReference: the page names the site's
// host (without the port) and shows a reference ID; the log has that
// reference for the page served and for a proof refused, whose 403 names
// it too; an owner's template is served instead of the built-in page, and
// a proof from it earns a session.
func TestChallengePageNamesTheSiteAndItsReference(t *testing.T) {
	own := filepath.Join(t.TempDir(), "challenge.html")
	if err := os.WriteFile(own, []byte(ownChallengePage), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, template string
		want           []string
	}{
		{"built-in", "", []string{"<title>One moment… (127.0.0.1)</title>", "reach <strong>127.0.0.1</strong>", "<noscript>", "<progress"}},
		{"owner's", "template " + own, []string{"Welcome to the Shop at 127.0.0.1", "Quote ", "<noscript>", "<progress"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startCaddy(t, trustLoopback+`
	tollgate {
		cookie {
			challenge pow 8 {
				`+tc.template+`
			}
		}
	}`, challengeSite)
			get := func(ip string) string {
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/page", nil)
				req.Header.Set("Accept", "text/html")
				req.Header.Set("X-Forwarded-For", ip)
				resp := srv.do(req)
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return string(b)
			}
			page := get("203.0.113.140")
			for _, w := range tc.want {
				if !strings.Contains(page, w) {
					t.Errorf("the page lacks %q:\n%s", w, page)
				}
			}
			if strings.Contains(page, ":"+strings.Split(srv.URL, ":")[2]) {
				t.Errorf("the page shows the port")
			}
			ref := challengeReference.FindStringSubmatch(page)
			m := challengeFields.FindStringSubmatch(page)
			if ref == nil || m == nil {
				t.Fatalf("no reference or form on the page:\n%s", page)
			}
			if !strings.Contains(page, ref[1]) || !strings.Contains(srv.logs(), `"msg":"challenge served","reference":"`+ref[1]+`"`) {
				t.Errorf("reference %s not in the log of pages served", ref[1])
			}
			// From another network: refused, the 403 and the log name the reference.
			form := url.Values{"token": {m[1]}, "answer": {solve(t, m[1], 8)}, "return": {"/page"}}
			post := func(ip string) (*http.Response, string) {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+ChallengePath, strings.NewReader(form.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("X-Forwarded-For", ip)
				noRedirect := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
				resp, err := noRedirect.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp, string(b)
			}
			if resp, _ := post("198.51.100.140"); resp.StatusCode != http.StatusForbidden {
				t.Fatalf("proof from another network: %d; want 403", resp.StatusCode)
			}
			if logs := srv.logs(); !strings.Contains(logs, `"msg":"challenge refused","reference":"`+ref[1]+`","reason":"network"`) {
				t.Errorf("the refusal is not logged with reference %s and its reason", ref[1])
			}
			if !strings.Contains(srv.logs(), "(reference "+ref[1]+")") {
				t.Errorf("the 403's error does not name reference %s", ref[1])
			}
			if resp, _ := post("203.0.113.140"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Set-Cookie") == "" {
				t.Errorf("proof from the page's network: %d, Set-Cookie %q; want 303 with a session", resp.StatusCode, resp.Header.Get("Set-Cookie"))
			}
		})
	}
}

// TestChallengePageInABrowser loads a challenged page in headless
// Chromium. At the highest difficulty (2^32 hashes on average: the proof
// is not found while the test looks) the page names the site, shows the
// reference the log has, and its progress bar moves; at a low one it lands
// on the page asked for. Both with the built-in page and an owner's
// template. With JavaScript off, the page says why it cannot go on.
// Screenshots are kept as test artifacts.
func TestChallengePageInABrowser(t *testing.T) {
	own := filepath.Join(t.TempDir(), "challenge.html")
	if err := os.WriteFile(own, []byte(ownChallengePage), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, template, heading string }{
		{"built-in", "", "One moment…"},
		{"owner", "template " + own, "Welcome to the Shop at 127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			globals := func(difficulty string) string {
				return "\ttollgate {\n\t\tcookie {\n\t\t\tchallenge pow " + difficulty + " {\n\t\t\t\t" + tc.template + "\n\t\t\t}\n\t\t}\n\t}"
			}
			srv := startCaddy(t, globals("32"), challengeSite)
			b := startBrowser(t)
			b.run("navigating", chromedp.Navigate(srv.URL+"/page?x=1"))
			var heading, ref, status string
			b.eval(`document.querySelector("h1").innerText`, &heading)
			b.eval(`document.getElementById("tollgate-reference").innerText`, &ref)
			if heading != tc.heading || !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(ref) {
				t.Errorf("challenge page: heading %q, reference %q; want %q and 12 hex digits", heading, ref, tc.heading)
			}
			if !strings.Contains(srv.logs(), `"reference":"`+ref+`"`) {
				t.Errorf("the reference the browser shows, %q, is not in the log", ref)
			}
			b.until("the progress bar moving", `document.getElementById("tollgate-progress").value > 0`)
			b.eval(`document.getElementById("tollgate-status").innerText`, &status)
			if status != "Checking your browser. This takes a second and happens once." {
				t.Errorf("status while checking: %q", status)
			}
			b.screenshot("challenge-" + tc.name + ".png")

			srv.reload(globals("8"), challengeSite)
			// The reload closes the connections of the server it replaces:
			// a navigation on one the browser kept is tried again.
			testutil.Eventually(t, 10*time.Second, "navigating after the reload", func() bool {
				return chromedp.Run(b.ctx, chromedp.Navigate(srv.URL+"/page?x=2")) == nil
			})
			// The page solves and navigates on its own: a read during the
			// navigation fails and is tried again.
			testutil.Eventually(t, 45*time.Second, "landing on the page asked for", func() bool {
				var body string
				err := chromedp.Run(b.ctx, chromedp.Evaluate(`document.body ? document.body.innerText : ""`, &body))
				return err == nil && strings.HasPrefix(body, "session /page?x=2")
			})
			b.mu.Lock()
			defer b.mu.Unlock()
			if len(b.errors) > 0 {
				t.Errorf("the page reported errors: %v", b.errors)
			}
		})
	}

	t.Run("no JavaScript", func(t *testing.T) {
		srv := startCaddy(t, `	tollgate {
		cookie {
			challenge pow 8
		}
	}`, challengeSite)
		b := startBrowser(t)
		b.run("turning JavaScript off", emulation.SetScriptExecutionDisabled(true))
		b.run("navigating", chromedp.Navigate(srv.URL+"/page"))
		var text string
		b.eval(`document.body.innerText`, &text)
		if !strings.Contains(text, "Turn JavaScript on for 127.0.0.1") || !strings.Contains(text, "Reference: ") || strings.Contains(text, "Checking your browser") {
			t.Errorf("with JavaScript off the page says:\n%s\nwant the <noscript> explanation and the reference, and no word of a check that is not running", text)
		}
		var bar bool
		b.eval(`document.getElementById("tollgate-progress").hidden`, &bar)
		if !bar {
			t.Errorf("with JavaScript off the progress bar is shown")
		}
		b.screenshot("challenge-noscript.png")
	})
}
