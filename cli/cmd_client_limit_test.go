package cli

import (
	"regexp"
	"testing"

	"github.com/tollgate/tollgate/internal/testutil"
)

// TestCLIClientShowsTheKeysOwnLimitAndBan: `client` shows the limit of the
// key's tier (--tier; the default tier's without it), not the zone's, and
// says plainly when the key is banned and for how long.
func TestCLIClientShowsTheKeysOwnLimitAndBan(t *testing.T) {
	testutil.TollgateBinary(t)
	srv := startCaddy(t, `
	tollgate {
		tier_from {http.request.header.X-User-Tier}
		zone api {
			limit 2 1h
			key {http.request.header.X-API-Key}
			tier pro 5
			ban 1h
		}
	}
	respond "ok"`)
	for range 6 {
		srv.get(t, "/", "X-API-Key", "k1", "X-User-Tier", "pro")
	}
	for _, tc := range []struct {
		args []string
		want []string // regexps
	}{
		{[]string{"client", "k1", "--tier", "pro"}, []string{`tier\s+pro\n`, `(?m)^api\s+sliding_window\s+5 \(zone 2\)\s+0\s+`, `banned \d+s`}},
		{[]string{"client", "k1"}, []string{`tier\s+\(default\)`, `--tier`, `(?m)^api\s+sliding_window\s+2\s+0\s+`, `banned \d+s`}},
	} {
		out, errOut, code := testutil.CLI(t, append(tc.args, "--address", srv.Admin)...)
		if code != 0 {
			t.Errorf("%v: exit %d\n%s%s", tc.args, code, out, errOut)
			continue
		}
		for _, w := range tc.want {
			if !regexp.MustCompile(w).MatchString(out) {
				t.Errorf("%v: output lacks %s:\n%s", tc.args, w, out)
			}
		}
	}
	_, errOut, code := testutil.CLI(t, "client", "k1", "--tier", "p p", "--address", srv.Admin)
	if code != exitRefused || !regexp.MustCompile(`tier name \\?"p p\\?"`).MatchString(errOut) {
		t.Errorf("--tier 'p p': exit %d, %s; want refused, naming the tier", code, errOut)
	}
}
