package caddymodule

import (
	"fmt"
	"strings"
	"testing"
)

// twoSharedSites is a config of two sites, each declaring the shared zone
// x with the given handler and zone lines.
func twoSharedSites(t *testing.T, handlerA, zoneA, handlerB, zoneB string) []byte {
	t.Helper()
	site := func(host, handler, zone string) string {
		return fmt.Sprintf(`http://%s:8080 {
	tollgate {
		%s
		zone x {
			shared
			%s
		}
	}
	respond "%s"
}
`, host, handler, zone, host)
	}
	return adapt(t, "{\n\tadmin off\n}\n"+site("a.test", handlerA, zoneA)+site("b.test", handlerB, zoneB))
}

// A trial declaration of a shared zone would spend the budget the other
// declarations enforce (the counter is one): a client's trial requests on
// one site would get it denied on the other. Such a config is refused.
func TestSharedZoneTrialInOnePlaceOnlyIsRefused(t *testing.T) {
	for _, c := range []struct{ name, handlerA, zoneA string }{
		{"zone dry_run", "", "limit 3 1m\n\t\t\tdry_run"},
		{"handler dry_run", "dry_run", "limit 3 1m"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := validateConfig(twoSharedSites(t, c.handlerA, c.zoneA, "", "limit 3 1m"))
			if err == nil {
				t.Fatal("validate accepted a shared zone that is a trial in one site and enforced in the other")
			}
			for _, want := range []string{`shared zone "x"`, "dry_run"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %s", err, want)
				}
			}
		})
	}
	// A trial everywhere is fine: no declaration enforces the counter.
	if err := validateConfig(twoSharedSites(t, "dry_run", "limit 3 1m", "", "limit 3 1m\n\t\t\tdry_run")); err != nil {
		t.Fatalf("validate refused a shared zone that is a trial everywhere: %v", err)
	}
}

// A token bucket's default burst is its limit: spelling it out changes
// nothing, so two declarations that differ only in that agree.
func TestSharedZoneExplicitDefaultBurstAgrees(t *testing.T) {
	tb := "limit 3 1m\n\t\t\talgorithm token_bucket"
	if err := validateConfig(twoSharedSites(t, "", tb, "", tb+"\n\t\t\tburst 3")); err != nil {
		t.Fatalf("validate refused burst 3 beside the default burst of limit 3: %v", err)
	}
	if err := validateConfig(twoSharedSites(t, "", tb, "", tb+"\n\t\t\tburst 4")); err == nil {
		t.Fatal("validate accepted burst 4 beside the default burst of limit 3")
	}
}
