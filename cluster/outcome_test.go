package cluster

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testutil"
	"github.com/tollgate/tollgate/limiter"
)

// A delay zone keyed to a key another node owns waits instead of being
// denied: the owner books the slot and says how long to wait; with more
// than the longest wait ahead it denies, as at home. The next-quota time
// comes back too.
func TestDelayAtAPeerOwnerWaitsInsteadOfDenying(t *testing.T) {
	nodes := startNodes(t, 3)
	via := nodes[0]
	key := keyOwnedBy(t, via.Ring(), nodes[1].Name(), 0)
	lim := limiter.Limit{Algorithm: limiter.TokenBucket, Quota: 2, Window: time.Second}
	req := []limiter.Request{{Key: key, Zone: 1, Limit: lim, MaxDelay: 1200 * time.Millisecond}}
	res := make([]limiter.Result, 1)
	for i := range 2 {
		ok, src := via.Take(time.Now(), req, res)
		if !ok || src != SourcePeer || res[0].Delay != 0 {
			t.Fatalf("request %d within the burst: allowed %v by %v, wait %s", i, ok, src, res[0].Delay)
		}
		if res[0].Next <= 0 || res[0].Next > 500*time.Millisecond {
			t.Errorf("request %d: next quota in %s; want within the 500ms a token takes", i, res[0].Next)
		}
	}
	// The bucket is empty: the next two are booked a token apart.
	var waits []time.Duration
	for range 2 {
		ok, src := via.Take(time.Now(), req, res)
		if !ok || src != SourcePeer {
			t.Fatalf("a request a slot frees up for within the longest wait: allowed %v by %v: %+v", ok, src, res[0])
		}
		waits = append(waits, res[0].Delay)
	}
	if waits[0] <= 0 || waits[0] > 500*time.Millisecond || waits[1] <= waits[0] || waits[1] > time.Second {
		t.Fatalf("waits %v: want two bookings, a token (500ms) apart, the first within 500ms", waits)
	}
	// The next would wait about 1.5s, past the longest wait: denied.
	if ok, _ := via.Take(time.Now(), req, res); ok {
		t.Fatalf("a request booked %s ahead, beyond the longest wait of 1.2s", res[0].Delay)
	}
}

// A month window at a peer owner is the calendar month: its reset is the
// 1st of the next month at midnight of the zone's time zone, not the end
// of a fixed 31-day window from the epoch.
func TestCalendarWindowAtAPeerOwner(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	nodes := startNodes(t, 3)
	via := nodes[0]
	key := keyOwnedBy(t, via.Ring(), nodes[2].Name(), 0)
	cal := &limiter.Calendar{Unit: limiter.Month, Location: berlin}
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 3, Window: limiter.Month.Nominal(), Calendar: cal}
	req := []limiter.Request{{Key: key, Zone: 1, Limit: lim}}
	res := make([]limiter.Result, 1)
	// A Berlin month ends on an hour's edge: the four takes and the reset checked must fall in one month.
	testutil.ClearOfWindowEdge(time.Hour, 5*time.Second)
	before := time.Now()
	ok, src := via.Take(before, req, res)
	after := time.Now()
	if !ok || src != SourcePeer {
		t.Fatalf("allowed %v by %v", ok, src)
	}
	start, length := cal.Span(before)
	end := start.Add(length)
	if local := start.In(berlin); local.Day() != 1 || local.Hour() != 0 {
		t.Fatalf("test: the month starts %s", start)
	}
	lo, hi := end.Sub(after)-time.Second, end.Sub(before)+time.Second
	if res[0].Reset < lo || res[0].Reset > hi {
		fixed := time.Duration(lim.Window) - time.Duration(before.UnixNano()%int64(lim.Window))
		t.Fatalf("the owner's window resets in %s; want the calendar month's end in %s (a fixed window would end in %s)", res[0].Reset, end.Sub(before), fixed)
	}
	// The limit holds within the month at the owner.
	for range 2 {
		if ok, _ := via.Take(time.Now(), req, res); !ok {
			t.Fatal("denied within the month's quota")
		}
	}
	if ok, _ := via.Take(time.Now(), req, res); ok {
		t.Fatal("a fourth request in a month of three")
	}
}
