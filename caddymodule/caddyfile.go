package caddymodule

import (
	"encoding/base64"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/fingerprint"
	"github.com/tollgate/tollgate/limiter"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("tollgate", parseHandler)
	// Early: before authentication, so unauthenticated floods are limited
	// too, and before anything that proxies or serves.
	httpcaddyfile.RegisterDirectiveOrder("tollgate", httpcaddyfile.Before, "basic_auth")
	httpcaddyfile.RegisterGlobalOption("tollgate", parseApp)
}

func parseHandler(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	handler := new(Handler)
	err := handler.UnmarshalCaddyfile(h.Dispenser)
	return handler, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	tollgate [<matcher>] {
//	    zone <name> {                   # repeatable; names unique within the directive
//	        limit <N> <window>          # a rate zone, e.g. limit 100 1m
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
//	    }
//	    tier_from <placeholders>        # where a request's tier comes from
//	    dry_run                         # every zone a trial; no cookies issued
//	    headers always|denied|off       # which responses get RateLimit headers; default always
//	}
//
// Every value is checked here, ending with the handler's Validate, so
// `caddy adapt` already rejects bad ones.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.Errf("tollgate: unexpected argument %q; zones go in a block: tollgate { zone <name> { ... } }", d.Val())
	}
	seen := make(map[string]bool)
	for d.NextBlock(0) {
		sub := d.Val()
		if sub != "zone" && seen[sub] {
			return d.Errf("tollgate: %s is given twice", sub)
		}
		seen[sub] = true
		switch sub {
		case "zone":
			z, err := parseZone(d)
			if err != nil {
				return err
			}
			for _, other := range h.Zones {
				if other.Name == z.Name {
					return d.Errf("tollgate: zone %q is declared twice; zone names must be unique within a handler", z.Name)
				}
			}
			h.Zones = append(h.Zones, z)
		case "dry_run":
			if d.NextArg() {
				return d.Errf("tollgate: dry_run takes no argument, got %q", d.Val())
			}
			h.DryRun = true
		case "tier_from":
			if !d.NextArg() {
				return d.Err("tollgate: tier_from needs placeholders, e.g. tier_from {http.request.header.X-User-Tier}")
			}
			h.TierFrom = d.Val()
			if d.NextArg() {
				return d.Errf("tollgate: tier_from takes one argument, got also %q", d.Val())
			}
		case "headers":
			if !d.NextArg() {
				return d.Err("tollgate: headers needs a value: always, denied or off")
			}
			switch h.Headers = d.Val(); h.Headers {
			case headersAlways, headersDenied, headersOff:
			default:
				return d.Errf("tollgate: headers %q: must be always, denied or off", h.Headers)
			}
			if d.NextArg() {
				return d.Errf("tollgate: headers takes one argument, got also %q", d.Val())
			}
		default:
			return d.Errf("tollgate: unknown subdirective %q (allowed: zone, dry_run, headers, tier_from)", sub)
		}
	}
	if err := h.Validate(); err != nil {
		return d.Err(err.Error())
	}
	return nil
}

