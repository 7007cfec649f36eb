package caddymodule

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
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
	places, _ := modulePlaces(app)
	return places
}

// modulePlaces is handlerPlaces, and also the places of every other
// handler in those routes (reverse_proxy, say), by the module's pointer:
// a tollgate handler in routes that no walk here reaches (a
// reverse_proxy's handle_response) is placed below the nearest of its
// ancestors found there.
func modulePlaces(app *caddyhttp.App) (map[*Handler]string, map[any]string) {
	places := make(map[*Handler]string)
	others := make(map[any]string)
	if app == nil {
		return places, others
	}
	for _, srv := range app.Servers {
		listen := slices.Clone(srv.Listen)
		slices.Sort(listen)
		server := strings.Join(listen, ",")
		seen := make(map[string]int) // top-level routes with the same site
		walk := func(prefix string, routes caddyhttp.RouteList) {
			for _, r := range routes {
				key := prefix
				if m := matchersText(r.MatcherSets); m != "" {
					key += " " + m
				}
				site := key
				if n := seen[key]; n > 0 {
					site += "#" + strconv.Itoa(n+1) // another route with the same matchers
				}
				seen[key]++
				walkHandlers(places, others, site, "", r.Handlers)
			}
		}
		walk(server, srv.Routes)
		if srv.Errors != nil {
			walk(server+" errors", srv.Errors.Routes)
		}
		names := make([]string, 0, len(srv.NamedRoutes))
		for name := range srv.NamedRoutes {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			if r := srv.NamedRoutes[name]; r != nil {
				walkHandlers(places, others, server+" route "+name, "", r.Handlers)
			}
		}
	}
	return places, others
}

// walkHandlers records the tollgate handlers among hs, and descends into
// subroutes, extending path with each handler's and route's index.
func walkHandlers(places map[*Handler]string, others map[any]string, site, path string, hs []caddyhttp.MiddlewareHandler) {
	for hi, mh := range hs {
		p := path + "/" + strconv.Itoa(hi)
		if isPointer(mh) {
			others[mh] = site + p
		}
		switch x := mh.(type) {
		case *Handler:
			places[x] = site + p
		case *caddyhttp.Subroute:
			for ri, r := range x.Routes {
				walkHandlers(places, others, site, p+"."+strconv.Itoa(ri), r.Handlers)
			}
			if x.Errors != nil {
				for ri, r := range x.Errors.Routes {
					walkHandlers(places, others, site, p+".errors."+strconv.Itoa(ri), r.Handlers)
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

// isPointer says whether m can be a map key: modules are pointers, but
// an interface holding an uncomparable value would panic as one.
func isPointer(m any) bool {
	return m != nil && reflect.ValueOf(m).Kind() == reflect.Pointer
}

// nestedPlace places h, which no walk of the http app's routes reached,
// below the nearest of its ancestors (as Caddy provisioned it) that was
// placed, with its content's digest and, when several such handlers have
// the same digest there, their order. Without such an ancestor, its
// content alone. seen counts the places given; call in provisioning order.
func nestedPlace(h *Handler, others map[any]string, seen map[string]int) string {
	for i := len(h.ancestry) - 1; i >= 0; i-- {
		m := h.ancestry[i]
		if !isPointer(m) || m == caddy.Module(h) {
			continue
		}
		if p, ok := others[m]; ok {
			place := p + " " + contentPlace(h)
			if n := seen[place]; n > 0 {
				seen[place]++
				return place + "#" + strconv.Itoa(n+1)
			}
			seen[place]++
			return place
		}
	}
	return contentPlace(h)
}
