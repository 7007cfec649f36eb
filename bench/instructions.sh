#!/usr/bin/env bash
# Counts the instructions each server executes per request, under valgrind's
# callgrind, and prints one table with the ratio of each to plain Caddy's.
# Instruction counts do not depend on what else the machine runs, so this
# comparison holds on a busy machine, where CPU times (bench/load.sh) swing;
# it leaves out what instructions do not show (cache misses, the kernel's
# share of the network). The servers and clients are those of
# bench/servers.sh.
#
# Each server runs alone under callgrind (GOMAXPROCS=1, asynchronous
# preemption off, which callgrind needs), pinned to CPU 0; the load
# generator, pinned to CPU 1, warms it up, then each round zeroes the
# counts, sends load for the given seconds and dumps them: the instructions
# of every thread of the server (the runtime, the garbage collector and
# Tollgate's background work included) divided by the requests answered.
#
#   bench/instructions.sh [rounds=3] [seconds per round=10] [connections=32] [pipeline=8]
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-3}
secs=${2:-10}
conns=${3:-32}
pipeline=${4:-8}
out=bench/out
mkdir -p "$out"
command -v valgrind >/dev/null || {
	echo "needs valgrind (apt-get install valgrind)" >&2
	exit 1
}

# shellcheck source=bench/servers.sh
. bench/servers.sh

server=""
cleanup() { [ -z "$server" ] || kill "$server" 2>/dev/null || true; }
trap cleanup EXIT

results="$out/instructions-results.tsv"
printf 'round\tclients\tserver\trequests\tper_second\tinstructions_per_request\n' >"$results"
run=0
for name in "${names[@]}"; do
	write_config "$name"
	rm -f "$out/callgrind-$name".*
	env GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 XDG_DATA_HOME="$out/data" XDG_CONFIG_HOME="$out/config" \
		"${pin0[@]}" valgrind --tool=callgrind --callgrind-out-file="$out/callgrind-$name" \
		"$out/caddy-compare" run --config "$out/$name.caddyfile" --adapter caddyfile >"$out/$name.log" 2>&1 &
	server=$!
	await_server "$name" 600
	for c in "${clients[@]}"; do
		load "$name" "$c" 2 $((run++)) -c "$conns" -pipeline "$pipeline" >/dev/null # warm-up
		for r in $(seq "$rounds"); do
			callgrind_control -z "$server" >/dev/null 2>&1
			report=$(load "$name" "$c" "$secs" $((run++)) -c "$conns" -pipeline "$pipeline")
			callgrind_control -d "$server" >/dev/null 2>&1
			check_report "$report" "round $r $c $name"
			dump=$(ls -t "$out/callgrind-$name".* | head -1)
			awk -v r="$r" -v c="$c" -v n="$name" -v req="$(json_field "$report" requests)" -v ps="$(json_field "$report" per_second)" \
				'/^totals:/ { printf "%d\t%s\t%s\t%d\t%.0f\t%.0f\n", r, c, n, req, ps, $2 / req }' "$dump" >>"$results"
		done
	done
	kill "$server"
	wait "$server" 2>/dev/null || true
	server=""
done

column -t "$results"
echo
echo "load: $(uptime)"
echo "rounds: $rounds of ${secs}s per client and server, $conns connections, pipeline $pipeline"
echo
summarize "$results" instructions_per_request "instructions/request"
