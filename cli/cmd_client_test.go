package cli

import (
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/testutil"
)

// TestCLIWarnsOfANearlyHashedID resets an ID copied from the logs a digit
// short: the API takes it for a raw key, and the CLI says so, instead of a
// bare success that lets nobody through.
func TestCLIWarnsOfANearlyHashedID(t *testing.T) {
	testutil.TollgateBinary(t)
	srv := startCaddy(t, testutil.AdminSite)
	addr := srv.Admin
	for _, tc := range []struct {
		args []string
		warn bool
	}{
		{[]string{"reset", "h:9f86d081884c7d6"}, true},
		{[]string{"reset", "h:9f86d081884c7d6z"}, true},
		{[]string{"client", "h:zz"}, true},
		{[]string{"grant", "revoke", "api", "h:1"}, true},
		{[]string{"reset", "h:9f86d081884c7d65"}, false},
		{[]string{"reset", "alice"}, false},
	} {
		_, errOut, _ := testutil.CLI(t, append(tc.args, "--address", addr)...)
		if got := strings.Contains(errOut, "is not a hashed ID"); got != tc.warn {
			t.Errorf("caddy tollgate %v: warned %v (%s); want %v", tc.args, got, errOut, tc.warn)
		}
	}
}
