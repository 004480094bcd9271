// Package pluginbuild holds the commands that build plugins from source:
// Go for wasip1 as a library, C with clang and wasi-libc as a reactor,
// AssemblyScript with asc and the kit's abort handler, TypeScript with the
// TypeScript kit's build.mjs, Rust with rustc alone as a wasm32-wasi
// cdylib. plugintest builds test plugins with them; agentic-host plugin
// build builds projects.
package pluginbuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrToolchain is wrapped by errors caused by a missing toolchain.
var ErrToolchain = errors.New("plugin toolchain missing")

// GoCommand is the build of a Go plugin: standard Go for wasip1, a
// reactor (c-shared) so //go:wasmexport functions are callable, outside
// any go.work (the plugin's own go.mod decides its dependencies). flags
// are extra go build flags; a later -buildmode overrides c-shared.
func GoCommand(ctx context.Context, dir, out string, flags ...string) *exec.Cmd {
	args := append([]string{"build", "-buildmode=c-shared", "-trimpath"}, flags...)
	cmd := exec.CommandContext(ctx, "go", append(args, "-o", out, ".")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "CGO_ENABLED=0")
	return cmd
}

// CCommand is the build of a C plugin with clang for wasm32-wasi, as a
// reactor (exports callable after _initialize), with wasi-libc and lld and
// without compiler-rt (Debian ships it in a separate package).
func CCommand(ctx context.Context, dir, sysroot, out string, sources, include, flags []string) *exec.Cmd {
	args := []string{"--target=wasm32-wasi", "--sysroot=" + sysroot, "-O2", "-mexec-model=reactor", "-nodefaultlibs",
		"-Wall", "-Wextra", "-Werror", "-fno-exceptions", "-o", out}
	for _, inc := range include {
		args = append(args, "-I", inc)
	}
	args = append(args, flags...)
	args = append(args, sources...)
	args = append(args, "-lc")
	cmd := exec.CommandContext(ctx, Clang(), args...)
	cmd.Dir = dir
	return cmd
}

// AssemblyScriptCommand is the build of an AssemblyScript plugin with asc.
// Without flags it optimises and replaces the abort handler with the kit's
// (which logs and traps); flags replace those.
func AssemblyScriptCommand(ctx context.Context, dir, nodeModules, entry, out string, flags []string) *exec.Cmd {
	asc := filepath.Join(nodeModules, "node_modules", "assemblyscript", "bin", "asc.js")
	if len(flags) == 0 {
		flags = []string{"-O3", "--noAssert", "--use", "abort=agenticAbort"}
	}
	args := append([]string{asc, entry, "--outFile", out, "--path", filepath.Join(nodeModules, "node_modules")}, flags...)
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Dir = dir
	return cmd
}

// TypeScriptCommand is the build of a TypeScript (or JavaScript) plugin
// with the TypeScript kit's build.mjs in kit (a directory with the kit's
// package.json and node_modules): TypeScript checks the project when a
// tsconfig.json is beside entry, esbuild bundles entry into one script,
// and the script goes into the JavaScript engine's module (plugins'
// JavaScriptSection).
func TypeScriptCommand(ctx context.Context, dir, kit, entry, out string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "node", filepath.Join(kit, "build.mjs"), entry, out)
	cmd.Dir = dir
	return cmd
}

// Clang is the clang to run: $CLANG, else clang.
func Clang() string {
	if c := os.Getenv("CLANG"); c != "" {
		return c
	}
	return "clang"
}

// WASISysroot returns the wasi-libc sysroot: $WASI_SYSROOT, Debian's /usr
// (headers in /usr/include/wasm32-wasi), or /usr/share/wasi-sysroot.
func WASISysroot() (string, error) {
	if s := os.Getenv("WASI_SYSROOT"); s != "" {
		return s, nil
	}
	for _, s := range []string{"/usr", "/usr/share/wasi-sysroot", "/opt/wasi-sdk/share/wasi-sysroot"} {
		if _, err := os.Stat(filepath.Join(s, "lib", "wasm32-wasi", "libc.a")); err == nil {
			return s, nil
		}
	}
	return "", fmt.Errorf("%w: wasi-libc is not installed (apt-get install wasi-libc, or set WASI_SYSROOT)", ErrToolchain)
}

