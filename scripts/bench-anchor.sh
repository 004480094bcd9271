#!/usr/bin/env bash
# The anchor benchmark: the host's CPU per model step beside the AI SDK 7
# ToolLoopAgent's (../shared/bench/aisdk), each against the same fake server
# (agentic-host fake-provider --anchor) in the same run, alternating, 3
# rounds; it prints every measurement and the medians' ratio.
#   scripts/bench-anchor.sh [RUNS]   (make bench-anchor)
# With ANCHOR_OUT=FILE it also writes each round in go test -bench's format
# (package "anchor", unit cpu-us/step), which make bench adds to its results.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/agentic-host}
runs=${1:-200}
anchor_src=${ANCHOR_DIR:-../shared/bench/aisdk}
[ -f "$anchor_src/bench.mjs" ] || { echo "bench-anchor: no AI SDK harness at $anchor_src (set ANCHOR_DIR)" >&2; exit 2; }
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
cp -r "$anchor_src/." "$work/aisdk"
(cd "$work/aisdk" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
go build -o "$work/anchor" ./internal/cmd/anchor
"$BIN" fake-provider --anchor --addr 127.0.0.1:0 >"$work/fake.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
	url=$(sed -n 's/.*base URL \(http[^ ]*\).*/\1/p' "$work/fake.log")
	[ -n "$url" ] && break
	sleep 0.05
done
[ -n "$url" ] || { cat "$work/fake.log" >&2; exit 1; }
cpu() { sed -n 's/.*"cpu_us_per_step":\([0-9.]*\).*/\1/p'; }
for round in 1 2 3; do
	a=$( (cd "$work/aisdk" && node bench.mjs "$url" "$runs") | cpu)
	f=$("$work/anchor" -base-url "$url" -runs "$runs" -storage file | cpu)
	m=$("$work/anchor" -base-url "$url" -runs "$runs" -storage memory | cpu)
	echo "round $round: cpu µs per step — AI SDK $a, host (file) $f, host (memory) $m"
	echo "$a $f $m" >>"$work/rounds"
done
if [ -n "${ANCHOR_OUT:-}" ]; then
	go run ./internal/cmd/benchsummary -anchor-rounds "$work/rounds" >"$ANCHOR_OUT"
fi
median() { sort -n | sed -n 2p; }
a=$(awk '{print $1}' "$work/rounds" | median)
f=$(awk '{print $2}' "$work/rounds" | median)
m=$(awk '{print $3}' "$work/rounds" | median)
awk -v a="$a" -v f="$f" -v m="$m" 'BEGIN { printf "medians: AI SDK %.0f µs, host file %.0f µs (%.3f×), host memory %.0f µs (%.3f×)\n", a, f, f/a, m, m/a }'
