// Package plugintest helps test plugins and the code that hosts them: it
// builds plugins from source with the real toolchains (Go for wasip1,
// Debian clang + wasi-libc, AssemblyScript, the TypeScript kit, Debian
// rustc + its wasm32 standard library), caches the built modules by a
// hash of their sources, and loads them into a runtime whose compilation
// cache lives on disk, so repeated test runs are fast.
//
// Builds are cached under [CacheDir]. A missing toolchain skips the test
// (with what to install), unless AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS=1, which
// fails it instead.
package plugintest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/pluginbuild"
	"github.com/agentichost/agentic/plugins"
)

// CacheDir is where built modules and the on-disk compilation cache are
// kept: $AGENTIC_PLUGIN_CACHE, else the user cache directory's
// agentic-host/plugintest, else one under the temporary directory.
func CacheDir() string {
	if d := os.Getenv("AGENTIC_PLUGIN_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "agentic-host", "plugintest")
	}
	return filepath.Join(os.TempDir(), "agentic-host-plugintest")
}

// ErrToolchain is wrapped by build errors caused by a missing toolchain.
var ErrToolchain = pluginbuild.ErrToolchain

// Build is one build of a plugin.
type Build struct {
	// Kind is "go", "c", "assemblyscript", "ts" (TypeScript or
	// JavaScript, built with the TypeScript kit) or "rust".
	Kind string
	// Dir is the plugin's source directory: a Go module's main package,
	// the directory of the C sources, of the AssemblyScript entry, or of
	// the Rust crate root.
	Dir string
	// Sources are, for C, the .c files (relative to Dir or absolute); for
	// AssemblyScript, the entry file; for Rust, the crate root. Unused for
	// Go.
	Sources []string
	// Flags are extra compiler flags (-D for C, e.g.; go build flags for
	// Go; --cfg for Rust). For AssemblyScript they replace the kit's
	// optimisation and abort flags (a plugin written without the kit
	// builds with its own).
	Flags []string
	// Include are directories of headers (C) or of sources the build reads
	// (every kind: the Rust kit's, which a crate names with #[path]): their
	// contents are part of the cache key. Relative paths are relative to
	// Dir.
	Include []string
	// NodeModules is the directory holding the node_modules with
	// assemblyscript (AssemblyScript), or the TypeScript kit's directory
	// (ts: its build.mjs and node_modules); relative to Dir. If
	// node_modules is missing, npm ci (or npm install) runs there first.
	NodeModules string
}

var (
	buildMu   sync.Mutex
	buildOnce = map[string]*onceResult{}
)

type onceResult struct {
	once sync.Once
	wasm []byte
	err  error
}

// Do builds b (or returns the cached module) and returns the .wasm bytes.
// Relative Include entries are relative to Dir, like Sources.
func (b Build) Do(ctx context.Context) ([]byte, error) {
	dir, err := filepath.Abs(b.Dir)
	if err != nil {
		return nil, err
	}
	b.Dir = dir
	inc := make([]string, len(b.Include))
	for i, d := range b.Include {
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		inc[i] = filepath.Clean(d)
	}
	b.Include = inc
	if b.NodeModules != "" && !filepath.IsAbs(b.NodeModules) {
		b.NodeModules = filepath.Join(dir, b.NodeModules)
	}
	key, err := b.key()
	if err != nil {
		return nil, err
	}
	buildMu.Lock()
	r := buildOnce[key]
	if r == nil {
		r = &onceResult{}
		buildOnce[key] = r
	}
	buildMu.Unlock()
	r.once.Do(func() { r.wasm, r.err = b.build(ctx, key) })
	return r.wasm, r.err
}

