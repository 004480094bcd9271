package plugins_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// Loading a directory: its modules load side by side, so that modules that
// use up their deadlines do not add up, and what is served and refused does
// not depend on which finished first.

// hostileDirectory is a directory's worth of modules that each use up a
// deadline of limits — two compile bombs (CompileTimeout), two start
// functions that never return (CallTimeout) — and get_account, which loads.
// sum is what loading them one after the other takes at least.
func hostileDirectory(t *testing.T, limits plugins.Limits) (files map[string][]byte, sum time.Duration) {
	files = map[string][]byte{
		"bomb1.wasm":       nestedBlocks(100_000),
		"bomb2.wasm":       nestedBlocks(100_001),
		"loop1.wasm":       startLoop(),
		"loop2.wasm":       startLoop(),
		"get_account.wasm": getAccountWasm(t),
	}
	return files, 2*limits.CompileTimeout + 2*limits.CallTimeout
}

var hostileRefused = []string{"bomb1", "bomb2", "loop1", "loop2"}

// refusedNames returns the names of the tenant's refused modules.
func refusedNames(reg *plugins.Registry, tenant string) []string {
	var names []string
	for _, r := range reg.Refusals(tenant) {
		names = append(names, r.Name)
	}
	return names
}

// TestHostileDirectoryLoadsTogether: a directory of modules that each run
// to a deadline loads in about the time of its slowest one, not the sum
// of them all — at Watch (the first scan) and when they are dropped into a
// watched directory (one batch) — each refused with its reason, and the
// healthy module among them served.
func TestHostileDirectoryLoadsTogether(t *testing.T) {
	// Fuel without bound in practice: a start function that never returns
	// is stopped by its deadline, not (on a fast machine without -race,
	// in about 4 s) by the default fuel.
	limits := plugins.Limits{CompileTimeout: 5 * time.Second, CallTimeout: 5 * time.Second, Fuel: 1 << 60}
	files, sum := hostileDirectory(t, limits)
	rt, _ := newRuntime(t)
	// The bound is measured, not fixed: what a compile bomb and a start
	// function that never returns take to be refused, each alone, on this
	// machine now. Side by side the five modules take about their sum at
	// most (a start function may wait for a compiler process behind the
	// bombs); one after the other they would take twice it and more. A
	// fixed bound (two thirds of the deadlines' sum) failed on a loaded
	// machine, where the directory took 15.7 s.
	alone := func(name string) time.Duration {
		reg := plugins.NewRegistry(rt, plugins.RegistryOptions{Limits: func(string) plugins.Limits { return limits }})
		defer reg.Close(context.Background())
		dir := t.TempDir()
		writeAtomic(t, filepath.Join(dir, name+".wasm"), files[name+".wasm"])
		start := time.Now()
		if _, err := reg.Watch(context.Background(), "acme", dir, plugins.WatchOptions{}); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if got := refusedNames(reg, "acme"); !slices.Equal(got, []string{name}) {
			t.Fatalf("%s alone: refused %v, want it", name, got)
		}
		return took
	}
	// get_account's own compile is not what is measured: compiled once
	// beforehand (with room), its load in the directory takes no compiler
	// process, which a loaded machine under -race could keep past the
	// bombs' 5s CompileTimeout (the directory then refused it too).
	warm := plugins.NewRegistry(rt, plugins.RegistryOptions{Limits: func(string) plugins.Limits {
		l := limits
		l.CompileTimeout, l.CallTimeout = 5*time.Minute, 5*time.Minute
		return l
	}})
	if _, err := warm.Load(context.Background(), "acme", plugins.Source{Name: "get_account", Wasm: files["get_account.wasm"]}); err != nil {
		t.Fatal(err)
	}
	warm.Close(context.Background())
	two := alone("bomb1") + alone("loop1")
	bound := two * 3 / 2
	check := func(t *testing.T, reg *plugins.Registry, tenant string, took time.Duration) {
		t.Helper()
		t.Logf("loaded in %s (one after the other: over %s; a bomb and a start function alone: %s)", took.Round(time.Millisecond), sum, two.Round(time.Millisecond))
		if took > bound {
			t.Errorf("the directory took %s to load, over %s (1.5 times a bomb's and a start function's %s alone): its modules' deadlines add up (%s)", took, bound, two, sum)
		}
		if got := refusedNames(reg, tenant); !slices.Equal(got, hostileRefused) {
			t.Errorf("refused %v, want %v", got, hostileRefused)
		}
		for _, r := range reg.Refusals(tenant) {
			// A compile bomb is stopped by whichever bound it reaches
			// first: its 5s, or (metered, it is bigger) MaxCompileBytes,
			// which a fast machine reaches in about 4s.
			want := []string{"did not finish compiling within 5s", "needed more than 1024 MiB (Limits.MaxCompileBytes)"}
			if strings.HasPrefix(r.Name, "loop") {
				want = []string{"instantiating: timed out after 5s"}
			}
			if !slices.ContainsFunc(want, func(w string) bool { return strings.Contains(r.Err.Error(), w) }) {
				t.Errorf("%s refused with %v, want one of %q", r.Name, r.Err, want)
			}
		}
		tool, ok := reg.Tool(tenant, "get_account")
		if !ok {
			t.Fatal("get_account is not served")
		}
		if res, err := tool.Call(context.Background(), hostCall("get_account", `{"account_id":"42"}`)); err != nil || !strings.Contains(res.Output, `"account_id":"42"`) {
			t.Fatalf("get_account: %q, %v", res.Output, err)
		}
	}

	t.Run("scan", func(t *testing.T) {
		reg := plugins.NewRegistry(rt, plugins.RegistryOptions{Limits: func(string) plugins.Limits { return limits }})
		t.Cleanup(func() { _ = reg.Close(context.Background()) })
		dir := t.TempDir()
		for name, b := range files {
			writeAtomic(t, filepath.Join(dir, name), b)
		}
		start := time.Now()
		w := within(t, 3*time.Minute, "Watch", func() *plugins.DirWatcher {
			w, err := reg.Watch(context.Background(), "acme", dir, plugins.WatchOptions{})
			if err != nil {
				t.Error(err)
			}
			return w
		})
		if w == nil {
			t.FailNow()
		}
		check(t, reg, "acme", time.Since(start))
	})

	t.Run("rescan", func(t *testing.T) {
		reg := plugins.NewRegistry(rt, plugins.RegistryOptions{Limits: func(string) plugins.Limits { return limits }})
		t.Cleanup(func() { _ = reg.Close(context.Background()) })
		dir := t.TempDir()
		if _, err := reg.Watch(context.Background(), "acme", dir, plugins.WatchOptions{Debounce: 200 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		for name, b := range files {
			writeAtomic(t, filepath.Join(dir, name), b)
		}
		start := time.Now()
		took := within(t, 3*time.Minute, "waiting for the directory to load", func() time.Duration {
			for {
				_, ok := reg.Tool("acme", "get_account")
				if ok && len(reg.Refusals("acme")) == len(hostileRefused) {
					return time.Since(start)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
		check(t, reg, "acme", took)
	})
}

// lingering is bombs.c with a start function that spins for d before it
// returns: a module that loads, slowly.
func lingering(t *testing.T, d time.Duration) []byte {
	const lingerUnset = 0x11A6E511A6E511A6 // bombs.c's linger_ns as built
	return patchU64(t, withStart(t, bombsWasm(t), "linger"), lingerUnset, uint64(d.Nanoseconds()))
}

// TestDirectoryLoadOrder: modules that load side by side apply in the
// order of their names, whichever finishes first: the one a tenant cap
// refuses, and the changes reported, are those of loading them one by one.
// aaa (8 tools) loads slowly, zzz (3 tools) at once; under a cap of 10
// tools, zzz is refused, not aaa.
func TestDirectoryLoadOrder(t *testing.T) {
	rt, _ := newRuntime(t)
	var mu sync.Mutex
	var changes []string
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
		Limits: func(string) plugins.Limits { return plugins.Limits{TenantTools: 10, CallTimeout: time.Minute} },
		OnChange: func(c plugins.Change) {
			mu.Lock()
			changes = append(changes, c.Name+" "+string(c.Kind))
			mu.Unlock()
		},
	})
	t.Cleanup(func() { _ = reg.Close(context.Background()) })
	dir := t.TempDir()
	writeAtomic(t, filepath.Join(dir, "aaa.wasm"), lingering(t, time.Second))
	writeAtomic(t, filepath.Join(dir, "zzz.wasm"), versionWasm(t, "Z"))
	if _, err := reg.Watch(context.Background(), "acme", dir, plugins.WatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := reg.Module("acme", "aaa"); !ok {
		t.Fatalf("aaa was not loaded; refusals %v", reg.Refusals("acme"))
	}
	refusals := reg.Refusals("acme")
	if len(refusals) != 1 || refusals[0].Name != "zzz" || !errors.Is(refusals[0].Err, plugins.ErrTenantLimit) {
		t.Fatalf("refusals %v, want zzz refused for the tenant's tools cap", refusals)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"aaa loaded", "zzz rejected"}; !slices.Equal(changes, want) {
		t.Fatalf("changes %q, want %q", changes, want)
	}
}

// TestHostileDirectoryHugeFiles: a module file over MaxModuleBytes, one
// that never ends (/dev/zero) and a sidecar that never ends are refused
// once the limit's worth of them was read, with the bound that refused
// them, while the directory's healthy module loads; LoadFile reads no
// further than the tenant's limit either.
func TestHostileDirectoryHugeFiles(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	rt, _ := newRuntime(t)
	// The healthy module's describe gets all the time it needs: beside
	// -race and other packages' tests, a Go plugin's first instance may
	// take longer than the default 5 s, and its speed is not what this
	// test is about.
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{Limits: func(string) plugins.Limits { return plugins.Limits{CallTimeout: 2 * time.Minute} }})
	t.Cleanup(func() { _ = reg.Close(context.Background()) })
	dir := t.TempDir()
	writeAtomic(t, filepath.Join(dir, "get_account.wasm"), getAccountWasm(t))
	writeAtomic(t, filepath.Join(dir, "sidecar.wasm"), plainWasm(t))
	big := filepath.Join(dir, "big.wasm")
	if err := os.WriteFile(big, []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, plugins.DefaultMaxModuleBytes+1); err != nil { // sparse
		t.Fatal(err)
	}
	for _, link := range []string{"endless.wasm", "sidecar.json"} {
		if err := os.Symlink("/dev/zero", filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	within(t, time.Minute, "Watch over a directory of endless files", func() bool {
		_, err := reg.Watch(context.Background(), "acme", dir, plugins.WatchOptions{})
		if err != nil {
			t.Error(err)
		}
		return true
	})
	want := map[string]string{
		"big":     "over 67108864 bytes, the limit (Limits.MaxModuleBytes)",
		"endless": "over 67108864 bytes, the limit (Limits.MaxModuleBytes)",
		"sidecar": "over 1048576 bytes, the limit (Limits.MaxOutputBytes",
	}
	refusals := reg.Refusals("acme")
	if len(refusals) != len(want) {
		t.Errorf("refusals %v, want %d", refusals, len(want))
	}
	for _, r := range refusals {
		if !strings.Contains(r.Err.Error(), want[r.Name]) || !errors.Is(r.Err, plugins.ErrInvalidModule) && !errors.Is(r.Err, plugins.ErrInvalidDescription) {
			t.Errorf("%s refused with %v, want %q", r.Name, r.Err, want[r.Name])
		}
	}
	if _, ok := reg.Tool("acme", "get_account"); !ok {
		t.Fatal("get_account is not served")
	}

	tight := plugins.NewRegistry(rt, plugins.RegistryOptions{Limits: func(string) plugins.Limits { return plugins.Limits{MaxModuleBytes: 1 << 20} }})
	t.Cleanup(func() { _ = tight.Close(context.Background()) })
	_, err := tight.LoadFile(context.Background(), "acme", filepath.Join(dir, "get_account.wasm"))
	if !errors.Is(err, plugins.ErrInvalidModule) || !strings.Contains(err.Error(), "over 1048576 bytes, the limit (Limits.MaxModuleBytes)") {
		t.Fatalf("LoadFile of a 3 MB module under a 1 MiB limit: %v", err)
	}
}

// TestConcurrentLoadsHammer: many loads of modules at once on one runtime
// (a directory's loads run side by side) — the same module under several
// names, and every module's Extism kernel, compiled from the on-disk cache
// at the same time — each load serves, under -race. wazero v1.12.0
// publishes a module it read from the file cache before finishing it
// (wazero#2547): unless the runtime keeps those compiles apart, a second
// load of the same module can instantiate a half-made one.
func TestConcurrentLoadsHammer(t *testing.T) {
	wasm := [][]byte{versionWasm(t, "A"), bombsWasm(t), plainWasm(t)}
	exports := []string{"describe", "describe", "count_vowels"}
	for round := range 5 {
		rt := plugintest.Runtime(t, plugins.Options{})
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m, err := rt.Load(context.Background(), plugins.Source{Name: fmt.Sprintf("m%d", i), Wasm: wasm[i%len(wasm)], Tenant: "acme"})
				if err != nil {
					errs <- err
					return
				}
				defer m.Close(context.Background())
				if _, err := m.CallExport(context.Background(), exports[i%len(wasm)], []byte("{}")); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
	}
}

// TestCompilesTwoAtOnce: however many modules load at once, at most two
// compiler processes run: four compile bombs loaded together (each runs
// to its compile deadline) are compiled two by two, each refused.
func TestCompilesTwoAtOnce(t *testing.T) {
	rt, _ := newRuntime(t)
	limits := plugins.Limits{CompileTimeout: 2 * time.Second}
	errs := make(chan error, 4)
	for i := range 4 {
		go func() {
			_, err := rt.Load(context.Background(), plugins.Source{Name: fmt.Sprintf("bomb%d", i), Wasm: nestedBlocks(100_000 + i), Tenant: "acme", Limits: limits})
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; !errors.Is(err, plugins.ErrInvalidModule) {
			t.Errorf("a compile bomb: %v, want refused", err)
		}
	}
	if runs, peak := plugins.CompilerRuns(rt), plugins.CompilersPeak(rt); runs != 4 || peak != 2 {
		t.Errorf("%d compiler processes, at most %d at once; want 4, two at once", runs, peak)
	}
}
