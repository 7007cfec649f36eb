package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/limiter"
)

// handleTiers serves GET, PUT and DELETE /tollgate/tiers.
func (adminAPI) handleTiers(w http.ResponseWriter, r *http.Request) error {
	app, err := runningApp()
	if err != nil {
		return err
	}
	var table map[string]map[string]int64
	switch r.Method {
	case http.MethodGet:
	case http.MethodPut:
		if table, err = readTierOverrides(r); err != nil {
			return err
		}
		if err := app.validateTierOverrides(table); err != nil {
			return err
		}
	case http.MethodDelete:
		table = map[string]map[string]int64{}
	default:
		return methodNotAllowed(r, "GET, PUT or DELETE")
	}
	if table != nil {
		want, err := ifMatchVersion(r)
		if err != nil {
			return err
		}
		if err := app.changeTierOverrides(table, want); err != nil {
			return err
		}
	}
	view := app.tiersView()
	w.Header().Set("ETag", adminapi.TiersETag(app.state.tiers.version()))
	return writeJSON(w, view)
}

// anyVersion is what ifMatchVersion returns for a change that names no
// version: it applies whatever the table in effect.
const anyVersion = -1

// ifMatchVersion reads a change's If-Match: the overrides_version (the
// ETag) the change was made from, quoted or bare, or * (any).
func ifMatchVersion(r *http.Request) (int64, error) {
	h := strings.TrimSpace(r.Header.Get("If-Match"))
	if h == "" || h == "*" {
		return anyVersion, nil
	}
	digits, quoted := strings.CutPrefix(h, `"`)
	closed := true
	if quoted {
		digits, closed = strings.CutSuffix(digits, `"`)
	}
	v, err := strconv.ParseUint(digits, 10, 63)
	if err != nil || !closed {
		return 0, badRequest(`If-Match %q: want the overrides_version that GET /tollgate/tiers answers (its ETag), such as "1795312345678901234", or *`, h)
	}
	return int64(v), nil
}

// changeTierOverrides replaces the tier table if the one in effect here is
// still version want (anyVersion: whatever it is); else it is a 412 and
// nothing changes.
func (a *App) changeTierOverrides(zones map[string]map[string]int64, want int64) error {
	a.state.tiers.mu.Lock()
	defer a.state.tiers.mu.Unlock()
	if cur := a.state.tiers.version(); want != anyVersion && want != cur {
		origin := "here"
		if t := a.state.tiers.load(); t != nil && t.Origin != "" {
			origin = "on " + t.Origin
		}
		return caddy.APIError{HTTPStatus: http.StatusPreconditionFailed,
			Err: fmt.Errorf(`the tier table changed since it was read: If-Match "%d", now "%d" (changed %s); GET /tollgate/tiers, make the change again on what it shows and send it with If-Match of the new overrides_version`,
				want, cur, origin)}
	}
	return a.setTierOverrides(zones)
}

// tiersBodyWant is what PUT /tollgate/tiers takes, for error messages.
const tiersBodyWant = `an object of zone → tier → limit, such as {"api": {"pro": 2000}}, naming every override to keep; to drop every override, DELETE /tollgate/tiers`

// readTierOverrides reads a PUT /tollgate/tiers body. Anything but a table
// naming at least one zone, each with at least one tier and a whole-number
// limit, is refused: a body of null or {} would otherwise drop every
// override, which is what DELETE is for.
func readTierOverrides(r *http.Request) (map[string]map[string]int64, error) {
	var raw json.RawMessage
	if err := decodeBody(r, &raw, tiersBodyWant); err != nil {
		return nil, err
	}
	var zones map[string]json.RawMessage
	if !isJSONObject(raw) || json.Unmarshal(raw, &zones) != nil {
		return nil, badRequest("body %s: want %s", shortJSON(raw), tiersBodyWant)
	}
	if len(zones) == 0 {
		return nil, badRequest("body {} names no zone: want %s", tiersBodyWant)
	}
	out := make(map[string]map[string]int64, len(zones))
	for zone, zraw := range zones {
		var tiers map[string]json.RawMessage
		if !isJSONObject(zraw) || json.Unmarshal(zraw, &tiers) != nil {
			return nil, badRequest(`zone %q: %s: want an object of tier → limit, such as {"pro": 2000}`, zone, shortJSON(zraw))
		}
		if len(tiers) == 0 {
			return nil, badRequest("zone %q: {} names no tier: name at least one, or leave the zone out to drop its overrides", zone)
		}
		out[zone] = make(map[string]int64, len(tiers))
		for tier, nraw := range tiers {
			n, err := strconv.ParseInt(string(bytes.TrimSpace(nraw)), 10, 64)
			if err != nil {
				return nil, badRequest("zone %q: tier %q: %s: want a whole number, such as 2000", zone, tier, shortJSON(nraw))
			}
			out[zone][tier] = n
		}
	}
	return out, nil
}