// MustBuild builds b for a test: it skips the test when a toolchain is
// missing (fails it if AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS=1) and fails it on
// any other error.
func MustBuild(tb testing.TB, b Build) []byte {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wasm, err := b.Do(ctx)
	if errors.Is(err, ErrToolchain) {
		if os.Getenv("AGENTIC_REQUIRE_PLUGIN_TOOLCHAINS") == "1" {
			tb.Fatal(err)
		}
		tb.Skip(err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return wasm
}

// GoPlugin builds the Go plugin in dir for a test (see [MustBuild]).
func GoPlugin(tb testing.TB, dir string) []byte {
	tb.Helper()
	return MustBuild(tb, Build{Kind: "go", Dir: dir})
}

// CPlugin builds C sources in dir for a test; include lists header
// directories (the C kit's, e.g.), flags extra clang flags.
func CPlugin(tb testing.TB, dir string, sources, include, flags []string) []byte {
	tb.Helper()
	return MustBuild(tb, Build{Kind: "c", Dir: dir, Sources: sources, Include: include, Flags: flags})
}

// RustPlugin builds the Rust crate root source of dir for a test with
// rustc ([pluginbuild.Rustc]); include lists directories of sources it
// reads (the kit's, e.g.), flags extra rustc flags.
func RustPlugin(tb testing.TB, dir, source string, include, flags []string) []byte {
	tb.Helper()
	return MustBuild(tb, Build{Kind: "rust", Dir: dir, Sources: []string{source}, Include: include, Flags: flags})
}

// AssemblyScriptPlugin builds the AssemblyScript entry file of dir for a
// test with the assemblyscript of nodeModules (a directory with
// package.json; relative to dir); include lists directories of sources it
// imports (the kit's, e.g.).
func AssemblyScriptPlugin(tb testing.TB, dir, entry, nodeModules string, include []string) []byte {
	tb.Helper()
	return MustBuild(tb, Build{Kind: "assemblyscript", Dir: dir, Sources: []string{entry}, Include: include, NodeModules: nodeModules})
}

// TypeScriptPlugin builds the TypeScript or JavaScript entry file of dir
// for a test with the TypeScript kit in kit (relative to dir; its
// build.mjs, sources and node_modules are the build's).
func TypeScriptPlugin(tb testing.TB, dir, entry, kit string) []byte {
	tb.Helper()
	return MustBuild(tb, Build{Kind: "ts", Dir: dir, Sources: []string{entry}, Include: []string{kit}, NodeModules: kit})
}

// key hashes everything the build depends on.
func (b Build) key() (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "kind=%s\nflags=%q\nsources=%q\n", b.Kind, b.Flags, b.Sources)
	dirs := append([]string{b.Dir}, b.Include...)
	if b.Kind == "go" {
		dirs = append(dirs, goReplaceDirs(b.Dir)...)
	}
	for _, d := range dirs {
		if err := hashDir(h, d); err != nil {
			return "", err
		}
	}
	fmt.Fprintf(h, "toolchain=%s\n", toolchainVersion(b.Kind, b.NodeModules))
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

var toolchainVersions sync.Map

func toolchainVersion(kind, nodeModules string) string {
	if v, ok := toolchainVersions.Load(kind + nodeModules); ok {
		return v.(string)
	}
	var out []byte
	switch kind {
	case "go":
		out, _ = exec.Command("go", "version").Output()
	case "c":
		out, _ = exec.Command(clang(), "--version").Output()
	case "assemblyscript":
		out, _ = os.ReadFile(filepath.Join(nodeModules, "node_modules", "assemblyscript", "package.json"))
	case "ts":
		out, _ = os.ReadFile(filepath.Join(nodeModules, "package-lock.json"))
		b, _ := os.ReadFile(filepath.Join(nodeModules, "build.mjs"))
		out = append(out, b...)
	case "rust":
		out, _ = exec.Command(pluginbuild.Rustc(), "-vV").Output()
	}
	v := fmt.Sprintf("%x", sha256.Sum256(out))
	toolchainVersions.Store(kind+nodeModules, v)
	return v
}

// hashDir hashes the relevant files under dir: names and contents, in a
// stable order, skipping built modules and dependencies' trees.
func hashDir(h interface{ Write([]byte) (int, error) }, dir string) error {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", ".git", "testdata", "build":
				if path != dir {
					return filepath.SkipDir
				}
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".mod", ".sum", ".c", ".h", ".ts", ".json", ".rs":
			files = append(files, path)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) && strings.Contains(filepath.ToSlash(dir), "/node_modules/") {
		return fmt.Errorf("plugintest: %s is not installed (make test installs the kits' npm packages: scripts/plugin-toolchains.sh): %w", dir, err)
	}
	if err != nil {
		return fmt.Errorf("plugintest: hashing %s: %w", dir, err)
	}
	sort.Strings(files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, f)
		fmt.Fprintf(h, "file=%s len=%d\n", filepath.ToSlash(rel), len(data))
		h.Write(data)
	}
	return nil
}

