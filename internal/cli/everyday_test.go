//go:build unix

package cli_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/pluginbuild"
)

// TestFlagsAnywhere: flags after the message are flags, never text; a
// message word that looks like a flag is refused with a hint, or sent
// after "--".
func TestFlagsAnywhere(t *testing.T) {
	store := "file:" + t.TempDir()
	code, out, errOut := run(t, "", "chat", "--storage", store, "--session", "f", "say hi", "--offline")
	if code != 0 || strings.Contains(out, "--offline") {
		t.Fatalf("flags after the message: exit %d\n%s\n%s", code, out, errOut)
	}
	tr := transcriptOf(t, store, "f")
	if tr.Items[0].Text != "say hi" {
		t.Fatalf("the message sent was %q", tr.Items[0].Text)
	}
	code, _, errOut = run(t, "", "chat", "--offline", "--storage", store, "--session", "f", "it", "is", "-5")
	if code != 2 || !strings.Contains(errOut, `goes after "--"`) {
		t.Fatalf("a flag-looking word: exit %d, %q", code, errOut)
	}
	code, out, errOut = run(t, "", "chat", "--offline", "--storage", store, "--session", "f", "--", "it", "is", "-5")
	if code != 0 {
		t.Fatalf("after --: exit %d\n%s\n%s", code, out, errOut)
	}
	if tr := transcriptOf(t, store, "f"); tr.Items[len(tr.Items)-2].Text != "it is -5" {
		t.Fatalf("after --, the message sent was %q", tr.Items[len(tr.Items)-2].Text)
	}
}

