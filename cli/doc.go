// Package cli is the caddy tollgate command: subcommands that show and
// change what Tollgate is doing in a running Caddy, and the relay that
// serves the status page to a browser. It is a client of the admin API
// (package adminapi) and imports nothing of the modules, so it works
// against any running Caddy built with Tollgate.
package cli