// goReplaceDirs returns the local directories go.mod replaces modules
// with: their sources are part of the build.
func goReplaceDirs(dir string) []string {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		_, target, ok := strings.Cut(sc.Text(), "=>")
		if !ok {
			continue
		}
		fields := strings.Fields(target)
		if len(fields) == 0 || !(strings.HasPrefix(fields[0], ".") || strings.HasPrefix(fields[0], "/")) {
			continue
		}
		p := fields[0]
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		dirs = append(dirs, p)
	}
	return dirs
}

func (b Build) build(ctx context.Context, key string) ([]byte, error) {
	cache := filepath.Join(CacheDir(), "wasm")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	out := filepath.Join(cache, fmt.Sprintf("%s-%s-%s.wasm", b.Kind, filepath.Base(b.Dir), key))
	if data, err := os.ReadFile(out); err == nil && len(data) > 0 {
		return data, nil
	}
	tmp, err := os.CreateTemp(cache, ".build-*.wasm")
	if err != nil {
		return nil, err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	built := tmp.Name()
	var cmd *exec.Cmd
	switch b.Kind {
	case "go":
		if _, err := exec.LookPath("go"); err != nil {
			return nil, fmt.Errorf("%w: go is not on PATH", ErrToolchain)
		}
		cmd = GoCommand(ctx, b.Dir, tmp.Name(), b.Flags...)
	case "c":
		c := clang()
		if _, err := exec.LookPath(c); err != nil {
			return nil, fmt.Errorf("%w: clang is not installed (apt-get install clang lld wasi-libc, or scripts/plugin-toolchains.sh)", ErrToolchain)
		}
		sysroot, err := WASISysroot()
		if err != nil {
			return nil, err
		}
		cmd = CCommand(ctx, b.Dir, sysroot, tmp.Name(), b.Sources, b.Include, b.Flags)
	case "assemblyscript":
		if err := ensureNodeModules(ctx, b.NodeModules); err != nil {
			return nil, err
		}
		cmd = AssemblyScriptCommand(ctx, b.Dir, b.NodeModules, b.Sources[0], tmp.Name(), b.Flags)
	case "ts":
		if _, err := exec.LookPath("node"); err != nil {
			return nil, fmt.Errorf("%w: node is not installed (apt-get install nodejs npm, or scripts/plugin-toolchains.sh)", ErrToolchain)
		}
		if err := ensureNodeModules(ctx, b.NodeModules); err != nil {
			return nil, err
		}
		cmd = pluginbuild.TypeScriptCommand(ctx, b.Dir, b.NodeModules, b.Sources[0], tmp.Name())
	case "rust":
		rustc := pluginbuild.Rustc()
		target, err := pluginbuild.RustToolchain(ctx, rustc)
		if err != nil {
			return nil, err
		}
		// rustc writes its intermediate files beside its output: a
		// directory of its own keeps concurrent builds apart.
		tmpDir, err := os.MkdirTemp(cache, ".rust-*")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmpDir)
		built = filepath.Join(tmpDir, "plugin.wasm")
		cmd = pluginbuild.RustCommand(ctx, b.Dir, rustc, target, b.Sources[0], built, b.Flags)
	default:
		return nil, fmt.Errorf("plugintest: unknown kind %q", b.Kind)
	}
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("plugintest: building %s (%s): %v\n%s", b.Dir, strings.Join(cmd.Args, " "), err, stderr.String())
	}
	data, err := os.ReadFile(built)
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("plugintest: building %s produced an empty module", b.Dir)
	}
	if err := os.Rename(built, out); err != nil {
		return nil, err
	}
	return data, nil
}

