package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

// Exit codes of `caddy tollgate …`, for scripts.
const (
	exitOK          = 0 // done
	exitRefused     = 1 // Tollgate refused the request, or failed: the message says why
	exitUsage       = 2 // the command line is wrong
	exitUnreachable = 3 // no admin endpoint answered at the address
	exitNotFound    = 4 // no such client, grant or zone
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "tollgate",
		Usage: "status|client|reset|tiers|grant|ui … [--address <admin>] [--json]",
		Short: "Shows and changes what Tollgate is doing in a running Caddy",
		Long: `
Talks to the admin endpoint of a running Caddy, as 'caddy reload' does: the
address is --address if given, else the admin address of --config, else
localhost:2019.

  caddy tollgate status                          members, ring agreement, fallback, keys, zones by denials
  caddy tollgate client <id> [--zone z]          a client's counters (a raw key, or h:… as the logs print it)
  caddy tollgate reset <id> [--zone z]           let a client through again
  caddy tollgate tiers                           tier limits in effect
  caddy tollgate tiers set <zone> <tier>=<n>…    override tier limits at run time
  caddy tollgate tiers clear                     drop every override
  caddy tollgate grant add <zone> <key> <amount> <duration>
  caddy tollgate grant show [<zone> <key>]       one grant, or every grant
  caddy tollgate grant revoke <zone> <key>
  caddy tollgate ui [--listen 127.0.0.1:2099]    the live status page, for a browser

Output is a table; --json prints the admin API's JSON. Exit codes: 0 done,
1 refused or failed (the message says why), 2 bad command line, 3 no admin
endpoint at the address, 4 no such client, grant or zone.
`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.PersistentFlags().String("address", "", "Address of the administration endpoint, if not the config's or localhost:2019")
			cmd.PersistentFlags().StringP("config", "c", "", "Configuration file to read the admin address from")
			cmd.PersistentFlags().StringP("adapter", "a", "", "Name of the config adapter, with --config")
			cmd.PersistentFlags().Bool("json", false, "Print JSON instead of a table")
			// A wrong command line exits 2, as documented, whether cobra
			// or a subcommand finds it wrong.
			cmd.Args = cobra.ArbitraryArgs
			cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
				return caddycmd.WrapCommandFuncForCobra(func(caddycmd.Flags) (int, error) {
					return exitUsage, fmt.Errorf("%v; usage: %s", err, c.UseLine())
				})(c, nil)
			})
			cmd.RunE = runCLI(nil)
			for _, sub := range cliCommands() {
				cmd.AddCommand(sub)
			}
		},
	})
}

// cliRun is one subcommand's work: it writes to out and returns an exit
// code and an error saying what to do.
type cliRun func(c *cliContext, args []string) (int, error)

// runCLI turns a subcommand into a cobra RunE with Caddy's exit codes.
func runCLI(run cliRun) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return caddycmd.WrapCommandFuncForCobra(func(fl caddycmd.Flags) (int, error) {
			if run == nil && len(args) > 0 {
				return exitUsage, fmt.Errorf("unknown subcommand %q: name one of status, client, reset, tiers, grant or ui; see caddy help tollgate", args[0])
			}
			if run == nil {
				return exitUsage, errors.New("name a subcommand: status, client, reset, tiers, grant or ui; see caddy help tollgate")
			}
			c, err := newCLIContext(fl, cmd.OutOrStdout())
			if err != nil {
				return exitUsage, err
			}
			return run(c, args)
		})(cmd, args)
	}
}

