#!/usr/bin/env bash
# Runs every native fuzzer (func FuzzXxx in a _test.go file) of the module's
# packages for FUZZTIME each (default 20s), one after the other; stops at the
# first failure, which go test reports with the input that failed (added to
# the package's testdata/fuzz corpus).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-20s}
found=0
while read -r dir pkg; do
	for f in "$dir"/*_test.go; do
		[ -e "$f" ] || continue
		for name in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$f"); do
			found=$((found + 1))
			echo "== $pkg $name ($FUZZTIME)"
			"$GO" test -run='^$' -fuzz="^${name}\$" -fuzztime="$FUZZTIME" "$pkg"
		done
	done
done < <("$GO" list -f '{{.Dir}} {{.ImportPath}}' ./...)
if [ "$found" = 0 ]; then
	echo "fuzz: no fuzzer found" >&2
	exit 1
fi
echo "fuzz: $found fuzzers ran for $FUZZTIME each"
