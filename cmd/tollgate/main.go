// Command tollgate is Caddy with its standard modules and Tollgate, the same
// binary xcaddy.sh builds. Tests and quick local runs use it.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/tollgate/tollgate"
)

func main() {
	caddycmd.Main()
}
