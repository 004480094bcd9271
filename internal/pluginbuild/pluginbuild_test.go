package pluginbuild

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRustc writes a rustc into a new directory that prints sysroot, with
// the standard libraries of targets in it, and returns its path.
func fakeRustc(t *testing.T, targets ...string) string {
	t.Helper()
	dir := t.TempDir()
	sysroot := filepath.Join(dir, "sysroot")
	for _, target := range targets {
		if err := os.MkdirAll(filepath.Join(sysroot, "lib", "rustlib", target, "lib"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rustc := filepath.Join(dir, "rustc")
	if err := os.WriteFile(rustc, []byte("#!/bin/sh\necho "+sysroot+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return rustc
}

// TestRustToolchain: the target follows from the standard libraries
// rustc has, and each missing piece is ErrToolchain naming what to
// install.
func TestRustToolchain(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		targets []string
		want    string
	}{
		{[]string{"wasm32-wasi", "x86_64-unknown-linux-gnu"}, "wasm32-wasi"},
		{[]string{"wasm32-wasip1"}, "wasm32-wasip1"},
		{[]string{"wasm32-wasi", "wasm32-wasip1"}, "wasm32-wasip1"},
	} {
		if got, err := RustToolchain(ctx, fakeRustc(t, tt.targets...)); err != nil || got != tt.want {
			t.Errorf("%v: %q, %v; want %q", tt.targets, got, err, tt.want)
		}
	}

	_, err := RustToolchain(ctx, fakeRustc(t, "x86_64-unknown-linux-gnu", "wasm32-unknown-unknown"))
	if !errors.Is(err, ErrToolchain) || !strings.Contains(err.Error(), "has no standard library for wasm32-wasi") ||
		!strings.Contains(err.Error(), "apt-get install libstd-rust-dev-wasm32") {
		t.Errorf("no wasm32-wasi standard library: %v", err)
	}
	_, err = RustToolchain(ctx, filepath.Join(t.TempDir(), "rustc"))
	if !errors.Is(err, ErrToolchain) || !strings.Contains(err.Error(), "rustc is not installed (apt-get install rustc libstd-rust-dev-wasm32 lld") {
		t.Errorf("no rustc: %v", err)
	}
	// Debian's rustc links with rust-lld beside it, a link into lld.
	rustc := fakeRustc(t, "wasm32-wasi")
	if err := os.Symlink("lld-14", filepath.Join(filepath.Dir(rustc), "rust-lld")); err != nil {
		t.Fatal(err)
	}
	_, err = RustToolchain(ctx, rustc)
	if !errors.Is(err, ErrToolchain) || !strings.Contains(err.Error(), "apt-get install lld") {
		t.Errorf("rust-lld linking to nothing: %v", err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(rustc), "lld-14"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := RustToolchain(ctx, rustc); err != nil || got != "wasm32-wasi" {
		t.Errorf("with lld: %q, %v", got, err)
	}
}

// TestRustc: $RUSTC wins; else Debian's rustc, which a rustup one
// earlier on PATH must not shadow.
func TestRustc(t *testing.T) {
	t.Setenv("RUSTC", "/opt/rust/bin/rustc")
	if got := Rustc(); got != "/opt/rust/bin/rustc" {
		t.Errorf("with RUSTC: %s", got)
	}
	t.Setenv("RUSTC", "")
	want := "rustc"
	if _, err := os.Stat("/usr/bin/rustc"); err == nil {
		want = "/usr/bin/rustc"
	}
	if got := Rustc(); got != want {
		t.Errorf("without RUSTC: %s, want %s", got, want)
	}
}