func cliCommands() []*cobra.Command {
	zoneFlag := func(c *cobra.Command) { c.Flags().String("zone", "", "Only this zone") }
	sub := func(use, short string, args cobra.PositionalArgs, run cliRun) *cobra.Command {
		c := &cobra.Command{Use: use, Short: short, SilenceUsage: true, Args: cobra.ArbitraryArgs}
		c.RunE = runCLI(func(ctx *cliContext, a []string) (int, error) {
			if err := args(c, a); err != nil {
				return exitUsage, fmt.Errorf("%v; usage: %s%s", err, c.CommandPath(), strings.TrimPrefix(use, c.Name()))
			}
			return run(ctx, a)
		})
		return c
	}
	status := sub("status", "Members, ring agreement, fallback, keys and zones by denials", cobra.NoArgs, cliStatus)
	client := sub("client <id>", "A client's counters: a raw key, or h:… as the logs print it", cobra.ExactArgs(1), cliClient)
	zoneFlag(client)
	reset := sub("reset <id>", "Let a client through again", cobra.ExactArgs(1), cliReset)
	zoneFlag(reset)
	tiers := sub("tiers", "Tier limits in effect", cobra.NoArgs, cliTiers)
	tiers.AddCommand(
		sub("set <zone> <tier>=<limit>...", "Override tier limits of a zone at run time", cobra.MinimumNArgs(2), cliTiersSet),
		sub("clear", "Drop every run-time override", cobra.NoArgs, cliTiersClear),
	)
	grant := sub("grant", "Grants of extra quota", cobra.NoArgs, func(*cliContext, []string) (int, error) {
		return exitUsage, errors.New("name what to do: caddy tollgate grant add|show|revoke")
	})
	grant.AddCommand(
		sub("add <zone> <key> <amount> <duration>", "Give a key extra quota in a zone for a duration (e.g. 168h, 7d, or seconds)", cobra.ExactArgs(4), cliGrantAdd),
		sub("show [<zone> <key>]", "One grant, or every grant", cobra.RangeArgs(0, 2), cliGrantShow),
		sub("revoke <zone> <key>", "Revoke a grant", cobra.ExactArgs(2), cliGrantRevoke),
	)
	ui := sub("ui", "Serve the live status page on a loopback address, relaying to the admin endpoint", cobra.NoArgs, cliUI)
	ui.Flags().String("listen", defaultUIListen, "Loopback address to serve the status page on")
	return []*cobra.Command{status, client, reset, tiers, grant, ui}
}

// defaultUIListen is where `caddy tollgate ui` serves the page: not 2020
// or 2021, which are the admin addresses of a second and third Caddy on a
// host (as in docs/examples/cluster).
const defaultUIListen = "127.0.0.1:2099"

// cliContext is what every subcommand uses: where the admin endpoint is,
// how to print.
type cliContext struct {
	addr   string
	json   bool
	zone   string
	listen string
	out    io.Writer
	client *http.Client
	origin string // the base of admin URLs
	// originHeader is the Origin sent to the admin endpoint: its own
	// address, or none on a unix socket, as caddy reload does.
	originHeader string
}

func newCLIContext(fl caddycmd.Flags, out io.Writer) (*cliContext, error) {
	addr, err := caddycmd.DetermineAdminAPIAddress(fl.String("address"), nil, fl.String("config"), fl.String("adapter"))
	if err != nil {
		return nil, fmt.Errorf("finding the admin address: %v; give it with --address", err)
	}
	parsed, err := caddy.ParseNetworkAddress(addr)
	if err != nil || parsed.PortRangeSize() > 1 || !strings.HasPrefix(parsed.Network, "tcp") && !parsed.IsUnixNetwork() && !parsed.IsFdNetwork() {
		return nil, fmt.Errorf("--address %q is not an admin address: want host:port, e.g. localhost:2019 (no http://), or unix//path", addr)
	}
	c := &cliContext{addr: addr, json: fl.Bool("json"), out: out, origin: "http://" + parsed.JoinHostPort(0)}
	c.originHeader = c.origin
	if f := fl.Lookup("zone"); f != nil {
		c.zone = f.Value.String()
	}
	if f := fl.Lookup("listen"); f != nil {
		c.listen = f.Value.String()
	}
	if parsed.IsUnixNetwork() || parsed.IsFdNetwork() {
		// As caddy reload does: a bogus host, no Origin (Caddy refuses
		// one on a socket), and the socket's path without the
		// permission bits the admin option may give it ("|0660").
		c.origin, c.originHeader = "http://127.0.0.1", ""
		if path, _, ok := strings.Cut(parsed.Host, "|"); ok && parsed.IsUnixNetwork() {
			parsed.Host = path
		}
	}
	if _, err := url.Parse(c.origin); err != nil {
		return nil, fmt.Errorf("--address %q is not an admin address: want host:port, e.g. localhost:2019, or unix//path", addr)
	}
	c.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, parsed.Network, parsed.JoinHostPort(0))
		},
	},
		// A redirect from the admin endpoint is an answer, never followed:
		// following one would send the request (a DELETE, say) to a route
		// it was not meant for.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c, nil
}

// pathSegment escapes one path segment of an admin URL, a key or a zone:
// "." and ".." are escaped too, as the admin endpoint would otherwise take
// them for a move up the path.
func pathSegment(s string) string {
	if s == "." || s == ".." {
		return strings.ReplaceAll(s, ".", "%2E")
	}
	return url.PathEscape(s)
}

