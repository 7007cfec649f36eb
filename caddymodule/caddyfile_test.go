package caddymodule

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	h := new(Handler)
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`tollgate {
		zone api {
			limit 100 1m
			key {http.request.header.X-API-Key}
			match {
				path /api/*
			}
		}
		zone burst {
			limit 10 1s
			algorithm token_bucket
			burst 40
			shared
		}
		dry_run
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if !h.DryRun || len(h.Zones) != 2 {
		t.Fatalf("parsed %+v", h)
	}
	api, burst := h.Zones[0], h.Zones[1]
	if api.Name != "api" || api.Limit != 100 || time.Duration(api.Window) != time.Minute ||
		api.Key != "{http.request.header.X-API-Key}" || api.Algorithm != "" || api.MatchRaw["path"] == nil || api.Shared {
		t.Errorf("zone api parsed as %+v", api)
	}
	if burst.Name != "burst" || burst.Limit != 10 || time.Duration(burst.Window) != time.Second ||
		burst.Algorithm != "token_bucket" || burst.Burst != 40 || !burst.Shared {
		t.Errorf("zone burst parsed as %+v", burst)
	}
}

func TestUnmarshalCaddyfileErrors(t *testing.T) {
	zone := func(body string) string { return "tollgate {\n zone api {\n" + body + "\n }\n}" }
	for _, tc := range []struct {
		name, input, want string
	}{
		{"limit zero", zone("limit 0 1m"), `limit "0" must be a whole number from 1 to 2147483647`},
		{"limit negative", zone("limit -5 1m"), `limit "-5" must be a whole number from 1`},
		{"limit not an integer", zone("limit 1.5 1m"), `limit "1.5" must be a whole number`},
		{"limit not a number", zone("limit many 1m"), `limit "many" must be a whole number`},
		{"limit absurd", zone("limit 3000000000 1m"), `limit "3000000000" must be a whole number from 1 to 2147483647`},
		{"limit one argument", zone("limit 100"), "limit takes 2 argument(s), got 1: limit <N> <window>"},
		{"limit three arguments", zone("limit 100 1m 5"), "limit takes 2 argument(s), got 3"},
		{"window zero", zone("limit 10 0s"), `limit window "0s" must be from 1ms to 8784h0m0s`},
		{"window negative", zone("limit 10 -1m"), `limit window "-1m" must be from 1ms`},
		{"window without unit", zone("limit 10 60"), `limit window "60" needs a unit, e.g. 30s, 1m, 1h or 1d`},
		{"window garbage", zone("limit 10 soon"), `limit window "soon" is not a duration`},
		{"window too long", zone("limit 10 400d"), `limit window "400d" must be from 1ms to 8784h0m0s`},
		{"limit missing", zone("key {http.request.host}"), `zone "api": limit is required`},
		{"limit repeated", zone("limit 10 1m\nlimit 20 1m"), `zone "api": limit is given twice`},
		{"key repeated", zone("limit 10 1m\nkey a\nkey b"), `zone "api": key is given twice`},
		{"key without value", zone("limit 10 1m\nkey"), "key takes 1 argument(s), got 0"},
		{"unknown zone subdirective", zone("limit 10 1m\nrate 5"), `zone "api": unknown subdirective "rate" (allowed: limit, key, algorithm, burst, match, shared, dry_run, network_share, concurrent, tier, lease, ttl, count_response, cost, cost_header, ban, delay, delay_queue, window_timezone)`},
		{"unknown algorithm", zone("limit 10 1m\nalgorithm leaky_bucket"), `unknown algorithm "leaky_bucket" (allowed: sliding_window, fixed_window, token_bucket)`},
		{"burst without token bucket", zone("limit 10 1m\nburst 5"), "burst is only allowed with algorithm token_bucket, not sliding_window"},
		{"burst with fixed window", zone("limit 10 1m\nalgorithm fixed_window\nburst 5"), "burst is only allowed with algorithm token_bucket, not fixed_window"},
		{"burst zero", zone("limit 10 1m\nalgorithm token_bucket\nburst 0"), `burst "0" must be a whole number from 1`},
		{"burst not a number", zone("limit 10 1m\nalgorithm token_bucket\nburst lots"), `burst "lots" must be a whole number`},
		{"shared with argument", zone("limit 10 1m\nshared yes"), "shared takes 0 argument(s), got 1"},
		{"match with arguments", zone("limit 10 1m\nmatch path /x"), "match takes a block of request matchers"},
		{"unknown matcher", zone("limit 10 1m\nmatch {\nnosuch x\n}"), "nosuch"},
		{"duplicate zone", "tollgate {\n zone api {\n limit 1 1m\n }\n zone api {\n limit 2 1m\n }\n}", `zone "api" is declared twice`},
		{"zone without name", "tollgate {\n zone {\n limit 1 1m\n }\n}", "zone needs a name"},
		{"zone name with space", "tollgate {\n zone \"my api\" {\n limit 1 1m\n }\n}", `zone name "my api": only letters, digits`},
		{"zone name quote", "tollgate {\n zone a\"b {\n limit 1 1m\n }\n}", "only letters, digits"},
		{"zone extra argument", "tollgate {\n zone api 100 {\n limit 1 1m\n }\n}", `zone "api": unexpected argument "100"`},
		{"no zone", "tollgate {\n}", "no zone configured"},
		{"no block", "tollgate", "no zone configured"},
		{"argument after directive", "tollgate api", `unexpected argument "api"`},
		{"unknown subdirective", "tollgate {\n rate 5\n}", `unknown subdirective "rate" (allowed: zone, dry_run, headers, tier_from, form_max_size)`},
		{"headers unknown", "tollgate {\n headers sometimes\n zone a {\n limit 1 1m\n }\n}", `headers "sometimes": must be always, denied or off`},
		{"headers missing", "tollgate {\n headers\n zone a {\n limit 1 1m\n }\n}", "headers needs a value"},
		{"headers twice", "tollgate {\n headers off\n headers off\n zone a {\n limit 1 1m\n }\n}", "headers is given twice"},
		{"dry_run argument", "tollgate {\n dry_run yes\n zone a {\n limit 1 1m\n }\n}", `dry_run takes no argument, got "yes"`},
		{"dry_run twice", "tollgate {\n dry_run\n dry_run\n zone a {\n limit 1 1m\n }\n}", "dry_run is given twice"},
		{"concurrent zero", zone("concurrent 0"), `concurrent "0" must be a whole number from 1 to 256`},
		{"concurrent too many", zone("concurrent 1000"), `concurrent "1000" must be a whole number from 1 to 256`},
		{"concurrent and limit", zone("concurrent 4\nlimit 10 1m"), "a zone has either limit or concurrent, not both"},
		{"lease without concurrent", zone("limit 10 1m\nlease {http.request.header.X-Room}"), "lease and ttl are for concurrent zones"},
		{"ttl without concurrent", zone("limit 10 1m\nttl 1m"), "lease and ttl are for concurrent zones"},
		{"ttl too short", zone("concurrent 4\nttl 10ms"), `ttl "10ms" must be at least 1s`},
		{"algorithm with concurrent", zone("concurrent 4\nalgorithm fixed_window"), "algorithm and burst are for limit zones"},
		{"tier without tier_from", zone("limit 10 1m\ntier pro 100"), "sets tier limits, but the handler has no tier_from"},
		{"tier one argument", "tollgate {\n tier_from x\n zone api {\n limit 10 1m\n tier pro\n }\n}", "tier takes 2 argument(s), got 1"},
		{"tier limit zero", "tollgate {\n tier_from x\n zone api {\n limit 10 1m\n tier pro 0\n }\n}", `tier pro limit "0" must be a whole number`},
		{"tier twice", "tollgate {\n tier_from x\n zone api {\n limit 10 1m\n tier pro 5\n tier pro 6\n }\n}", "tier pro is given twice"},
		{"tier named default", "tollgate {\n tier_from x\n zone api {\n limit 10 1m\n tier default 5\n }\n}", `tier default: "default" is the zone's own limit (limit or concurrent)`},
		{"tier bad name", "tollgate {\n tier_from x\n zone api {\n limit 10 1m\n tier \"p p\" 5\n }\n}", `tier name "p p"`},
		{"tier over the concurrency cap", "tollgate {\n tier_from x\n zone rooms {\n concurrent 4\n tier pro 1000\n }\n}", "tier pro 1000: must be a whole number from 1 to 256"},
		{"tier_from twice", "tollgate {\n tier_from a\n tier_from b\n zone a {\n limit 1 1m\n }\n}", "tier_from is given twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := new(Handler).UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v\nwant one containing %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "tollgate") && tc.name != "unknown matcher" {
				t.Errorf("error %q does not name the directive", err)
			}
		})
	}
}

