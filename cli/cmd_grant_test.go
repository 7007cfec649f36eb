package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestCLIGrantsOfZonesSharingAName gives a grant in a zone name two
// handlers use: the API answers one grant per zone, and the CLI shows both
// instead of taking the answer for a foreign one after the grant was given.
func TestCLIGrantsOfZonesSharingAName(t *testing.T) {
	srv := startCaddy(t, `
	route /a/* {
		tollgate {
			zone api {
				limit 2 1h
			}
		}
	}
	route /b/* {
		tollgate {
			zone api {
				limit 3 1h
			}
		}
	}
	respond "ok"`)
	addr := srv.Admin
	for _, tc := range []struct {
		what string
		run  subcommand
		args []string
	}{
		{"grant add", runGrantAdd, []string{"api", "bob", "5", "3600"}},
		{"grant show", runGrantShow, []string{"api", "bob"}},
	} {
		var out bytes.Buffer
		c := invocationFor(t, addr, false, &out)
		code, err := tc.run(c, tc.args)
		if code != exitOK || strings.Count(out.String(), "bob") != 2 || strings.Count(out.String(), "api@") != 2 {
			t.Errorf("%s %v: exit %d, %v\n%s; want both zones' grants", tc.what, tc.args, code, err, out.String())
		}
	}
}
