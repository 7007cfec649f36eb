package caddymodule

import (
	"runtime"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/fingerprint"
)

// TestKeptHeaderTextNeverChanges checks the verdict's own text: the first
// RateLimit value it keeps is backed by the verdict and stays as it was
// after later decisions on the same request (a second tollgate handler),
// whose values are copies; a value too long for the verdict is copied too.
func TestKeptHeaderTextNeverChanges(t *testing.T) {
	v := new(verdict)
	buf := []byte(`"site";r=41;t=60`)
	first := v.keep(buf)
	copy(buf, `"api";r=0;t=9999`) // the caller's scratch, reused
	second := v.keep(buf)
	long := v.keep([]byte(strings.Repeat("x", verdictText+1)))
	if first != `"site";r=41;t=60` || second != `"api";r=0;t=9999` || len(long) != verdictText+1 {
		t.Fatalf("kept %q, %q and %d bytes", first, second, len(long))
	}
	if n := testing.AllocsPerRun(100, func() {
		keptVerdict = new(verdict) // on the heap, as a request's verdict is
		keptText = keptVerdict.keep(buf)
	}); n != 1 {
		t.Errorf("a fresh verdict's first value: %v allocations with the verdict's own; want 1", n)
	}
}

var (
	keptVerdict *verdict
	keptText    string
)

// TestVerdictPlaceholdersAreItsReplace checks the func value a verdict
// hands Caddy's replacer, which is laid out by hand: calling it is calling
// that verdict's replace, for every placeholder, each verdict its own,
// after the verdict is written again, and after a garbage collection in
// which the func value was the only thing that held the verdict.
func TestVerdictPlaceholdersAreItsReplace(t *testing.T) {
	names := []string{"decision", "zone", "remaining", "reset", "retry_after", "client_id", "client_kind",
		"ip_pressure", "squeezed", "source", "tier", "reputation", "unknown"}
	z := &Zone{Name: "api"}
	check := func(v *verdict, f caddy.ReplacerFunc) {
		t.Helper()
		for _, n := range names {
			got, gotOK := f(placeholderPrefix + n)
			want, wantOK := v.replace(placeholderPrefix + n)
			if got != want || gotOK != wantOK {
				t.Errorf("%s: the func value gives %v, %v; replace gives %v, %v", n, got, gotOK, want, wantOK)
			}
		}
		if got, ok := f("http.request.uri"); ok {
			t.Errorf("another placeholder answered: %v", got)
		}
	}
	a := &verdict{decision: decisionAllow, zone: z, remaining: 41, reset: 60, tier: "free",
		identity: fingerprint.Identity{Kind: fingerprint.KindFingerprint, Digest: 0xfeed}, source: cluster.SourceOwner}
	b := &verdict{decision: decisionDeny, zone: z, retryAfter: 9, score: 0.5, scoreKnown: true}
	fa, fb := a.placeholders(), b.placeholders()
	check(a, fa)
	check(b, fb)
	a.decision, a.remaining = decisionDryRunDeny, 0 // a second handler's decision
	check(a, fa)
	if got, _ := fa(placeholderPrefix + "decision"); got != decisionDryRunDeny {
		t.Errorf("after the verdict changed: %v", got)
	}

	kept := (&verdict{decision: decisionAllow, zone: z, tier: "kept"}).placeholders()
	runtime.GC()
	runtime.GC()
	garbage := make([][]byte, 0, 1000)
	for range 1000 { // reuse whatever was freed
		garbage = append(garbage, make([]byte, 512))
	}
	if got, ok := kept(placeholderPrefix + "tier"); !ok || got != "kept" || len(garbage) != 1000 {
		t.Errorf("after a collection: %v, %v", got, ok)
	}
}
