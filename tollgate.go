// Package tollgate plugs Tollgate into Caddy: importing it registers the
// tollgate app, the http.handlers.tollgate middleware, the
// caddy.listeners.tollgate listener wrapper, the admin.api.tollgate routes
// and their Caddyfile syntax (package caddymodule), and the caddy tollgate
// command (package cli). xcaddy.sh builds Caddy with it.
package tollgate

import (
	// The Caddy modules and the admin API's server.
	_ "github.com/tollgate/tollgate/caddymodule"
	// The caddy tollgate command, a client of the admin API.
	_ "github.com/tollgate/tollgate/cli"
)
