package cluster

import (
	"fmt"
	"sync"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Calendar windows on the wire: a unit byte (0: fixed-length windows)
// and, for a calendar, the IANA name of its time zone ("" for UTC). The
// receiver looks the name up in its own time zone database, once per
// name: two nodes of one cluster share a calendar by its name.

// maxCalendars bounds the calendars a node keeps looked up; a peer naming
// more is answered by looking each further one up again.
const maxCalendars = 256

// calendars are the calendars decoded so far, by unit and zone name, so
// that a zone's requests share one *limiter.Calendar and the time zone
// database is read once per name.
var calendars = struct {
	mu sync.Mutex
	m  map[calendarKey]*limiter.Calendar
}{m: map[calendarKey]*limiter.Calendar{}}

type calendarKey struct {
	unit limiter.CalendarUnit
	zone string
}

func encodeCalendar(e *encoder, c *limiter.Calendar) {
	if c == nil {
		e.u8(0)
		return
	}
	e.u8(byte(c.Unit))
	if c.Location == nil || c.Location == time.UTC {
		e.str("")
		return
	}
	e.str(c.Location.String())
}

// decodeCalendar reads a calendar: nil for fixed-length windows. An
// unknown unit, or a time zone this node does not know, is an error that
// names it: the sender's limit cannot be counted as it meant it.
func decodeCalendar(d *decoder) *limiter.Calendar {
	unit := limiter.CalendarUnit(d.u8())
	if d.err != nil || unit == 0 {
		return nil
	}
	zone := d.str()
	if d.err != nil {
		return nil
	}
	if unit.Nominal() == 0 {
		d.err = fmt.Errorf("unknown calendar unit %d (allowed: 1 day, 2 week, 3 month)", unit)
		return nil
	}
	k := calendarKey{unit, zone}
	calendars.mu.Lock()
	c, ok := calendars.m[k]
	calendars.mu.Unlock()
	if ok {
		return c
	}
	loc := time.UTC
	if zone != "" {
		if zone == "Local" {
			d.err = fmt.Errorf("calendar time zone %q: not an IANA name; the nodes' local zones may differ", zone)
			return nil
		}
		var err error
		if loc, err = time.LoadLocation(zone); err != nil {
			d.err = fmt.Errorf("calendar time zone %q: not a time zone this node knows: %w", zone, err)
			return nil
		}
	}
	c = &limiter.Calendar{Unit: unit, Location: loc}
	calendars.mu.Lock()
	if prev, ok := calendars.m[k]; ok {
		c = prev
	} else if len(calendars.m) < maxCalendars {
		calendars.m[k] = c
	}
	calendars.mu.Unlock()
	return c
}
