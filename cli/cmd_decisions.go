package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/tollgate/tollgate/adminapi"
)

// runDecide returns the subcommand that makes an operator's decision about
// a key (block or allow), or with --remove lifts the key's decisions of
// that action.
func runDecide(action string) subcommand {
	return func(c *invocation, args []string) (int, error) {
		if c.remove {
			if c.forDuration != "" || c.reason != "" {
				return exitUsage, fmt.Errorf("--remove lifts decisions: it takes no --for or --reason")
			}
			lifted, raw, err := c.liftDecisions(args[0], action)
			if err != nil {
				return exitFor(err), err
			}
			if c.json {
				return c.printJSON(raw)
			}
			c.printLifted(args[0], lifted)
			return exitOK, nil
		}
		warnNearlyHashed(args[0])
		req := adminapi.DecisionRequest{Key: args[0], Zone: c.zone, Action: action, Reason: c.reason}
		if c.forDuration != "" {
			req.Duration = c.forDuration
			if secs, err := strconv.ParseInt(c.forDuration, 10, 64); err == nil {
				req.Duration = secs
			}
		}
		var made adminapi.DecisionMade
		raw, err := c.call(http.MethodPost, adminapi.PathDecisions, req, &made)
		if err != nil {
			return exitFor(err), err
		}
		if c.json {
			return c.printJSON(raw)
		}
		verb := map[string]string{adminapi.ActionBlock: "blocked", adminapi.ActionAllow: "allowed"}[action]
		name := args[0]
		if made.Decision.Key != name { // a raw key: its hashed ID, as lists show it
			name += " (" + made.Decision.Key + ")"
		}
		fmt.Fprintf(c.out, "%s %s in %s until %s\n", verb, name, zoneWords(made.Decision.Zone), made.Decision.Expires)
		if r := made.Replaced; r != nil {
			fmt.Fprintf(c.out, "replaced: %s in %s until %s\n", r.Action, zoneWords(r.Zone), r.Expires)
		}
		return exitOK, nil
	}
}

// zoneWords names the zone of a decision: "every zone" when it has none.
func zoneWords(zone string) string {
	if zone == "" {
		return "every zone"
	}
	return "zone " + zone
}

// liftDecisions lifts the decisions of a key: of one action, or both when
// action is empty; in --zone only, if given. None to lift is a not-found
// error.
func (c *invocation) liftDecisions(key, action string) ([]adminapi.DecisionView, []byte, error) {
	hid, err := c.hashedID(key)
	if err != nil {
		return nil, nil, err
	}
	q := url.Values{}
	if c.zone != "" {
		q.Set(adminapi.QueryZone, c.zone)
	}
	if action != "" {
		q.Set(adminapi.QueryAction, action)
	}
	path := adminapi.PathDecision + adminapi.PathSegment(hid)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var lifted adminapi.DecisionsLifted
	raw, err := c.call(http.MethodDelete, path, nil, &lifted)
	if err != nil {
		return nil, nil, err
	}
	return lifted.Lifted, raw, nil
}

// printLifted says which decisions of key were lifted.
func (c *invocation) printLifted(key string, lifted []adminapi.DecisionView) {
	for _, d := range lifted {
		fmt.Fprintf(c.out, "lifted the %s of %s in %s (it would have held until %s)\n", d.Action, key, zoneWords(d.Zone), d.Expires)
	}
}

// runDecisions lists the decisions in effect.
func runDecisions(c *invocation, _ []string) (int, error) {
	var list adminapi.DecisionList
	raw, err := c.call(http.MethodGet, adminapi.PathDecisions, nil, &list)
	if err != nil {
		return exitFor(err), err
	}
	if c.json {
		return c.printJSON(raw)
	}
	if len(list.Items) == 0 {
		fmt.Fprintln(c.out, "no decision holds now")
		return exitOK, nil
	}
	w := c.table()
	fmt.Fprintln(w, "KEY\tZONE\tACTION\tEXPIRES\tREASON")
	for _, d := range list.Items {
		zone := d.Zone
		if zone == "" {
			zone = "*"
		}
		reason := d.Reason // one line, no tab: the API refuses control characters
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", d.Key, zone, d.Action, d.Expires, reason)
	}
	if err := w.Flush(); err != nil {
		return exitRefused, err
	}
	fmt.Fprintln(c.out, "keys are listed by their hashed ID (no raw key is kept); ZONE * is every zone")
	return exitOK, nil
}
