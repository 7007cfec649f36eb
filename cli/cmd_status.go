package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/tollgate/tollgate/adminapi"
)

// maxStatusPages bounds the pages of denied keys `caddy tollgate status`
// reads: 100 pages of 1000 keys.
const maxStatusPages = 100

// zoneDenials is one zone's keys denied now, as `caddy tollgate status`
// shows them (zones_by_denials, with --json).
type zoneDenials struct {
	Zone           string `json:"zone"`            // the zone's name
	KeysDenied     int    `json:"keys_denied"`     // how many of its keys are denied now, by their own budget
	NetworksDenied int    `json:"networks_denied"` // how many IP networks are denied now, by their network budget
	Denials        uint64 `json:"denials"`         // how many denials of those keys and networks the nodes saw
}

// runStatus prints this node's view of the cluster, its counters and the
// zones by denials now.
func runStatus(c *invocation, _ []string) (int, error) {
	var st adminapi.Status
	raw, err := c.call(http.MethodGet, adminapi.PathStatus, nil, &st)
	if err != nil {
		return exitFor(err), err
	}
	// Every page: under attack, when it matters, more keys are denied
	// than one page holds. The pages are bounded, and a cut is said.
	denied, unreachable, cut, err := readList[adminapi.DeniedKey](c, adminapi.PathDenied, adminapi.MaxDeniedPage, "", maxStatusPages)
	if err != nil {
		return exitFor(err), err
	}
	byZone := map[string]*zoneDenials{}
	for _, it := range denied {
		zd := byZone[it.Zone]
		if zd == nil {
			zd = &zoneDenials{Zone: it.Zone}
			byZone[it.Zone] = zd
		}
		if it.Budget == adminapi.BudgetNetwork {
			zd.NetworksDenied++
		} else {
			zd.KeysDenied++
		}
		zd.Denials += it.Denials
	}
	top := make([]zoneDenials, 0, len(byZone))
	for _, zd := range byZone {
		top = append(top, *zd)
	}
	sort.Slice(top, func(i, j int) bool {
		return top[i].Denials > top[j].Denials || top[i].Denials == top[j].Denials && top[i].Zone < top[j].Zone
	})
	if c.json {
		out := map[string]any{"status": json.RawMessage(raw), "zones_by_denials": top}
		if cut {
			out["zones_by_denials_cut"] = true
		}
		b, _ := json.Marshal(out)
		return c.printJSON(b)
	}
	cl := st.Cluster
	w := c.table()
	fmt.Fprintf(w, "node\t%s\n", cl.Node)
	if cl.Standalone {
		fmt.Fprintf(w, "cluster\tstandalone (no peers, no fallback)\n")
	} else {
		agree := "yes, every node has ring " + cl.RingFingerprint
		if !st.Ring.Agreed {
			agree = "NO: " + ringDisagreement(st.Ring, cl.RingFingerprint)
		}
		fmt.Fprintf(w, "ring agreement\t%s\n", agree)
		fb := "none"
		if len(cl.PeersInFallback) > 0 {
			fb = strings.Join(cl.PeersInFallback, ", ")
		}
		fmt.Fprintf(w, "peers in fallback\t%s\n", fb)
		if cl.FallbackRatio != nil {
			fmt.Fprintf(w, "fallback\t%s, ratio %g, %d keys, %d activations\n", cl.FallbackMode, *cl.FallbackRatio, deref(cl.FallbackKeys), deref(cl.Activations))
		}
	}
	fmt.Fprintf(w, "keys\t%d held of %d (%d reclaimed, %d overflowed), about %s\n", st.Keys.Held, st.Keys.Max, st.Keys.Reclaimed, st.Keys.Overflowed, humanBytes(st.Memory.CounterBytes))
	w.Flush()
	fmt.Fprintln(c.out)
	if !cl.Standalone { // a single node is its own only member
		w = c.table()
		fmt.Fprintln(w, "MEMBER\tSTATE\tRING_SHARE\tFALLBACK")
		for _, m := range cl.Members {
			fmt.Fprintf(w, "%s\t%s\t%.0f%%\t%v\n", m.Name, m.State, m.Share*100, yesNo(m.Fallback))
		}
		w.Flush()
		fmt.Fprintln(c.out)
	}
	if len(top) == 0 {
		fmt.Fprintln(c.out, "no key and no network is denied now")
	} else {
		// One word per heading, so that each reads as one column.
		fmt.Fprintln(c.out, "denied now, by zone (keys by their own budget, networks by the budget their clients without a session share):")
		w = c.table()
		fmt.Fprintln(w, "ZONE\tKEYS\tNETWORKS\tDENIALS")
		for _, zd := range top {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\n", zd.Zone, zd.KeysDenied, zd.NetworksDenied, zd.Denials)
		}
		w.Flush()
	}
	if len(unreachable) > 0 {
		fmt.Fprintf(c.out, "not counted: %s did not answer\n", strings.Join(unreachable, ", "))
	}
	if cut {
		fmt.Fprintf(c.out, "counted the first %d keys denied only; see GET /tollgate/denied for the rest\n", len(denied))
	}
	return exitOK, nil
}

// ringDisagreement says which nodes route by another ring than own, or did
// not answer.
func ringDisagreement(ra adminapi.RingAgreement, own string) string {
	var parts []string
	for name, fp := range ra.Fingerprints {
		if fp != own {
			parts = append(parts, name+" has "+fp)
		}
	}
	sort.Strings(parts)
	for _, n := range ra.Unreachable {
		parts = append(parts, n+" did not answer")
	}
	return strings.Join(parts, "; ")
}

// deref returns *p, or the zero value for nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// yesNo renders a bool for a table.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// humanBytes renders a size in bytes, KiB, MiB or GiB.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
