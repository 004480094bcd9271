#!/usr/bin/env bash
# api-check.sh BASE: compares the exported API of the module
# (github.com/agentichost/agentic, internal packages left out) at BASE, a
# release tag or any commit, with the working tree's, with apidiff. It lists
# every change; an incompatible one fails, unless ACCEPT_API_BREAK=1 says
# the break is decided (then write it in CHANGELOG.md).
set -euo pipefail
base=${1:-}
GO=${GO:-go}
APIDIFF=${APIDIFF:?the apidiff module@version to run}
module=github.com/agentichost/agentic
if [ -z "$base" ]; then
	echo "api-check: no release tag (v*) yet, so no API to compare with: set API_BASE=REF to compare with a commit"
	exit 0
fi
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
cleanup() {
	git -C "$root" worktree remove --force "$tmp/old" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
git -C "$root" worktree add --detach "$tmp/old" "$base" >/dev/null 2>&1 || {
	echo "api-check: $base is not a commit of this repository" >&2
	exit 1
}
# apidiff names each internal package it leaves out on stderr: kept for a
# failure only.
(cd "$tmp/old" && "$GO" run "$APIDIFF" -m -w "$tmp/old.api" "$module" 2>"$tmp/log") || { cat "$tmp/log" >&2; exit 1; }
(cd "$root" && "$GO" run "$APIDIFF" -m -w "$tmp/new.api" "$module" 2>"$tmp/log") || { cat "$tmp/log" >&2; exit 1; }
report=$(cd "$root" && "$GO" run "$APIDIFF" -m "$tmp/old.api" "$tmp/new.api" 2>"$tmp/log") || { cat "$tmp/log" >&2; exit 1; }
if [ -z "$report" ]; then
	echo "api-check: the exported API is as at $base"
	exit 0
fi
echo "api-check: the exported API's changes since $base:"
echo "$report"
if grep -q 'Incompatible changes:' <<<"$report"; then
	if [ "${ACCEPT_API_BREAK:-}" = 1 ]; then
		echo "api-check: incompatible changes, accepted (ACCEPT_API_BREAK=1): say so in CHANGELOG.md"
		exit 0
	fi
	echo "api-check: incompatible changes since $base: make them compatible, or decide the break with ACCEPT_API_BREAK=1 and say so in CHANGELOG.md" >&2
	exit 1
fi
