#!/usr/bin/env bash
# Builds ./caddy: Caddy with this checkout's Tollgate module, through xcaddy.
#
#   ./xcaddy.sh              build ./caddy
#   ./xcaddy.sh run          build, then run the demo in Caddyfile.example
#   ./xcaddy.sh <args...>    build, then run ./caddy <args...>
#
# xcaddy itself is built from the version pinned in tools/go.mod.
set -euo pipefail
cd "$(dirname "$0")"

CADDY_VERSION=v2.11.9
MODULE=github.com/tollgate/tollgate

if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
	export PATH="$PATH:/usr/local/go/bin"
fi

mkdir -p .bin
(cd tools && go build -o ../.bin/xcaddy github.com/caddyserver/xcaddy/cmd/xcaddy)

# The local module goes in with an explicit version: the module proxy is not
# asked to list versions of a module that is not published.
.bin/xcaddy build "$CADDY_VERSION" --with "$MODULE@v0.0.0=$PWD" --output ./caddy

case "${1:-}" in
"") ;;
run)
	shift
	exec ./caddy run --config Caddyfile.example --adapter caddyfile "$@"
	;;
*)
	exec ./caddy "$@"
	;;
esac
