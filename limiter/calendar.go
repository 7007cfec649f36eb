package limiter

import (
	"fmt"
	"time"
)

// CalendarUnit is the length of a calendar window.
type CalendarUnit uint8

// Calendar units.
const (
	// Day is a calendar day: from midnight to midnight of the time zone,
	// 23 or 25 hours on the days its clocks change.
	Day CalendarUnit = iota + 1
	// Week is an ISO week: from Monday's midnight to the next Monday's.
	Week
	// Month is a calendar month: from the 1st's midnight to the next 1st's.
	Month
)

var calendarNames = [...]string{Day: "day", Week: "week", Month: "month"}

// String returns the configuration name of u: day, week or month.
func (u CalendarUnit) String() string {
	if u >= Day && int(u) < len(calendarNames) {
		return calendarNames[u]
	}
	return fmt.Sprintf("calendar(%d)", u)
}

// ParseCalendarUnit returns the unit with the given configuration name.
func ParseCalendarUnit(name string) (CalendarUnit, error) {
	for u := Day; int(u) < len(calendarNames); u++ {
		if calendarNames[u] == name {
			return u, nil
		}
	}
	return 0, fmt.Errorf("unknown calendar unit %q (allowed: day, week, month)", name)
}

// Nominal is the Window a Limit with this unit carries: the unit's
// longest length (25 hours, 7 days and 25 hours' worth, 31 days), so that
// anything that keeps state for a Window keeps it long enough.
func (u CalendarUnit) Nominal() time.Duration {
	switch u {
	case Day:
		return 25 * time.Hour
	case Week:
		return 7*24*time.Hour + time.Hour
	case Month:
		return 31*24*time.Hour + time.Hour
	}
	return 0
}

// Calendar aligns windows to the calendar of a time zone. A Calendar is
// not changed once a Limit holds it, and may be shared.
type Calendar struct {
	Unit CalendarUnit
	// Location is the time zone whose midnights start the windows; nil
	// means UTC.
	Location *time.Location
}

func (c *Calendar) validate() error {
	if c.Unit < Day || int(c.Unit) >= len(calendarNames) {
		return fmt.Errorf("unknown calendar unit %d (allowed: day, week, month)", c.Unit)
	}
	return nil
}

// span returns the calendar window that contains the instant ns (Unix
// nanoseconds): its start and its length.
func (c *Calendar) span(ns int64) (start, length int64) {
	loc := c.Location
	if loc == nil {
		loc = time.UTC
	}
	t := time.Unix(0, ns).In(loc)
	y, m, d := t.Date()
	var from, to time.Time
	switch c.Unit {
	case Week:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		from = time.Date(y, m, d-back, 0, 0, 0, 0, loc)
		to = time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	case Month:
		from = time.Date(y, m, 1, 0, 0, 0, 0, loc)
		to = time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	default:
		from = time.Date(y, m, d, 0, 0, 0, 0, loc)
		to = time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	}
	return from.UnixNano(), to.UnixNano() - from.UnixNano()
}

// Span returns the calendar window that contains t: its start and length.
func (c *Calendar) Span(t time.Time) (time.Time, time.Duration) {
	start, length := c.span(t.UnixNano())
	return time.Unix(0, start), time.Duration(length)
}
