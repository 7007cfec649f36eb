#!/usr/bin/env bash
# Measures a 3-node Tollgate cluster against a single node on loopback, in
# interleaved rounds. All Caddy processes run pinned to CPU 0 and the load
# generator to CPU 1, so the cluster gets no more CPU than the single node:
# the comparison is the cost of counting every key at its owner (2 of 3
# checks cross to another node) against counting locally. Each connection
# is its own client (its own loopback address and session cookie) and the
# 3-node runs spread connections over the nodes. Reports requests/s, server
# CPU per request (all processes together), and peer frames per forwarded
# check (batching).
#
#   bench/cluster.sh [rounds=6] [seconds per round=3] [connections=48] [pipeline=4]
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-6}
secs=${2:-3}
conns=${3:-48}
pipeline=${4:-4}
out=bench/out/cluster
rm -rf "$out"
mkdir -p "$out"

# shellcheck source=bench/build.sh
. bench/build.sh

secret=bench-cluster-secret-0123456789abcdef
site='tollgate {
		zone site {
			limit 1000000000 1h
		}
	}
	respond "ok"'

declare -A pid=() admin=() http=()
write_config() { # write_config <name> <http> <admin> <cluster block or empty>
	cat >"$out/$1.caddyfile" <<CADDY
{
	admin 127.0.0.1:$3
	persist_config off
	auto_https off
	log {
		output discard
	}
	tollgate {
		secret $secret
		$4
	}
}
http://127.0.0.1:$2 {
	$site
}
CADDY
}
start() { # start <name>
	env XDG_DATA_HOME="$out/data-$1" XDG_CONFIG_HOME="$out/config-$1" \
		"${pin0[@]}" "$out/caddy" run --config "$out/$1.caddyfile" --adapter caddyfile >"$out/$1.log" 2>&1 &
	pid[$1]=$!
}
cleanup() { kill "${pid[@]}" 2>/dev/null || true; }
trap cleanup EXIT

write_config single 18090 2090 ""
http[single]=18090 admin[single]=2090
for i in 0 1 2; do
	others=""
	for j in 0 1 2; do [ "$i" != "$j" ] && others="$others 127.0.0.1:$((17946 + j))"; done
	write_config "node$i" $((18091 + i)) $((2091 + i)) "cluster {
			bind 127.0.0.1:$((17946 + i))
			peer_listen 127.0.0.1:$((17956 + i))
			join$others
		}"
	http[node$i]=$((18091 + i)) admin[node$i]=$((2091 + i))
done
for name in single node0 node1 node2; do start "$name"; done

status() { curl -s "http://127.0.0.1:${admin[$1]}/tollgate/status"; }
for _ in $(seq 100); do
	if [ "$(status node0 | grep -c '"name":')" -ge 3 ] && status node2 | grep '"peers_in_fallback": \[\]' >/dev/null; then break; fi
	sleep 0.2
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
json_field() { sed -E "s/.*\"$2\":([0-9.]+).*/\1/" <<<"$1"; }
peer_field() { status "$1" | sed -nE "s/.*\"$2\": ([0-9]+).*/\1/p"; }
hz=$(getconf CLK_TCK)
results="$out/results.tsv"
printf 'round\tsetup\trequests\tper_second\tcpu_us_per_request\tbatch_p50_us\tframes_per_forwarded_check\n' >"$results"

measure() { # measure <round> <setup>
	local names urls before after report requests frames0 items0 frames1 items1
	if [ "$2" = single ]; then names=(single); else names=(node0 node1 node2); fi
	urls=""
	for n in "${names[@]}"; do urls="$urls,http://127.0.0.1:${http[$n]}/"; done
	before=0 frames0=0 items0=0
	for n in "${names[@]}"; do
		before=$((before + $(cpu_ticks "${pid[$n]}")))
		frames0=$((frames0 + $(peer_field "$n" peer_frames))) items0=$((items0 + $(peer_field "$n" peer_items)))
	done
	report=$("${pin1[@]}" "$out/loadgen" -url "${urls#,}" -c "$conns" -d "${secs}s" -pipeline "$pipeline" -cookies)
	after=0 frames1=0 items1=0
	for n in "${names[@]}"; do
		after=$((after + $(cpu_ticks "${pid[$n]}")))
		frames1=$((frames1 + $(peer_field "$n" peer_frames))) items1=$((items1 + $(peer_field "$n" peer_items)))
	done
	requests=$(json_field "$report" requests)
	if grep -qE '"(429|5[0-9][0-9])":' <<<"$report"; then
		echo "round $1 $2: unexpected statuses: $report" >&2
		exit 1
	fi
	awk -v r="$1" -v s="$2" -v req="$requests" -v ps="$(json_field "$report" per_second)" \
		-v ticks=$((after - before)) -v hz="$hz" -v p50="$(json_field "$report" p50_ns)" \
		-v frames=$((frames1 - frames0)) -v items=$((items1 - items0)) \
		'BEGIN { printf "%d\t%s\t%d\t%.0f\t%.2f\t%.0f\t%s\n", r, s, req, ps, ticks / hz * 1e6 / req, p50 / 1000, (items > 0 ? sprintf("%.3f", frames / items) : "-") }' >>"$results"
}

measure 0 single
measure 0 cluster
for r in $(seq "$rounds"); do
	if ((r % 2)); then measure "$r" single; measure "$r" cluster; else measure "$r" cluster; measure "$r" single; fi
done
column -t "$results"
echo
awk -F'\t' '
	NR > 1 && $1 > 0 { rps[$2] = rps[$2] " " $4; cpu[$2] = cpu[$2] " " $5; fr[$2] = fr[$2] " " $7 }
	function median(list,   a, k, i, j, t) {
		k = split(list, a, " ")
		for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
	}
	END {
		printf "median requests/s       single %.0f  3-node cluster %.0f  ratio %.3f\n", median(rps["single"]), median(rps["cluster"]), median(rps["cluster"]) / median(rps["single"])
		printf "median CPU µs/request   single %.2f  3-node cluster %.2f\n", median(cpu["single"]), median(cpu["cluster"])
		printf "median peer frames per forwarded check: %s\n", median(fr["cluster"])
	}' "$results"