// RustFlags are the flags of a Rust plugin's build, besides its target,
// source and output: a library (cdylib) whose #[no_mangle] exports Extism
// calls, optimised for size, without symbols.
var RustFlags = []string{"--edition", "2021", "--crate-type", "cdylib", "-C", "opt-level=s", "-C", "strip=symbols"}

// RustCommand is the build of a Rust plugin with rustc alone (no cargo, no
// crates): source is the crate root, which declares the kit's module
// (mod agentic), target a wasm32 WASI target ([RustToolchain]). flags are
// extra rustc flags (--cfg, e.g.).
func RustCommand(ctx context.Context, dir, rustc, target, source, out string, flags []string) *exec.Cmd {
	args := append([]string{"--target", target}, RustFlags...)
	args = append(args, flags...)
	args = append(args, "-o", out, source)
	cmd := exec.CommandContext(ctx, rustc, args...)
	cmd.Dir = dir
	return cmd
}

// Rustc is the rustc to run: $RUSTC, else Debian's /usr/bin/rustc when it
// is there (a rustup rustc earlier on PATH may lack the wasm32 standard
// library), else rustc.
func Rustc() string {
	if r := os.Getenv("RUSTC"); r != "" {
		return r
	}
	if _, err := os.Stat("/usr/bin/rustc"); err == nil {
		return "/usr/bin/rustc"
	}
	return "rustc"
}

// rustInstall says what installs a Rust toolchain for plugins.
const rustInstall = "apt-get install rustc libstd-rust-dev-wasm32 lld, or scripts/plugin-toolchains.sh"

// RustToolchain checks that rustc can build a plugin and returns the
// wasm32 WASI target whose standard library it has: wasm32-wasip1 (the
// name since rustc 1.78) or wasm32-wasi (Debian's libstd-rust-dev-wasm32,
// rustc 1.63 in Debian 12). Errors wrap [ErrToolchain] and name what to
// install: rustc, the standard library for wasm32, or the linker Debian's
// rustc runs (rust-lld, from lld).
func RustToolchain(ctx context.Context, rustc string) (target string, err error) {
	path, err := exec.LookPath(rustc)
	if err != nil {
		return "", fmt.Errorf("%w: %s is not installed (%s)", ErrToolchain, rustc, rustInstall)
	}
	out, err := exec.CommandContext(ctx, path, "--print", "sysroot").Output()
	if err != nil {
		return "", fmt.Errorf("%w: %s --print sysroot: %v (%s)", ErrToolchain, path, err, rustInstall)
	}
	sysroot := strings.TrimSpace(string(out))
	for _, t := range []string{"wasm32-wasip1", "wasm32-wasi"} {
		if _, err := os.Stat(filepath.Join(sysroot, "lib", "rustlib", t, "lib")); err == nil {
			target = t
			break
		}
	}
	if target == "" {
		return "", fmt.Errorf("%w: %s has no standard library for wasm32-wasi in %s (apt-get install libstd-rust-dev-wasm32; with rustup: rustup target add wasm32-wasip1)", ErrToolchain, path, sysroot)
	}
	// Debian's rustc links wasm with /usr/bin/rust-lld, a link to lld's
	// binary, which comes with lld (a recommended package only).
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		lld := filepath.Join(filepath.Dir(resolved), "rust-lld")
		if _, err := os.Lstat(lld); err == nil {
			if _, err := os.Stat(lld); err != nil {
				return "", fmt.Errorf("%w: %s links to a linker that is not installed (apt-get install lld)", ErrToolchain, lld)
			}
		}
	}
	return target, nil
}