// errNotJSON is returned by call when a 2xx answer is not the JSON it
// expected.
var errNotJSON = errors.New("not JSON")

// apiError is an error answer of the admin API.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// call sends a request to the admin API and decodes a 2xx answer into
// out; it returns the raw answer for --json. headers are extra request
// headers, name then value.
func (c *cliContext) call(method, path string, body any, out any, headers ...string) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.origin+path, rd)
	if err != nil {
		return nil, err
	}
	if c.originHeader != "" {
		req.Header.Set("Origin", c.originHeader)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, &apiError{status: 0, msg: fmt.Sprintf("cannot reach Caddy's admin endpoint at %s: %v; is Caddy running? Name its admin address (the admin global option) with --address", c.addr, errors.Unwrap(err))}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s %s: %v", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(raw, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(raw))
		}
		msg := e.Error
		if resp.StatusCode == http.StatusNotFound && strings.Contains(msg, "no route") {
			msg += "; is this Caddy built with Tollgate, and --address its admin endpoint?"
		}
		return nil, &apiError{status: resp.StatusCode, msg: msg}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return nil, fmt.Errorf("%w: %s %s answered what this command does not understand (%v); is --address Caddy's admin endpoint (the admin global option), and caddy the same version as the running one?", errNotJSON, method, path, err)
		}
	}
	return raw, nil
}

// exitFor maps an error to an exit code.
func exitFor(err error) int {
	var ae *apiError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ae) && ae.status == 0:
		return exitUnreachable
	case errors.As(err, &ae) && ae.status == http.StatusNotFound:
		return exitNotFound
	}
	return exitRefused
}

// printJSON prints an answer as it came, indented.
func (c *cliContext) printJSON(raw []byte) (int, error) {
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") != nil {
		buf.Reset()
		buf.Write(raw)
	}
	buf.WriteString("\n")
	_, err := c.out.Write(bytes.TrimRight(buf.Bytes(), "\n"))
	fmt.Fprintln(c.out)
	return exitOK, err
}

func (c *cliContext) table() *tabwriter.Writer {
	return tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
}

func (c *cliContext) zoneQuery() string {
	if c.zone == "" {
		return ""
	}
	return "?zone=" + url.QueryEscape(c.zone)
}

// ---- status ----

// maxStatusPages bounds the pages of denied keys `caddy tollgate status`
// reads: 100 pages of 1000 keys.
const maxStatusPages = 100

// ZoneDenials is one zone's keys denied now, as `caddy tollgate status`
// shows them.
type ZoneDenials struct {
	Zone       string `json:"zone"`
	KeysDenied int    `json:"keys_denied"`
	Denials    uint64 `json:"denials"`
}