// parseZone parses one `zone <name> { ... }` block.
func parseZone(d *caddyfile.Dispenser) (*Zone, error) {
	if !d.NextArg() {
		return nil, d.Err("tollgate: zone needs a name: zone <name> { limit <N> <window> }")
	}
	z := &Zone{Name: d.Val()}
	if err := validateZoneName(z.Name); err != nil {
		return nil, d.Errf("tollgate: %v", err)
	}
	if d.NextArg() {
		return nil, d.Errf("tollgate: zone %q: unexpected argument %q; settings go in the zone's block", z.Name, d.Val())
	}
	seen := make(map[string]bool)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if seen[sub] && sub != "tier" {
			return nil, d.Errf("tollgate: zone %q: %s is given twice", z.Name, sub)
		}
		seen[sub] = true
		args := d.RemainingArgs()
		wantArgs := func(n int, usage string) error {
			if len(args) != n {
				return d.Errf("tollgate: zone %q: %s takes %d argument(s), got %d: %s %s", z.Name, sub, n, len(args), sub, usage)
			}
			return nil
		}
		switch sub {
		case "limit":
			if err := wantArgs(2, "<N> <window>, e.g. limit 100 1m"); err != nil {
				return nil, err
			}
			n, err := parseLimit(args[0])
			if err != nil {
				return nil, d.Errf("tollgate: zone %q: limit %v", z.Name, err)
			}
			w, err := parseWindow(args[1])
			if err != nil {
				return nil, d.Errf("tollgate: zone %q: limit window %v", z.Name, err)
			}
			z.Limit, z.Window = n, caddy.Duration(w)
		case "key":
			if err := wantArgs(1, "<placeholders>, e.g. key {http.request.header.X-API-Key}"); err != nil {
				return nil, err
			}
			z.Key = args[0]
		case "algorithm":
			if err := wantArgs(1, "sliding_window|fixed_window|token_bucket"); err != nil {
				return nil, err
			}
			z.Algorithm = args[0]
		case "burst":
			if err := wantArgs(1, "<N>"); err != nil {
				return nil, err
			}
			n, err := parseLimit(args[0])
			if err != nil {
				return nil, d.Errf("tollgate: zone %q: burst %v", z.Name, err)
			}
			z.Burst = n
		case "match":
			if len(args) != 0 {
				return nil, d.Errf("tollgate: zone %q: match takes a block of request matchers, not arguments", z.Name)
			}
			set, err := caddyhttp.ParseCaddyfileNestedMatcherSet(d)
			if err != nil {
				return nil, err
			}
			z.MatchRaw = set
		case "shared":
			if err := wantArgs(0, ""); err != nil {
				return nil, err
			}
			z.Shared = true
		case "network_share":
			if err := wantArgs(1, "<N>, e.g. network_share 4"); err != nil {
				return nil, err
			}
			n, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || n < 1 || n > maxNetworkShare {
				return nil, d.Errf("tollgate: zone %q: network_share %q must be a whole number from 1 to %d", z.Name, args[0], maxNetworkShare)
			}
			z.NetworkShare = n
		case "dry_run":
			if err := wantArgs(0, ""); err != nil {
				return nil, err
			}
			z.DryRun = true
		case "concurrent":
			if err := wantArgs(1, "<N>, e.g. concurrent 4"); err != nil {
				return nil, err
			}
			n, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || n < 1 || n > maxConcurrent {
				return nil, d.Errf("tollgate: zone %q: concurrent %q must be a whole number from 1 to %d", z.Name, args[0], maxConcurrent)
			}
			z.Concurrent = n
		case "tier":
			if err := wantArgs(2, "<name> <limit>, e.g. tier pro 10000"); err != nil {
				return nil, err
			}
			if err := validateTierName(args[0]); err != nil {
				return nil, d.Errf("tollgate: zone %q: %v", z.Name, err)
			}
			if _, dup := z.Tiers[args[0]]; dup {
				return nil, d.Errf("tollgate: zone %q: tier %s is given twice", z.Name, args[0])
			}
			n, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil || n < 1 || n > limiter.MaxQuota {
				return nil, d.Errf("tollgate: zone %q: tier %s limit %q must be a whole number from 1 to %d", z.Name, args[0], args[1], int64(limiter.MaxQuota))
			}
			if z.Tiers == nil {
				z.Tiers = make(map[string]int64)
			}
			z.Tiers[args[0]] = n
		case "lease":
			if err := wantArgs(1, "<placeholders>, e.g. lease {http.request.header.X-Room-Id}"); err != nil {
				return nil, err
			}
			z.Lease = args[0]
		case "ttl":
			if err := wantArgs(1, "<duration>, e.g. ttl 15m"); err != nil {
				return nil, err
			}
			dur, err := parseDuration(args[0], time.Second)
			if err != nil {
				return nil, d.Errf("tollgate: zone %q: ttl %v", z.Name, err)
			}
			z.TTL = caddy.Duration(dur)
		default:
			return nil, d.Errf("tollgate: zone %q: unknown subdirective %q (allowed: limit, key, algorithm, burst, match, shared, dry_run, network_share, concurrent, tier, lease, ttl)", z.Name, sub)
		}
	}
	if !seen["limit"] && !seen["concurrent"] {
		return nil, d.Errf("tollgate: zone %q: limit is required: limit <N> <window>, e.g. limit 100 1m (or concurrent <N> for a lease zone)", z.Name)
	}
	if err := z.validate(); err != nil { // here too, for the zone's line in the error
		return nil, d.Errf("tollgate: %v", err)
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
//	        challenge pow <difficulty> [{ except { <request matchers> } }]  # browsers solve a proof of work for a session; default off
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
	if d.NextArg() {
		return nil, d.Errf("tollgate: unexpected argument %q; settings go in a block", d.Val())
	}
	seen := make(map[string]bool)
	for d.NextBlock(0) {
		sub := d.Val()
		if seen[sub] {
			return nil, d.Errf("tollgate: %s is given twice", sub)
		}
		seen[sub] = true
		var err error
		switch sub {
		case "max_keys":
			app.MaxKeys, err = intArg(d, "max_keys", "e.g. max_keys 1000000", 1, maxMaxKeys)
		case "network_share":
			var n int
			n, err = intArg(d, "network_share", "e.g. network_share 4", 1, maxNetworkShare)
			app.NetworkShare = int64(n)
		case "secret":
			app.Secrets = d.RemainingArgs()
			if len(app.Secrets) == 0 {
				return nil, d.Err("tollgate: secret needs at least one value, e.g. secret {env.TOLLGATE_SECRET}")
			}
			for i, s := range app.Secrets {
				if !strings.Contains(s, "{") && len(s) < fingerprint.MinSecretLen {
					return nil, d.Errf("tollgate: secret #%d is %d bytes; it must be at least %d (e.g. openssl rand -base64 48)", i+1, len(s), fingerprint.MinSecretLen)
				}
			}
		case "cookie":
			app.Cookie, err = parseCookie(d)
		case "ip_prefix":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return nil, d.Errf("tollgate: ip_prefix takes 2 arguments, got %d: ip_prefix <IPv4 bits> <IPv6 bits>, e.g. ip_prefix 32 64", len(args))
			}
			if app.IPv4Prefix, err = strconv.Atoi(args[0]); err != nil || app.IPv4Prefix < 1 || app.IPv4Prefix > 32 {
				return nil, d.Errf("tollgate: ip_prefix IPv4 bits %q: must be a whole number from 1 to 32", args[0])
			}
			if app.IPv6Prefix, err = strconv.Atoi(args[1]); err != nil || app.IPv6Prefix < 1 || app.IPv6Prefix > 128 {
				return nil, d.Errf("tollgate: ip_prefix IPv6 bits %q: must be a whole number from 1 to 128", args[1])
			}
		case "ip_pressure":
			app.IPPressure, err = parsePressure(d)
		case "cluster":
			app.Cluster, err = parseCluster(d)
		case "fallback":
			args := d.RemainingArgs()
			if len(args) != 1 {
				return nil, d.Errf("tollgate: fallback takes 1 argument, got %d: fallback local|open|closed", len(args))
			}
			if _, err := cluster.ParseFallbackMode(args[0]); err != nil {
				return nil, d.Errf("tollgate: %v", err)
			}
			app.Fallback = args[0]
		case "reputation":
			app.Reputation, err = parseReputation(d)
		case "snapshot_interval":
			args := d.RemainingArgs()
			switch {
			case len(args) != 1:
				return nil, d.Errf("tollgate: snapshot_interval takes 1 argument, got %d: snapshot_interval <duration>|off", len(args))
			case args[0] == "off":
				app.SnapshotInterval = -1
			default:
				dur, err := parseDuration(args[0], time.Second)
				if err != nil {
					return nil, d.Errf("tollgate: snapshot_interval %v (or off)", err)
				}
				app.SnapshotInterval = caddy.Duration(dur)
			}
		case "fallback_ratio":
			args := d.RemainingArgs()
			if len(args) != 1 {
				return nil, d.Errf("tollgate: fallback_ratio takes 1 argument, got %d: fallback_ratio <ratio>, e.g. 0.4", len(args))
			}
			if app.FallbackRatio, err = strconv.ParseFloat(args[0], 64); err != nil || !(app.FallbackRatio > 0 && app.FallbackRatio <= 1) {
				return nil, d.Errf("tollgate: fallback_ratio %q: must be a number above 0 and at most 1, e.g. 0.4", args[0])
			}
		default:
			return nil, d.Errf("tollgate: unknown global option %q (allowed: max_keys, network_share, secret, cookie, ip_prefix, ip_pressure, cluster, fallback, fallback_ratio, reputation, snapshot_interval)", sub)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := app.Validate(); err != nil { // the app's one validation path
		return nil, d.Err(err.Error())
	}
	return httpcaddyfile.App{
		Name:  "tollgate",
		Value: caddyconfig.JSON(app, nil),
	}, nil
}

// parseCookie parses the `cookie { ... }` block of the global option.
func parseCookie(d *caddyfile.Dispenser) (*CookieConfig, error) {
	c := new(CookieConfig)
	if d.NextArg() {
		return nil, d.Errf("tollgate: cookie: unexpected argument %q; settings go in a block", d.Val())
	}
	seen := make(map[string]bool)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if seen[sub] {
			return nil, d.Errf("tollgate: cookie %s is given twice", sub)
		}
		seen[sub] = true
		args := d.RemainingArgs()
		switch sub {
		case "name":
			if len(args) != 1 {
				return nil, d.Errf("tollgate: cookie name takes 1 argument, got %d", len(args))
			}
			c.Name = args[0]
		case "max_age":
			if len(args) != 1 {
				return nil, d.Errf("tollgate: cookie max_age takes 1 argument, got %d: max_age <duration>, e.g. max_age 720h", len(args))
			}
			dur, err := parseDuration(args[0], time.Minute)
			if err != nil {
				return nil, d.Errf("tollgate: cookie max_age %v", err)
			}
			c.MaxAge = caddy.Duration(dur)
		case "issue":
			switch {
			case len(args) == 1 && (args[0] == issueAlways || args[0] == issueOff):
				c.Issue = args[0]
			case len(args) == 2 && args[0] == issueHeader:
				c.Issue, c.IssueHeader = issueHeader, args[1]
			default:
				return nil, d.Errf("tollgate: cookie issue %q: must be always, off or header <Header-Name>", strings.Join(args, " "))
			}
		case "challenge":
			if len(args) != 2 || args[0] != challengePoW {
				return nil, d.Errf("tollgate: cookie challenge %q: must be pow <difficulty>, e.g. challenge pow 16", strings.Join(args, " "))
			}
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 || n > maxDifficulty {
				return nil, d.Errf("tollgate: cookie challenge pow %q: difficulty must be a whole number of bits from 1 to %d", args[1], maxDifficulty)
			}
			c.Challenge = &ChallengeConfig{Type: challengePoW, Difficulty: n}
			for nest := d.Nesting(); d.NextBlock(nest); {
				if d.Val() != "except" || d.CountRemainingArgs() != 0 {
					return nil, d.Errf("tollgate: cookie challenge: unknown setting %q (allowed: except { <request matchers> })", d.Val())
				}
				set, err := caddyhttp.ParseCaddyfileNestedMatcherSet(d)
				if err != nil {
					return nil, err
				}
				c.Challenge.ExceptRaw = set
			}
		case "issue_limit":
			if len(args) != 2 {
				return nil, d.Errf("tollgate: cookie issue_limit takes 2 arguments, got %d: issue_limit <N> <window>, e.g. issue_limit 10 1h", len(args))
			}
			n, err := parseLimit(args[0])
			if err != nil {
				return nil, d.Errf("tollgate: cookie issue_limit %v", err)
			}
			w, err := parseWindow(args[1])
			if err != nil {
				return nil, d.Errf("tollgate: cookie issue_limit window %v", err)
			}
			c.IssueLimit, c.IssueWindow = n, caddy.Duration(w)
		default:
			return nil, d.Errf("tollgate: cookie: unknown subdirective %q (allowed: name, max_age, issue, issue_limit, challenge)", sub)
		}
	}
	if c.Name != "" {
		if _, err := fingerprint.NewIdentifier(fingerprint.Config{Secrets: [][]byte{make([]byte, fingerprint.MinSecretLen)}, CookieName: c.Name}); err != nil {
			return nil, d.Errf("tollgate: cookie %v", err)
		}
	}
	return c, nil
}

