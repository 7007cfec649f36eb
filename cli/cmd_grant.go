package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/adminapi"
)

// runGrantAdd gives a key extra quota in a zone for a duration.
func runGrantAdd(c *invocation, args []string) (int, error) {
	warnNearlyHashed(args[1])
	amount, err := strconv.ParseInt(args[2], 10, 64)
	if err != nil {
		return exitUsage, fmt.Errorf("amount %q: want a whole number, e.g. 500", args[2])
	}
	var duration any = args[3]
	if secs, err := strconv.ParseInt(args[3], 10, 64); err == nil {
		duration = secs
	}
	// A new grant replaces the key's grant in the zone: say so, and what it
	// replaced.
	var replaced []adminapi.GrantView
	if hid, err := c.hashedID(args[1]); err == nil {
		path := adminapi.GrantPath(args[0], hid)
		if raw, err := c.call(http.MethodGet, path, nil, nil); err == nil {
			replaced, _ = grantsOf(http.MethodGet, path, raw)
		}
	}
	body := map[string]any{"zone": args[0], "key": args[1], "amount": amount, "duration": duration}
	raw, err := c.call(http.MethodPost, adminapi.PathGrants, body, nil)
	if err != nil {
		return exitFor(err), err
	}
	if c.json {
		return c.printJSON(raw)
	}
	gs, err := grantsOf(http.MethodPost, adminapi.PathGrants, raw)
	if err != nil {
		return exitRefused, err
	}
	for _, g := range replaced {
		fmt.Fprintf(c.out, "replaced the grant of %s in %s: %d of %d left, until %s\n", args[1], g.Scope, g.Remaining, g.Amount, g.Expires)
	}
	return c.printGrants(gs)
}

// runGrantShow prints a key's grant in a zone, or every grant that holds.
func runGrantShow(c *invocation, args []string) (int, error) {
	if len(args) == 1 {
		return exitUsage, errors.New("give a zone and a key, or neither to list every grant")
	}
	if len(args) == 2 {
		hid, err := c.hashedID(args[1])
		if err != nil {
			return exitFor(err), err
		}
		path := adminapi.GrantPath(args[0], hid)
		raw, err := c.call(http.MethodGet, path, nil, nil)
		if err != nil {
			return exitFor(err), err
		}
		if c.json {
			return c.printJSON(raw)
		}
		gs, err := grantsOf(http.MethodGet, path, raw)
		if err != nil {
			return exitRefused, err
		}
		for i := range gs {
			gs[i].Key = args[1] // as given, not the ID it was looked up by
		}
		return c.printGrants(gs)
	}
	items, unreachable, _, err := readList[adminapi.GrantView](c, adminapi.PathGrants, adminapi.MaxGrantsPage, strings.Replace(c.zoneQuery(), "?", "&", 1), 0)
	if err != nil {
		return exitFor(err), err
	}
	all := adminapi.GrantList{Items: items, Unreachable: unreachable}
	if all.Items == nil {
		all.Items = []adminapi.GrantView{}
	}
	if c.json {
		b, _ := json.Marshal(all)
		return c.printJSON(b)
	}
	if len(all.Items) == 0 {
		fmt.Fprintln(c.out, "no grant holds now")
	} else if code, err := c.printGrants(all.Items); err != nil {
		return code, err
	} else {
		fmt.Fprintln(c.out, "keys are listed by their hashed ID (no raw key is kept); caddy tollgate grant show <zone> <key> shows one by its raw key")
	}
	if len(all.Unreachable) > 0 {
		fmt.Fprintf(c.out, "not listed: grants given through or owned by %s (they did not answer)\n", strings.Join(all.Unreachable, ", "))
	}
	return exitOK, nil
}

// grantsOf reads a grant answer: one grant, or a list of them when zones
// of several handlers share the zone's name (one grant per scope).
func grantsOf(method, path string, raw []byte) ([]adminapi.GrantView, error) {
	var gs []adminapi.GrantView
	var err error
	if b := bytes.TrimSpace(raw); len(b) > 0 && b[0] == '[' {
		err = json.Unmarshal(b, &gs)
	} else {
		var g adminapi.GrantView
		err = json.Unmarshal(b, &g)
		gs = []adminapi.GrantView{g}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s answered what this command does not understand (%v); is caddy the same version as the running one?", errNotJSON, method, path, err)
	}
	return gs, nil
}

// printGrants prints grants as a table; the SCOPE column only when a
// zone's name does not say it (zones of several handlers sharing a name).
func (c *invocation) printGrants(gs []adminapi.GrantView) (int, error) {
	scoped := slices.ContainsFunc(gs, func(g adminapi.GrantView) bool { return g.Scope != g.Zone })
	w := c.table()
	if scoped {
		fmt.Fprintln(w, "ZONE\tSCOPE\tKEY\tAMOUNT\tUSED\tREMAINING\tEXPIRES")
	} else {
		fmt.Fprintln(w, "ZONE\tKEY\tAMOUNT\tUSED\tREMAINING\tEXPIRES")
	}
	for _, g := range gs {
		if scoped {
			fmt.Fprintf(w, "%s\t%s\t", g.Zone, g.Scope)
		} else {
			fmt.Fprintf(w, "%s\t", g.Zone)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\n", g.Key, g.Amount, g.Used, g.Remaining, g.Expires)
	}
	return exitOK, w.Flush()
}

// runGrantRevoke revokes a key's grant in a zone.
func runGrantRevoke(c *invocation, args []string) (int, error) {
	hid, err := c.hashedID(args[1])
	if err != nil {
		return exitFor(err), err
	}
	raw, err := c.call(http.MethodDelete, adminapi.GrantPath(args[0], hid), nil, nil)
	if err != nil {
		return exitFor(err), err
	}
	if c.json {
		return c.printJSON(raw)
	}
	fmt.Fprintf(c.out, "revoked the grant of %s in zone %s\n", args[1], args[0])
	return exitOK, nil
}
