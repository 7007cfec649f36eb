package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/tollgate/tollgate/adminapi"
)

// warnNearlyHashed says when an id looks like a hashed ID from the logs
// but is not one (a digit short, a typo): the API takes it for a raw key,
// so a reset of it succeeds and lets nobody through.
func warnNearlyHashed(id string) {
	if _, ok := adminapi.ParseHashedID(id); !ok && strings.HasPrefix(id, adminapi.HashedPrefix) {
		caddy.Log().Warn(fmt.Sprintf("%q is not a hashed ID (h: and 16 hex digits, as the logs print it): it is taken as a raw key", id))
	}
}

// hashedID returns the ID the admin routes are called with for a key: a
// hashed or network ID as it is, a raw key's hashed ID as the admin API
// answers it (POST /tollgate/hash, the key in the body), so that no raw key
// is put in a URL, which Caddy's admin log records.
func (c *invocation) hashedID(id string) (string, error) {
	warnNearlyHashed(id)
	if _, ok := adminapi.ParseHashedID(id); ok {
		return id, nil
	}
	if _, ok := adminapi.ParseNetworkID(id); ok {
		return id, nil
	}
	var ans adminapi.HashAnswer
	if _, err := c.call(http.MethodPost, adminapi.PathHash, adminapi.HashRequest{Key: id}, &ans); err != nil {
		return "", err
	}
	return ans.ID, nil
}

// callClient sends method to the route of client id (in --zone, if given;
// a GET for --tier, if given) and decodes the answer into out; the
// answer's ID is id as given.
func (c *invocation) callClient(method, id string, out any) ([]byte, error) {
	hid, err := c.hashedID(id)
	if err != nil {
		return nil, err
	}
	path := adminapi.ClientPath(hid) + c.zoneQuery()
	if c.tier != "" && method == http.MethodGet {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		path += sep + adminapi.QueryTier + "=" + url.QueryEscape(c.tier)
	}
	return c.call(method, path, nil, out)
}

// runClient prints a client's counters in every zone, or --zone.
func runClient(c *invocation, args []string) (int, error) {
	var view adminapi.ClientView
	raw, err := c.callClient(http.MethodGet, args[0], &view)
	if err != nil {
		return exitFor(err), err
	}
	seen := false
	for _, z := range view.Zones {
		seen = seen || counted(z)
	}
	unseen := errUnseen(args[0])
	if c.json {
		code, err := c.printJSON(raw)
		if err == nil && !seen {
			return exitNotFound, unseen
		}
		return code, err
	}
	if !seen {
		return exitNotFound, unseen
	}
	w := c.table()
	fmt.Fprintf(w, "client\t%s\n", args[0])
	fmt.Fprintf(w, "owner\t%s\n", view.Owner)
	if view.Replica != "" {
		fmt.Fprintf(w, "replica\t%s\n", view.Replica)
	}
	if view.Reputation != nil {
		fmt.Fprintf(w, "reputation\t%d\n", *view.Reputation)
	}
	if view.Tier != "" {
		fmt.Fprintf(w, "tier\t%s\n", view.Tier)
	} else {
		fmt.Fprintf(w, "tier\t(default): limits of a key with no tier or an unlisted one; give --tier for another\n")
	}
	w.Flush()
	fmt.Fprintln(c.out)
	w = c.table()
	fmt.Fprintln(w, "ZONE\tALGORITHM\tLIMIT\tREMAINING\tRESET\tDENIED\tSOURCE\tGRANT")
	for _, z := range view.Zones {
		if !counted(z) {
			continue // a zone that never saw the key: nothing to show
		}
		grant := "-"
		if z.Grant != nil {
			grant = fmt.Sprintf("%d of %d left", z.Grant.Remaining, z.Grant.Amount)
		}
		// The key's own limit (tier, reputation), and the zone's when it
		// differs.
		limit := strconv.FormatInt(z.Limit, 10)
		if z.ZoneLimit != 0 && z.ZoneLimit != z.Limit {
			limit += fmt.Sprintf(" (zone %d)", z.ZoneLimit)
		}
		denied := yesNo(z.Exhausted)
		if z.BannedFor > 0 {
			denied = fmt.Sprintf("banned %ds", z.BannedFor)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%ds\t%s\t%s\t%s\n", z.Zone, z.Algorithm, limit, z.Remaining, z.Reset, denied, z.Source, grant)
	}
	w.Flush()
	return exitOK, nil
}

// counted reports whether a zone holds anything for the key: a count, a
// denial, a grant or a lease.
func counted(z adminapi.ZoneView) bool {
	return z.Remaining < z.Limit || z.Exhausted || z.Grant != nil || len(z.Leases) > 0
}

// errUnseen says that nothing is counted for id.
func errUnseen(id string) error {
	return fmt.Errorf("nothing is counted for %s now: it was not seen lately, or its counters expired (check the id: a raw key as the zone renders it, or h: and 16 hex digits as the logs print it)", id)
}

// runReset lets a client through again in every zone, or --zone: it lifts
// the key's operator decisions there, and drops its counters. A client with
// no decision and nothing counted is not found, as `client` says, and
// nothing is reset.
func runReset(c *invocation, args []string) (int, error) {
	lifted, _, err := c.liftDecisions(args[0], "")
	if err != nil && exitFor(err) != exitNotFound {
		return exitFor(err), err
	}
	if !c.json {
		c.printLifted(args[0], lifted)
	}
	var view adminapi.ClientView
	seen, err := c.callClient(http.MethodGet, args[0], &view)
	if err != nil {
		return exitFor(err), err
	}
	if !slices.ContainsFunc(view.Zones, counted) {
		if c.json { // as client prints it
			c.printJSON(seen)
		}
		if len(lifted) > 0 {
			if !c.json {
				fmt.Fprintf(c.out, "no counters to reset: nothing is counted for %s now\n", args[0])
			}
			return exitOK, nil
		}
		return exitNotFound, errUnseen(args[0])
	}
	var res adminapi.ResetResult
	raw, err := c.callClient(http.MethodDelete, args[0], &res)
	if err != nil {
		return exitFor(err), err
	}
	if c.json {
		return c.printJSON(raw)
	}
	fmt.Fprintf(c.out, "reset %s in %s\n", args[0], strings.Join(res.ZonesReset, ", "))
	if len(res.Unreachable) > 0 {
		fmt.Fprintf(c.out, "not told (they forget the key when its denial ends): %s\n", strings.Join(res.Unreachable, ", "))
	}
	return exitOK, nil
}
