package caddymodule

import (
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// testHTTPApp builds a provisioned-looking http app: server names and the
// order of routes across sites are what a reload may change.
func testHTTPApp(names [2]string, swap bool, hs [5]*Handler) *caddyhttp.App {
	site := func(host string, h ...caddyhttp.MiddlewareHandler) caddyhttp.Route {
		return caddyhttp.Route{
			MatcherSets: caddyhttp.MatcherSets{{caddyhttp.MatchHost{host}}},
			Handlers: []caddyhttp.MiddlewareHandler{&caddyhttp.Subroute{Routes: caddyhttp.RouteList{
				{Handlers: h},
			}}},
		}
	}
	routes := caddyhttp.RouteList{site("a.test", hs[0]), site("b.test", &caddyhttp.Subroute{Routes: caddyhttp.RouteList{{Handlers: []caddyhttp.MiddlewareHandler{hs[1]}}, {Handlers: []caddyhttp.MiddlewareHandler{hs[2]}}}})}
	if swap {
		routes[0], routes[1] = routes[1], routes[0]
	}
	return &caddyhttp.App{Servers: map[string]*caddyhttp.Server{
		names[0]: {Listen: []string{":8080"}, Routes: routes},
		names[1]: {
			Listen:      []string{":9090", ":9091"},
			Routes:      caddyhttp.RouteList{{Handlers: []caddyhttp.MiddlewareHandler{hs[3]}}},
			NamedRoutes: map[string]*caddyhttp.Route{"shared_route": {Handlers: []caddyhttp.MiddlewareHandler{hs[4]}}},
		},
	}}
}

// TestHandlerPlacesComeFromContent: every handler gets a distinct place,
// and renaming servers or reordering sites changes none of them.
func TestHandlerPlacesComeFromContent(t *testing.T) {
	var hs [5]*Handler
	for i := range hs {
		hs[i] = new(Handler)
	}
	want := handlerPlaces(testHTTPApp([2]string{"srv0", "srv1"}, false, hs))
	seen := map[string]bool{}
	for i, h := range hs {
		p, ok := want[h]
		if !ok {
			t.Fatalf("handler %d not found", i)
		}
		if seen[p] {
			t.Fatalf("two handlers at %q", p)
		}
		seen[p] = true
		t.Logf("handler %d: %s", i, p)
	}
	got := handlerPlaces(testHTTPApp([2]string{"srv1", "srv0"}, true, hs))
	for i, h := range hs {
		if got[h] != want[h] {
			t.Errorf("handler %d moved from %q to %q when servers were renamed and sites reordered", i, want[h], got[h])
		}
	}
}