func TestParseAppGlobalOption(t *testing.T) {
	v, err := parseApp(caddyfile.NewTestDispenser(`tollgate {
		max_keys 5000
		secret {env.TOLLGATE_SECRET} 0123456789abcdef0123456789abcdef-old
		cookie {
			name sid
			max_age 48h
			issue header X-Human
			issue_limit 5 10m
		}
		ip_prefix 24 56
		ip_pressure {
			threshold 30 5m
			squeeze 0.25
			duration 2h
			max_networks 1000
		}
	}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var app App
	if err := json.Unmarshal(v.(httpcaddyfile.App).Value, &app); err != nil {
		t.Fatal(err)
	}
	c, p := app.Cookie, app.IPPressure
	if app.MaxKeys != 5000 || len(app.Secrets) != 2 || app.Secrets[0] != "{env.TOLLGATE_SECRET}" ||
		c == nil || c.Name != "sid" || time.Duration(c.MaxAge) != 48*time.Hour || c.Issue != "header" || c.IssueHeader != "X-Human" ||
		c.IssueLimit != 5 || time.Duration(c.IssueWindow) != 10*time.Minute ||
		app.IPv4Prefix != 24 || app.IPv6Prefix != 56 ||
		p == nil || p.Threshold != 30 || time.Duration(p.Window) != 5*time.Minute || p.Squeeze != 0.25 ||
		time.Duration(p.Duration) != 2*time.Hour || p.MaxNetworks != 1000 {
		t.Fatalf("parsed %s", v.(httpcaddyfile.App).Value)
	}

	v, err = parseApp(caddyfile.NewTestDispenser(`tollgate {
		secret {env.TOLLGATE_SECRET}
		cluster {
			bind 10.0.0.5:7946
			peer_listen 10.0.0.5:7947
			advertise 203.0.113.5:7946
			join 10.0.0.6:7946 10.0.0.7:7946
			gossip_key {env.TOLLGATE_GOSSIP_KEY}
			peer_timeout 50ms
		}
		fallback open
		fallback_ratio 0.3
	}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var clustered App
	json.Unmarshal(v.(httpcaddyfile.App).Value, &clustered)
	if cl := clustered.Cluster; cl == nil || cl.Bind != "10.0.0.5:7946" || cl.PeerListen != "10.0.0.5:7947" ||
		cl.Advertise != "203.0.113.5:7946" || len(cl.Join) != 2 || cl.GossipKey != "{env.TOLLGATE_GOSSIP_KEY}" ||
		time.Duration(cl.PeerTimeout) != 50*time.Millisecond || clustered.Fallback != "open" || clustered.FallbackRatio != 0.3 {
		t.Fatalf("parsed %s", v.(httpcaddyfile.App).Value)
	}

	v, err = parseApp(caddyfile.NewTestDispenser("tollgate {\n ip_pressure off\n}"), nil)
	if err != nil || !strings.Contains(string(v.(httpcaddyfile.App).Value), `"ip_pressure":{"off":true}`) {
		t.Fatalf("ip_pressure off: %v %v", v, err)
	}

	for input, want := range map[string]string{
		"tollgate {\n max_keys 0\n}":                                                    `max_keys "0": must be a whole number from 1`,
		"tollgate {\n max_keys lots\n}":                                                 `max_keys "lots": must be a whole number`,
		"tollgate {\n max_keys\n}":                                                      "max_keys takes 1 argument, got 0",
		"tollgate {\n max_keys 5 6\n}":                                                  "max_keys takes 1 argument, got 2",
		"tollgate {\n max_keys 5\n max_keys 6\n}":                                       "max_keys is given twice",
		"tollgate {\n max_entries 5\n}":                                                 `unknown global option "max_entries" (allowed: max_keys, network_share, secret, cookie, ip_prefix, ip_pressure, cluster, fallback, fallback_ratio, reputation, snapshot_interval)`,
		"tollgate on":                                                                   `unexpected argument "on"`,
		"tollgate {\n secret\n}":                                                        "secret needs at least one value",
		"tollgate {\n secret tooshort\n}":                                               "secret #1 is 8 bytes; it must be at least 32",
		"tollgate {\n cookie {\n name \"a b\"\n }\n}":                                   `cookie name "a b"`,
		"tollgate {\n cookie {\n max_age 10\n }\n}":                                     `cookie max_age "10" needs a unit`,
		"tollgate {\n cookie {\n max_age 10s\n }\n}":                                    `cookie max_age "10s" must be at least 1m0s`,
		"tollgate {\n cookie {\n issue sometimes\n }\n}":                                `cookie issue "sometimes": must be always, off or header <Header-Name>`,
		"tollgate {\n cookie {\n issue header\n }\n}":                                   `cookie issue "header": must be always, off or header`,
		"tollgate {\n cookie {\n issue_limit 0 1h\n }\n}":                               `cookie issue_limit "0" must be a whole number`,
		"tollgate {\n cookie {\n issue_limit 5\n }\n}":                                  "cookie issue_limit takes 2 arguments, got 1",
		"tollgate {\n cookie {\n path /\n }\n}":                                         `cookie: unknown subdirective "path"`,
		"tollgate {\n cookie {\n name a\n name b\n }\n}":                                "cookie name is given twice",
		"tollgate {\n ip_prefix 24\n}":                                                  "ip_prefix takes 2 arguments, got 1",
		"tollgate {\n ip_prefix 33 64\n}":                                               `ip_prefix IPv4 bits "33": must be a whole number from 1 to 32`,
		"tollgate {\n ip_prefix 24 129\n}":                                              `ip_prefix IPv6 bits "129": must be a whole number from 1 to 128`,
		"tollgate {\n ip_pressure on\n}":                                                `ip_pressure "on": the only argument is off`,
		"tollgate {\n ip_pressure {\n squeeze 1.5\n }\n}":                               `ip_pressure squeeze "1.5": must be a number above 0 and at most 1`,
		"tollgate {\n ip_pressure {\n squeeze 0\n }\n}":                                 `ip_pressure squeeze "0"`,
		"tollgate {\n ip_pressure {\n threshold 20\n }\n}":                              "ip_pressure threshold takes 2 argument(s), got 1",
		"tollgate {\n ip_pressure {\n threshold 0 10m\n }\n}":                           `ip_pressure threshold "0": must be a whole number from 1`,
		"tollgate {\n ip_pressure {\n duration -1h\n }\n}":                              `ip_pressure duration "-1h" must be at least 1s`,
		"tollgate {\n ip_pressure {\n size 5\n }\n}":                                    `ip_pressure: unknown subdirective "size"`,
		"tollgate {\n reputation on\n}":                                                 `reputation "on": the only argument is off`,
		"tollgate {\n reputation {\n penalty 0\n }\n}":                                  `reputation penalty "0": must be a number above 0 and at most 100`,
		"tollgate {\n reputation {\n penalty 101\n }\n}":                                `reputation penalty "101": must be a number above 0 and at most 100`,
		"tollgate {\n reputation {\n recovery -1\n }\n}":                                `reputation recovery "-1": must be a number above 0`,
		"tollgate {\n reputation {\n penalty 1\n penalty 2\n }\n}":                      "reputation penalty is given twice",
		"tollgate {\n reputation {\n bucket 120 1\n }\n}":                               `reputation bucket from "120": must be a score from 0 to 100`,
		"tollgate {\n reputation {\n bucket 50 0\n }\n}":                                `reputation factor "0": must be a number above 0 and at most 1`,
		"tollgate {\n reputation {\n bucket 50\n }\n}":                                  "reputation bucket takes 2 arguments, got 1",
		"tollgate {\n reputation {\n bucket 50 1\n bucket 0 0.5\n bucket 20 0.2\n }\n}": "from the highest score down",
		"tollgate {\n reputation {\n bucket 50 0.5\n bucket 0 0.8\n }\n}":               "a lower score cannot get more",
		"tollgate {\n reputation {\n bucket 50 1\n }\n}":                                "the lowest bucket must start at 0",
		"tollgate {\n reputation {\n decay 5\n }\n}":                                    `reputation: unknown subdirective "decay" (allowed: penalty, recovery, bucket)`,
		"tollgate {\n snapshot_interval 10ms\n}":                                        `snapshot_interval "10ms" must be at least 1s`,
		"tollgate {\n snapshot_interval\n}":                                             "snapshot_interval takes 1 argument, got 0",
	} {
		_, err := parseApp(caddyfile.NewTestDispenser(input), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error = %v; want one containing %q", input, err, want)
		}
	}
}

// TestValidateRejectsBadJSON checks that config given as JSON, which skips
// the Caddyfile parser, is rejected by `caddy validate` with the same care.
func TestValidateRejectsBadJSON(t *testing.T) {
	route := func(handler string) string {
		return `{"admin":{"disabled":true},"apps":{"http":{"servers":{"s":{"listen":["127.0.0.1:0"],"routes":[{"handle":[` + handler + `]}]}}}}}`
	}
	for _, tc := range []struct{ name, config, want string }{
		{"no zones", route(`{"handler":"tollgate"}`), "no zone configured"},
		{"limit zero", route(`{"handler":"tollgate","zones":[{"name":"a","limit":0,"window":"1m"}]}`), `zone "a": limit 0: must be a whole number from 1`},
		{"limit negative", route(`{"handler":"tollgate","zones":[{"name":"a","limit":-1,"window":"1m"}]}`), `zone "a": limit -1`},
		{"window missing", route(`{"handler":"tollgate","zones":[{"name":"a","limit":5}]}`), `zone "a": limit window 0s: must be from 1ms`},
		{"window negative", route(`{"handler":"tollgate","zones":[{"name":"a","limit":5,"window":"-1m"}]}`), `limit window -1m0s`},
		{"algorithm unknown", route(`{"handler":"tollgate","zones":[{"name":"a","limit":5,"window":"1m","algorithm":"gcra"}]}`), `unknown algorithm "gcra"`},
		{"burst without bucket", route(`{"handler":"tollgate","zones":[{"name":"a","limit":5,"window":"1m","burst":3}]}`), "burst is only allowed with algorithm token_bucket"},
		{"duplicate zones", route(`{"handler":"tollgate","zones":[{"name":"a","limit":5,"window":"1m"},{"name":"a","limit":5,"window":"1m"}]}`), `zone "a" is declared twice`},
		{"headers unknown", route(`{"handler":"tollgate","headers":"never","zones":[{"name":"a","limit":5,"window":"1m"}]}`), `headers "never": must be always, denied or off`},
		{"nameless zone", route(`{"handler":"tollgate","zones":[{"limit":5,"window":"1m"}]}`), "zone without a name"},
		{"max_keys negative", `{"admin":{"disabled":true},"apps":{"tollgate":{"max_keys":-1}}}`, "max_keys -1"},
		{"secret short", `{"admin":{"disabled":true},"apps":{"tollgate":{"secrets":["short"]}}}`, "secret #1 is 5 bytes; it must be at least 32"},
		{"secret placeholder empty", `{"admin":{"disabled":true},"apps":{"tollgate":{"secrets":["{env.TOLLGATE_TEST_UNSET}"]}}}`, "secret #1 ({env.TOLLGATE_TEST_UNSET}) is empty"},
		{"cookie issue unknown", `{"admin":{"disabled":true},"apps":{"tollgate":{"cookie":{"issue":"sometimes"}}}}`, `cookie issue "sometimes": must be always, header <name> or off`},
		{"cookie issue header without name", `{"admin":{"disabled":true},"apps":{"tollgate":{"cookie":{"issue":"header"}}}}`, "cookie issue header needs a header name"},
		{"cookie name bad", `{"admin":{"disabled":true},"apps":{"tollgate":{"secrets":["0123456789abcdef0123456789abcdef"],"cookie":{"name":"a;b"}}}}`, `cookie name "a;b"`},
		{"ip prefix", `{"admin":{"disabled":true},"apps":{"tollgate":{"ipv4_prefix":40}}}`, "IPv4 prefix length 40"},
		{"pressure squeeze", `{"admin":{"disabled":true},"apps":{"tollgate":{"ip_pressure":{"squeeze":2}}}}`, "ip_pressure: squeeze 2"},
		{"fallback unknown", `{"admin":{"disabled":true},"apps":{"tollgate":{"fallback":"sometimes"}}}`, `fallback "sometimes": must be local, open or closed`},
		{"cluster without secret", `{"admin":{"disabled":true},"apps":{"tollgate":{"cluster":{"bind":"127.0.0.1:0","peer_listen":"127.0.0.1:0"}}}}`, "cluster needs `secret`"},
		{"cluster gossip key required off loopback", `{"admin":{"disabled":true},"apps":{"tollgate":{"secrets":["0123456789abcdef0123456789abcdef"],"cluster":{"bind":"0.0.0.0:0","peer_listen":"0.0.0.0:0"}}}}`, "gossip_key is required unless every address is loopback"},
		{"cluster gossip key size", `{"admin":{"disabled":true},"apps":{"tollgate":{"secrets":["0123456789abcdef0123456789abcdef"],"cluster":{"bind":"127.0.0.1:0","peer_listen":"127.0.0.1:0","gossip_key":"c2hvcnQ="}}}}`, "gossip_key is 5 bytes; it must be 16, 24 or 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg caddy.Config
			if err := json.Unmarshal([]byte(tc.config), &cfg); err != nil {
				t.Fatal(err)
			}
			err := caddy.Validate(&cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate error = %v\nwant one containing %q", err, tc.want)
			}
		})
	}
}

// TestTierOfZeroOrNegativeIsRefusedAtEveryEntry tries a tier limit of 0
// and a negative one through the Caddyfile, JSON and the admin API, on a
// token-bucket zone (where a 0 once divided by zero): each is refused, and
// the zone keeps serving.
func TestTierOfZeroOrNegativeIsRefusedAtEveryEntry(t *testing.T) {
	for _, n := range []string{"0", "-1"} {
		d := caddyfile.NewTestDispenser("tollgate {\n tier_from x\n zone api {\n limit 10 1m\n algorithm token_bucket\n tier pro " + n + "\n }\n}")
		if err := new(Handler).UnmarshalCaddyfile(d); err == nil || !strings.Contains(err.Error(), "tier pro limit") {
			t.Errorf("Caddyfile tier pro %s: error %v", n, err)
		}
	}
	route := func(zone string) string {
		return `{"admin":{"disabled":true},"apps":{"http":{"servers":{"s":{"listen":["127.0.0.1:0"],"routes":[{"handle":[{"handler":"tollgate","tier_from":"x","zones":[` + zone + `]}]}]}}}}}`
	}
	for _, zone := range []string{
		`{"name":"a","limit":5,"window":"1m","algorithm":"token_bucket","tiers":{"pro":0}}`,
		`{"name":"a","limit":5,"window":"1m","tiers":{"pro":-3}}`,
		`{"name":"a","concurrent":2,"tiers":{"pro":0}}`,
	} {
		if err := validateConfig([]byte(route(zone))); err == nil || !strings.Contains(err.Error(), "must be a whole number from 1") {
			t.Errorf("JSON %s: validate error %v", zone, err)
		}
	}

	srv := startCaddy(t, "", `
	tollgate {
		tier_from {http.request.header.X-User-Tier}
		zone credits {
			limit 3 1h
			algorithm token_bucket
			key {http.request.header.X-User}
			tier pro 5
		}
	}
	respond "ok"`)
	for _, body := range []string{`{"credits": {"pro": 0}}`, `{"credits": {"pro": -1}}`} {
		if status, got := adminSend(t, srv.Admin, http.MethodPut, "/tollgate/tiers", body, nil); status != http.StatusBadRequest || !strings.Contains(got, "must be a whole number from 1") {
			t.Errorf("PUT %s: %d %s; want 400", body, status, got)
		}
	}
	if s := srv.status("/", "X-User", "ann", "X-User-Tier", "pro"); s != http.StatusOK {
		t.Fatalf("the zone after refused tier changes: %d", s)
	}
}
