package caddymodule

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// handlerPlaces finds every tollgate handler in the routes of a provisioned
// http app and says where it is, in terms of the config's content only:
//
//	<listen addresses> <route matchers>/<position in the site>
//
// The site is the server's listen addresses and the matchers of the
// top-level route (for a Caddyfile site, its host names); the position is
// the path of handler and route indexes from that route down to the
// handler (a Caddyfile site's directives, in the order the adapter sorts
// them). Neither depends on the order of servers, or of sites, in the
// config, so a handler keeps its place when sites are reordered.
func handlerPlaces(app *caddyhttp.App) map[*Handler]string {
	places := make(map[*Handler]string)
	if app == nil {
		return places
	}
	for _, srv := range app.Servers {
		listen := slices.Clone(srv.Listen)
		slices.Sort(listen)
		server := strings.Join(listen, ",")
		seen := make(map[string]int) // top-level routes with the same site
		walk := func(prefix string, routes caddyhttp.RouteList) {
			for _, r := range routes {
				key := prefix + matchersText(r.MatcherSets)
				site := key
				if n := seen[key]; n > 0 {
					site += "#" + strconv.Itoa(n+1) // another route with the same matchers
				}
				seen[key]++
				walkHandlers(places, site, "", r.Handlers)
			}
		}
		walk(server+" ", srv.Routes)
		if srv.Errors != nil {
			walk(server+" errors ", srv.Errors.Routes)
		}
		names := make([]string, 0, len(srv.NamedRoutes))
		for name := range srv.NamedRoutes {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			if r := srv.NamedRoutes[name]; r != nil {
				walkHandlers(places, server+" route "+name, "", r.Handlers)
			}
		}
	}
	return places
}

// walkHandlers records the tollgate handlers among hs, and descends into
// subroutes, extending path with each handler's and route's index.
func walkHandlers(places map[*Handler]string, site, path string, hs []caddyhttp.MiddlewareHandler) {
	for hi, mh := range hs {
		p := path + "/" + strconv.Itoa(hi)
		switch x := mh.(type) {
		case *Handler:
			places[x] = site + p
		case *caddyhttp.Subroute:
			for ri, r := range x.Routes {
				walkHandlers(places, site, p+"."+strconv.Itoa(ri), r.Handlers)
			}
			if x.Errors != nil {
				for ri, r := range x.Errors.Routes {
					walkHandlers(places, site, p+".errors."+strconv.Itoa(ri), r.Handlers)
				}
			}
		}
	}
}

// matchersText renders provisioned matcher sets as text: host names as
// they are, other matchers as their module name and JSON, each set sorted.
func matchersText(sets caddyhttp.MatcherSets) string {
	var out []string
	for _, set := range sets {
		var parts []string
		for _, m := range set {
			switch h := m.(type) {
			case caddyhttp.MatchHost:
				parts = append(parts, strings.Join(sortedCopy(h), ","))
			case *caddyhttp.MatchHost:
				parts = append(parts, strings.Join(sortedCopy(*h), ","))
			default:
				name := "matcher"
				if mod, ok := m.(caddy.Module); ok {
					name = caddy.GetModuleName(mod)
				}
				raw, _ := json.Marshal(m)
				parts = append(parts, name+"="+string(raw))
			}
		}
		slices.Sort(parts)
		out = append(out, strings.Join(parts, " "))
	}
	return strings.Join(out, " | ")
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// contentPlace names a handler found in no http route (a handler some
// other module embeds) by a digest of its config.
func contentPlace(h *Handler) string {
	raw, _ := json.Marshal(h)
	sum := sha256.Sum256(raw)
	return "handler " + hex.EncodeToString(sum[:6])
}
