#!/usr/bin/env bash
# The anchor benchmark: the host's CPU per model step beside the AI SDK 7
# ToolLoopAgent's (../shared/bench/aisdk), each against the same server in
# the same run, alternating, 3 rounds, against two servers: the project's
# fake (agentic-host fake-provider --anchor) and an independent one in
# Python (scripts/leanmodel.py); it prints every measurement, the medians'
# ratios and the worst of them.
#   scripts/bench-anchor.sh [RUNS]   (make bench-anchor)
# With ANCHOR_OUT=FILE it also writes each round in go test -bench's format
# (package "anchor", unit cpu-us/step, one benchmark a server), which make
# bench adds to its results.
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
python3 scripts/leanmodel.py >"$work/lean.log" 2>&1 &
pids+=($!)
declare -A url
for server in fake lean; do
	for _ in $(seq 100); do
		url[$server]=$(sed -n 's/.*base URL \(http[^ ]*\).*/\1/p' "$work/$server.log")
		[ -n "${url[$server]}" ] && break
		sleep 0.05
	done
	[ -n "${url[$server]}" ] || { cat "$work/$server.log" >&2; exit 1; }
done
cpu() { sed -n 's/.*"cpu_us_per_step":\([0-9.]*\).*/\1/p'; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# Where the file stores go (TMPDIR) matters: see docs/performance.md.
echo "file storage: $(scripts/fsinfo.sh)"
for round in 1 2 3; do
	for server in fake lean; do
		u=${url[$server]}
		a=$( (cd "$work/aisdk" && node bench.mjs "$u" "$runs") | cpu)
		f=$("$work/anchor" -base-url "$u" -runs "$runs" -storage file | cpu)
		m=$("$work/anchor" -base-url "$u" -runs "$runs" -storage memory | cpu)
		# The file store on tmpfs too: the same code and system calls,
		# without the disk's file creation (see docs/performance.md).
		t=""
		if [ -d /dev/shm ] && [ -w /dev/shm ]; then
			t=$("$work/anchor" -base-url "$u" -runs "$runs" -storage file -dir /dev/shm | cpu)
		fi
		echo "round $round, $server server: cpu µs per step — AI SDK $a, host (file) $f, host (memory) $m${t:+, host (file on tmpfs) $t}"
		echo "$server $a $f $m $t" >>"$work/rounds"
	done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "${ANCHOR_OUT:-}" ]; then
	go run ./internal/cmd/benchsummary -anchor-rounds "$work/rounds" >"$ANCHOR_OUT"
fi
median() { sort -n | sed -n 2p; }
worst=0
for server in fake lean; do
	a=$(awk -v s=$server '$1 == s {print $2}' "$work/rounds" | median)
	f=$(awk -v s=$server '$1 == s {print $3}' "$work/rounds" | median)
	m=$(awk -v s=$server '$1 == s {print $4}' "$work/rounds" | median)
	t=$(awk -v s=$server '$1 == s && NF == 5 {print $5}' "$work/rounds" | median)
	awk -v s="$server" -v a="$a" -v f="$f" -v m="$m" -v t="$t" 'BEGIN {
		printf "medians, %s server: AI SDK %.0f µs, host file %.0f µs (%.3f×), host memory %.0f µs (%.3f×)", s, a, f, f/a, m, m/a
		if (t != "") printf ", host file on tmpfs %.0f µs (%.3f×)", t, t/a
		printf "\n" }'
	worst=$(awk -v w="$worst" -v a="$a" -v f="$f" 'BEGIN { r = f/a; print (r > w ? r : w) }')
done
awk -v w="$worst" 'BEGIN { printf "worst ratio, file storage: %.3f× (target ≤ 0.10×)\n", w }'
