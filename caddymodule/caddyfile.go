package caddymodule

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/tollgate/tollgate/fingerprint"
)

// parseHandler parses the tollgate directive.
func parseHandler(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	handler := new(Handler)
	err := handler.UnmarshalCaddyfile(h.Dispenser)
	return handler, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	tollgate [<matcher>] {
//	    zone <name> {                   # repeatable; names unique within the directive
//	        limit <N> <window>          # a rate zone, e.g. limit 100 1m; 1d, 1w and 1mo follow the calendar
//	        concurrent <N>              # or a concurrency zone: N holders at once (1 to 256)
//	        key <placeholders>          # default: the client ID
//	        algorithm sliding_window|fixed_window|token_bucket   # default sliding_window
//	        burst <N>                   # token_bucket only; default N of limit
//	        tier <name> <N>             # the limit (or slots) of a tier; repeatable; needs tier_from
//	        lease <placeholders>        # concurrency zones: what names a holder; default each request
//	        ttl <duration>              # concurrency zones: lease lifetime, at least 1s; default 15m
//	        match { <request matchers> }   # default: every request
//	        shared                      # count with every shared zone of this name (same settings)
//	        dry_run                     # a trial zone: counts and reports, never denies
//	        network_share <N>           # cookie-less budget of one IP network, × limit; default: the global one
//	        count_response { status <codes...>; header <field> [<value>] }   # count only matching responses
//	        cost <N|placeholders>       # units a request spends, 0 to the limit; default 1
//	        cost_header <Header>        # the response header reporting the real cost, settled after the response
//	        ban <duration>              # once denied, the key stays denied this long (1s to 366d)
//	        delay <duration>            # wait up to this long for a slot instead of a 429 (1ms to 1h)
//	        delay_queue <N>             # requests of a key waiting at once on a node; default 100
//	        window_timezone <IANA name> # the time zone of calendar windows (1d, 1w, 1mo); default UTC
//	    }
//	    tier_from <placeholders>        # where a request's tier comes from
//	    dry_run                         # every zone a trial; no cookies issued
//	    headers always|denied|off       # which responses get RateLimit headers; default always
//	    form_max_size <bytes>           # of a body read for {http.tollgate.form.*}; default 64KiB
//	}
//
// Each value is read with the rule Validate applies to it (see bounds.go),
// so an error names the value as written and its line; the directive ends
// with the handler's Validate, once, so `caddy adapt` already rejects what
// only a whole handler shows (and reports it at the line of the zone or
// setting it is about).
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.Errf("tollgate: unexpected argument %q; zones go in a block: tollgate { zone <name> { ... } }", d.Val())
	}
	read := settingTokens{}
	err := eachSetting(d, handlerBlock, func(sub string, args []string) error {
		read[sub] = d.Token()
		switch sub {
		case "zone":
			at := d.Token() // the zone's line, for what Validate finds wrong in it
			z, err := parseZone(d, args)
			if err != nil {
				return err
			}
			h.Zones = append(h.Zones, z)
			read[z] = at
		case "dry_run":
			if len(args) > 0 {
				return d.Errf("tollgate: dry_run takes no argument, got %q", args[0])
			}
			h.DryRun = true
		case "tier_from":
			switch len(args) {
			case 0:
				return d.Err("tollgate: tier_from needs placeholders, e.g. tier_from {http.request.header.X-User-Tier}")
			case 1:
				h.TierFrom = args[0]
			default:
				return d.Errf("tollgate: tier_from takes one argument, got also %q", args[1])
			}
		case "headers":
			switch len(args) {
			case 0:
				return d.Err("tollgate: headers needs a value: always, denied or off")
			case 1:
				h.Headers = args[0] // its values are Validate's to check
			default:
				return d.Errf("tollgate: headers takes one argument, got also %q", args[1])
			}
		case "form_max_size":
			if len(args) != 1 {
				return d.Errf("tollgate: form_max_size takes 1 argument, got %d (e.g. form_max_size 64KiB)", len(args))
			}
			n, err := humanize.ParseBytes(args[0])
			if err != nil || n < 1 || n > maxFormMaxSize {
				return d.Errf("tollgate: form_max_size %q: %v", args[0], formSizeBounds.refusal())
			}
			h.FormMaxSize = int64(n)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return read.errAt(d, h.Validate())
}

// handlerBlock is the block of the tollgate directive.
var handlerBlock = block{
	allowed:    []string{"zone", "dry_run", "headers", "tier_from", "form_max_size"},
	repeatable: []string{"zone"},
	unknown:    "tollgate: unknown subdirective",
}

// zoneBlock is the block of a zone; name is the zone's.
func zoneBlock(name string) block {
	return block{
		setting:    fmt.Sprintf("zone %q: ", name),
		allowed:    []string{"limit", "key", "algorithm", "burst", "match", "shared", "dry_run", "network_share", "concurrent", "tier", "lease", "ttl", "count_response", "cost", "cost_header", "ban", "delay", "delay_queue", "window_timezone"},
		repeatable: []string{"tier"},
		unknown:    fmt.Sprintf("tollgate: zone %q: unknown subdirective", name),
	}
}

// parseZone parses one `zone <name> { ... }` block; args are the zone
// line's arguments, d is at its last.
func parseZone(d *caddyfile.Dispenser, args []string) (*Zone, error) {
	if len(args) == 0 {
		return nil, d.Err("tollgate: zone needs a name: zone <name> { limit <N> <window> }")
	}
	z := &Zone{Name: args[0]}
	if err := validateZoneName(z.Name); err != nil {
		return nil, d.Errf("tollgate: %v", err)
	}
	if len(args) > 1 {
		return nil, d.Errf("tollgate: zone %q: unexpected argument %q; settings go in the zone's block", z.Name, args[1])
	}
	seen := map[string]bool{}
	err := eachSetting(d, zoneBlock(z.Name), func(sub string, args []string) error {
		seen[sub] = true
		wantArgs := func(n int, usage string) error {
			if len(args) != n {
				return d.Errf("tollgate: zone %q: %s takes %d argument(s), got %d: %s %s", z.Name, sub, n, len(args), sub, usage)
			}
			return nil
		}
		// whole reads the setting's one argument, a whole number in bounds.
		whole := func(bounds wholeRange, usage string) (int64, error) {
			if err := wantArgs(1, usage); err != nil {
				return 0, err
			}
			n, err := bounds.parse(args[0])
			if err != nil {
				return 0, d.Errf("tollgate: zone %q: %s %q %v", z.Name, sub, args[0], err)
			}
			return n, nil
		}
		var err error
		switch sub {
		case "limit":
			if err := wantArgs(2, "<N> <window>, e.g. limit 100 1m"); err != nil {
				return err
			}
			n, err := quotaBounds.parse(args[0])
			if err != nil {
				return d.Errf("tollgate: zone %q: limit %q %v", z.Name, args[0], err)
			}
			if unit, ok := calendarWindows[args[1]]; ok {
				z.Limit, z.Calendar = n, unit
				return nil
			}
			w, err := parseWindow(args[1])
			if err != nil {
				return d.Errf("tollgate: zone %q: limit window %v", z.Name, err)
			}
			z.Limit, z.Window = n, caddy.Duration(w)
		case "key":
			if err := wantArgs(1, "<placeholders>, e.g. key {http.request.header.X-API-Key}"); err != nil {
				return err
			}
			z.Key = args[0]
		case "algorithm":
			if err := wantArgs(1, "sliding_window|fixed_window|token_bucket"); err != nil {
				return err
			}
			z.Algorithm = args[0]
		case "burst":
			z.Burst, err = whole(quotaBounds, "<N>")
		case "match":
			if len(args) != 0 {
				return d.Errf("tollgate: zone %q: match takes a block of request matchers, not arguments", z.Name)
			}
			set, err := caddyhttp.ParseCaddyfileNestedMatcherSet(d)
			if err != nil {
				return err
			}
			z.MatchRaw = set
		case "shared":
			z.Shared, err = true, wantArgs(0, "")
		case "network_share":
			z.NetworkShare, err = whole(networkShareBounds, "<N>, e.g. network_share 4")
		case "dry_run":
			z.DryRun, err = true, wantArgs(0, "")
		case "concurrent":
			z.Concurrent, err = whole(concurrentBounds, "<N>, e.g. concurrent 4")
		case "tier":
			if err := wantArgs(2, "<name> <limit>, e.g. tier pro 10000"); err != nil {
				return err
			}
			if err := validateTierName(args[0]); err != nil {
				return d.Errf("tollgate: zone %q: %v", z.Name, err)
			}
			if _, dup := z.Tiers[args[0]]; dup {
				return d.Errf("tollgate: zone %q: tier %s is given twice", z.Name, args[0])
			}
			// A concurrent zone's tiers are capped lower: Validate checks
			// them against the zone's kind, which may come later.
			n, err := quotaBounds.parse(args[1])
			if err != nil {
				return d.Errf("tollgate: zone %q: tier %s limit %q %v", z.Name, args[0], args[1], err)
			}
			if z.Tiers == nil {
				z.Tiers = make(map[string]int64)
			}
			z.Tiers[args[0]] = n
		case "lease":
			if err := wantArgs(1, "<placeholders>, e.g. lease {http.request.header.X-Room-Id}"); err != nil {
				return err
			}
			z.Lease = args[0]
		case "ttl":
			if err := wantArgs(1, "<duration>, e.g. ttl 15m"); err != nil {
				return err
			}
			dur, err := parseDuration(args[0], 0)
			if err == nil {
				if err = checkLeaseTTL(dur); err != nil {
					err = fmt.Errorf("%q %v", args[0], err)
				}
			}
			if err != nil {
				return d.Errf("tollgate: zone %q: ttl %v", z.Name, err)
			}
			z.TTL = caddy.Duration(dur)
		case "count_response":
			for range args {
				d.Prev() // the matcher reads its own arguments
			}
			matchers := map[string]caddyhttp.ResponseMatcher{}
			if err := caddyhttp.ParseNamedResponseMatcher(d.NewFromNextSegment(), matchers); err != nil {
				return d.Errf("tollgate: zone %q: count_response: %v (e.g. count_response { status 401 403 })", z.Name, err)
			}
			rm := matchers["count_response"]
			z.CountResponse = &rm
		case "cost":
			if err := wantArgs(1, "<N> or <placeholders>, e.g. cost 10 or cost {http.request.header.X-Cost}"); err != nil {
				return err
			}
			z.Cost = args[0] // Validate checks it against the limit
		case "cost_header":
			if err := wantArgs(1, "<Header>, e.g. cost_header X-Cost"); err != nil {
				return err
			}
			z.CostHeader = args[0]
		case "ban", "delay":
			if err := wantArgs(1, "<duration>, e.g. "+sub+" 10m"); err != nil {
				return err
			}
			dur, err := parseDuration(args[0], 0)
			if err != nil {
				return d.Errf("tollgate: zone %q: %s %v", z.Name, sub, err)
			}
			if sub == "ban" {
				z.Ban = caddy.Duration(dur)
			} else {
				z.Delay = caddy.Duration(dur)
			}
		case "delay_queue":
			z.DelayQueue, err = whole(delayQueueBounds, "<N>, e.g. delay_queue 100")
		case "window_timezone":
			if err := wantArgs(1, "<IANA name>, e.g. window_timezone Europe/Berlin"); err != nil {
				return err
			}
			z.WindowTimezone = args[0]
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if !seen["limit"] && !seen["concurrent"] {
		return nil, d.Errf("tollgate: zone %q: limit is required: limit <N> <window>, e.g. limit 100 1m (or concurrent <N> for a lease zone)", z.Name)
	}
	return z, nil
}

// parseApp parses the `tollgate` global option:
//
//	tollgate {
//	    max_keys <N>                    # counters held in memory; default 1048576
//	    network_share <N>               # cookie-less budget of one IP network, × each zone's limit; default 4
//	    secret <secret> [<older>...]    # ≥ 32 bytes each; {env.*} allowed; default: generated and stored
//	    cookie {
//	        name <name>                 # default __tollgate
//	        max_age <duration>          # default 720h
//	        issue always|off|header <Header-Name>   # default always
//	        issue_limit <N> <window>    # new sessions per IP network; default 30 1h
//	        challenge pow <difficulty> [{                # browsers solve a proof of work for a session; default off
//	            except { <request matchers> }              # never challenged
//	            template <file>                            # the owner's page; includes {{template "tollgate_challenge" .}}
//	        }]
//	    }
//	    ip_prefix <IPv4 bits> <IPv6 bits>   # one client network; default 32 64
//	    ip_pressure off
//	    ip_pressure {
//	        threshold <N> <window>      # distinct cookie-less fingerprints; default 20 10m
//	        squeeze <factor>            # limit multiplier, (0, 1]; default 0.5
//	        duration <duration>         # default 1h
//	        max_networks <N>            # networks watched; default 65536
//	    }
//	    cluster {
//	        bind <host:port>            # gossip listener
//	        peer_listen <host:port>     # peer RPC listener
//	        advertise <host:port>       # default: bind
//	        peer_advertise <host:port>  # default: peer_listen's port on the advertised host
//	        join <host:port> ...        # seeds, retried with backoff
//	        gossip_key <base64 key>     # 16/24/32 bytes; required unless all addresses are loopback
//	        name <name>                 # default: the advertised gossip address
//	        peer_timeout <duration>     # default 100ms
//	    }
//	    fallback local|open|closed      # default local
//	    fallback_ratio <ratio>          # (0, 1]; default 0.4
//	    reputation off
//	    reputation {
//	        penalty <points>            # per denial, (0, 100]; default 1
//	        recovery <points>           # regained per hour, above 0; default 10
//	        bucket <from> <factor>      # repeatable, highest first, the last from 0; default 75 1, 50 0.6, 25 0.3, 0 0.1
//	    }
//	    snapshot_interval <duration>|off   # at least 1s; default 1m
//	}
func parseApp(d *caddyfile.Dispenser, existing any) (any, error) {
	app := new(App)
	if existing != nil {
		return nil, d.Err("tollgate: the global option is given twice; merge the blocks")
	}
	d.Next() // option name
	if _, err := blockArgs(d, "", false); err != nil {
		return nil, err
	}
	read := settingTokens{}
	err := eachSetting(d, appBlock, func(sub string, args []string) error {
		read[sub] = d.Token()
		var err error
		switch sub {
		case "max_keys":
			var n int64
			n, err = wholeArg(d, sub, args, "e.g. max_keys 1000000", maxKeysBounds)
			app.MaxKeys = int(n)
		case "network_share":
			app.NetworkShare, err = wholeArg(d, sub, args, "e.g. network_share 4", networkShareBounds)
		case "secret":
			app.Secrets = args
			if len(app.Secrets) == 0 {
				return d.Err("tollgate: secret needs at least one value, e.g. secret {env.TOLLGATE_SECRET}")
			}
			for i, s := range app.Secrets {
				if strings.Contains(s, "{") {
					continue // checked once its placeholders are replaced
				}
				if err := checkSecret(i+1, s); err != nil {
					return d.Errf("tollgate: %v", err)
				}
			}
		case "cookie":
			app.Cookie, err = parseCookie(d, args)
		case "ip_prefix":
			if len(args) != 2 {
				return d.Errf("tollgate: ip_prefix takes 2 arguments, got %d: ip_prefix <IPv4 bits> <IPv6 bits>, e.g. ip_prefix 32 64", len(args))
			}
			if app.IPv4Prefix, err = strconv.Atoi(args[0]); err != nil || app.IPv4Prefix < 1 || app.IPv4Prefix > 32 {
				return d.Errf("tollgate: ip_prefix IPv4 bits %q: must be a whole number from 1 to 32", args[0])
			}
			if app.IPv6Prefix, err = strconv.Atoi(args[1]); err != nil || app.IPv6Prefix < 1 || app.IPv6Prefix > 128 {
				return d.Errf("tollgate: ip_prefix IPv6 bits %q: must be a whole number from 1 to 128", args[1])
			}
		case "ip_pressure":
			app.IPPressure, err = parsePressure(d, args)
		case "cluster":
			app.Cluster, err = parseCluster(d, args)
		case "fallback":
			if len(args) != 1 {
				return d.Errf("tollgate: fallback takes 1 argument, got %d: fallback local|open|closed", len(args))
			}
			app.Fallback = args[0] // its values are Validate's to check
		case "reputation":
			app.Reputation, err = parseReputation(d, args)
		case "snapshot_interval":
			switch {
			case len(args) != 1:
				return d.Errf("tollgate: snapshot_interval takes 1 argument, got %d: snapshot_interval <duration>|off", len(args))
			case args[0] == "off":
				app.SnapshotInterval = -1
			default:
				dur, err := parseDuration(args[0], 0)
				if err == nil {
					if err = checkSnapshotInterval(dur); err != nil {
						err = fmt.Errorf("%q %v", args[0], err)
					}
				}
				if err != nil {
					return d.Errf("tollgate: snapshot_interval %v (or off)", err)
				}
				app.SnapshotInterval = caddy.Duration(dur)
			}
		case "fallback_ratio":
			if len(args) != 1 {
				return d.Errf("tollgate: fallback_ratio takes 1 argument, got %d: fallback_ratio <ratio>, e.g. 0.4", len(args))
			}
			if app.FallbackRatio, err = parseAboveZero(args[0], 1); err != nil {
				return d.Errf("tollgate: fallback_ratio %q: %v, e.g. 0.4", args[0], err)
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := read.errAt(d, app.Validate()); err != nil { // the app's one validation path
		return nil, err
	}
	return httpcaddyfile.App{
		Name:  "tollgate",
		Value: caddyconfig.JSON(app, nil),
	}, nil
}

// appBlock is the block of the tollgate global option.
var appBlock = block{
	allowed: []string{"max_keys", "network_share", "secret", "cookie", "ip_prefix", "ip_pressure", "cluster", "fallback", "fallback_ratio", "reputation", "snapshot_interval"},
	unknown: "tollgate: unknown global option",
}

// cookieBlock is the block of the cookie option.
var cookieBlock = block{
	name:    "cookie",
	setting: "cookie ",
	allowed: []string{"name", "max_age", "issue", "issue_limit", "challenge"},
	unknown: "tollgate: cookie: unknown subdirective",
}

// parseCookie parses the `cookie { ... }` block of the global option; args
// are its line's arguments.
func parseCookie(d *caddyfile.Dispenser, args []string) (*CookieConfig, error) {
	c := new(CookieConfig)
	_, err := readBlock(d, cookieBlock, args, func(sub string, args []string) error {
		switch sub {
		case "name":
			if len(args) != 1 {
				return d.Errf("tollgate: cookie name takes 1 argument, got %d", len(args))
			}
			if err := fingerprint.CheckCookieName(args[0]); err != nil {
				return d.Errf("tollgate: %v", err)
			}
			c.Name = args[0]
		case "max_age":
			if len(args) != 1 {
				return d.Errf("tollgate: cookie max_age takes 1 argument, got %d: max_age <duration>, e.g. max_age 720h", len(args))
			}
			dur, err := parseDuration(args[0], time.Minute)
			if err != nil {
				return d.Errf("tollgate: cookie max_age %v", err)
			}
			c.MaxAge = caddy.Duration(dur)
		case "issue":
			switch {
			case len(args) == 1 && (args[0] == issueAlways || args[0] == issueOff):
				c.Issue = args[0]
			case len(args) == 2 && args[0] == issueHeader:
				c.Issue, c.IssueHeader = issueHeader, args[1]
			default:
				return d.Errf("tollgate: cookie issue %q: must be always, off or header <Header-Name>", strings.Join(args, " "))
			}
		case "challenge":
			if len(args) != 2 || args[0] != challengePoW {
				return d.Errf("tollgate: cookie challenge %q: must be pow <difficulty>, e.g. challenge pow 16", strings.Join(args, " "))
			}
			n, err := strconv.Atoi(args[1])
			if err == nil {
				err = checkDifficulty(n)
			} else {
				err = checkDifficulty(0)
			}
			if err != nil {
				return d.Errf("tollgate: cookie challenge pow %q: %v", args[1], err)
			}
			c.Challenge = &ChallengeConfig{Type: challengePoW, Difficulty: n}
			seenSetting := map[string]bool{}
			for nest := d.Nesting(); d.NextBlock(nest); {
				setting := d.Val()
				if seenSetting[setting] {
					return d.Errf("tollgate: cookie challenge: %s is set twice; set it once", setting)
				}
				seenSetting[setting] = true
				switch {
				case setting == "except" && d.CountRemainingArgs() == 0:
					set, err := caddyhttp.ParseCaddyfileNestedMatcherSet(d)
					if err != nil {
						return err
					}
					c.Challenge.ExceptRaw = set
				case setting == "template":
					args := d.RemainingArgs()
					if len(args) != 1 {
						return d.Errf("tollgate: cookie challenge template %q: takes one argument, the file of the page, e.g. template /etc/caddy/challenge.html", strings.Join(args, " "))
					}
					c.Challenge.Template = args[0]
				default:
					return d.Errf("tollgate: cookie challenge: unknown setting %q (allowed: except { <request matchers> }, template <file>)", setting)
				}
			}
		case "issue_limit":
			if len(args) != 2 {
				return d.Errf("tollgate: cookie issue_limit takes 2 arguments, got %d: issue_limit <N> <window>, e.g. issue_limit 10 1h", len(args))
			}
			n, err := quotaBounds.parse(args[0])
			if err != nil {
				return d.Errf("tollgate: cookie issue_limit %q %v", args[0], err)
			}
			w, err := parseWindow(args[1])
			if err != nil {
				return d.Errf("tollgate: cookie issue_limit window %v", err)
			}
			c.IssueLimit, c.IssueWindow = n, caddy.Duration(w)
		}
		return nil
	})
	return c, err
}

// pressureBlock is the block of the ip_pressure option.
var pressureBlock = block{
	name:       "ip_pressure",
	offAllowed: true,
	setting:    "ip_pressure ",
	allowed:    []string{"threshold", "squeeze", "duration", "max_networks"},
	unknown:    "tollgate: ip_pressure: unknown subdirective",
}

// parsePressure parses `ip_pressure off` or an `ip_pressure { ... }` block;
// args are its line's arguments.
func parsePressure(d *caddyfile.Dispenser, args []string) (*PressureConfig, error) {
	p := new(PressureConfig)
	off, err := readBlock(d, pressureBlock, args, func(sub string, args []string) error {
		if want := map[string]int{"threshold": 2}[sub]; want == 0 && len(args) != 1 || want == 2 && len(args) != 2 {
			return d.Errf("tollgate: ip_pressure %s takes %d argument(s), got %d", sub, max(want, 1), len(args))
		}
		var err error
		switch sub {
		case "threshold":
			if p.Threshold, err = strconv.Atoi(args[0]); err != nil || p.Threshold < 1 || p.Threshold > 10000 {
				return d.Errf("tollgate: ip_pressure threshold %q: must be a whole number from 1 to 10000", args[0])
			}
			w, err := parseWindow(args[1])
			if err != nil {
				return d.Errf("tollgate: ip_pressure threshold window %v", err)
			}
			p.Window = caddy.Duration(w)
		case "squeeze":
			if p.Squeeze, err = parseAboveZero(args[0], 1); err != nil {
				return d.Errf("tollgate: ip_pressure squeeze %q: %v, e.g. 0.5", args[0], err)
			}
		case "duration":
			dur, err := parseDuration(args[0], time.Second)
			if err != nil {
				return d.Errf("tollgate: ip_pressure duration %v", err)
			}
			p.Duration = caddy.Duration(dur)
		case "max_networks":
			if p.MaxNetworks, err = strconv.Atoi(args[0]); err != nil || p.MaxNetworks < 1 {
				return d.Errf("tollgate: ip_pressure max_networks %q: must be a whole number of at least 1", args[0])
			}
		}
		return nil
	})
	p.Off = off
	return p, err
}

// reputationBlock is the block of the reputation option.
var reputationBlock = block{
	name:       "reputation",
	offAllowed: true,
	setting:    "reputation ",
	allowed:    []string{"penalty", "recovery", "bucket"},
	repeatable: []string{"bucket"},
	unknown:    "tollgate: reputation: unknown subdirective",
}

// parseReputation parses `reputation off` or a `reputation { ... }` block;
// args are its line's arguments.
func parseReputation(d *caddyfile.Dispenser, args []string) (*ReputationConfig, error) {
	c := new(ReputationConfig)
	off, err := readBlock(d, reputationBlock, args, func(sub string, args []string) error {
		// aboveZero reads a number above 0 and at most hi.
		aboveZero := func(s, what string, hi float64) (float64, error) {
			v, err := parseAboveZero(s, hi)
			if err != nil {
				return 0, d.Errf("tollgate: reputation %s %q: %v", what, s, err)
			}
			return v, nil
		}
		var err error
		switch sub {
		case "penalty":
			if len(args) != 1 {
				return d.Errf("tollgate: reputation penalty takes 1 argument, got %d: penalty <points per denial>", len(args))
			}
			c.Penalty, err = aboveZero(args[0], "penalty", 100)
		case "recovery":
			if len(args) != 1 {
				return d.Errf("tollgate: reputation recovery takes 1 argument, got %d: recovery <points per hour>", len(args))
			}
			c.Recovery, err = aboveZero(args[0], "recovery", 1e6)
		case "bucket":
			if len(args) != 2 {
				return d.Errf("tollgate: reputation bucket takes 2 arguments, got %d: bucket <from score> <factor>, e.g. bucket 50 0.6", len(args))
			}
			var b BucketConfig
			b.From, err = strconv.ParseFloat(args[0], 64)
			if err != nil || !(b.From >= 0 && b.From <= 100) {
				return d.Errf("tollgate: reputation bucket from %q: must be a score from 0 to 100", args[0])
			}
			b.Factor, err = aboveZero(args[1], "factor", 1)
			c.Buckets = append(c.Buckets, b)
		}
		return err
	})
	if off || err != nil {
		c.Off = off
		return c, err
	}
	// The buckets as a whole (their order, the last from 0): the check
	// provisioning makes before the policy reaches the engine.
	if err := c.policy().Validate(); err != nil {
		return nil, d.Errf("tollgate: reputation: %v", err)
	}
	return c, nil
}

// clusterBlock is the block of the cluster option.
var clusterBlock = block{
	name:    "cluster",
	setting: "cluster ",
	allowed: []string{"bind", "peer_listen", "advertise", "peer_advertise", "join", "gossip_key", "name", "peer_timeout"},
	unknown: "tollgate: cluster: unknown subdirective",
}

// parseCluster parses the `cluster { ... }` block of the global option;
// args are its line's arguments.
func parseCluster(d *caddyfile.Dispenser, args []string) (*ClusterConfig, error) {
	c := new(ClusterConfig)
	seen := map[string]bool{}
	_, err := readBlock(d, clusterBlock, args, func(sub string, args []string) error {
		seen[sub] = true
		one := func() (string, error) {
			if len(args) != 1 {
				return "", d.Errf("tollgate: cluster %s takes 1 argument, got %d", sub, len(args))
			}
			return args[0], nil
		}
		address := func() (string, error) {
			a, err := one()
			if err != nil {
				return "", err
			}
			if err := checkAddress(a); err != nil {
				return "", d.Errf("tollgate: cluster %s %q: %v", sub, a, err)
			}
			return a, nil
		}
		var err error
		switch sub {
		case "bind":
			c.Bind, err = address()
		case "peer_listen":
			c.PeerListen, err = address()
		case "advertise":
			c.Advertise, err = address()
		case "peer_advertise":
			c.PeerAdvertise, err = address()
		case "join":
			if len(args) == 0 {
				return d.Err("tollgate: cluster join needs at least one host:port")
			}
			for _, a := range args {
				if err := checkAddress(a); err != nil {
					return d.Errf("tollgate: cluster join %q: %v", a, err)
				}
			}
			c.Join = args
		case "gossip_key":
			if c.GossipKey, err = one(); err == nil && !strings.Contains(c.GossipKey, "{") {
				raw, decErr := base64.StdEncoding.DecodeString(c.GossipKey)
				switch {
				case decErr != nil:
					err = d.Errf("tollgate: cluster gossip_key: not base64 (make one with: openssl rand -base64 32)")
				case len(raw) != 16 && len(raw) != 24 && len(raw) != 32:
					err = d.Errf("tollgate: cluster gossip_key is %d bytes; it must be 16, 24 or 32 (openssl rand -base64 32)", len(raw))
				}
			}
		case "name":
			c.Name, err = one()
		case "peer_timeout":
			var v string
			if v, err = one(); err == nil {
				var dur time.Duration
				if dur, err = parseDuration(v, time.Millisecond); err != nil {
					err = d.Errf("tollgate: cluster peer_timeout %v", err)
				}
				c.PeerTimeout = caddy.Duration(dur)
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, required := range []string{"bind", "peer_listen"} {
		if !seen[required] {
			return nil, d.Errf("tollgate: cluster needs %s <host:port>", required)
		}
	}
	return c, nil
}

// checkAddress checks a host:port setting whose host may be a placeholder.
func checkAddress(a string) error {
	if strings.Contains(a, "{") {
		return nil
	}
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("not a host:port address")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// wholeArg reads the single whole-number argument of setting name,
// within bounds; example shows it in use.
func wholeArg(d *caddyfile.Dispenser, name string, args []string, example string, bounds wholeRange) (int64, error) {
	if len(args) != 1 {
		return 0, d.Errf("tollgate: %s takes 1 argument, got %d (%s)", name, len(args), example)
	}
	n, err := bounds.parse(args[0])
	if err != nil {
		return 0, d.Errf("tollgate: %s %q: %v", name, args[0], err)
	}
	return n, nil
}

// parseWindow parses a window such as 30s, 1m or 1h.
func parseWindow(s string) (time.Duration, error) {
	d, err := parseDuration(s, 0)
	if err != nil {
		return 0, err
	}
	if err := validateWindow(d); err != nil {
		return 0, fmt.Errorf("%q %v", s, err)
	}
	return d, nil
}

// parseDuration parses a duration with a unit (30s, 1m, 1h, 1d), at least
// least long if that is positive.
func parseDuration(s string, least time.Duration) (time.Duration, error) {
	if s != "" && strings.Trim(s, "0123456789.") == "" {
		return 0, fmt.Errorf("%q needs a unit, e.g. 30s, 1m, 1h or 1d", s)
	}
	d, err := caddy.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (e.g. 30s, 1m, 1h or 1d)", s)
	}
	if least > 0 && d < least {
		return 0, fmt.Errorf("%q must be at least %s", s, least)
	}
	return d, nil
}

// block is what eachSetting needs to know of a block of settings, and
// readBlock of the option it belongs to.
type block struct {
	name       string   // the option's, for readBlock
	offAllowed bool     // `<name> off` turns the option off
	setting    string   // what names a setting of the block in errors, before its name: "cookie ", `zone "api": `
	allowed    []string // its settings, in the order an unknown one's error lists them
	repeatable []string // the settings that may be given more than once
	unknown    string   // the start of an unknown setting's error
}

// eachSetting reads the settings of the block d is before, one a line:
// every setting must be one the block allows, and not given twice unless
// repeatable. each is called with the setting's name and the arguments on
// its line, d on the last of them; a nested block is each's to read.
func eachSetting(d *caddyfile.Dispenser, b block, each func(name string, args []string) error) error {
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if seen[name] && !slices.Contains(b.repeatable, name) {
			return d.Errf("tollgate: %s%s is given twice", b.setting, name)
		}
		seen[name] = true
		if !slices.Contains(b.allowed, name) {
			return d.Errf("%s %q (allowed: %s)", b.unknown, name, strings.Join(b.allowed, ", "))
		}
		if err := each(name, d.RemainingArgs()); err != nil {
			return err
		}
	}
	return nil
}

// readBlock reads an option whose settings go in a block: off, when the
// option allows it (then there is no block), or the block's settings.
// args are those on the option's line.
func readBlock(d *caddyfile.Dispenser, b block, args []string, each func(name string, args []string) error) (off bool, err error) {
	if off, err = settingsOnly(d, b.name, args, b.offAllowed); off || err != nil {
		return off, err
	}
	return false, eachSetting(d, b, each)
}

// settingsOnly refuses arguments on the line of an option whose settings go
// in a block (what names it; "" for the global option itself), but off when
// offAllowed, which it reports.
func settingsOnly(d *caddyfile.Dispenser, what string, args []string, offAllowed bool) (off bool, err error) {
	switch {
	case len(args) == 0:
		return false, nil
	case offAllowed && len(args) == 1 && args[0] == "off":
		return true, nil
	case offAllowed:
		bad := args[0]
		if bad == "off" {
			bad = args[1]
		}
		return false, d.Errf("tollgate: %s %q: the only argument is off; settings go in a block", what, bad)
	case what == "":
		return false, d.Errf("tollgate: unexpected argument %q; settings go in a block", args[0])
	}
	return false, d.Errf("tollgate: %s: unexpected argument %q; settings go in a block", what, args[0])
}

// blockArgs is settingsOnly for the arguments that follow the option's name.
func blockArgs(d *caddyfile.Dispenser, what string, offAllowed bool) (bool, error) {
	return settingsOnly(d, what, d.RemainingArgs(), offAllowed)
}

// settingTokens remembers where each setting (by its name) and each zone
// (by its pointer) was read, for the errors Validate reports about them.
type settingTokens map[any]caddyfile.Token

// errAt returns err, from Validate, as a Caddyfile error at the line of
// the setting or zone it is about, or else at d's.
func (t settingTokens) errAt(d *caddyfile.Dispenser, err error) error {
	if err == nil {
		return nil
	}
	if se, ok := errors.AsType[settingError](err); ok {
		if tok, ok := t[se.about]; ok {
			at := caddyfile.NewDispenser([]caddyfile.Token{tok})
			at.Next()
			return at.WrapErr(err)
		}
	}
	return d.WrapErr(err)
}

// settingError is an error of Validate about one setting (by its name) or
// one zone (a *Zone), so that the Caddyfile can say where it was read.
type settingError struct {
	about any
	err   error
}

func (e settingError) Error() string { return e.err.Error() }
func (e settingError) Unwrap() error { return e.err }

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*Handler)(nil)
)
