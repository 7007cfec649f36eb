package cli

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/adminapi"
)

// runTiers prints every zone's tier limits: the config's, the overrides,
// and those in effect.
func runTiers(c *invocation, _ []string) (int, error) {
	return c.showTiers(http.MethodGet, nil)
}

// showTiers sends a tiers request and prints the table it answers; headers
// are extra request headers, name then value.
func (c *invocation) showTiers(method string, body any, headers ...string) (int, error) {
	var view adminapi.TiersView
	raw, err := c.call(method, adminapi.PathTiers, body, &view, headers...)
	if ae, ok := errors.AsType[*apiError](err); ok && ae.status == http.StatusPreconditionFailed {
		err = &apiError{status: ae.status, msg: ae.msg + "\nsomeone else changed the tier limits while this command ran: run it again to apply your change on top of theirs"}
	}
	if err != nil {
		return exitFor(err), err
	}
	if c.json {
		return c.printJSON(raw)
	}
	zones := make([]string, 0, len(view.Zones))
	for z := range view.Zones {
		zones = append(zones, z)
	}
	sort.Strings(zones)
	w := c.table()
	fmt.Fprintln(w, "ZONE\tKIND\tTIER\tCONFIG\tOVERRIDE\tIN EFFECT")
	for _, z := range zones {
		tv := view.Zones[z]
		// The default tier's override is named "default" in the table.
		over, effective := "-", tv.Default
		if n, ok := tv.Overrides[adminapi.DefaultTier]; ok {
			over, effective = strconv.FormatInt(n, 10), n
		}
		fmt.Fprintf(w, "%s\t%s\t(default)\t%d\t%s\t%d\n", z, tv.Kind, tv.Default, over, effective)
		tiers := make([]string, 0, len(tv.Effective))
		for t := range tv.Effective {
			if t != adminapi.DefaultTier {
				tiers = append(tiers, t)
			}
		}
		sort.Strings(tiers)
		for _, t := range tiers {
			cfg, over := "-", "-"
			if n, ok := tv.Caddyfile[t]; ok {
				cfg = strconv.FormatInt(n, 10)
			}
			if n, ok := tv.Overrides[t]; ok {
				over = strconv.FormatInt(n, 10)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\n", z, tv.Kind, t, cfg, over, tv.Effective[t])
		}
	}
	return exitOK, w.Flush()
}

// runTiersSet merges the given limits into the overrides in effect and
// puts the whole table, as the API replaces it whole.
func runTiersSet(c *invocation, args []string) (int, error) {
	zone := args[0]
	var view adminapi.TiersView
	if _, err := c.call(http.MethodGet, adminapi.PathTiers, nil, &view); err != nil {
		return exitFor(err), err
	}
	// Overrides are by zone name; the view is by scope, and every scope of
	// a name has the same overrides.
	table := adminapi.TierOverrides{}
	for scope, tv := range view.Zones {
		name := tv.Zone
		if name == "" { // an older Caddy: keyed by name
			name = scope
		}
		if len(tv.Overrides) > 0 {
			table[name] = tv.Overrides
		}
	}
	if table[zone] == nil {
		table[zone] = map[string]int64{}
	}
	for _, a := range args[1:] {
		tier, n, ok := strings.Cut(a, "=")
		limit, err := strconv.ParseInt(n, 10, 64)
		if !ok || tier == "" || err != nil {
			return exitUsage, fmt.Errorf("%q: want <tier>=<limit>, e.g. pro=12000", a)
		}
		table[zone][tier] = limit
	}
	// Conditional on the table read above: a change made meanwhile by
	// someone else is not overwritten (the API answers 412).
	return c.showTiers(http.MethodPut, table, "If-Match", adminapi.TiersETag(view.OverridesVersion))
}

// runTiersClear drops every run-time override.
func runTiersClear(c *invocation, _ []string) (int, error) {
	return c.showTiers(http.MethodDelete, nil)
}