// parsePressure parses `ip_pressure off` or an `ip_pressure { ... }` block.
func parsePressure(d *caddyfile.Dispenser) (*PressureConfig, error) {
	p := new(PressureConfig)
	if d.NextArg() {
		if d.Val() != "off" || d.NextArg() {
			return nil, d.Errf("tollgate: ip_pressure %q: the only argument is off; settings go in a block", d.Val())
		}
		p.Off = true
		return p, nil
	}
	seen := make(map[string]bool)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if seen[sub] {
			return nil, d.Errf("tollgate: ip_pressure %s is given twice", sub)
		}
		seen[sub] = true
		args := d.RemainingArgs()
		if want := map[string]int{"threshold": 2}[sub]; want == 0 && len(args) != 1 || want == 2 && len(args) != 2 {
			return nil, d.Errf("tollgate: ip_pressure %s takes %d argument(s), got %d", sub, max(want, 1), len(args))
		}
		var err error
		switch sub {
		case "threshold":
			if p.Threshold, err = strconv.Atoi(args[0]); err != nil || p.Threshold < 1 || p.Threshold > 10000 {
				return nil, d.Errf("tollgate: ip_pressure threshold %q: must be a whole number from 1 to 10000", args[0])
			}
			w, err := parseWindow(args[1])
			if err != nil {
				return nil, d.Errf("tollgate: ip_pressure threshold window %v", err)
			}
			p.Window = caddy.Duration(w)
		case "squeeze":
			if p.Squeeze, err = strconv.ParseFloat(args[0], 64); err != nil || !(p.Squeeze > 0 && p.Squeeze <= 1) {
				return nil, d.Errf("tollgate: ip_pressure squeeze %q: must be a number above 0 and at most 1, e.g. 0.5", args[0])
			}
		case "duration":
			dur, err := parseDuration(args[0], time.Second)
			if err != nil {
				return nil, d.Errf("tollgate: ip_pressure duration %v", err)
			}
			p.Duration = caddy.Duration(dur)
		case "max_networks":
			if p.MaxNetworks, err = strconv.Atoi(args[0]); err != nil || p.MaxNetworks < 1 {
				return nil, d.Errf("tollgate: ip_pressure max_networks %q: must be a whole number of at least 1", args[0])
			}
		default:
			return nil, d.Errf("tollgate: ip_pressure: unknown subdirective %q (allowed: threshold, squeeze, duration, max_networks)", sub)
		}
	}
	return p, nil
}

