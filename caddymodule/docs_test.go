package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// docBlocks returns the fenced blocks of a language in the README and docs.
func docBlocks(t *testing.T, lang string) map[string]string {
	t.Helper()
	files, _ := filepath.Glob("../docs/*.md")
	files = append(files, "../README.md")
	fence := regexp.MustCompile("(?ms)^```" + lang + "\n(.*?)^```")
	out := make(map[string]string)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range fence.FindAllStringSubmatch(string(raw), -1) {
			out[filepath.Base(f)+"#"+string(rune('a'+i))] = m[1]
		}
	}
	return out
}

// TestDocLinksAndImagesResolve: every relative link or image in the README
// and docs names a file of the repository, and every image the docs show is
// a screenshot kept as text (an SVG of the page's own markup), not pixels.
func TestDocLinksAndImagesResolve(t *testing.T) {
	files, _ := filepath.Glob("../docs/*.md")
	files = append(files, "../README.md")
	link := regexp.MustCompile(`(!?)\[[^\]]*\]\(([^)\s#]+)(#[^)]*)?\)`)
	images := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(raw), -1) {
			target := m[2]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path := filepath.Join(filepath.Dir(f), target)
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s: %v", filepath.Base(f), target, err)
				continue
			}
			if m[1] == "!" {
				images++
				body, _ := os.ReadFile(path)
				if !strings.HasSuffix(target, ".svg") || !strings.Contains(string(body), "<foreignObject") {
					t.Errorf("%s shows %s: want an SVG screenshot of a page (docs/img/update.sh)", filepath.Base(f), target)
				}
			}
		}
	}
	if images == 0 {
		t.Errorf("the docs show no screenshot")
	}
}

// TestDocCaddyfileExamplesAdapt adapts every Caddyfile example in the
// README and docs: a whole Caddyfile as it is, a site snippet inside a site.
func TestDocCaddyfileExamplesAdapt(t *testing.T) {
	blocks := docBlocks(t, "caddyfile")
	if len(blocks) < 5 {
		t.Fatalf("found %d Caddyfile examples; the docs have more", len(blocks))
	}
	for name, block := range blocks {
		t.Run(name, func(t *testing.T) {
			config := block
			firstLine := strings.SplitN(strings.TrimSpace(block), "\n", 2)[0]
			if firstLine != "{" && !regexp.MustCompile(`^[a-z]+://\S+ \{$|^\S+\.\S+ \{$`).MatchString(firstLine) {
				config = "http://localhost:8080 {\n" + block + "\n}\n" // a snippet of a site
			}
			adapt(t, config)
		})
	}
}

