#!/usr/bin/env bash
# Counts the instructions of one request through Caddy's whole HTTP pipeline,
# in process (BenchmarkServe in caddymodule), under valgrind's callgrind,
# and prints one line per case with its ratio to plain Caddy's.
#
# Only what runs inside caddyhttp.(*Server).ServeHTTP is counted
# (--toggle-collect): not the process's start, not the benchmark's setup,
# and not Tollgate's timer-driven background work (a sweep of one engine
# shard every second, a snapshot every minute), which a process slowed
# fifty times by callgrind would otherwise charge to fifty times fewer
# requests. On a quiet machine two runs agree within a thousandth; on a
# busy one the timers that fire while a request is preempted are counted
# too, and runs of one case spread by a few per cent: run it several times,
# interleaved with the code it is compared with, and take the median. A
# case whose clients visit once each (10,000 of them) is counted on their
# second and third visits: (I(3N) - I(N)) / 2N.
#
#   bench/serve_instructions.sh [cases=plain,pass,vars,tollgate,tollgate_cookieless,tollgate_cookieless_refused,tollgate_cookieless_one] [N=10000]
set -euo pipefail
cd "$(dirname "$0")/.."

cases=${1:-plain,pass,vars,tollgate,tollgate_cookieless,tollgate_cookieless_refused,tollgate_cookieless_one}
n=${2:-10000}
out=bench/out
mkdir -p "$out"
command -v valgrind >/dev/null || {
	echo "needs valgrind (apt-get install valgrind)" >&2
	exit 1
}
go test -c -o "$out/caddymodule.test" ./caddymodule

# count <case> <requests> prints the instructions counted over that many requests.
count() {
	local file="$out/serve-$1-$2.callgrind"
	(cd caddymodule && env GOGC=off GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 \
		valgrind --tool=callgrind --collect-atstart=no \
		--toggle-collect='github.com/caddyserver/caddy/v2/modules/caddyhttp.(*Server).ServeHTTP' \
		--callgrind-out-file="../$file" \
		"../$out/caddymodule.test" -test.run '^$' -test.bench "Serve/$1\$" -test.benchtime "$2x" >/dev/null 2>&1)
	awk '/^(totals|summary):/ { print $2; exit }' "$file"
}

plain=""
IFS=, read -ra list <<<"$cases"
for c in "${list[@]}"; do
	if [ "$c" = tollgate ] || [ "$c" = tollgate_cookieless ] || [ "$c" = tollgate_cookieless_refused ]; then
		per=$((($(count "$c" $((3 * n))) - $(count "$c" "$n")) / (2 * n)))
	else
		per=$(($(count "$c" "$n") / n))
	fi
	[ "$c" != plain ] || plain=$per
	if [ -n "$plain" ]; then
		printf '%-26s %8d  %.3f\n' "$c" "$per" "$(echo "$per / $plain" | bc -l)"
	else
		printf '%-26s %8d\n' "$c" "$per"
	fi
done
