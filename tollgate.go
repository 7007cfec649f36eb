// Package tollgate plugs Tollgate into Caddy: importing it registers the
// tollgate app, the http.handlers.tollgate middleware and their Caddyfile
// syntax. xcaddy.sh builds Caddy with it.
package tollgate

import _ "github.com/tollgate/tollgate/caddymodule"