// isJSONObject reports whether raw is a JSON object (not null, an array or
// a scalar).
func isJSONObject(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) > 0 && b[0] == '{'
}

// shortJSON renders a JSON value for an error message, cut short if long.
func shortJSON(raw json.RawMessage) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

// validateTierOverrides checks a PUT body against the running config.
func (a *App) validateTierOverrides(body map[string]map[string]int64) error {
	known := a.tierNames()
	for zone, tiers := range body {
		zs := a.zonesNamed(zone)
		if len(zs) == 0 {
			for _, z := range a.zonesNamed("") {
				if z.scope == zone {
					return badRequest("zone %q is a scope of zone %q: overrides are set by zone name, for every scope of it; use %q", zone, z.Name, z.Name)
				}
			}
			return badRequest("unknown zone %q: the running config has %s", zone, strings.Join(a.zoneNames(), ", "))
		}
		for tier, n := range tiers {
			if err := validateTierName(tier); err != nil {
				return badRequest("zone %q: %v", zone, err)
			}
			if !known[tier] && tier != defaultTier {
				return badRequest("zone %q: unknown tier %q: the config names %s; a new tier is declared with `tier NAME N` in a zone first; requests with no tier or an unlisted one get the zone's default, set as default=N",
					zone, tier, joinKeys(known))
			}
			for _, z := range zs { // every zone of that name: rate and lease zones differ
				if err := z.validateTierLimit(n); err != nil {
					return badRequest("zone %q: tier %s %v", zone, tier, err)
				}
			}
		}
	}
	return nil
}

// setTierOverrides puts a new tier table in effect here, sends it to every
// node and keeps it in storage.
func (a *App) setTierOverrides(zones map[string]map[string]int64) error {
	raw, err := json.Marshal(zones)
	if err != nil {
		return err
	}
	v := a.node.Publish(tiersSharedName, raw)
	t := &tierTable{Zones: zones, Version: v.Version, Origin: v.Origin}
	a.state.tiers.store(t)
	if err := a.state.saveTiers(t); err != nil {
		a.logger.Error("keeping the tier table", zap.Error(err))
	}
	a.logger.Info("tier limits changed through the admin API", zap.Int("zones", len(zones)))
	return nil
}

func (a *App) tiersView() adminapi.TiersView {
	t := a.state.tiers.load()
	view := adminapi.TiersView{Zones: map[string]adminapi.TierView{}}
	if t != nil {
		view.OverridesVersion, view.OverridesOrigin = t.Version, t.Origin
	}
	for _, z := range a.zonesNamed("") {
		tv := adminapi.TierView{Zone: z.Name, Kind: "limit", Default: z.Limit, Caddyfile: map[string]int64{}, Overrides: map[string]int64{}, Effective: map[string]int64{}}
		if z.isLease() {
			tv.Kind, tv.Default = "concurrent", z.Concurrent
		}
		for tier, n := range z.Tiers {
			tv.Caddyfile[tier], tv.Effective[tier] = n, n
		}
		for tier, n := range t.zone(z.Name) {
			tv.Overrides[tier], tv.Effective[tier] = n, n
		}
		view.Zones[z.scope] = tv // overrides are by name: every scope of it has them
	}
	return view
}

// warnShadowedTiers logs, after a reload, the Caddyfile tier settings that
// run-time overrides shadow, so a reload never silently leaves them out.
func (a *App) warnShadowedTiers() {
	t := a.state.tiers.load()
	for _, z := range a.zonesNamed("") {
		for tier, n := range z.Tiers {
			if o, ok := t.get(z.Name, tier); ok && o != n {
				a.logger.Warn("a tier limit set through the admin API overrides the config; DELETE /tollgate/tiers to return to the config",
					zap.String("zone", z.Name), zap.String("tier", tier), zap.Int64("config", n), zap.Int64("in_effect", o))
			}
		}
	}
}

