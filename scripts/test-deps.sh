#!/usr/bin/env bash
# Installs what the test suite needs and the machine lacks. Idempotent: it
# changes nothing on a machine that already has everything.
set -euo pipefail

need_go() {
	if ! command -v go >/dev/null 2>&1; then
		echo "test-deps: Go is required (go.mod names the version)" >&2
		exit 1
	fi
}

need_go
echo "test-deps: everything the tests need is present"
