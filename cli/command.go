package cli

import (
	"errors"
	"fmt"
	"strings"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/tollgate/tollgate/adminapi"
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
		Usage: "status|client|reset|tiers|grant|block|allow|decisions|ui … [--address <admin>] [--json]",
		Short: "Shows and changes what Tollgate is doing in a running Caddy",
		Long: `
Talks to the admin endpoint of a running Caddy, as 'caddy reload' does: the
address is --address if given, else the admin address of --config, else
localhost:2019.

  caddy tollgate status                          members, ring agreement, fallback, keys, zones by denials
  caddy tollgate client <id> [--zone z]          a client's counters (a raw key, or h:… as the logs print it)
  caddy tollgate reset <id> [--zone z]           let a client through again (and lift its decisions)
  caddy tollgate tiers                           tier limits in effect
  caddy tollgate tiers set <zone> <tier>=<n>…    override tier limits at run time
  caddy tollgate tiers clear                     drop every override
  caddy tollgate grant add <zone> <key> <amount> <duration>
  caddy tollgate grant show [<zone> <key>]       one grant, or every grant
  caddy tollgate grant revoke <zone> <key>
  caddy tollgate block <key> [--for 1h] [--zone z] [--reason text]
                                                 deny a key's requests until the decision expires
  caddy tollgate allow <key> [--for 1h] [--zone z] [--reason text]
                                                 let a key skip the limits until then
  caddy tollgate block|allow --remove <key> [--zone z]
                                                 lift a key's blocks or allows
  caddy tollgate decisions                       the blocks and allows in effect, reason and expiry
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
			cmd.RunE = cobraRun(nil)
			for _, sub := range subcommands() {
				cmd.AddCommand(sub)
			}
		},
	})
}

// subcommand is one subcommand's work: it writes to out and returns an exit
// code and an error saying what to do.
type subcommand func(c *invocation, args []string) (int, error)

// cobraRun turns a subcommand into a cobra RunE with Caddy's exit codes.
func cobraRun(run subcommand) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return caddycmd.WrapCommandFuncForCobra(func(fl caddycmd.Flags) (int, error) {
			if run == nil && len(args) > 0 {
				return exitUsage, fmt.Errorf("unknown subcommand %q: name one of status, client, reset, tiers, grant, block, allow, decisions or ui; see caddy help tollgate", args[0])
			}
			if run == nil {
				return exitUsage, errors.New("name a subcommand: status, client, reset, tiers, grant, block, allow, decisions or ui; see caddy help tollgate")
			}
			c, err := newInvocation(fl, cmd.OutOrStdout())
			if err != nil {
				return exitUsage, err
			}
			return run(c, args)
		})(cmd, args)
	}
}

// subcommands builds the subcommands of caddy tollgate.
func subcommands() []*cobra.Command {
	zoneFlag := func(c *cobra.Command) { c.Flags().String("zone", "", "Only this zone") }
	sub := func(use, short string, args cobra.PositionalArgs, run subcommand) *cobra.Command {
		c := &cobra.Command{Use: use, Short: short, SilenceUsage: true, Args: cobra.ArbitraryArgs}
		c.RunE = cobraRun(func(ctx *invocation, a []string) (int, error) {
			if err := args(c, a); err != nil {
				return exitUsage, fmt.Errorf("%v; usage: %s%s", err, c.CommandPath(), strings.TrimPrefix(use, c.Name()))
			}
			return run(ctx, a)
		})
		return c
	}
	status := sub("status", "Members, ring agreement, fallback, keys and zones by denials", cobra.NoArgs, runStatus)
	client := sub("client <id>", "A client's counters and own limits: a raw key, or h:… as the logs print it", cobra.ExactArgs(1), runClient)
	zoneFlag(client)
	client.Flags().String("tier", "", "The key's tier, for the limits it has (default: the default tier, of requests with no tier or an unlisted one)")
	reset := sub("reset <id>", "Let a client through again", cobra.ExactArgs(1), runReset)
	zoneFlag(reset)
	tiers := sub("tiers", "Tier limits in effect", cobra.NoArgs, runTiers)
	tiers.AddCommand(
		sub("set <zone> <tier>=<limit>...", "Override tier limits of a zone at run time", cobra.MinimumNArgs(2), runTiersSet),
		sub("clear", "Drop every run-time override", cobra.NoArgs, runTiersClear),
	)
	grant := sub("grant", "Grants of extra quota", cobra.NoArgs, func(*invocation, []string) (int, error) {
		return exitUsage, errors.New("name what to do: caddy tollgate grant add|show|revoke")
	})
	grant.AddCommand(
		sub("add <zone> <key> <amount> <duration>", "Give a key extra quota in a zone for a duration (e.g. 168h, 7d, or seconds)", cobra.ExactArgs(4), runGrantAdd),
		sub("show [<zone> <key>]", "One grant, or every grant", cobra.RangeArgs(0, 2), runGrantShow),
		sub("revoke <zone> <key>", "Revoke a grant", cobra.ExactArgs(2), runGrantRevoke),
	)
	decisionFlags := func(c *cobra.Command, action string) {
		zoneFlag(c)
		c.Flags().String("for", "", "How long the decision holds: 1h, 7d, or seconds (default 24h, at most 366d)")
		c.Flags().String("reason", "", "Why, for whoever lists the decisions later (at most 200 characters, one line)")
		c.Flags().Bool("remove", false, "Lift the key's "+action+" decisions (in --zone only, if given) instead")
	}
	block := sub("block <key>", "Deny a key's requests, or a network's (n:…), with a 429 in every zone, or --zone, until the decision expires", cobra.ExactArgs(1), runDecide(adminapi.ActionBlock))
	decisionFlags(block, adminapi.ActionBlock)
	allow := sub("allow <key>", "Let a key, or a network (n:…), skip the limits of every zone, or --zone, until the decision expires", cobra.ExactArgs(1), runDecide(adminapi.ActionAllow))
	decisionFlags(allow, adminapi.ActionAllow)
	decisions := sub("decisions", "The operators' blocks and allows in effect, with reason and expiry", cobra.NoArgs, runDecisions)
	ui := sub("ui", "Serve the live status page on a loopback address, relaying to the admin endpoint", cobra.NoArgs, runUI)
	ui.Flags().String("listen", defaultUIListen, "Loopback address to serve the status page on")
	return []*cobra.Command{status, client, reset, tiers, grant, block, allow, decisions, ui}
}