// TestDocJSONExamplesValidate validates every JSON config example: a
// handler inside a server, an app as it is.
func TestDocJSONExamplesValidate(t *testing.T) {
	t.Setenv("TOLLGATE_SECRET", "doc-example-secret-0123456789abcdef")
	checked := 0
	for name, block := range docBlocks(t, "json") {
		var probe map[string]any
		if err := json.Unmarshal([]byte(block), &probe); err != nil {
			t.Errorf("%s: not JSON: %v", name, err)
			continue
		}
		var config string
		switch {
		case probe["handler"] == "tollgate":
			config = `{"admin":{"disabled":true},"apps":{"http":{"servers":{"s":{"listen":["127.0.0.1:0"],"routes":[{"handle":[` + block + `]}]}}}}}`
		case probe["apps"] != nil:
			var apps struct {
				Apps map[string]json.RawMessage `json:"apps"`
			}
			json.Unmarshal([]byte(block), &apps)
			if strings.Contains(string(apps.Apps["tollgate"]), `"cluster"`) {
				continue // would start a cluster node; its settings are checked by the Caddyfile tests
			}
			config = `{"admin":{"disabled":true},"apps":` + mustJSON(t, apps.Apps) + `}`
		default:
			continue // an admin API answer, checked by the admin tests
		}
		checked++
		if err := validateConfig([]byte(config)); err != nil {
			t.Errorf("%s does not validate: %v\n%s", name, err, block)
		}
	}
	if checked < 2 {
		t.Fatalf("validated %d JSON config examples; the docs have at least 2", checked)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docCurl is one curl example of docs/admin-api.md and the JSON shown
// after it, if any.
type docCurl struct {
	line         int
	method, path string
	body         string
	want         string // JSON, or empty
}

// docCurls reads the curl examples of a doc in order.
func docCurls(t *testing.T, file string) []docCurl {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	block := regexp.MustCompile("(?ms)^```(sh|json)\n(.*?)^```")
	var out []docCurl
	for _, m := range block.FindAllStringSubmatchIndex(text, -1) {
		lang, body := text[m[2]:m[3]], text[m[4]:m[5]]
		line := strings.Count(text[:m[0]], "\n") + 1
		if lang == "json" {
			if n := len(out); n > 0 && out[n-1].want == "" && !strings.Contains(text[m[0]-300:m[0]], "\n## ") {
				out[n-1].want = body
			}
			continue
		}
		body = strings.ReplaceAll(body, "\\\n", " ")
		for _, cmd := range strings.Split(strings.TrimSpace(body), "\n") {
			args := shellWords(cmd)
			if len(args) == 0 || args[0] != "curl" {
				t.Fatalf("%s:%d: not a curl command: %s", file, line, cmd)
			}
			c := docCurl{line: line, method: http.MethodGet}
			for i := 1; i < len(args); i++ {
				switch a := args[i]; {
				case a == "-X":
					i++
					c.method = args[i]
				case a == "-d":
					i++
					c.body = args[i]
					if c.method == http.MethodGet {
						c.method = http.MethodPost
					}
				case strings.HasPrefix(a, "localhost:2019/"):
					c.path = strings.TrimPrefix(a, "localhost:2019")
				default:
					t.Fatalf("%s:%d: curl option %q the docs test does not know", file, line, a)
				}
			}
			out = append(out, c)
		}
	}
	return out
}

// shellWords splits a command line as sh would, for the quoting the docs
// use: '…' and "…".
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	in, started := rune(0), false
	for _, r := range s {
		switch {
		case in != 0 && r == in:
			in = 0
		case in != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			in, started = r, true
		case r == ' ' || r == '\t':
			if started || cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
				started = false
			}
		default:
			cur.WriteRune(r)
		}
	}
	if started || cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// standaloneAbsent are the status fields a single node leaves out, as the
// doc says; the cluster process tests read them.
var standaloneAbsent = map[string]bool{
	".cluster.fallback_mode": true, ".cluster.fallback_ratio": true, ".cluster.fallback_keys": true,
	".cluster.fallback_activations": true, ".cluster.last_ring_change": true,
}

// policyExtras are fields the doc shows in a later example, "with policy
// in use": an earlier example may leave them out.
var policyExtras = map[string]bool{".reputation": true}

// namedKeys matches the paths of objects whose keys are names.
var namedKeys = regexp.MustCompile(`^\.ring_agreement\.fingerprints$|^\.zones$|^\.zones\.[^.]+\.(caddyfile|overrides|effective)$|^\.challenges$`)

// compareShape reports where got differs from the doc's want in field
// names or JSON types. An array in the doc gives the shape of every
// element (the union of its elements' fields); each of its fields must be
// in some element of the answer.
func compareShape(path string, want, got any, errs *[]string) {
	typeOf := func(v any) string {
		switch v.(type) {
		case map[string]any:
			return "object"
		case []any:
			return "array"
		case string:
			return "string"
		case float64:
			return "number"
		case bool:
			return "boolean"
		}
		return "null"
	}
	if typeOf(want) != typeOf(got) {
		*errs = append(*errs, fmt.Sprintf("%s: the doc shows a %s, the answer has a %s (%v)", path, typeOf(want), typeOf(got), got))
		return
	}
	switch w := want.(type) {
	case map[string]any:
		g := got.(map[string]any)
		if namedKeys.MatchString(path) {
			// Keys are names (of zones, of tiers): every value has the
			// shape of the doc's values.
			var shape any
			for _, wv := range w {
				if m, ok := wv.(map[string]any); ok && shape != nil {
					for k, v := range m {
						shape.(map[string]any)[k] = v
					}
					continue
				}
				if m, ok := wv.(map[string]any); ok {
					shape = map[string]any{}
					for k, v := range m {
						shape.(map[string]any)[k] = v
					}
					continue
				}
				shape = wv
			}
			for k, gv := range g {
				if shape != nil {
					compareShape(path+"."+k, shape, gv, errs)
				}
			}
			return
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				if !standaloneAbsent[path+"."+k] && !policyExtras[path+"."+k] {
					*errs = append(*errs, fmt.Sprintf("%s.%s: in the doc, not in the answer", path, k))
				}
				continue
			}
			compareShape(path+"."+k, wv, gv, errs)
		}
		for k := range g {
			if _, ok := w[k]; !ok && !policyExtras[path+"."+k] {
				*errs = append(*errs, fmt.Sprintf("%s.%s: in the answer, not in the doc", path, k))
			}
		}
	case []any:
		g := got.([]any)
		if len(w) == 0 {
			return
		}
		if len(g) == 0 {
			*errs = append(*errs, fmt.Sprintf("%s: the answer's list is empty; the test should give it something to show", path))
			return
		}
		// The union of the doc's elements is the shape of each element.
		union := map[string]any{}
		objects := true
		for _, e := range w {
			m, ok := e.(map[string]any)
			if !ok {
				objects = false
				break
			}
			for k, v := range m {
				union[k] = v
			}
		}
		if !objects {
			for i, e := range g {
				compareShape(fmt.Sprintf("%s[%d]", path, i), w[0], e, errs)
			}
			return
		}
		seen := map[string]bool{}
		for i, e := range g {
			m, ok := e.(map[string]any)
			if !ok {
				*errs = append(*errs, fmt.Sprintf("%s[%d]: the doc shows objects, the answer has %v", path, i, e))
				continue
			}
			for k, v := range m {
				seen[k] = true
				wv, ok := union[k]
				if !ok {
					*errs = append(*errs, fmt.Sprintf("%s[%d].%s: in the answer, not in the doc", path, i, k))
					continue
				}
				compareShape(fmt.Sprintf("%s[%d].%s", path, i, k), wv, v, errs)
			}
		}
		for k := range union {
			if !seen[k] {
				*errs = append(*errs, fmt.Sprintf("%s[].%s: in the doc, in no element of the answer", path, k))
			}
		}
	}
}

