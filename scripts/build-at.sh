#!/usr/bin/env bash
# build-at.sh REF OUT [NAME]: builds agentic-host as it was at REF (a tag
# or a commit of this repository) into OUT, its version stamped NAME (by
# default REF's tag, else devel-COMMIT): the previous release, for make
# upgrade-soak.
set -euo pipefail
ref=${1:?a tag or commit}
out=${2:?the binary to write}
GO=${GO:-go}
root=$(cd "$(dirname "$0")/.." && pwd)
case $out in /*) ;; *) out=$PWD/$out ;; esac
commit=$(git -C "$root" rev-parse --verify "$ref^{commit}" 2>/dev/null) || {
	echo "build-at: $ref is not a commit of this repository" >&2
	exit 1
}
name=${3:-$(git -C "$root" describe --tags --match 'v[0-9]*' --exact-match "$commit" 2>/dev/null || echo "devel-${commit:0:12}")}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$root" archive --format=tar "$commit" | tar -x -C "$tmp"
mkdir -p "$(dirname "$out")"
(cd "$tmp" && "$GO" build -trimpath -ldflags "-X github.com/agentichost/agentic/internal/cli.stamped=$name" -o "$out" ./cmd/agentic-host)
echo "build-at: $out is agentic-host at $name (commit ${commit:0:12})"
