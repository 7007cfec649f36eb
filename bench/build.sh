# Sourced by the bench scripts, from the repository's root, with $out set:
# puts Go on PATH if need be, builds Caddy with Tollgate ($out/caddy) and
# the load generator ($out/loadgen), and sets pin0 and pin1, which prefix a
# command to run it on CPU 0 or 1 (when there are two).

if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
	export PATH="$PATH:/usr/local/go/bin"
fi
go build -o "$out/caddy" ./cmd/tollgate
go build -o "$out/loadgen" ./bench/loadgen

pin0=() pin1=()
if command -v taskset >/dev/null && [ "$(nproc)" -gt 1 ]; then
	pin0=(taskset -c 0) pin1=(taskset -c 1)
fi