// TestEverydayCLI: version, help on stdout, clear errors for the mistakes
// a new user makes, and the usage line.
func TestEverydayCLI(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, out, _ := run(t, "", args...)
		if code != 0 || !strings.HasPrefix(out, "agentic-host ") || !strings.Contains(out, "go1.") {
			t.Errorf("%v: exit %d, %q", args, code, out)
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"chat", "-h"}, {"task", "--help"}, {"transcript", "-h"}, {"migrate", "-h"}, {"plugin", "list", "-h"}} {
		code, out, errOut := run(t, "", args...)
		if code != 0 || !strings.Contains(out, "Usage") || errOut != "" {
			t.Errorf("%v: exit %d, stdout %d bytes, stderr %q; want the help on stdout", args, code, len(out), errOut)
		}
	}
	_, out, _ := run(t, "", "--help")
	for _, scheme := range []string{"memory:", "file:DIR", "fsync=1", "redis://", "rediss://", "redis+cluster://"} {
		if !strings.Contains(out, scheme) {
			t.Errorf("the help does not name the storage scheme %s", scheme)
		}
	}
	_, out, _ = run(t, "", "task", "-h")
	if !strings.Contains(out, "a new session task-<id>") || strings.Contains(out, `(default "cli")`) {
		t.Errorf("task -h does not show its session default:\n%s", out)
	}

	store := "file:" + t.TempDir()
	code, _, errOut := run(t, "", "transcript", "--storage", store, "nope")
	if code != 1 || !strings.Contains(errOut, "no session nope in "+store) {
		t.Errorf("transcript of a missing session: exit %d, %q", code, errOut)
	}
	code, _, errOut = run(t, "", "chat", "--offline", "--storage", "memory:", "hi")
	if code != 0 || !strings.Contains(errOut, "keeps nothing after this command") {
		t.Errorf("memory: one-shot: exit %d, %q", code, errOut)
	}
	code, _, errOut = run(t, "", "chat", "--storage", "memory:", "--base-url", "127.0.0.1:8089", "hi")
	if code != 2 || !strings.Contains(errOut, "did you mean http://127.0.0.1:8089/v1") {
		t.Errorf("a base URL without scheme: exit %d, %q", code, errOut)
	}
	code, _, errOut = run(t, "", "chat", "--storage", "memory:", "hi")
	if code != 2 || !strings.Contains(errOut, "OPENROUTER_API_KEY is not set; use --offline") {
		t.Errorf("no key: exit %d, %q", code, errOut)
	}
	file := filepath.Join(t.TempDir(), "get_account.wasm")
	os.WriteFile(file, []byte("\x00asm"), 0o644)
	code, _, errOut = run(t, "", "chat", "--offline", "--storage", "memory:", "--plugins", file, "hi")
	if code != 2 || !strings.Contains(errOut, "not a directory") {
		t.Errorf("--plugins FILE: exit %d, %q", code, errOut)
	}

	code, out, errOut = run(t, "", "chat", "--offline", "--storage", store, "--session", "u", "--usage", "hi")
	if code != 0 || !strings.Contains(errOut, "[usage: 1 runs,") || !strings.Contains(errOut, "cost $") {
		t.Errorf("--usage: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = run(t, "/help\n/usage\nhello\n/usage\n/nope\n", "chat", "--offline", "--storage", store, "--session", "u")
	if code != 0 {
		t.Errorf("interactive: exit %d\n%s", code, errOut)
	}
	for _, want := range []string{"/usage   tokens and cost", "[usage: 1 runs,", "[usage: 2 runs,", "unknown command /nope"} {
		if !strings.Contains(out, want) {
			t.Errorf("interactive: no %q in\n%s", want, out)
		}
	}
}

// TestPluginNewBuildCall: from nothing to a working tool in each
// language, outside this repository: plugin new writes a project, plugin
// build builds it with the language's own toolchain and registry (the Go
// module proxy, npm) and nothing of this checkout, plugin call answers
// with its test input, and a model calls it through chat; then serve
// offers the five tools at once and its model calls each.
func TestPluginNewBuildCall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds five plugins")
	}
	served := filepath.Join(t.TempDir(), "plugins")
	os.MkdirAll(filepath.Join(served, "acme"), 0o755)
	var built []string
	for _, lang := range []string{"go", "ts", "assemblyscript", "c", "rust"} {
		t.Run(lang, func(t *testing.T) {
			requireToolchain(t, lang)
			name := "greet_" + lang
			dir := filepath.Join(t.TempDir(), name)
			code, out, errOut := run(t, "", "plugin", "new", "--lang", lang, name, dir)
			if code != 0 || !strings.Contains(out, "plugin build "+dir) {
				t.Fatalf("plugin new: exit %d\n%s\n%s", code, out, errOut)
			}
			for _, f := range []string{"README.md", "Makefile", "input.json"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("the project has no %s", f)
				}
			}
			code, out, errOut = run(t, "", "plugin", "build", dir)
			wasm := filepath.Join(dir, name+".wasm")
			if code != 0 || strings.TrimSpace(out) != wasm {
				t.Fatalf("plugin build: exit %d\n%s\n%s", code, out, errOut)
			}
			input, _ := os.ReadFile(filepath.Join(dir, "input.json"))
			code, out, errOut = run(t, "", "plugin", "call", wasm, name, string(input))
			if code != 0 || strings.TrimSpace(out) != "Hello, Ada!" {
				t.Fatalf("plugin call: exit %d, %q\n%s", code, out, errOut)
			}
			only := t.TempDir()
			b, _ := os.ReadFile(wasm)
			os.WriteFile(filepath.Join(only, name+".wasm"), b, 0o644)
			// (The binary, not this race-instrumented process: it compiles
			// the module again.)
			code, out, errOut = runBin(t, needBinary(t), "chat", "--offline", "--storage", "memory:", "--plugins", only, "Please "+name+" name=Ada")
			if code != 0 || !strings.Contains(out, "Hello, Ada!") {
				t.Fatalf("chat: exit %d\n%s\n%s", code, out, errOut)
			}
			os.WriteFile(filepath.Join(served, "acme", name+".wasm"), b, 0o644)
			built = append(built, name)
		})
	}
	if len(built) > 0 {
		model, err := fakemodel.Start(fakemodel.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer model.Close()
		s := startServe(t, "serve", needBinary(t), writeServeConfig(t, "file:"+t.TempDir(), model.URL(), "plugins_dir: "+served+"\n"))
		for _, name := range built {
			s.post(name, "Please "+name+" name=Ada")
			s.waitState(name, "completed", 2*time.Minute)
			if body := s.must("GET", "/v1/sessions/"+name+"/transcript", "", http.StatusOK, nil); !strings.Contains(body, "Hello, Ada!") {
				t.Errorf("serve: %s's transcript has no greeting: %s", name, body)
			}
		}
	}
	code, _, errOut := run(t, "", "plugin", "new", "--lang", "cobol", "x", t.TempDir())
	if code != 2 || !strings.Contains(errOut, "want one of go, ts, assemblyscript, c, rust") {
		t.Errorf("an unknown language: exit %d, %q", code, errOut)
	}
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "keep.txt"), []byte("x"), 0o644)
	if code, _, errOut := run(t, "", "plugin", "new", "x", full); code != 1 || !strings.Contains(errOut, "not empty") {
		t.Errorf("a directory that is not empty: exit %d, %q", code, errOut)
	}
	if code, _, errOut := run(t, "", "plugin", "build", t.TempDir()); code != 2 || !strings.Contains(errOut, "not a plugin project") {
		t.Errorf("building a directory that is no project: exit %d, %q", code, errOut)
	}
	// A rustc without the standard library for wasm32: the error names
	// the package that has it.
	rust := filepath.Join(t.TempDir(), "greet")
	if code, _, errOut := run(t, "", "plugin", "new", "--lang", "rust", "greet", rust); code != 0 {
		t.Fatalf("plugin new --lang rust: exit %d, %q", code, errOut)
	}
	bin := t.TempDir()
	os.WriteFile(filepath.Join(bin, "rustc"), []byte("#!/bin/sh\necho "+bin+"\n"), 0o755)
	t.Setenv("RUSTC", filepath.Join(bin, "rustc"))
	if code, _, errOut := run(t, "", "plugin", "build", rust); code != 1 || !strings.Contains(errOut, "has no standard library for wasm32-wasi") ||
		!strings.Contains(errOut, "apt-get install libstd-rust-dev-wasm32") {
		t.Errorf("a rustc without the wasm32 standard library: exit %d, %q", code, errOut)
	}
	t.Setenv("RUSTC", filepath.Join(bin, "nothing"))
	if code, _, errOut := run(t, "", "plugin", "build", rust); code != 1 || !strings.Contains(errOut, "is not installed (apt-get install rustc libstd-rust-dev-wasm32 lld") {
		t.Errorf("no rustc: exit %d, %q", code, errOut)
	}
}

