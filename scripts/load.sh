#!/usr/bin/env bash
# make load: the service under load, each figure beside its peer from the
# same run (internal/cmd/load):
#   - the UI chat route, LOAD_ROUTE chats at once: serve's CPU per chat and
#     time to headers beside an AI SDK 7 route's (ROUTE_DIR, by default
#     ../shared/bench/aisdk-route, installed here with npm ci), against the
#     project's fake model and the lean one (scripts/leanmodel.py);
#   - an open-loop load through serve on file storage at LOAD_RATES chats a
#     second, then up to the capacity (accept p99 past 100 ms), and
#     fairness at it (ten tenants, one at ten times its share); then the
#     capacity and fairness again with serve alone on CPU 0 (taskset), the
#     clients and the model on the other CPUs;
#   - the capacity model at LOAD_MODEL_RATE chats a second: per chat, serve's
#     CPU, ledger and SSE bytes, and on Redis the commands and bytes; then
#     checked with 3 serve processes on a 3-node Redis Cluster;
#   - LOAD_SESSIONS sessions at once in process (accept, append, memory).
set -euo pipefail
cd "$(dirname "$0")/.."
route_src=${ROUTE_DIR:-../shared/bench/aisdk-route}
args=(-bin "${BIN:-bin/agentic-host}" -sessions "${LOAD_SESSIONS:-1000}" -route "${LOAD_ROUTE:-1000}"
	-rates "${LOAD_RATES:-200,500}" -model-rate "${LOAD_MODEL_RATE:-100}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -f "$route_src/server.mjs" ] && command -v node >/dev/null && command -v npm >/dev/null; then
	cp -r "$route_src/." "$work/route"
	(cd "$work/route" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
	args+=(-aisdk-route "$work/route")
else
	echo "No AI SDK route at $route_src (ROUTE_DIR) or no node: serve's route is measured alone."
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# Where the file stores go (TMPDIR) matters: see docs/performance.md.
echo "file storage: $(scripts/fsinfo.sh)"
bin/load "${args[@]}"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