// parseReputation parses `reputation off` or a `reputation { ... }` block.
func parseReputation(d *caddyfile.Dispenser) (*ReputationConfig, error) {
	c := new(ReputationConfig)
	if d.NextArg() {
		if d.Val() != "off" || d.NextArg() {
			return nil, d.Errf("tollgate: reputation %q: the only argument is off; settings go in a block", d.Val())
		}
		c.Off = true
		return c, nil
	}
	seen := make(map[string]bool)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if seen[sub] && sub != "bucket" {
			return nil, d.Errf("tollgate: reputation %s is given twice", sub)
		}
		seen[sub] = true
		args := d.RemainingArgs()
		// positive reads a number above 0 and at most hi.
		positive := func(s, what string, hi float64) (float64, error) {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || !(v > 0 && v <= hi) {
				return 0, d.Errf("tollgate: reputation %s %q: must be a number above 0 and at most %g", what, s, hi)
			}
			return v, nil
		}
		var err error
		switch sub {
		case "penalty":
			if len(args) != 1 {
				return nil, d.Errf("tollgate: reputation penalty takes 1 argument, got %d: penalty <points per denial>", len(args))
			}
			c.Penalty, err = positive(args[0], "penalty", 100)
		case "recovery":
			if len(args) != 1 {
				return nil, d.Errf("tollgate: reputation recovery takes 1 argument, got %d: recovery <points per hour>", len(args))
			}
			c.Recovery, err = positive(args[0], "recovery", 1e6)
		case "bucket":
			if len(args) != 2 {
				return nil, d.Errf("tollgate: reputation bucket takes 2 arguments, got %d: bucket <from score> <factor>, e.g. bucket 50 0.6", len(args))
			}
			var b BucketConfig
			b.From, err = strconv.ParseFloat(args[0], 64)
			if err != nil || !(b.From >= 0 && b.From <= 100) {
				return nil, d.Errf("tollgate: reputation bucket from %q: must be a score from 0 to 100", args[0])
			}
			b.Factor, err = positive(args[1], "factor", 1)
			c.Buckets = append(c.Buckets, b)
		default:
			return nil, d.Errf("tollgate: reputation: unknown subdirective %q (allowed: penalty, recovery, bucket)", sub)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := c.policy().Validate(); err != nil {
		return nil, d.Errf("tollgate: reputation: %v", err)
	}
	return c, nil
}

// parseCluster parses the `cluster { ... }` block of the global option.
func parseCluster(d *caddyfile.Dispenser) (*ClusterConfig, error) {
	c := new(ClusterConfig)
	if d.NextArg() {
		return nil, d.Errf("tollgate: cluster: unexpected argument %q; settings go in a block", d.Val())
	}
	seen := make(map[string]bool)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if seen[sub] {
			return nil, d.Errf("tollgate: cluster %s is given twice", sub)
		}
		seen[sub] = true
		args := d.RemainingArgs()
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
				return nil, d.Err("tollgate: cluster join needs at least one host:port")
			}
			for _, a := range args {
				if err := checkAddress(a); err != nil {
					return nil, d.Errf("tollgate: cluster join %q: %v", a, err)
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
		default:
			return nil, d.Errf("tollgate: cluster: unknown subdirective %q (allowed: bind, peer_listen, advertise, peer_advertise, join, gossip_key, name, peer_timeout)", sub)
		}
		if err != nil {
			return nil, err
		}
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

// intArg parses the single whole-number argument of a subdirective.
func intArg(d *caddyfile.Dispenser, name, example string, lo, hi int) (int, error) {
	args := d.RemainingArgs()
	if len(args) != 1 {
		return 0, d.Errf("tollgate: %s takes 1 argument, got %d (%s)", name, len(args), example)
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < lo || n > hi {
		return 0, d.Errf("tollgate: %s %q: must be a whole number from %d to %d", name, args[0], lo, hi)
	}
	return n, nil
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*Handler)(nil)
)
