#!/usr/bin/env bash
# Installs the toolchains that build Wasm plugins, when missing (all of
# them, or the kits named: scripts/plugin-toolchains.sh go). Idempotent: it
# changes nothing on a machine that already has everything.
#
#   Go plugins            Go (go.mod names the version) and the module
#                         github.com/extism/go-pdk v1.1.3 (downloaded)
#   C plugins             Debian clang, lld and wasi-libc
#   Rust plugins          Debian rustc, libstd-rust-dev-wasm32 (its standard
#                         library for wasm32-wasi) and lld (the linker it
#                         runs, rust-lld); RUSTC names another rustc
#   AssemblyScript        node + npm, and pdk/assemblyscript/node_modules
#                         (@extism/as-pdk 1.0.0, assemblyscript 0.28, from
#                         its package-lock.json)
#   TypeScript            node + npm, and pdk/ts/node_modules (typescript 7,
#                         esbuild 0.28 and the JavaScript engine quickjs-wasi
#                         3.7, from its package-lock.json)
#
# Missing Debian packages are installed with apt-get when we are root on a
# Debian-like machine; otherwise the script says what to install, and fails
# only when AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS=1 (without the toolchains, the
# tests that build plugins skip).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
missing_any=0

say() { echo "plugin-toolchains: $*"; }
warn() { echo "plugin-toolchains: $*" >&2; missing_any=1; }

plugin_apt_install() {
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

need_c_toolchain() {
	local pkgs=()
	command -v clang >/dev/null 2>&1 || pkgs+=(clang)
	command -v wasm-ld >/dev/null 2>&1 || command -v wasm-ld-14 >/dev/null 2>&1 || pkgs+=(lld)
	if [ ! -e /usr/lib/wasm32-wasi/libc.a ] && [ -z "${WASI_SYSROOT:-}" ]; then
		pkgs+=(wasi-libc)
	fi
	if [ "${#pkgs[@]}" = 0 ]; then
		return
	fi
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		say "installing ${pkgs[*]}"
		plugin_apt_install "${pkgs[@]}"
		return
	fi
	warn "missing ${pkgs[*]}: install the Debian packages clang lld wasi-libc (or set WASI_SYSROOT to a wasi-libc sysroot)"
}

need_rust_toolchain() {
	local pkgs=() rustc=${RUSTC:-/usr/bin/rustc}
	if [ -n "${RUSTC:-}" ]; then
		# Another rustc: it is the user's to equip; say what it lacks.
		local sysroot
		if ! sysroot=$("$rustc" --print sysroot 2>/dev/null); then
			warn "RUSTC=$rustc does not run"
		elif [ ! -d "$sysroot/lib/rustlib/wasm32-wasi" ] && [ ! -d "$sysroot/lib/rustlib/wasm32-wasip1" ]; then
			warn "RUSTC=$rustc has no standard library for wasm32-wasi (rustup target add wasm32-wasip1)"
		fi
		return
	fi
	[ -x /usr/bin/rustc ] || pkgs+=(rustc)
	[ -d /usr/lib/rustlib/wasm32-wasi/lib ] || pkgs+=(libstd-rust-dev-wasm32)
	# rustc links wasm with /usr/bin/rust-lld, a link (from rustc) to
	# lld's binary: -e follows it.
	[ -e /usr/bin/rust-lld ] || pkgs+=(lld)
	if [ "${#pkgs[@]}" = 0 ]; then
		return
	fi
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		say "installing ${pkgs[*]}"
		plugin_apt_install "${pkgs[@]}"
		return
	fi
	warn "missing ${pkgs[*]}: install the Debian packages rustc libstd-rust-dev-wasm32 lld (or set RUSTC to a rustc with the wasm32-wasip1 standard library)"
}

need_go_pdk() {
	if ! command -v go >/dev/null 2>&1; then
		warn "Go is required"
		return
	fi
	(cd "$root/pdk" && GOWORK=off go mod download github.com/extism/go-pdk) || warn "could not download github.com/extism/go-pdk"
}

need_assemblyscript() {
	if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
		warn "node and npm are required for AssemblyScript plugins (apt-get install nodejs npm)"
		return
	fi
	if [ -e "$root/pdk/assemblyscript/node_modules/assemblyscript/bin/asc.js" ] &&
		[ -e "$root/pdk/assemblyscript/node_modules/@extism/as-pdk/index.ts" ]; then
		return
	fi
	say "installing the AssemblyScript kit's packages (npm ci in pdk/assemblyscript)"
	(cd "$root/pdk/assemblyscript" && npm ci --no-audit --no-fund) || warn "npm ci in pdk/assemblyscript failed"
}

need_typescript() {
	if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
		warn "node and npm are required for TypeScript plugins (apt-get install nodejs npm)"
		return
	fi
	if [ -e "$root/pdk/ts/node_modules/quickjs-wasi/quickjs.wasm" ] &&
		[ -e "$root/pdk/ts/node_modules/esbuild/package.json" ] &&
		[ -e "$root/pdk/ts/node_modules/typescript/package.json" ]; then
		return
	fi
	say "installing the TypeScript kit's packages (npm ci in pdk/ts)"
	(cd "$root/pdk/ts" && npm ci --no-audit --no-fund) || warn "npm ci in pdk/ts failed"
}

# With arguments, only those kits: scripts/plugin-toolchains.sh go c
kits=("$@")
if [ "${#kits[@]}" = 0 ]; then
	kits=(c rust go assemblyscript ts)
fi
for kit in "${kits[@]}"; do
	case "$kit" in
	c) need_c_toolchain ;;
	rust) need_rust_toolchain ;;
	go) need_go_pdk ;;
	assemblyscript) need_assemblyscript ;;
	ts) need_typescript ;;
	*)
		echo "plugin-toolchains: no kit $kit (c, rust, go, assemblyscript, ts)" >&2
		exit 2
		;;
	esac
done
if [ "$missing_any" = 1 ]; then
	if [ "${AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS:-}" = 1 ]; then
		echo "plugin-toolchains: AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS=1 requires them" >&2
		exit 1
	fi
	echo "plugin-toolchains: the tests that build those plugins will be skipped" >&2
	exit 0
fi
say "every plugin toolchain is present"
