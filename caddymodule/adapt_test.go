package caddymodule

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden adapt files with the current output")

// adaptSeparator divides a golden file into its Caddyfile and its JSON.
const adaptSeparator = "\n----------\n"

// TestAdaptGolden adapts each testdata/adapt/*.caddyfile file and compares
// the JSON with the part after the separator. Run with -update to rewrite.
func TestAdaptGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/adapt/*.caddyfile")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			input, want, _ := strings.Cut(string(raw), adaptSeparator)
			got := indentJSON(t, adapt(t, input))
			if *update {
				if err := os.WriteFile(file, []byte(input+adaptSeparator+got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != want {
				t.Errorf("adapted JSON differs from the golden file\ngot:\n%s", got)
			}
		})
	}
}

// TestAdaptExample keeps Caddyfile.example, the README's demo, adapting to
// the JSON in testdata/Caddyfile.example.json.
func TestAdaptExample(t *testing.T) {
	input, err := os.ReadFile("../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	got := indentJSON(t, adapt(t, string(input)))
	const golden = "testdata/Caddyfile.example.json"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("Caddyfile.example adapts differently from %s\ngot:\n%s", golden, got)
	}
}

// TestDocExamplesAdapt adapts every Caddyfile under docs/examples, so the
// examples the documentation points to cannot rot.
func TestDocExamplesAdapt(t *testing.T) {
	files, _ := filepath.Glob("../docs/examples/*/*.caddyfile")
	more, _ := filepath.Glob("../docs/examples/*.caddyfile")
	files = append(files, more...)
	if len(files) == 0 {
		t.Fatal("no examples found")
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if cfg := adapt(t, string(raw)); !bytes.Contains(cfg, []byte(`"tollgate"`)) {
			t.Errorf("%s adapts to a config without tollgate", file)
		}
	}
}

func indentJSON(t testing.TB, raw []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "\t"); err != nil {
		t.Fatalf("adapted config is not JSON: %v", err)
	}
	return buf.String() + "\n"
}