func cliStatus(c *cliContext, _ []string) (int, error) {
	var st Status
	raw, err := c.call(http.MethodGet, "/tollgate/status", nil, &st)
	if err != nil {
		return exitFor(err), err
	}
	// Every page: under attack, when it matters, more keys are denied
	// than one page holds. The pages are bounded, and a cut is said.
	var denied DeniedList
	cursor, cut := "", false
	for pages := 0; ; pages++ {
		if pages == maxStatusPages {
			cut = true
			break
		}
		path := "/tollgate/denied?limit=" + strconv.Itoa(maxPageSize)
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		var page DeniedList
		if _, err := c.call(http.MethodGet, path, nil, &page); err != nil {
			return exitFor(err), err
		}
		denied.Items = append(denied.Items, page.Items...)
		denied.Unreachable = page.Unreachable
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	byZone := map[string]*ZoneDenials{}
	for _, it := range denied.Items {
		zd := byZone[it.Zone]
		if zd == nil {
			zd = &ZoneDenials{Zone: it.Zone}
			byZone[it.Zone] = zd
		}
		zd.KeysDenied++
		zd.Denials += it.Denials
	}
	top := make([]ZoneDenials, 0, len(byZone))
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
	w = c.table()
	fmt.Fprintln(w, "MEMBER\tSTATE\tRING SHARE\tFALLBACK")
	for _, m := range cl.Members {
		fmt.Fprintf(w, "%s\t%s\t%.0f%%\t%v\n", m.Name, m.State, m.Share*100, yesNo(m.Fallback))
	}
	w.Flush()
	fmt.Fprintln(c.out)
	if len(top) == 0 {
		fmt.Fprintln(c.out, "no key is denied now")
	} else {
		w = c.table()
		fmt.Fprintln(w, "ZONE\tKEYS DENIED NOW\tDENIALS")
		for _, zd := range top {
			fmt.Fprintf(w, "%s\t%d\t%d\n", zd.Zone, zd.KeysDenied, zd.Denials)
		}
		w.Flush()
	}
	if len(denied.Unreachable) > 0 {
		fmt.Fprintf(c.out, "not counted: %s did not answer\n", strings.Join(denied.Unreachable, ", "))
	}
	if cut {
		fmt.Fprintf(c.out, "counted the first %d keys denied only; see GET /tollgate/denied for the rest\n", len(denied.Items))
	}
	return exitOK, nil
}

func ringDisagreement(ra RingAgreement, own string) string {
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

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

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

// ---- clients ----

func clientPath(id string) string { return "/tollgate/clients/" + pathSegment(id) }

// warnNearlyHashed says when an id looks like a hashed ID from the logs
// but is not one (a digit short, a typo): the API takes it for a raw key,
// so a reset of it succeeds and lets nobody through.
func warnNearlyHashed(id string) {
	if _, ok := parseHashedID(id); !ok && strings.HasPrefix(id, hashedPrefix) {
		caddy.Log().Warn(fmt.Sprintf("%q is not a hashed ID (h: and 16 hex digits, as the logs print it): it is taken as a raw key", id))
	}
}

func cliClient(c *cliContext, args []string) (int, error) {
	warnNearlyHashed(args[0])
	var view ClientView
	raw, err := c.call(http.MethodGet, clientPath(args[0])+c.zoneQuery(), nil, &view)
	if err != nil {
		return exitFor(err), err
	}
	seen := false
	for _, z := range view.Zones {
		seen = seen || z.Remaining < z.Limit || z.Exhausted || z.Grant != nil || len(z.Leases) > 0
	}
	unseen := fmt.Errorf("nothing is counted for %s now: it was not seen lately, or its counters expired (check the id: a raw key as the zone renders it, or h: and 16 hex digits as the logs print it)", args[0])
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
	fmt.Fprintf(w, "client\t%s\n", view.ID)
	fmt.Fprintf(w, "owner\t%s\n", view.Owner)
	if view.Reputation != nil {
		fmt.Fprintf(w, "reputation\t%d\n", *view.Reputation)
	}
	w.Flush()
	fmt.Fprintln(c.out)
	w = c.table()
	fmt.Fprintln(w, "ZONE\tALGORITHM\tLIMIT\tREMAINING\tRESET\tDENIED\tSOURCE\tGRANT")
	for _, z := range view.Zones {
		grant := "-"
		if z.Grant != nil {
			grant = fmt.Sprintf("%d of %d left", z.Grant.Remaining, z.Grant.Amount)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%ds\t%s\t%s\t%s\n", z.Zone, z.Algorithm, z.Limit, z.Remaining, z.Reset, yesNo(z.Exhausted), z.Source, grant)
	}
	w.Flush()
	return exitOK, nil
}

func cliReset(c *cliContext, args []string) (int, error) {
	warnNearlyHashed(args[0])
	var res ResetResult
	raw, err := c.call(http.MethodDelete, clientPath(args[0])+c.zoneQuery(), nil, &res)
	if err != nil {
		return exitFor(err), err
	}
	if c.json {
		return c.printJSON(raw)
	}
	fmt.Fprintf(c.out, "reset %s in %s\n", res.ID, strings.Join(res.ZonesReset, ", "))
	if len(res.Unreachable) > 0 {
		fmt.Fprintf(c.out, "not told (they forget the key when its denial ends): %s\n", strings.Join(res.Unreachable, ", "))
	}
	return exitOK, nil
}

// ---- tiers ----

func cliTiers(c *cliContext, _ []string) (int, error) {
	return c.showTiers(http.MethodGet, nil)
}

// showTiers sends a tiers request and prints the table it answers; headers
// are extra request headers, name then value.
func (c *cliContext) showTiers(method string, body any, headers ...string) (int, error) {
	var view TiersView
	raw, err := c.call(method, "/tollgate/tiers", body, &view, headers...)
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
		fmt.Fprintf(w, "%s\t%s\t(default)\t%d\t-\t%d\n", z, tv.Kind, tv.Default, tv.Default)
		tiers := make([]string, 0, len(tv.Effective))
		for t := range tv.Effective {
			tiers = append(tiers, t)
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

// cliTiersSet merges the given limits into the overrides in effect and
// puts the whole table, as the API replaces it whole.
func cliTiersSet(c *cliContext, args []string) (int, error) {
	zone := args[0]
	var view TiersView
	if _, err := c.call(http.MethodGet, "/tollgate/tiers", nil, &view); err != nil {
		return exitFor(err), err
	}
	// Overrides are by zone name; the view is by scope, and every scope of
	// a name has the same overrides.
	table := map[string]map[string]int64{}
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
	return c.showTiers(http.MethodPut, table, "If-Match", tiersETag(view.OverridesVersion))
}

func cliTiersClear(c *cliContext, _ []string) (int, error) {
	return c.showTiers(http.MethodDelete, nil)
}

// ---- grants ----

func grantPath(zone, key string) string {
	return "/tollgate/grants/" + pathSegment(zone) + "/" + pathSegment(key)
}

func cliGrantAdd(c *cliContext, args []string) (int, error) {
	warnNearlyHashed(args[1])
	amount, err := strconv.ParseInt(args[2], 10, 64)
	if err != nil {
		return exitUsage, fmt.Errorf("amount %q: want a whole number, e.g. 500", args[2])
	}
	var duration any = args[3]
	if secs, err := strconv.ParseInt(args[3], 10, 64); err == nil {
		duration = secs
	}
	body := map[string]any{"zone": args[0], "key": args[1], "amount": amount, "duration": duration}
	raw, err := c.call(http.MethodPost, "/tollgate/grants", body, nil)
	if err != nil {
		return exitFor(err), err
	}
	if c.json {
		return c.printJSON(raw)
	}
	gs, err := grantsOf(http.MethodPost, "/tollgate/grants", raw)
	if err != nil {
		return exitRefused, err
	}
	return c.printGrants(gs)
}

func cliGrantShow(c *cliContext, args []string) (int, error) {
	if len(args) == 1 {
		return exitUsage, errors.New("give a zone and a key, or neither to list every grant")
	}
	if len(args) == 2 {
		warnNearlyHashed(args[1])
		path := grantPath(args[0], args[1])
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
		return c.printGrants(gs)
	}
	var all GrantList
	cursor := ""
	for {
		var page GrantList
		path := "/tollgate/grants?limit=" + strconv.Itoa(maxGrantsPage) + strings.Replace(c.zoneQuery(), "?", "&", 1)
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		if _, err := c.call(http.MethodGet, path, nil, &page); err != nil {
			return exitFor(err), err
		}
		all.Items = append(all.Items, page.Items...)
		all.Unreachable = page.Unreachable
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if all.Items == nil {
		all.Items = []GrantView{}
	}
	if c.json {
		b, _ := json.Marshal(all)
		return c.printJSON(b)
	}
	if len(all.Items) == 0 {
		fmt.Fprintln(c.out, "no grant holds now")
	} else if code, err := c.printGrants(all.Items); err != nil {
		return code, err
	}
	if len(all.Unreachable) > 0 {
		fmt.Fprintf(c.out, "not listed: grants given through or owned by %s (they did not answer)\n", strings.Join(all.Unreachable, ", "))
	}
	return exitOK, nil
}

// grantsOf reads a grant answer: one grant, or a list of them when zones
// of several handlers share the zone's name (one grant per scope).
func grantsOf(method, path string, raw []byte) ([]GrantView, error) {
	var gs []GrantView
	var err error
	if b := bytes.TrimSpace(raw); len(b) > 0 && b[0] == '[' {
		err = json.Unmarshal(b, &gs)
	} else {
		var g GrantView
		err = json.Unmarshal(b, &g)
		gs = []GrantView{g}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s answered what this command does not understand (%v); is caddy the same version as the running one?", errNotJSON, method, path, err)
	}
	return gs, nil
}

func (c *cliContext) printGrants(gs []GrantView) (int, error) {
	w := c.table()
	fmt.Fprintln(w, "ZONE\tSCOPE\tKEY\tAMOUNT\tUSED\tREMAINING\tEXPIRES")
	for _, g := range gs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", g.Zone, g.Scope, g.Key, g.Amount, g.Used, g.Remaining, g.Expires)
	}
	return exitOK, w.Flush()
}

func cliGrantRevoke(c *cliContext, args []string) (int, error) {
	warnNearlyHashed(args[1])
	raw, err := c.call(http.MethodDelete, grantPath(args[0], args[1]), nil, nil)
	if err != nil {
		return exitFor(err), err
	}
	if c.json {
		return c.printJSON(raw)
	}
	fmt.Fprintf(c.out, "revoked the grant of %s in zone %s\n", args[1], args[0])
	return exitOK, nil
}