// TestDocCurlExamplesAnswerAsShown runs every curl example of
// docs/admin-api.md, in order, against a real Caddy set up with the doc's
// zones and traffic, and compares each answer's shape with the JSON the
// doc shows after it.
func TestDocCurlExamplesAnswerAsShown(t *testing.T) {
	srv := startCaddy(t, `tollgate {
		reputation {
			penalty 1
		}
	}`, testutil.DocSite)
	testutil.ClearOfWindowEdge(time.Hour, 20*time.Second)
	// api counts a minute: the 3 denials end with it; the denied list's page of 2 needs all 3.
	testutil.ClearOfWindowEdge(time.Minute, 10*time.Second)
	// The traffic the doc's answers describe: alice and bob over the api
	// limit, alice with credits spent and two rooms held, a grant.
	for _, user := range []string{"alice", "bob", "carol"} {
		for range 101 {
			srv.get("/api/x", "X-User", user)
		}
	}
	for range 5 {
		srv.get("/credits/x", "X-User", "alice")
	}
	srv.get("/rooms/x", "X-User", "alice", "X-Room-Id", "r1")
	srv.get("/rooms/x", "X-User", "alice", "X-Room-Id", "r2")
	adminSend(t, srv.Admin, http.MethodPost, "/tollgate/grants", `{"zone": "credits", "key": "alice", "amount": 500, "duration": "168h"}`, nil)
	adminSend(t, srv.Admin, http.MethodPut, "/tollgate/tiers", `{"credits": {"pro": 12000}}`, nil)
	app, err := runningApp()
	if err != nil {
		t.Fatal(err)
	}
	aliceHash := adminapi.HashedID(app.keyHashOf("alice"))
	app.state.history.sample(time.Now()) // a step of history with the traffic above

	curls := docCurls(t, "../docs/admin-api.md")
	if len(curls) < 12 {
		t.Fatalf("found %d curl examples in docs/admin-api.md; it has more", len(curls))
	}
	checked := 0
	for _, c := range curls {
		path := strings.ReplaceAll(c.path, "h:9f86d081884c7d65", aliceHash)
		resp, body := adminRaw(t, srv.Admin, c.method, path, c.body)
		where := fmt.Sprintf("admin-api.md:%d %s %s", c.line, c.method, c.path)
		if resp.StatusCode/100 != 2 {
			t.Errorf("%s: %d %s", where, resp.StatusCode, body)
			continue
		}
		if c.want == "" {
			continue
		}
		var want, got any
		if err := json.Unmarshal([]byte(c.want), &want); err != nil {
			t.Errorf("%s: the doc's JSON does not parse: %v", where, err)
			continue
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Errorf("%s: the answer is not JSON: %v\n%s", where, err, body)
			continue
		}
		var errs []string
		compareShape("", want, got, &errs)
		for _, e := range errs {
			t.Errorf("%s: %s", where, e)
		}
		if len(errs) > 0 {
			t.Logf("%s answered:\n%s", where, body)
		}
		checked++
	}
	if checked < 8 {
		t.Errorf("compared %d answers with the doc; it shows more", checked)
	}
}
