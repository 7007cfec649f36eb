package caddymodule

import (
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/tollgate/tollgate/adminapi"
	"github.com/tollgate/tollgate/cluster"
	"github.com/tollgate/tollgate/limiter"
)

// handleClient serves GET and DELETE /tollgate/clients/{id}[?zone=name].
// {id} is the key as a zone renders it: the client ID by default, or
// whatever the zone's key produced (URL-escaped); or its hashed ID, h:…,
// as the logs print it. A GET of n:<hash>, as {http.tollgate.network}
// renders it, shows that IP network's budgets for requests without a
// session, and a DELETE of it resets them.
func (adminAPI) handleClient(w http.ResponseWriter, r *http.Request) error {
	raw := strings.TrimPrefix(r.URL.EscapedPath(), adminapi.PathClients)
	id, err := url.PathUnescape(raw)
	if err != nil || id == "" || strings.Contains(raw, "/") {
		return badRequest("want /tollgate/clients/{id}, with the id URL-escaped; got %q", r.URL.Path)
	}
	app, err := runningApp()
	if err != nil {
		return err
	}
	zoneName := r.URL.Query().Get(adminapi.QueryZone)
	zones := app.zonesNamed(zoneName)
	if len(zones) == 0 {
		if zoneName != "" {
			return notFound("no zone %q in the running config", zoneName)
		}
		return notFound("no zone in the running config")
	}
	keyHash := app.keyHashOf(id)
	if net, ok := adminapi.ParseNetworkID(id); ok && r.Method == http.MethodDelete {
		return app.resetNetwork(w, id, net, zones)
	}
	if net, ok := adminapi.ParseNetworkID(id); ok && r.Method == http.MethodGet {
		view := adminapi.ClientView{ID: id, Zones: []adminapi.ZoneView{}}
		view.Owner, view.Replica = app.placement(limiter.ZoneKey(net, 0))
		for _, z := range zones {
			if !z.countsNetwork() {
				continue
			}
			zv, err := app.networkZoneView(z, net)
			if err != nil {
				return unavailable(err)
			}
			view.Zones = append(view.Zones, zv)
		}
		return writeJSON(w, view)
	}
	switch r.Method {
	case http.MethodGet:
		tier := r.URL.Query().Get(adminapi.QueryTier)
		if tier != "" {
			if err := validateTierName(tier); err != nil {
				return badRequest("?%s=: %v", adminapi.QueryTier, err)
			}
		}
		view := adminapi.ClientView{ID: id, Zones: []adminapi.ZoneView{}, Tier: tier}
		view.Owner, view.Replica = app.placement(limiter.ZoneKey(keyHash, 0))
		factor := 1.0
		if rk := app.reputationKey(keyHash); rk != 0 {
			score, err := app.node.Reputation(rk)
			if err != nil {
				return unavailable(err)
			}
			rounded := int(math.Round(score))
			view.Reputation = &rounded
			factor = app.reputation.Factor(score)
		}
		tiers := app.state.tiers.load()
		for _, z := range zones {
			limit := z.limitFor(tier, tiers)
			if !z.isLease() && factor != 1 {
				limit = limit.Scale(factor) // as the engine scales it for the client
			}
			zv, err := app.zoneView(z, keyHash, id, limit)
			if err != nil {
				return unavailable(err)
			}
			view.Zones = append(view.Zones, zv)
		}
		return writeJSON(w, view)
	case http.MethodDelete:
		keys := make([]limiter.Key, 0, len(zones)+1)
		out := adminapi.ResetResult{ID: id, ZonesReset: []string{}}
		for _, z := range zones {
			keys = append(keys, limiter.ZoneKey(keyHash, z.seed))
			out.ZonesReset = append(out.ZonesReset, z.Name)
		}
		keys = append(keys, banKeys(zones, keyHash)...) // and lift their bans
		if rk := app.reputationKey(keyHash); rk != 0 && zoneName == "" {
			keys = append(keys, rk) // the whole client: its reputation too
		}
		out.Unreachable = app.node.Reset(keys...)
		if out.Unreachable == nil {
			out.Unreachable = []string{}
		}
		var scopes []string
		if zoneName != "" {
			for _, z := range zones {
				scopes = append(scopes, z.scope)
			}
		}
		forgetEverywhere(app.node, gatherDeniedForget, keyHash, scopes)
		app.logger.Info("client reset through the admin API", zap.Strings("zones", out.ZonesReset),
			zap.String("key_hash", adminapi.HashedID(keyHash)))
		return writeJSON(w, out)
	}
	return methodNotAllowed(r, "GET or DELETE")
}