// GoCommand is the build of a Go plugin: standard Go for wasip1, a
// reactor (c-shared) so //go:wasmexport functions are callable, outside
// any go.work (the plugin's own go.mod decides its dependencies). flags
// are extra go build flags; a later -buildmode overrides c-shared.
func GoCommand(ctx context.Context, dir, out string, flags ...string) *exec.Cmd {
	return pluginbuild.GoCommand(ctx, dir, out, flags...)
}

// CCommand is the build of a C plugin with clang for wasm32-wasi, as a
// reactor (exports callable after _initialize), with wasi-libc and lld and
// without compiler-rt (Debian ships it in a separate package).
func CCommand(ctx context.Context, dir, sysroot, out string, sources, include, flags []string) *exec.Cmd {
	return pluginbuild.CCommand(ctx, dir, sysroot, out, sources, include, flags)
}

// AssemblyScriptCommand is the build of an AssemblyScript plugin with asc.
// Without flags it optimises and replaces the abort handler with the kit's
// (which logs and traps); flags replace those.
func AssemblyScriptCommand(ctx context.Context, dir, nodeModules, entry, out string, flags []string) *exec.Cmd {
	return pluginbuild.AssemblyScriptCommand(ctx, dir, nodeModules, entry, out, flags)
}

func clang() string { return pluginbuild.Clang() }

// WASISysroot returns the wasi-libc sysroot: $WASI_SYSROOT, Debian's /usr
// (headers in /usr/include/wasm32-wasi), or /usr/share/wasi-sysroot.
func WASISysroot() (string, error) { return pluginbuild.WASISysroot() }

var npmMu sync.Mutex

func ensureNodeModules(ctx context.Context, dir string) error {
	if dir == "" {
		return errors.New("plugintest: AssemblyScript and TypeScript builds need Build.NodeModules")
	}
	npmMu.Lock()
	defer npmMu.Unlock()
	for _, marker := range []string{"assemblyscript/bin/asc.js", "quickjs-wasi/quickjs.wasm"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", filepath.FromSlash(marker))); err == nil {
			return nil
		}
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return fmt.Errorf("%w: npm is not installed (needed for AssemblyScript and TypeScript)", ErrToolchain)
	}
	args := []string{"ci", "--no-audit", "--no-fund"}
	if _, err := os.Stat(filepath.Join(dir, "package-lock.json")); err != nil {
		args[0] = "install"
	}
	cmd := exec.CommandContext(ctx, "npm", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: npm %s in %s: %v\n%s", ErrToolchain, args[0], dir, err, out)
	}
	return nil
}

// Runtime returns a plugins.Runtime for a test, its compilation cache on
// disk under CacheDir (shared by test runs), closed when the test ends.
func Runtime(tb testing.TB, opts plugins.Options) *plugins.Runtime {
	tb.Helper()
	if opts.CacheDir == "" {
		opts.CacheDir = filepath.Join(CacheDir(), "wazero")
	}
	rt, err := plugins.NewRuntime(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

// Load loads wasm into rt for a test; the module closes when the test ends.
func Load(tb testing.TB, rt *plugins.Runtime, src plugins.Source) *plugins.Module {
	tb.Helper()
	m, err := rt.Load(context.Background(), src)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}
