# Sourced by bench/load.sh and bench/instructions.sh, from the repository's
# root, with $out set: builds the one Caddy binary every server runs
# ($out/caddy-compare, with xcaddy from the version pinned in tools/go.mod:
# this checkout's Tollgate and caddy-ratelimit v0.1.0), and describes the
# servers compared and the clients that load them.
#
# Servers:
#
#   plain            respond "ok"
#   caddy_ratelimit  the same behind github.com/mholt/caddy-ratelimit v0.1.0,
#                    keyed on the client's IP, never triggering
#   tollgate         the same behind a tollgate zone that never triggers
#                    (default key and settings: RateLimit headers on every
#                    response, sessions issued, IP pressure on)
#
# Clients:
#
#   cookieless       all connections from one address, never keeping a
#                    cookie: wrk, curl, scripts, most API clients
#   sessions         each connection its own address and client, keeping
#                    the session cookie it is given, as a browser does
#                    (addresses new in every run: one address is given two
#                    sessions an hour by default)

# shellcheck source=bench/build.sh
. bench/build.sh
mkdir -p .bin
(cd tools && go build -o ../.bin/xcaddy github.com/caddyserver/xcaddy/cmd/xcaddy)
.bin/xcaddy build "$(sed -n 's/^CADDY_VERSION=//p' xcaddy.sh)" \
	--with "github.com/tollgate/tollgate@v0.0.0=$PWD" \
	--with github.com/mholt/caddy-ratelimit@v0.1.0 \
	--output "$out/caddy-compare" >"$out/xcaddy.log" 2>&1 || {
	cat "$out/xcaddy.log" >&2
	exit 1
}

names=(plain caddy_ratelimit tollgate)
clients=(cookieless sessions)
declare -A port=([plain]=18081 [caddy_ratelimit]=18082 [tollgate]=18083)
declare -A site=(
	[plain]='respond "ok"'
	# caddy-ratelimit keeps a ring of `events` timestamps per key, so its
	# limit is a short window rather than a huge count.
	[caddy_ratelimit]='rate_limit {
		zone site {
			key {remote_host}
			events 10000
			window 10ms
		}
	}
	respond "ok"'
	[tollgate]='tollgate {
		zone site {
			limit 1000000000 1h
		}
	}
	respond "ok"'
)

# write_config <server> writes $out/<server>.caddyfile.
write_config() {
	cat >"$out/$1.caddyfile" <<CADDY
{
	admin off
	persist_config off
	auto_https off
	log {
		output discard
	}
}
http://127.0.0.1:${port[$1]} {
	${site[$1]}
}
CADDY
}

# await_server <server> waits until it answers, for up to <tries> tenths of a second.
await_server() {
	for _ in $(seq "${2:-100}"); do
		if "$out/loadgen" -url "http://127.0.0.1:${port[$1]}/" -c 1 -d 10ms 2>/dev/null | grep '"200"' >/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	echo "server $1 did not come up; see $out/$1.log" >&2
	exit 1
}

# load <server> <clients> <seconds> <run> [loadgen flags...] runs the load
# generator on CPU 1 and prints its JSON report; run numbers the run, so
# that session clients use new addresses each time.
load() {
	local server=$1 client=$2 secs=$3 run=$4 base=0
	shift 4
	local args=(-addrs 1)
	if [ "$client" = sessions ]; then
		args=(-cookies)
		base=$((1 + run * 256)) # room for 256 connections a run
	fi
	"${pin1[@]}" "$out/loadgen" -url "http://127.0.0.1:${port[$server]}/" -d "${secs}s" -addr-base "$base" "${args[@]}" "$@"
}

# check_report <report> <what> fails unless every answer was a 200.
check_report() {
	if ! grep -q '"200":' <<<"$1" || grep -qE '"(429|5[0-9][0-9])":' <<<"$1"; then
		echo "$2: unexpected statuses: $1" >&2
		exit 1
	fi
}

json_field() { sed -E "s/.*\"$2\":([0-9.]+).*/\1/" <<<"$1"; }

# summarize <tsv> <column> <unit> prints the medians of a results file
# (round, clients, server, requests, per_second, <column>...) per client and
# server, with their ratio to plain's in the same rounds.
summarize() {
	awk -F'\t' -v clients="${clients[*]}" -v names="${names[*]}" -v col="$2" -v unit="$3" '
	NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next }
	$1 > 0 { k = $2 " " $3; v[k] = v[k] " " $c }
	function median(list,   a, k, i, j, t) {
		k = split(list, a, " ")
		for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
	}
	END {
		printf "| clients | server | median %s | ratio to plain |\n|---|---|---|---|\n", unit
		nc = split(clients, cs, " "); nn = split(names, ns, " ")
		for (i = 1; i <= nc; i++) {
			p = median(v[cs[i] " plain"])
			for (j = 1; j <= nn; j++) {
				m = median(v[cs[i] " " ns[j]])
				printf "| %s | %s | %s | %.3f |\n", cs[i], ns[j], (m >= 1000 ? sprintf("%.0f", m) : sprintf("%.2f", m)), m / p
			}
		}
	}' "$1"
}
