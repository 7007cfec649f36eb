package caddymodule

import (
	"net/http"
	"sort"

	"github.com/tollgate/tollgate/adminapi"
)

// handleZones serves GET /tollgate/zones: the running config's zones with
// their settings and the tier limits in effect.
func (adminAPI) handleZones(w http.ResponseWriter, _ *http.Request) error {
	app, err := runningApp()
	if err != nil {
		return err
	}
	return writeJSON(w, app.zonesView())
}

func (a *App) zonesView() adminapi.ZoneList {
	tiers := a.state.tiers.load()
	list := adminapi.ZoneList{Items: []adminapi.ZoneConfig{}}
	for _, z := range a.zonesNamed("") {
		zc := adminapi.ZoneConfig{
			Zone: z.Name, Scope: z.scope, Kind: "rate", Limit: z.Limit, Window: z.limit.Window.Seconds(),
			Algorithm: z.limit.Algorithm.String(), Key: z.Key,
			Trial: z.DryRun || z.handler != nil && z.handler.DryRun,
		}
		if z.isLease() {
			zc.Kind, zc.Limit, zc.Window = "concurrent", z.Concurrent, z.limit.Window.Seconds()
		}
		if zc.Key == "" {
			zc.Key = "{" + placeholderPrefix + "client_id}"
		}
		effective := map[string]int64{}
		for tier, n := range z.Tiers {
			effective[tier] = n
		}
		for tier, n := range tiers.zone(z.Name) {
			effective[tier] = n
		}
		for tier, n := range effective {
			zc.Tiers = append(zc.Tiers, adminapi.TierLimit{Tier: tier, Limit: n})
		}
		sort.Slice(zc.Tiers, func(i, j int) bool { return zc.Tiers[i].Tier < zc.Tiers[j].Tier })
		list.Items = append(list.Items, zc)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Scope < list.Items[j].Scope })
	return list
}

// handleHistory serves GET /tollgate/history: this node's counts of the
// last hour, step by step, kept since the node started; with ?nodes=all,
// on a cluster, the sum of every node's.
func (adminAPI) handleHistory(w http.ResponseWriter, r *http.Request) error {
	app, err := runningApp()
	if err != nil {
		return err
	}
	all := false
	switch nodes := r.URL.Query().Get(adminapi.QueryNodes); nodes {
	case "":
	case adminapi.NodesAll:
		all = true
	default:
		return badRequest("?%s=%q: want %q (every node's counts summed) or nothing (this node's)", adminapi.QueryNodes, nodes, adminapi.NodesAll)
	}
	return writeJSON(w, app.state.historyView(all))
}
