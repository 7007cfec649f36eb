package caddymodule

import (
	"fmt"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// identify gives every zone of this config its identity, once, when the
// config is fully provisioned: before the config starts, or on the first
// request, whichever comes first.
//
// The rule: a shared zone is known by its name, and so is a zone whose
// name no other handler of the config declares. Zones of one name declared
// in several handlers are known by the name and the place of their
// handler (see handlerPlaces): the server's listen addresses, the site's
// matchers and the handler's position in the site. Identities come from
// the config's content only, never from the order in which things are
// provisioned, so a reload, or a reordering of sites, keeps every count
// where it was.
func (a *App) identify() {
	a.idOnce.Do(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		places, others := modulePlaces(a.httpApp)
		counts := a.nameCounts()
		nested := make(map[string]int)
		for _, h := range a.handlers {
			place, ok := places[h]
			if !ok {
				place = nestedPlace(h, others, nested)
			}
			a.identifyHandler(h, place, counts)
		}
		a.identified = true
	})
}

// nameCounts returns how many handlers declare each zone name. Call with
// a.mu held.
func (a *App) nameCounts() map[string]int {
	counts := make(map[string]int)
	for _, h := range a.handlers {
		for _, z := range h.Zones {
			counts[z.Name]++
		}
	}
	return counts
}

// identifyHandler sets the identities of h's zones, h being at place.
// Call with a.mu held.
func (a *App) identifyHandler(h *Handler, place string, counts map[string]int) {
	if a.scopes == nil {
		a.scopes = make(map[[2]string]bool)
	}
	for _, z := range h.Zones {
		scope := z.Name
		if !z.Shared && counts[z.Name] > 1 {
			scope = z.Name + "@" + place
		}
		z.setScope(a.hasher, scope)
		a.zoneList = append(a.zoneList, z)
		a.scopes[[2]string{z.Name, scope}] = true
	}
}

// zonesNamed returns the zones of this config called name (every zone if
// name is empty), one per identity.
func (a *App) zonesNamed(name string) []*Zone {
	a.identify()
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := make(map[uint64]bool)
	var out []*Zone
	for _, z := range a.zoneList {
		if (name == "" || z.Name == name) && !seen[z.seed] {
			seen[z.seed] = true
			out = append(out, z)
		}
	}
	return out
}

// forgetRemovedZones drops the metric series of this config's zones that
// the running config no longer has, or all of them when no config runs
// after this one (Caddy stopped, or the new config has no tollgate).
func (a *App) forgetRemovedZones() {
	cur := a.state.currentApp()
	if cur == a {
		return
	}
	a.mu.Lock()
	mine := a.scopes
	a.mu.Unlock()
	var kept map[[2]string]bool // nil: no config runs after this one
	if cur != nil {
		cur.identify()
		cur.mu.Lock()
		defer cur.mu.Unlock()
		kept = cur.scopes
	}
	for zs := range mine {
		if !kept[zs] {
			deleteDecisionSeries(zs[0], zs[1])
		}
	}
}

// registerHandler records a provisioned handler, whose zones get their
// identities once the whole config is provisioned (see identify). It
// refuses a shared zone declared with settings other than an earlier
// declaration's, naming both.
func (a *App) registerHandler(h *Handler, httpApp *caddyhttp.App) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, z := range h.Zones {
		if !z.Shared {
			continue
		}
		first, ok := a.shared[z.Name]
		if !ok {
			a.shared[z.Name] = z
			continue
		}
		if want, got := first.settings(first.DryRun || first.handler.DryRun), z.settings(z.DryRun || h.DryRun); want != got {
			return fmt.Errorf("tollgate: shared zone %q is declared with different settings: %s in %s, and %s in %s; every declaration of a shared zone must have the same settings",
				z.Name, want, a.describeHandler(first.handler), got, h.describe())
		}
	}
	for _, z := range h.Zones {
		z.handler = h
	}
	a.handlers = append(a.handlers, h)
	if httpApp != nil {
		a.httpApp = httpApp
	}
	if a.identified {
		// A handler provisioned after the config started (a route some
		// module provisions late): place it by its content.
		a.identifyHandler(h, contentPlace(h), a.nameCounts())
	}
	return nil
}

// describeHandler says where an already provisioned handler is.
func (a *App) describeHandler(h *Handler) string {
	if place, ok := handlerPlaces(a.httpApp)[h]; ok {
		return "the handler at " + place
	}
	return h.describe()
}
