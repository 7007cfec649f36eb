package caddymodule

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/internal/testutil"
)

// TestDeniedRecordStaysBoundedAndForgets floods the record of denied keys
// past its bound, at fixed instants: it never holds more than the bound,
// lists only keys still denied, prefers dropping expired ones, and forgets
// a key in the scopes named.
func TestDeniedRecordStaysBoundedAndForgets(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var d deniedRecord
	for i := range maxRecorded {
		until := t0.Add(time.Minute)
		if i < 10 {
			until = t0.Add(time.Second) // these expire first
		}
		d.record("api", "api#1", uint64(i), until, t0)
	}
	d.record("api", "api#1", 5, t0.Add(2*time.Minute), t0) // again: counted, not added
	if n := len(d.list(t0)); n != maxRecorded {
		t.Fatalf("%d listed; want %d", n, maxRecorded)
	}
	later := t0.Add(2 * time.Second)
	for i := range 50 {
		d.record("site", "site#1", uint64(i), later.Add(time.Minute), later)
	}
	if len(d.m) > maxRecorded {
		t.Fatalf("the record holds %d; the bound is %d", len(d.m), maxRecorded)
	}
	byKey := map[recordID]deniedEntry{}
	for _, e := range d.list(later) {
		if e.Until <= later.UnixNano() {
			t.Fatalf("an expired entry is listed: %+v", e)
		}
		byKey[recordID{e.Scope, e.Key}] = e
	}
	if e, ok := byKey[recordID{"api#1", 5}]; ok && e.Denials != 2 {
		t.Errorf("key 5 denied twice shows %d denials", e.Denials)
	}
	if _, ok := byKey[recordID{"site#1", 49}]; !ok {
		t.Error("the newest denial was dropped; want room made for it")
	}
	d.record("site", "site#1", 7, later.Add(time.Minute), later)
	d.forget(7, []string{"api#1"})
	if _, ok := d.m[recordID{"site#1", 7}]; !ok {
		t.Error("forgetting in api#1 dropped the key in site#1")
	}
	d.forget(7, nil)
	if _, ok := d.m[recordID{"site#1", 7}]; ok {
		t.Error("forgetting in every scope kept the key")
	}
}

// TestListPagesRejectBadInput reads page parameters as the list routes do.
func TestListPagesRejectBadInput(t *testing.T) {
	for q, ok := range map[string]bool{
		"":              true,
		"limit=1":       true,
		"limit=1000":    true,
		"limit=1001":    false,
		"limit=0":       false,
		"limit=-3":      false,
		"limit=ten":     false,
		"cursor=%21%21": false,
		"cursor=" + (recordCursor{Scope: "api#1", Key: 9}).encode(): true,
	} {
		_, err := readPage(httptest.NewRequest("GET", "/tollgate/denied?"+q, nil), adminapi.MaxDeniedPage)
		if (err == nil) != ok {
			t.Errorf("?%s: error %v; want ok=%v", q, err, ok)
		}
	}
}

// TestDeniedUntilIsNeverEarly lists keys denied until instants within a
// second: denied_until, to the second, is never before the key is let
// through, as retry_after_seconds is not.
func TestDeniedUntilIsNeverEarly(t *testing.T) {
	srv := startCaddy(t, "", testutil.AdminSite)
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
		app.state.lists.denied.record(z.Name, z.scope, key, base.Add(frac), now)
		untils[adminapi.HashedID(key)] = base.Add(frac)
	}
	t.Cleanup(func() {
		for i := range 4 {
			app.state.lists.denied.forget(uint64(1000+i), nil)
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
