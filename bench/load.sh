#!/usr/bin/env bash
# Measures what Tollgate costs Caddy on loopback, in interleaved rounds:
#
#   plain            respond "ok"
#   tollgate         the same behind a tollgate zone that never triggers
#                    (default settings: RateLimit headers on every response)
#   tollgate_quiet   the same zone with `headers denied` (no headers unless 429)
#   static_headers   plain Caddy adding two headers of the same size with the
#                    `header` directive: what the headers alone cost
#
# The servers run pinned to CPU 0 and the load generator (a second process)
# to CPU 1. The figure that counts is each server's own CPU time per request,
# from /proc/PID/stat: the load generator pipelines requests so that the
# server, not the generator, runs out of CPU. Prints each round, then the
# medians and their ratios against plain.
#
#   bench/load.sh [rounds=10] [seconds per round=3] [connections=32] [pipeline=8]
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-10}
secs=${2:-3}
conns=${3:-32}
pipeline=${4:-8}
out=bench/out
mkdir -p "$out"

# shellcheck source=bench/build.sh
. bench/build.sh

names=(plain tollgate tollgate_quiet static_headers)
declare -A port=([plain]=18081 [tollgate]=18082 [tollgate_quiet]=18083 [static_headers]=18084)
declare -A site=(
	[plain]='respond "ok"'
	[tollgate]='tollgate {
		zone site {
			limit 1000000000 1h
		}
	}
	respond "ok"'
	[tollgate_quiet]='tollgate {
		zone site {
			limit 1000000000 1h
		}
		headers denied
	}
	respond "ok"'
	[static_headers]='header Ratelimit-Policy "\"site\";q=1000000000;w=3600"
	header Ratelimit "\"site\";r=999999999;t=3600"
	respond "ok"'
)

declare -A pid=()
cleanup() { kill "${pid[@]}" 2>/dev/null || true; }
trap cleanup EXIT
for name in "${names[@]}"; do
	cat >"$out/$name.caddyfile" <<CADDY
{
	admin off
	persist_config off
	auto_https off
	log {
		output discard
	}
}
http://127.0.0.1:${port[$name]} {
	${site[$name]}
}
CADDY
	# A simple command, so $! is the PID caddy ends up with (env and taskset exec).
	env XDG_DATA_HOME="$out/data" XDG_CONFIG_HOME="$out/config" \
		"${pin0[@]}" "$out/caddy" run --config "$out/$name.caddyfile" --adapter caddyfile >"$out/$name.log" 2>&1 &
	pid[$name]=$!
done
for name in "${names[@]}"; do
	for _ in $(seq 100); do
		if "$out/loadgen" -url "http://127.0.0.1:${port[$name]}/" -c 1 -d 10ms 2>/dev/null | grep -q '"200"'; then
			continue 2
		fi
		sleep 0.1
	done
	echo "server $name did not come up; see $out/$name.log" >&2
	exit 1
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
json_field() { sed -E "s/.*\"$2\":([0-9.]+).*/\1/" <<<"$1"; }

hz=$(getconf CLK_TCK)
results="$out/load-results.tsv"
printf 'round\tserver\trequests\tper_second\tcpu_us_per_request\tbatch_p50_us\tbatch_p99_us\n' >"$results"
measure() { # measure <round> <name>
	local before after report requests
	before=$(cpu_ticks "${pid[$2]}")
	report=$("${pin1[@]}" "$out/loadgen" -url "http://127.0.0.1:${port[$2]}/" -c "$conns" -d "${secs}s" -pipeline "$pipeline" -cookies)
	after=$(cpu_ticks "${pid[$2]}")
	requests=$(json_field "$report" requests)
	if ! grep -q '"200":' <<<"$report" || grep -qE '"(429|5[0-9][0-9])":' <<<"$report"; then
		echo "round $1 $2: unexpected statuses: $report" >&2
		exit 1
	fi
	awk -v r="$1" -v n="$2" -v req="$requests" -v ps="$(json_field "$report" per_second)" \
		-v ticks=$((after - before)) -v hz="$hz" \
		-v p50="$(json_field "$report" p50_ns)" -v p99="$(json_field "$report" p99_ns)" \
		'BEGIN { printf "%d\t%s\t%d\t%.0f\t%.2f\t%.0f\t%.0f\n", r, n, req, ps, ticks / hz * 1e6 / req, p50 / 1000, p99 / 1000 }' >>"$results"
}

# Round 0 warms up and is not counted; then each round rotates the order.
for name in "${names[@]}"; do measure 0 "$name"; done
for r in $(seq "$rounds"); do
	for i in "${!names[@]}"; do
		measure "$r" "${names[$(((i + r) % ${#names[@]}))]}"
	done
done

column -t "$results"
echo
awk -F'\t' '
	NR > 1 && $1 > 0 { rps[$2] = rps[$2] " " $4; cpu[$2] = cpu[$2] " " $5; order[$2] = order[$2] ? order[$2] : ++n }
	function median(list,   a, k, i, j, t) {
		k = split(list, a, " ")
		for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
	}
	END {
		printf "%-16s %12s %14s %22s\n", "server", "median req/s", "median CPU µs/req", "throughput vs plain"
		pc = median(cpu["plain"])
		for (s in order) names[order[s]] = s
		for (i = 1; i <= n; i++) {
			s = names[i]; c = median(cpu[s])
			printf "%-16s %12.0f %14.2f %22.3f\n", s, median(rps[s]), c, pc / c
		}
	}' "$results"