// tierNames returns every tier some zone of the running config names.
func (a *App) tierNames() map[string]bool {
	names := map[string]bool{}
	for _, z := range a.zonesNamed("") {
		for tier := range z.Tiers {
			names[tier] = true
		}
	}
	return names
}

func joinKeys(set map[string]bool) string {
	if len(set) == 0 {
		return "no tiers"
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

func (a *App) zoneNames() []string {
	seen := map[string]bool{}
	var out []string
	for _, z := range a.zonesNamed("") {
		if !seen[z.Name] {
			seen[z.Name] = true
			out = append(out, z.Name)
		}
	}
	sort.Strings(out)
	return out
}

// grantBodyWant is what POST /tollgate/grants takes, for error messages.
const grantBodyWant = `an object {"zone": "api", "key": "alice", "amount": 500, "duration": "168h"}`

// grantDuration reads a grant's duration: seconds as a number, or a
// duration string.
func grantDuration(raw json.RawMessage) (time.Duration, error) {
	var secs float64
	if err := json.Unmarshal(raw, &secs); err == nil {
		d := time.Duration(secs * float64(time.Second))
		if d < time.Second || d > maxGrantDuration {
			return 0, badRequest("duration %s: must be from 1 to %d seconds, or a duration string such as 168h or 7d", raw, int64(maxGrantDuration.Seconds()))
		}
		return d, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, badRequest("duration %s: must be a number of seconds or a duration string such as 168h or 7d", raw)
	}
	d, err := caddy.ParseDuration(s)
	if err != nil || d < time.Second || d > maxGrantDuration {
		return 0, badRequest("duration %q: must be a duration from 1s to %dd, e.g. 168h or 7d, or a number of seconds from 1 to %d", s,
			int64(maxGrantDuration/(24*time.Hour)), int64(maxGrantDuration.Seconds()))
	}
	return d, nil
}

// grantView shows a grant of zone z to key, as given or hashed.
func grantView(z *Zone, key string, g limiter.GrantStatus) adminapi.GrantView {
	return adminapi.GrantView{
		Zone: z.Name, Scope: z.scope, Key: key, Version: uuidString(g.Version),
		Amount: g.Amount, Used: g.Used, Remaining: g.Remaining(),
		Created: instant(time.Unix(0, g.Created)), Expires: instant(time.Unix(0, g.Expires)),
	}
}

// maxGrantDuration bounds how long a grant may last.
const maxGrantDuration = limiter.MaxWindow

// handleGrantsCollection serves GET and POST /tollgate/grants.
func (adminAPI) handleGrantsCollection(w http.ResponseWriter, r *http.Request) error {
	app, err := runningApp()
	if err != nil {
		return err
	}
	if r.Method == http.MethodGet {
		return app.listGrants(w, r)
	}
	var req adminapi.GrantRequest
	if err := decodeBody(r, &req, grantBodyWant); err != nil {
		return err
	}
	zones, err := app.grantZones(req.Zone, false)
	if err != nil {
		return err
	}
	if req.Key == "" {
		return badRequest("key is required: the key as the zone renders it (the client ID by default)")
	}
	if req.Amount < 1 || req.Amount > limiter.MaxQuota {
		return badRequest("amount %d: must be a whole number from 1 to %d", req.Amount, int64(limiter.MaxQuota))
	}
	if len(req.Duration) == 0 {
		return badRequest("duration is required: a number of seconds, or a duration string such as 168h or 7d")
	}
	dur, err := grantDuration(req.Duration)
	if err != nil {
		return err
	}
	now := time.Now()
	g := limiter.Grant{Created: now.UnixNano(), Amount: req.Amount, Expires: now.Add(dur).UnixNano()}
	g.Version = newUUID()
	var out []adminapi.GrantView
	keyHash := app.keyHashOf(req.Key)
	for _, z := range zones {
		if _, err := app.node.PutGrant(limiter.ZoneKey(keyHash, z.seed), g); err != nil {
			return unavailable(err)
		}
		app.state.lists.grants.record(grantEntry{Zone: z.Name, Scope: z.scope, Key: keyHash, Created: g.Created, Expires: g.Expires}, now)
		out = append(out, grantView(z, req.Key, limiter.GrantStatus{Grant: g}))
	}
	app.logger.Info("grant given through the admin API", zap.String("zone", req.Zone), zap.Int64("amount", req.Amount),
		zap.Duration("duration", dur), zap.String("version", uuidString(g.Version)))
	// The hashed ID, not the raw key: a raw key could name another route
	// ("..") and would land in the URL that Caddy's admin log records.
	w.Header().Set("Location", adminapi.PathGrant+url.PathEscape(req.Zone)+"/"+adminapi.HashedID(keyHash))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	if len(out) == 1 {
		return writeJSON(w, out[0])
	}
	return writeJSON(w, out)
}

// grantZones returns the limit zones called name, or an API error: a zone
// the config does not have is a bad request in a body, and not found in a
// path.
func (a *App) grantZones(name string, inPath bool) ([]*Zone, error) {
	if name == "" {
		return nil, badRequest("zone is required: a limit zone of the running config (%s)", strings.Join(a.limitZoneNames(), ", "))
	}
	zones := a.zonesNamed(name)
	if len(zones) == 0 {
		unknown := badRequest
		if inPath {
			unknown = notFound
		}
		return nil, unknown("unknown zone %q: the running config has %s", name, strings.Join(a.zoneNames(), ", "))
	}
	if zones[0].isLease() {
		return nil, badRequest("zone %q is a concurrent zone: grants give extra quota to limit zones (%s)", name, strings.Join(a.limitZoneNames(), ", "))
	}
	return zones, nil
}

// limitZoneNames returns the names of the running config's limit zones,
// those a grant can name.
func (a *App) limitZoneNames() []string {
	seen := map[string]bool{}
	out := []string{}
	for _, z := range a.zonesNamed("") {
		if !z.isLease() && !seen[z.Name] {
			seen[z.Name] = true
			out = append(out, z.Name)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return []string{"none: it has only concurrent zones"}
	}
	return out
}

// handleGrant serves GET and DELETE /tollgate/grants/{zone}/{key}.
func (adminAPI) handleGrant(w http.ResponseWriter, r *http.Request) error {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), adminapi.PathGrant)
	zoneRaw, keyRaw, ok := strings.Cut(rest, "/")
	zone, err1 := url.PathUnescape(zoneRaw)
	key, err2 := url.PathUnescape(keyRaw)
	if !ok || zone == "" || key == "" || err1 != nil || err2 != nil || strings.Contains(keyRaw, "/") {
		return badRequest("want /tollgate/grants/{zone}/{key}, with both URL-escaped; got %q", r.URL.Path)
	}
	app, err := runningApp()
	if err != nil {
		return err
	}
	zones, err := app.grantZones(zone, true)
	if err != nil {
		return err
	}
	keyHash := app.keyHashOf(key)
	switch r.Method {
	case http.MethodGet:
		var out []adminapi.GrantView
		for _, z := range zones {
			g, ok, err := app.node.GetGrant(limiter.ZoneKey(keyHash, z.seed))
			if err != nil {
				return unavailable(err)
			}
			if ok {
				out = append(out, grantView(z, key, g))
			}
		}
		if len(out) == 0 {
			return notFound("no grant for key %q in zone %q", key, zone)
		}
		if len(out) == 1 {
			return writeJSON(w, out[0])
		}
		return writeJSON(w, out)
	case http.MethodDelete:
		revoked := false
		for _, z := range zones {
			ok, err := app.node.DeleteGrant(limiter.ZoneKey(keyHash, z.seed))
			if err != nil {
				return unavailable(err)
			}
			revoked = revoked || ok
		}
		if !revoked {
			return notFound("no grant for key %q in zone %q", key, zone)
		}
		scopes := make([]string, 0, len(zones))
		for _, z := range zones {
			scopes = append(scopes, z.scope)
		}
		forgetEverywhere(app.node, gatherGrantsForget, keyHash, scopes)
		app.logger.Info("grant revoked through the admin API", zap.String("zone", zone))
		return writeJSON(w, adminapi.GrantRevoked{Zone: zone, Key: key, Revoked: true})
	}
	return methodNotAllowed(r, "GET or DELETE")
}

// newUUID returns a random (version 4) UUID.
func newUUID() [16]byte { return uuid.New() }

func uuidString(id [16]byte) string { return uuid.UUID(id).String() }
