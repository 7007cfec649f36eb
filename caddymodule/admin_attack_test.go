package caddymodule

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
)

// TestDeniedUntilIsNeverEarly lists keys denied until instants within a
// second: denied_until, to the second, is never before the key is let
// through, as retry_after_seconds is not.
func TestDeniedUntilIsNeverEarly(t *testing.T) {
	srv := startCaddy(t, "", adminSite)
	app, err := runningApp()
	if err != nil {
		t.Fatal(err)
	}
	z := app.zonesNamed("api")[0]
	now := time.Now()
	base := now.Add(time.Hour).Truncate(time.Second)
	untils := map[string]time.Time{}
	for i, frac := range []time.Duration{0, time.Nanosecond, 400 * time.Millisecond, time.Second - time.Nanosecond} {
		key := uint64(1000 + i)
		app.state.ops.denied.record(z.Name, z.scope, key, base.Add(frac), now)
		untils[adminapi.HashedID(key)] = base.Add(frac)
	}
	t.Cleanup(func() {
		for i := range 4 {
			app.state.ops.denied.forget(uint64(1000+i), nil)
		}
	})
	var list adminapi.DeniedList
	if status, body := adminDo(t, srv.Admin, "GET", "/tollgate/denied?zone=api", &list); status != 200 {
		t.Fatalf("GET /tollgate/denied: %d %s", status, body)
	}
	seen := 0
	for _, it := range list.Items {
		until, ok := untils[it.Key]
		if !ok {
			continue
		}
		seen++
		shown, err := time.Parse(time.RFC3339, it.Until)
		if err != nil {
			t.Fatalf("denied_until %q: %v", it.Until, err)
		}
		if shown.Before(until) || shown.Sub(until) >= time.Second {
			t.Errorf("denied until %s: denied_until %s; want the next whole second, never earlier", until.Format(time.RFC3339Nano), it.Until)
		}
	}
	if seen != len(untils) {
		t.Fatalf("listed %d of the %d keys: %+v", seen, len(untils), list.Items)
	}
}