// resetNetwork serves DELETE /tollgate/clients/n:…: it drops the budgets
// of network net in zones (those that have one), so its clients without a
// session are let through again, and forgets its denials.
func (a *App) resetNetwork(w http.ResponseWriter, id string, net uint64, zones []*Zone) error {
	out := adminapi.ResetResult{ID: id, ZonesReset: []string{}}
	var keys []limiter.Key
	var scopes []string
	for _, z := range zones {
		if !z.countsNetwork() {
			continue
		}
		keys = append(keys, limiter.ZoneKey(net, z.networkSeed()))
		scopes = append(scopes, z.scope+adminapi.NetworkScopeSuffix)
		out.ZonesReset = append(out.ZonesReset, z.Name)
	}
	if len(keys) == 0 {
		return notFound("no zone with a network budget: only rate zones keyed by the client ID have one")
	}
	out.Unreachable = a.node.Reset(keys...)
	if out.Unreachable == nil {
		out.Unreachable = []string{}
	}
	forgetEverywhere(a.node, gatherDeniedForget, net, scopes)
	a.logger.Info("network reset through the admin API", zap.Strings("zones", out.ZonesReset), zap.String("network", id))
	return writeJSON(w, out)
}

// keyHashOf returns the hash of a key given raw or hashed.
func (a *App) keyHashOf(id string) uint64 {
	if h, ok := adminapi.ParseHashedID(id); ok {
		return h
	}
	return a.hasher.Sum64(id)
}

// placement names the node that counts k and the one that keeps its
// replica ("" on a node alone).
func (a *App) placement(k limiter.Key) (owner, replica string) {
	return a.node.Owner(k).Name, a.node.Successor(k).Name
}

// zoneView reads one zone's state for a key at its owner, whose own limit
// there is limit.
func (a *App) zoneView(z *Zone, keyHash uint64, id string, limit limiter.Limit) (adminapi.ZoneView, error) {
	key := limiter.ZoneKey(keyHash, z.seed)
	zv := adminapi.ZoneView{Zone: z.Name, Scope: z.scope, Algorithm: z.limit.Algorithm.String(), Window: z.limit.Window.Seconds()}
	if z.isLease() {
		leases, err := a.node.Leases(key)
		if err != nil {
			return zv, err
		}
		zv.Limit, zv.ZoneLimit = limit.Quota, z.Concurrent
		zv.Remaining = max(0, limit.Quota-int64(len(leases)))
		zv.Exhausted, zv.Source = zv.Remaining == 0, cluster.SourceOwner.String()
		if a.node.Owner(key).Name != a.node.Name() {
			zv.Source = cluster.SourcePeer.String()
		}
		for _, l := range leases {
			zv.Leases = append(zv.Leases, adminapi.LeaseView{ID: strconv.FormatUint(l.ID, 16), Expires: instant(time.Unix(0, l.Expires))})
		}
		return zv, nil
	}
	res := make([]limiter.Result, 1)
	src := a.node.Peek(time.Now(), []limiter.Request{{Key: key, Zone: z.seed, Limit: limit}}, res)
	zv.Limit, zv.ZoneLimit = limit.Quota, z.Limit
	zv.Remaining, zv.Reset = max(0, res[0].Remaining), headerSeconds(res[0].Reset)
	zv.Exhausted, zv.Source = !res[0].Allowed, src.String()
	if zv.BannedFor = a.banView(z, keyHash); zv.BannedFor > 0 {
		zv.Exhausted = true
	}
	g, ok, err := a.node.GetGrant(key)
	if err != nil {
		return zv, err
	}
	if ok {
		gv := grantView(z, id, g)
		zv.Grant = &gv
	}
	return zv, nil
}

// networkZoneView reads zone z's budget of a network at its owner, without
// IP pressure.
func (a *App) networkZoneView(z *Zone, net uint64) (adminapi.ZoneView, error) {
	limit := z.limit.Scale(float64(a.networkShare(z)))
	key := limiter.ZoneKey(net, z.networkSeed())
	zv := adminapi.ZoneView{Zone: z.Name, Scope: z.scope + adminapi.NetworkScopeSuffix, Algorithm: limit.Algorithm.String(), Window: limit.Window.Seconds()}
	res := make([]limiter.Result, 1)
	src := a.node.Peek(time.Now(), []limiter.Request{{Key: key, Zone: z.networkSeed(), Limit: limit}}, res)
	zv.Limit, zv.ZoneLimit = limit.Quota, z.Limit
	zv.Remaining, zv.Reset = max(0, res[0].Remaining), headerSeconds(res[0].Reset)
	zv.Exhausted, zv.Source = !res[0].Allowed, src.String()
	return zv, nil
}
