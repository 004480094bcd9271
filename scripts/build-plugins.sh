#!/usr/bin/env bash
# Builds the example plugins of examples/plugins into OUT (default
# bin/plugins): NAME.wasm for each examples/plugins/NAME, with its sidecar
# manifest NAME.json beside it when it has one.
#
#   scripts/build-plugins.sh                 every example
#   scripts/build-plugins.sh get_account …   only these
#   OUT=/tmp/p scripts/build-plugins.sh      elsewhere
#
# The kind of each example follows from its files: go.mod (Go, standard Go
# for wasip1), NAME.ts with a tsconfig.json (TypeScript, with the kit in
# pdk/ts), NAME.ts alone (AssemblyScript, with the kit in
# pdk/assemblyscript), NAME.c (C, with the kit in pdk/c unless it includes
# none), NAME.rs (Rust, rustc alone; the source names the kit in pdk/rust
# with #[path]). The commands are the ones plugins/plugintest runs in the
# tests. Missing toolchains: scripts/plugin-toolchains.sh installs them.
# RUSTC overrides the rustc (default: Debian's /usr/bin/rustc when there,
# else rustc).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/bin/plugins}
mkdir -p "$out"
out=$(cd "$out" && pwd)
sysroot=${WASI_SYSROOT:-/usr}
clang=${CLANG:-clang}
if [ -z "${RUSTC:-}" ]; then
	RUSTC=rustc
	if [ -x /usr/bin/rustc ]; then
		RUSTC=/usr/bin/rustc
	fi
fi

build_go() { # dir name
	(cd "$1" && GOOS=wasip1 GOARCH=wasm GOWORK=off CGO_ENABLED=0 \
		go build -buildmode=c-shared -trimpath -o "$out/$2.wasm" .)
}

build_assemblyscript() { # dir name
	local kit="$root/pdk/assemblyscript"
	if [ ! -e "$kit/node_modules/assemblyscript/bin/asc.js" ]; then
		(cd "$kit" && npm ci --no-audit --no-fund)
	fi
	(cd "$1" && node "$kit/node_modules/assemblyscript/bin/asc.js" "$2.ts" --outFile "$out/$2.wasm" \
		-O3 --noAssert --path "$kit/node_modules" --use abort=agenticAbort)
}

build_ts() { # dir name
	local kit="$root/pdk/ts"
	if [ ! -e "$kit/node_modules/quickjs-wasi/quickjs.wasm" ]; then
		(cd "$kit" && npm ci --no-audit --no-fund)
	fi
	(cd "$1" && node "$kit/build.mjs" "$2.ts" "$out/$2.wasm" >/dev/null)
}

build_c() { # dir name
	local sources=("$2.c")
	if grep -q '#include "agentic.h"' "$1/$2.c"; then
		sources+=("$root/pdk/c/agentic.c")
	fi
	(cd "$1" && "$clang" --target=wasm32-wasi --sysroot="$sysroot" -O2 -mexec-model=reactor -nodefaultlibs \
		-Wall -Wextra -Werror -fno-exceptions -I "$root/pdk/c" -o "$out/$2.wasm" "${sources[@]}" -lc)
}

build_rust() { # dir name
	# The wasm32 WASI target whose standard library rustc has: Debian's
	# wasm32-wasi, or wasm32-wasip1 (rustup's name).
	local sysroot target=wasm32-wasi
	sysroot=$("$RUSTC" --print sysroot)
	if [ -d "$sysroot/lib/rustlib/wasm32-wasip1" ]; then
		target=wasm32-wasip1
	elif [ ! -d "$sysroot/lib/rustlib/wasm32-wasi" ]; then
		echo "build-plugins: $RUSTC has no standard library for wasm32-wasi (apt-get install libstd-rust-dev-wasm32)" >&2
		return 1
	fi
	(cd "$1" && "$RUSTC" --target "$target" --edition 2021 --crate-type cdylib -C opt-level=s -C strip=symbols \
		-o "$out/$2.wasm" "$2.rs")
}

names=("$@")
if [ "${#names[@]}" = 0 ]; then
	for d in "$root"/examples/plugins/*/; do
		names+=("$(basename "$d")")
	done
fi

for name in "${names[@]}"; do
	dir="$root/examples/plugins/$name"
	if [ ! -d "$dir" ]; then
		echo "build-plugins: no example $name" >&2
		exit 1
	fi
	if [ -e "$dir/go.mod" ]; then
		kind=go
	elif [ -e "$dir/$name.ts" ] && [ -e "$dir/tsconfig.json" ]; then
		kind=ts
	elif [ -e "$dir/$name.ts" ]; then
		kind=assemblyscript
	elif [ -e "$dir/$name.c" ]; then
		kind=c
	elif [ -e "$dir/$name.rs" ]; then
		kind=rust
	else
		echo "build-plugins: cannot tell how to build $name" >&2
		exit 1
	fi
	"build_$kind" "$dir" "$name"
	if [ -e "$dir/$name.json" ]; then
		cp "$dir/$name.json" "$out/$name.json"
	fi
	echo "build-plugins: $name ($kind) -> ${out#"$root"/}/$name.wasm"
done
