package limiter

import (
	"testing"
	"time"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("time zone %s not available: %v", name, err)
	}
	return loc
}

// A monthly quota resets on the 1st at midnight, not 30 days after the
// epoch's alignment: spent on the 31st, it is back a second later.
func TestCalendarMonthResetsOnTheFirst(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Quota: 3, Window: Month.Nominal(), Calendar: &Calendar{Unit: Month}}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	e := New(Config{})
	req := Request{Key: 1, Limit: l}
	end := time.Date(2025, time.January, 31, 23, 59, 59, 0, time.UTC)
	for range 3 {
		if !e.TakeOne(end, req).Allowed {
			t.Fatal("a fresh month refused")
		}
	}
	r := e.TakeOne(end, req)
	if r.Allowed || r.RetryAfter != time.Second {
		t.Fatalf("4th request on Jan 31 23:59:59: %+v; want denied, retry in 1s", r)
	}
	if r := e.TakeOne(end.Add(time.Second), req); !r.Allowed || r.Remaining != 2 {
		t.Fatalf("on Feb 1 00:00:00: %+v; want allowed with 2 left", r)
	}
	// February's window is 28 days long; its reset is at March 1st.
	_, r = l.apply(entry{}, time.Date(2025, time.February, 14, 0, 0, 0, 0, time.UTC).UnixNano(), 1)
	if want := 15 * 24 * time.Hour; r.Reset != want {
		t.Fatalf("reset on Feb 14: %s; want %s (to March 1st)", r.Reset, want)
	}
	// The same instants under fixed 31-day windows from the epoch would
	// not have reset: the calendar is what makes it.
	if s, w := l.span(end.UnixNano()); time.Unix(0, s).UTC() != time.Date(2025, time.January, 1, 0, 0, 0, 0, time.UTC) || time.Duration(w) != 31*24*time.Hour {
		t.Fatalf("January's window: from %s for %s", time.Unix(0, s).UTC(), time.Duration(w))
	}
}

// Days follow the time zone's midnights, 23 hours long on the day its
// clocks go forward and 25 on the day they go back.
func TestCalendarDayAcrossADSTChange(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	l := Limit{Algorithm: FixedWindow, Quota: 1, Window: Day.Nominal(), Calendar: &Calendar{Unit: Day, Location: berlin}}
	e := New(Config{})
	req := Request{Key: 1, Limit: l}
	// 2025-03-30: clocks go from 02:00 to 03:00.
	morning := time.Date(2025, time.March, 30, 0, 30, 0, 0, berlin)
	if !e.TakeOne(morning, req).Allowed {
		t.Fatal("first request of the day refused")
	}
	r := e.TakeOne(morning, req)
	if want := 22*time.Hour + 30*time.Minute; r.Allowed || r.RetryAfter != want {
		t.Fatalf("second request at 00:30 on the short day: %+v; want denied for %s (23h day)", r, want)
	}
	if r := e.TakeOne(time.Date(2025, time.March, 30, 23, 59, 59, 0, berlin), req); r.Allowed {
		t.Fatal("admitted again before the local midnight")
	}
	if r := e.TakeOne(time.Date(2025, time.March, 31, 0, 0, 0, 0, berlin), req); !r.Allowed {
		t.Fatal("refused after the local midnight")
	}
	// 2025-10-26: clocks go from 03:00 back to 02:00; the day has 25 hours.
	if _, w := l.span(time.Date(2025, time.October, 26, 12, 0, 0, 0, berlin).UnixNano()); time.Duration(w) != 25*time.Hour {
		t.Fatalf("the day clocks go back lasts %s; want 25h", time.Duration(w))
	}
}

// Weeks are ISO weeks: Monday to Monday in the time zone.
func TestCalendarWeekStartsOnMonday(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	c := &Calendar{Unit: Week, Location: ny}
	start, length := c.Span(time.Date(2025, time.March, 9, 12, 0, 0, 0, ny)) // a Sunday, the day DST starts
	if want := time.Date(2025, time.March, 3, 0, 0, 0, 0, ny); !start.Equal(want) || length != 7*24*time.Hour-time.Hour {
		t.Fatalf("week of Sunday March 9: from %s for %s; want from %s for 167h (clocks go forward that Sunday)", start.In(ny), length, want)
	}
	start, length = c.Span(time.Date(2025, time.March, 10, 0, 0, 0, 0, ny)) // Monday
	if want := time.Date(2025, time.March, 10, 0, 0, 0, 0, ny); !start.Equal(want) || length != 7*24*time.Hour {
		t.Fatalf("week of Monday March 10: from %s for %s", start.In(ny), length)
	}
	start, length = c.Span(time.Date(2025, time.March, 5, 0, 0, 0, 0, ny))
	if length != 7*24*time.Hour-time.Hour || !start.Equal(time.Date(2025, time.March, 3, 0, 0, 0, 0, ny)) {
		t.Fatalf("the week clocks go forward lasts %s; want 167h", length)
	}
}

// A sliding window over months weighs last month's count by how much of
// this month is still ahead.
func TestCalendarSlidingWindowWeighsLastMonth(t *testing.T) {
	l := Limit{Algorithm: SlidingWindow, Quota: 10, Window: Month.Nominal(), Calendar: &Calendar{Unit: Month}}
	e := New(Config{})
	req := Request{Key: 1, Limit: l}
	for range 10 {
		e.TakeOne(time.Date(2025, time.March, 20, 0, 0, 0, 0, time.UTC), req)
	}
	// April 16 00:00 is half of April's 30 days: March's 10 weigh 5.
	r := e.TakeOne(time.Date(2025, time.April, 16, 0, 0, 0, 0, time.UTC), req)
	if !r.Allowed || r.Remaining != 4 {
		t.Fatalf("mid-April after a full March: %+v; want allowed with 4 left", r)
	}
	// Early in April, March still weighs almost all of its 10.
	e2 := New(Config{})
	for range 10 {
		e2.TakeOne(time.Date(2025, time.March, 20, 0, 0, 0, 0, time.UTC), req)
	}
	if r := e2.TakeOne(time.Date(2025, time.April, 1, 1, 0, 0, 0, time.UTC), req); r.Allowed {
		t.Fatalf("an hour into April after a full March: %+v; want denied", r)
	}
}

func TestCalendarValidate(t *testing.T) {
	cal := &Calendar{Unit: Month}
	if err := (Limit{Algorithm: TokenBucket, Quota: 5, Window: Month.Nominal(), Calendar: cal}).Validate(); err == nil {
		t.Error("a token bucket with a calendar window was accepted")
	}
	if err := (Limit{Quota: 5, Window: time.Hour, Calendar: &Calendar{Unit: 9}}).Validate(); err == nil {
		t.Error("an unknown calendar unit was accepted")
	}
	for _, name := range []string{"day", "week", "month"} {
		if u, err := ParseCalendarUnit(name); err != nil || u.String() != name {
			t.Errorf("ParseCalendarUnit(%q) = %v, %v", name, u, err)
		}
	}
	if _, err := ParseCalendarUnit("year"); err == nil {
		t.Error("year accepted as a calendar unit")
	}
}
