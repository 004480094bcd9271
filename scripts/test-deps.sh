#!/usr/bin/env bash
# Installs what the test suite needs and the machine lacks. Idempotent: it
# changes nothing on a machine that already has everything.
#
# Needs: Go; redis-server, redis-cli and redis-benchmark (the storage/redis
# tests start their own servers on free ports; they never use a system
# Redis). Missing Redis tools are installed with apt-get when we are root
# on a Debian-like machine; otherwise the script says what to install and
# fails only when AGENTIC_REQUIRE_REDIS=1 (without the tools, those tests
# skip). Chromium (the console's browser tests drive it headless) is
# installed the same way; without it those tests skip, unless
# AGENTIC_REQUIRE_BROWSER=1. So is minisign (the signed-plugin tests sign
# modules with it); without it those tests skip, unless
# AGENTIC_REQUIRE_MINISIGN=1.
set -euo pipefail

need_go() {
	if ! command -v go >/dev/null 2>&1; then
		echo "test-deps: Go is required (go.mod names the version)" >&2
		exit 1
	fi
}

apt_updated=0
apt_install() {
	if [ "$apt_updated" = 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		apt_updated=1
	fi
	# policy-rc.d keeps the packages from starting the system service: the
	# tests start their own servers.
	local policy=/usr/sbin/policy-rc.d created_policy=0
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		created_policy=1
	fi
	local rc=0
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" || rc=$?
	if [ "$created_policy" = 1 ]; then
		rm -f "$policy"
	fi
	return "$rc"
}

need_redis() {
	local missing=()
	for tool in redis-server redis-cli redis-benchmark; do
		command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
	done
	if [ "${#missing[@]}" = 0 ]; then
		return
	fi
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "test-deps: installing redis-server and redis-tools (missing: ${missing[*]})"
		apt_install redis-server redis-tools
		# Debian may start the service anyway (systemd ignores
		# policy-rc.d on some setups): stop it, the tests do not use it.
		if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then
			systemctl stop redis-server || true
		fi
		return
	fi
	echo "test-deps: missing ${missing[*]}: install the Debian packages redis-server and redis-tools" \
		"(apt-get install redis-server redis-tools) or your system's equivalent" >&2
	if [ "${AGENTIC_REQUIRE_REDIS:-}" = 1 ]; then
		echo "test-deps: AGENTIC_REQUIRE_REDIS=1 requires them" >&2
		exit 1
	fi
	echo "test-deps: the tests that need Redis will be skipped" >&2
}

# --- Chromium (internal/cli: the web console's browser tests) ------------------
# The console tests drive a headless chromium through the DevTools protocol
# against a real serve process. fonts-liberation gives their screenshots
# legible text.
need_chromium() {
	if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
		return
	fi
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "test-deps: installing chromium"
		apt_install chromium fonts-liberation
		return
	fi
	echo "test-deps: chromium is missing: install the Debian package chromium" \
		"(apt-get install chromium) or your system's equivalent" >&2
	if [ "${AGENTIC_REQUIRE_BROWSER:-}" = 1 ]; then
		echo "test-deps: AGENTIC_REQUIRE_BROWSER=1 requires it" >&2
		exit 1
	fi
	echo "test-deps: the console's browser tests will be skipped" >&2
}

# --- minisign (plugins, server, internal/cli: signed plugins) ------------------
# The tests sign modules with the minisign tool itself, so that what the
# host verifies is what plugin authors produce.
need_minisign() {
	if command -v minisign >/dev/null 2>&1; then
		return
	fi
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "test-deps: installing minisign"
		apt_install minisign
		return
	fi
	echo "test-deps: minisign is missing: install the Debian package minisign" \
		"(apt-get install minisign) or your system's equivalent" >&2
	if [ "${AGENTIC_REQUIRE_MINISIGN:-}" = 1 ]; then
		echo "test-deps: AGENTIC_REQUIRE_MINISIGN=1 requires it" >&2
		exit 1
	fi
	echo "test-deps: the signed-plugin tests will be skipped" >&2
}

# --- Plugin toolchains (plugins/, pdk/, examples/plugins) ---------------------
# The plugin tests build Wasm plugins from source with Go (wasip1), Debian
# clang + lld + wasi-libc, AssemblyScript (npm packages of
# pdk/assemblyscript), and Debian rustc + libstd-rust-dev-wasm32 + lld.
# scripts/plugin-toolchains.sh installs what is missing
# (AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS=1 makes a missing one an error).
need_plugin_toolchains() {
	"$(dirname "$0")/plugin-toolchains.sh"
}

# --- Node and the npm test clients (internal/cli) ------------------------------
# AssemblyScript plugins and the npm clients the tests drive run on node:
# the TypeScript MCP client (@modelcontextprotocol/sdk, for agentic-host mcp)
# and the AI SDK's UI client (ai, for serve's /v1/ui/chat), each pinned by
# the package-lock.json of its directory in internal/cli/testdata and
# installed there with npm ci. (ai asks for node 22 in its engines; the
# tests pass on node 20, so npm's warning about it is no error.) Without
# npm the tests that need them skip, unless
# AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS=1.
need_node() {
	if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
		return
	fi
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "test-deps: installing nodejs and npm"
		apt_install nodejs npm
		return
	fi
	echo "test-deps: node and npm are missing: install the Debian packages nodejs and npm" >&2
	if [ "${AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS:-}" = 1 ]; then
		echo "test-deps: AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS=1 requires them" >&2
		exit 1
	fi
}

# need_npm_client WHAT DIR PACKAGE: npm ci in DIR (from the repository's
# root) unless node_modules/PACKAGE is installed there.
need_npm_client() {
	local what=$1 dir
	dir="$(cd "$(dirname "$0")/.." && pwd)/$2"
	if [ -e "$dir/node_modules/$3/package.json" ]; then
		return
	fi
	if ! command -v npm >/dev/null 2>&1; then
		echo "test-deps: the $what tests will be skipped (no npm)" >&2
		return
	fi
	echo "test-deps: installing the $what (npm ci in $2)"
	if ! (cd "$dir" && npm ci --no-audit --no-fund); then
		echo "test-deps: npm ci in $dir failed" >&2
		if [ "${AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS:-}" = 1 ]; then
			exit 1
		fi
	fi
}

need_go
need_redis
need_chromium
need_minisign
need_node
need_plugin_toolchains
need_npm_client "TypeScript MCP client" protocol/mcp/testdata/mcp-client @modelcontextprotocol/sdk
need_npm_client "AI SDK UI client" protocol/uistream/testdata/ai-client ai
echo "test-deps: everything the tests need is present"
