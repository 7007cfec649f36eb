package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/cluster/core"
	"github.com/tollgate/tollgate/limiter"
)

// What a zone asks beyond counting crosses the wire: a request's longest
// wait and calendar, a result's wait and next-quota time, a settlement's
// instant and mode.
func TestCodecCarriesDelayCalendarAndSettlements(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	for _, cal := range []*limiter.Calendar{nil, {Unit: limiter.Month}, {Unit: limiter.Week, Location: berlin}, {Unit: limiter.Day, Location: time.UTC}} {
		lim := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 5, Window: time.Minute}
		if cal != nil {
			lim.Window = cal.Unit.Nominal()
		}
		lim.Calendar = cal
		req := limiter.Request{Key: 7, Zone: 2, Limit: lim, Cost: 2, MaxDelay: 1500 * time.Millisecond}
		e := &encoder{}
		encodeZoneReq(e, &req)
		got, err := decodeZoneReq(&decoder{b: e.b})
		if err != nil {
			t.Fatalf("%v: %v", cal, err)
		}
		if got.MaxDelay != req.MaxDelay || got.Cost != 2 {
			t.Errorf("longest wait %s, cost %d; want %s, 2", got.MaxDelay, got.Cost, req.MaxDelay)
		}
		switch {
		case cal == nil:
			if got.Limit.Calendar != nil {
				t.Errorf("a fixed-length window came back as calendar %+v", got.Limit.Calendar)
			}
		case got.Limit.Calendar == nil || got.Limit.Calendar.Unit != cal.Unit:
			t.Errorf("calendar %+v came back as %+v", cal, got.Limit.Calendar)
		default:
			want := "UTC"
			if cal.Location != nil {
				want = cal.Location.String()
			}
			if got.Limit.Calendar.Location.String() != want {
				t.Errorf("calendar in %s came back in %s", want, got.Limit.Calendar.Location)
			}
			// Decisions at fixed instants: the same windows on both sides.
			at := time.Date(2026, 3, 31, 23, 0, 0, 0, time.UTC)
			s1, l1 := cal.Span(at)
			s2, l2 := got.Limit.Calendar.Span(at)
			if !s1.Equal(s2) || l1 != l2 {
				t.Errorf("window at %s: sender %s+%s, receiver %s+%s", at, s1, l1, s2, l2)
			}
		}
	}
	res := limiter.Result{Allowed: true, Remaining: 3, Reset: time.Second, Delay: 250 * time.Millisecond, Next: 100 * time.Millisecond}
	e := &encoder{}
	encodeZoneRes(e, &res)
	d := &decoder{b: e.b}
	if got := decodeZoneRes(d); d.err != nil || got != res {
		t.Errorf("result %+v came back as %+v (%v)", res, got, d.err)
	}
	for _, mode := range []core.Mode{core.ModeRefund, core.ModeCharge} {
		tr := core.Transfer{Seq: 3, To: 1, Mode: mode, At: 1234567, Reqs: []limiter.Request{{Key: 1, Zone: 1, Limit: limiter.Limit{Quota: 3, Window: time.Hour}, Cost: 2}}}
		e := &encoder{}
		encodeMessage(e, tr)
		got, err := decodeRequest(msgTransfer, &decoder{b: e.b})
		if err != nil || got.(core.Transfer).Mode != mode || got.(core.Transfer).At != tr.At || got.(core.Transfer).Reqs[0].Cost != 2 {
			t.Errorf("settlement %s: got %+v (%v)", mode, got, err)
		}
	}
}

// What no node could count as meant is refused with a reason: an unknown
// calendar unit or time zone, a negative wait, an unknown transfer mode.
func TestCodecRefusesWhatItCannotCount(t *testing.T) {
	lim := limiter.Limit{Algorithm: limiter.FixedWindow, Quota: 5, Window: limiter.Month.Nominal(), Calendar: &limiter.Calendar{Unit: limiter.Month}}
	encode := func(mutate func(b []byte) []byte, req limiter.Request) []byte {
		e := &encoder{}
		encodeZoneReq(e, &req)
		return mutate(e.b)
	}
	same := func(b []byte) []byte { return b }
	calAt := 8 + 8 + 1 + 4 + 8 + 4 + 4 + 8 + 8 // where the calendar's unit byte is
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"unknown unit", encode(func(b []byte) []byte { b[calAt] = 9; return b }, limiter.Request{Key: 1, Limit: lim}), "unknown calendar unit 9"},
		{"unknown zone", encode(func(b []byte) []byte {
			return append(b[:calAt+1], append([]byte{byte(len("Mars/Olympus_Mons"))}, "Mars/Olympus_Mons"...)...)
		}, limiter.Request{Key: 1, Limit: lim}), `time zone "Mars/Olympus_Mons"`},
		{"local zone", encode(func(b []byte) []byte { return append(b[:calAt+1], append([]byte{5}, "Local"...)...) }, limiter.Request{Key: 1, Limit: lim}), "not an IANA name"},
		{"negative wait", encode(same, limiter.Request{Key: 1, Limit: lim, MaxDelay: 0}), ""},
		{"calendar on a token bucket", encode(same, limiter.Request{Key: 1, Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Quota: 5, Window: lim.Window, Calendar: lim.Calendar}}), "calendar windows are for"},
	} {
		if tc.name == "negative wait" {
			// A wait above MaxWindow reads as out of range (a negative one
			// is the same bits, read as unsigned beyond any bound).
			e := &encoder{}
			r := limiter.Request{Key: 1, Limit: lim}
			encodeZoneReq(e, &r)
			b := e.b
			for i := range 8 {
				b[calAt-8+i] = 0xff
			}
			tc.b, tc.want = b, "longest wait"
		}
		_, err := decodeZoneReq(&decoder{b: tc.b})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	e := &encoder{}
	encodeZoneRes(e, &limiter.Result{Allowed: true, Delay: -time.Second})
	d := &decoder{b: e.b}
	decodeZoneRes(d)
	if d.err != nil {
		t.Errorf("an encoder clamps a negative wait to zero; decoding it failed: %v", d.err)
	}
	b := e.b
	for i := range 8 {
		b[1+8+8+8+i] = 0xff
	}
	d = &decoder{b: b}
	decodeZoneRes(d)
	if d.err == nil || !strings.Contains(d.err.Error(), "below zero") {
		t.Errorf("a negative wait in a result: got %v, want an error", d.err)
	}
	tr := &encoder{}
	encodeTransfer(tr, &core.Transfer{Mode: core.ModeCharge + 1})
	if _, err := decodeRequest(msgTransfer, &decoder{b: tr.b}); err == nil || !strings.Contains(err.Error(), "unknown transfer mode") {
		t.Errorf("an unknown transfer mode: got %v", err)
	}
}
