package caddymodule

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
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
//	    zone <name> {
//	        limit <N> <window>          # required, e.g. limit 100 1m
//	        key <placeholders>          # default: the client IP
//	        algorithm sliding_window|fixed_window|token_bucket   # default sliding_window
//	        burst <N>                   # token_bucket only; default N of limit
//	        match { <request matchers> }   # default: every request
//	        shared                      # count with every shared zone of this name
//	    }
//	    dry_run                         # count, set headers, log; never block
//	    headers always|denied|off       # which responses get RateLimit headers; default always
//	}
//
// Every value is checked here, so `caddy adapt` already rejects bad ones.
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
			return d.Errf("tollgate: unknown subdirective %q (allowed: zone, dry_run, headers)", sub)
		}
	}
	if len(h.Zones) == 0 {
		return d.Err("tollgate: no zone configured; add at least one `zone <name> { limit <N> <window> }`")
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
		if seen[sub] {
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
		default:
			return nil, d.Errf("tollgate: zone %q: unknown subdirective %q (allowed: limit, key, algorithm, burst, match, shared)", z.Name, sub)
		}
	}
	if !seen["limit"] {
		return nil, d.Errf("tollgate: zone %q: limit is required: limit <N> <window>, e.g. limit 100 1m", z.Name)
	}
	if err := z.validate(); err != nil {
		return nil, d.Errf("tollgate: %v", err)
	}
	return z, nil
}

// parseApp parses the `tollgate` global option:
//
//	tollgate {
//	    max_keys <N>    # counters held in memory; default 1048576
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
		switch sub {
		case "max_keys":
			if !d.NextArg() {
				return nil, d.Err("tollgate: max_keys needs a number, e.g. max_keys 1000000")
			}
			n, err := strconv.Atoi(d.Val())
			if err != nil || n < 1 {
				return nil, d.Errf("tollgate: max_keys %q: must be a whole number of at least 1", d.Val())
			}
			if d.NextArg() {
				return nil, d.Errf("tollgate: max_keys takes one argument, got also %q", d.Val())
			}
			app.MaxKeys = n
		default:
			return nil, d.Errf("tollgate: unknown global option %q (allowed: max_keys)", sub)
		}
	}
	return httpcaddyfile.App{
		Name:  "tollgate",
		Value: caddyconfig.JSON(app, nil),
	}, nil
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*Handler)(nil)
)
