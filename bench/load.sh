#!/usr/bin/env bash
# Measures what a rate limiter costs Caddy on loopback, in interleaved rounds,
# and prints one table: each server's own CPU time per request, and its ratio
# to plain Caddy's in the same rounds. The servers and clients are described
# in bench/servers.sh: plain Caddy, caddy-ratelimit v0.1.0 and Tollgate, each
# loaded by cookie-less clients on one address (like wrk) and by clients that
# keep their session cookie.
#
# The servers run pinned to CPU 0 with GOMAXPROCS=1 and the load generator
# (bench/loadgen, a second process) to CPU 1. The figure that counts is each
# server's CPU time per request, from /proc/PID/stat: the load generator
# pipelines requests so that the server, not the generator, runs out of CPU.
# Round 0 warms up and is not counted; each later round runs every
# (client, server) pair once, in an order that rotates from round to round,
# so a change in the machine's speed falls on all servers alike. Medians are
# over the counted rounds. The machine's load average is printed before and
# after: on a busy machine, every figure rises and the ratios spread (see
# bench/instructions.sh for counts that do not depend on the load).
#
#   bench/load.sh [rounds=9] [seconds per round=3] [connections=32] [pipeline=8]
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-9}
secs=${2:-3}
conns=${3:-32}
pipeline=${4:-8}
out=bench/out
mkdir -p "$out"

# shellcheck source=bench/servers.sh
. bench/servers.sh

declare -A pid=()
cleanup() { kill "${pid[@]}" 2>/dev/null || true; }
trap cleanup EXIT
for name in "${names[@]}"; do
	write_config "$name"
	# A simple command, so $! is the PID caddy ends up with (env and taskset exec).
	env GOMAXPROCS=1 XDG_DATA_HOME="$out/data" XDG_CONFIG_HOME="$out/config" \
		"${pin0[@]}" "$out/caddy-compare" run --config "$out/$name.caddyfile" --adapter caddyfile >"$out/$name.log" 2>&1 &
	pid[$name]=$!
done
for name in "${names[@]}"; do await_server "$name"; done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
results="$out/load-results.tsv"
printf 'round\tclients\tserver\trequests\tper_second\tcpu_us_per_request\n' >"$results"
measure() { # measure <round> <clients> <server>
	local before after report
	before=$(cpu_ticks "${pid[$3]}")
	report=$(load "$3" "$2" "$secs" "$1" -c "$conns" -pipeline "$pipeline")
	after=$(cpu_ticks "${pid[$3]}")
	check_report "$report" "round $1 $2 $3"
	awk -v r="$1" -v c="$2" -v n="$3" -v req="$(json_field "$report" requests)" -v ps="$(json_field "$report" per_second)" \
		-v ticks=$((after - before)) -v hz="$hz" \
		'BEGIN { printf "%d\t%s\t%s\t%d\t%.0f\t%.2f\n", r, c, n, req, ps, ticks / hz * 1e6 / req }' >>"$results"
}

load_before=$(uptime)
pairs=()
for c in "${clients[@]}"; do
	for n in "${names[@]}"; do pairs+=("$c $n"); done
done
for p in "${pairs[@]}"; do
	read -r c n <<<"$p"
	measure 0 "$c" "$n"
done
for r in $(seq "$rounds"); do
	for i in "${!pairs[@]}"; do
		read -r c n <<<"${pairs[$(((i + r) % ${#pairs[@]}))]}"
		measure "$r" "$c" "$n"
	done
done
load_after=$(uptime)

column -t "$results"
echo
echo "load before: $load_before"
echo "load after:  $load_after"
echo "rounds: $rounds of ${secs}s, $conns connections, pipeline $pipeline"
echo
summarize "$results" cpu_us_per_request "CPU µs/request"
