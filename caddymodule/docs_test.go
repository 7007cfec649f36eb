package caddymodule

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
