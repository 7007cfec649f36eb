package caddymodule

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/tollgate/tollgate/internal/testutil"
)

func TestOutcomeSettingsInTheCaddyfile(t *testing.T) {
	h := new(Handler)
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`tollgate {
		form_max_size 8KiB
		zone login {
			limit 5 15m
			key {http.tollgate.form.username}
			count_response {
				status 401 4xx
				header X-Login-Failed *
			}
			ban 1h
		}
		zone search {
			limit 1000000 1mo
			window_timezone Europe/Berlin
			cost {http.request.header.X-Cost}
			cost_header X-Cost
		}
		zone api {
			limit 10 1s
			count_response status 5xx
			delay 500ms
			delay_queue 20
		}
		zone daily {
			limit 100 1d
			cost 3
		}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	login, search, api, daily := h.Zones[0], h.Zones[1], h.Zones[2], h.Zones[3]
	if h.FormMaxSize != 8192 {
		t.Errorf("form_max_size: %d", h.FormMaxSize)
	}
	if rm := login.CountResponse; rm == nil || len(rm.StatusCode) != 2 || rm.StatusCode[1] != 4 || rm.Headers["X-Login-Failed"] == nil || time.Duration(login.Ban) != time.Hour {
		t.Errorf("zone login: %+v %+v", login, login.CountResponse)
	}
	if search.Calendar != "month" || search.Window != 0 || search.WindowTimezone != "Europe/Berlin" || search.Cost != "{http.request.header.X-Cost}" || search.CostHeader != "X-Cost" {
		t.Errorf("zone search: %+v", search)
	}
	if rm := api.CountResponse; rm == nil || len(rm.StatusCode) != 1 || rm.StatusCode[0] != 5 || time.Duration(api.Delay) != 500*time.Millisecond || api.DelayQueue != 20 {
		t.Errorf("zone api: %+v", api)
	}
	if daily.Calendar != "day" || daily.Cost != "3" {
		t.Errorf("zone daily: %+v", daily)
	}
}

// Every new setting refuses bad values, naming the zone, the value and
// what is allowed.
func TestOutcomeSettingsRefuseBadValues(t *testing.T) {
	zone := func(body string) string { return "tollgate {\n zone login {\n" + body + "\n }\n}" }
	for _, tc := range []struct{ name, input, want string }{
		{"count_response empty", zone("limit 5 1m\ncount_response {\n}"), `zone "login": count_response needs a status or a header`},
		{"count_response bad status", zone("limit 5 1m\ncount_response {\nstatus abc\n}"), `zone "login": count_response: bad status value 'abc'`},
		{"count_response status out of range", zone("limit 5 1m\ncount_response status 700"), `zone "login": count_response status 700: must be a status code from 100 to 599`},
		{"count_response unknown", zone("limit 5 1m\ncount_response {\nbody x\n}"), `zone "login": count_response: unrecognized response matcher body`},
		{"cost negative", zone("limit 5 1m\ncost -1"), `zone "login": cost "-1" must be a whole number from 0 to 2147483647, or placeholders`},
		{"cost not a number", zone("limit 5 1m\ncost lots"), `zone "login": cost "lots" must be a whole number`},
		{"cost above the limit", zone("limit 5 1m\ncost 6"), `zone "login": cost "6" must be at most the limit, 5`},
		{"cost without argument", zone("limit 5 1m\ncost"), `zone "login": cost takes 1 argument(s), got 0`},
		{"cost_header bad", zone("limit 5 1m\ncost_header \"X Cost\""), `zone "login": cost_header "X Cost": must be a header name`},
		{"ban too short", zone("limit 5 1m\nban 10ms"), `zone "login": ban 10ms: must be from 1s to 8784h0m0s`},
		{"ban negative", zone("limit 5 1m\nban -1h"), `zone "login": ban -1h0m0s: must be from 1s`},
		{"ban no unit", zone("limit 5 1m\nban 60"), `zone "login": ban "60" needs a unit`},
		{"delay too long", zone("limit 5 1m\ndelay 2h"), `zone "login": delay 2h0m0s: must be from 1ms to 1h0m0s`},
		{"delay garbage", zone("limit 5 1m\ndelay soon"), `zone "login": delay "soon" is not a duration`},
		{"delay_queue zero", zone("limit 5 1m\ndelay 1s\ndelay_queue 0"), `zone "login": delay_queue "0" must be a whole number from 1 to 100000`},
		{"delay_queue without delay", zone("limit 5 1m\ndelay_queue 5"), `zone "login": delay_queue 5 is for zones with delay`},
		{"calendar with token bucket", zone("limit 5 1mo\nalgorithm token_bucket"), `zone "login": calendar windows (month) are for sliding_window and fixed_window, not token_bucket`},
		{"timezone unknown", zone("limit 5 1d\nwindow_timezone Mars/Olympus"), `zone "login": window_timezone "Mars/Olympus": not a time zone`},
		{"timezone without calendar", zone("limit 5 1h\nwindow_timezone UTC"), `zone "login": window_timezone "UTC" is for calendar windows`},
		{"two weeks", zone("limit 5 2w"), `zone "login": limit window "2w" is not a duration`},
		{"ban on a lease zone", zone("concurrent 4\nban 1h"), `zone "login": ban is for limit zones, not concurrent ones`},
		{"form_max_size zero", "tollgate {\n form_max_size 0\n zone a {\n limit 1 1m\n }\n}", `form_max_size "0": must be a whole number from 1 to 16777216`},
		{"form_max_size garbage", "tollgate {\n form_max_size big\n zone a {\n limit 1 1m\n }\n}", `form_max_size "big": must be a whole number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := new(Handler).UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v\nwant one containing %q", err, tc.want)
			}
		})
	}
}

// Calendar windows: RateLimit-Policy's w is the current window's length,
// a month's in seconds.
func TestCalendarPolicyShowsTheCurrentWindow(t *testing.T) {
	srv := startCaddy(t, "", `
	tollgate {
		zone monthly {
			limit 1000 1mo
		}
	}
	respond "ok"`)
	// A month (UTC) ends on an hour's edge: the request and the month computed below must fall in one.
	testutil.ClearOfWindowEdge(time.Hour, 5*time.Second)
	resp := srv.get("/")
	now := time.Now().UTC()
	start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	days := int(start.AddDate(0, 1, 0).Sub(start).Hours()) * 3600
	if want := `"monthly";q=1000;w=` + itoa(days); resp.Header.Get("RateLimit-Policy") != want || resp.StatusCode != http.StatusOK {
		t.Fatalf("RateLimit-Policy %q; want %q", resp.Header.Get("RateLimit-Policy"), want)
	}
	checkRateLimitHeaders(t, resp)
}

func itoa(n int) string { return strconv.Itoa(n) }