// requireToolchain skips a test when the toolchain of lang is missing,
// unless AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS=1.
func requireToolchain(t *testing.T, lang string) {
	t.Helper()
	if lang == "rust" {
		if _, err := pluginbuild.RustToolchain(context.Background(), pluginbuild.Rustc()); err != nil {
			if os.Getenv("AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS") == "1" {
				t.Fatal(err)
			}
			t.Skip(err)
		}
		return
	}
	bin := map[string]string{"go": "go", "ts": "npm", "assemblyscript": "npm", "c": "clang"}[lang]
	if _, err := exec.LookPath(bin); err != nil {
		if os.Getenv("AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS") == "1" {
			t.Fatalf("%s is not installed", bin)
		}
		t.Skipf("%s is not installed", bin)
	}
}

// TestEndpointThatDoesNotResolve: a base URL whose host does not resolve
// is a configuration error — chat fails at once, naming the host, instead
// of retrying — and a refused connection names the URL.
func TestEndpointThatDoesNotResolve(t *testing.T) {
	bin := needBinary(t)
	code, out, errOut := runBinEnv(t, bin, []string{"OPENROUTER_API_KEY=sk-test"},
		"chat", "--storage", "memory:", "--base-url", "https://no-such-host.invalid/v1", "hello")
	if code != 1 || !strings.Contains(errOut, "does not resolve (no-such-host.invalid)") || strings.Contains(errOut, "gave up after") {
		t.Errorf("exit %d\nstdout %q\nstderr %q\nwant a failure at once naming the host", code, out, errOut)
	}
}
