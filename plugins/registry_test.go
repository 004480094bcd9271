package plugins_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
)

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// withSection returns wasm with a custom section appended: the same code,
// a different module (and hash).
func withSection(wasm []byte, payload string) []byte {
	name := "test-version"
	body := append([]byte{byte(len(name))}, name...)
	body = append(body, payload...)
	out := append([]byte(nil), wasm...)
	out = append(out, 0) // custom section id
	for n := len(body); ; {
		b := byte(n & 0x7f)
		n >>= 7
		if n != 0 {
			out = append(out, b|0x80)
			continue
		}
		out = append(out, b)
		break
	}
	return append(out, body...)
}

type changes struct {
	mu  sync.Mutex
	all []plugins.Change
	ch  chan plugins.Change
}

func newChanges() *changes { return &changes{ch: make(chan plugins.Change, 1024)} }

func (c *changes) observe(ch plugins.Change) {
	c.mu.Lock()
	c.all = append(c.all, ch)
	c.mu.Unlock()
	c.ch <- ch
}

// wait returns the next change matching ok.
func (c *changes) wait(t testing.TB, what string, ok func(plugins.Change) bool) plugins.Change {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ch := <-c.ch:
			if ok(ch) {
				return ch
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func version(t testing.TB, tool host.Tool) (string, host.ToolResult) {
	t.Helper()
	res, err := tool.Call(context.Background(), host.ToolCall{ID: "c", Input: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatalf("version: %v", err)
	}
	var out struct{ Version string }
	if err := json.Unmarshal([]byte(res.Output), &out); err != nil {
		t.Fatalf("version output %q: %v", res.Output, err)
	}
	return out.Version, res
}

func toolNamed(ts host.Toolset, name string) host.Tool {
	for _, t := range ts.Tools() {
		if t.Spec().Name == name {
			return t
		}
	}
	return nil
}

func TestRegistry(t *testing.T) {
	rt, _ := newRuntime(t)
	ch := newChanges()
	// The slow tool spins for a fixed amount of work: a timeout a loaded
	// machine cannot reach.
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{OnChange: ch.observe,
		Limits: func(string) plugins.Limits { return plugins.Limits{CallTimeout: time.Minute} }})
	t.Cleanup(func() { reg.Close(context.Background()) })
	ctx := context.Background()
	a, b := versionWasm(t, "A"), versionWasm(t, "B")

	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "ver", Wasm: a}); err != nil {
		t.Fatal(err)
	}
	ts := reg.Toolset("acme")
	if got := len(ts.Tools()); got != 3 {
		t.Fatalf("%d tools, want 3", got)
	}
	if reg.Toolset("globex").Tools() != nil {
		t.Fatal("another tenant sees acme's tools")
	}
	stale := toolNamed(ts, "version")
	if v, res := version(t, stale); v != "A" || res.Source != hashOf(a) {
		t.Fatalf("got %s from %s", v, res.Source)
	}

	// A module offering the same names is in conflict with the first:
	// neither serves them until one is removed.
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "ver2", Wasm: b}); err != nil {
		t.Fatal(err)
	}
	if c := ch.wait(t, "conflict", func(c plugins.Change) bool { return c.Name == "ver2" }); len(c.Conflicts) != 3 ||
		!strings.Contains(c.Conflicts[0].String(), "is offered by ver and ver2") {
		t.Fatalf("conflicts reported: %v", c.Conflicts)
	}
	if got := len(ts.Tools()); got != 0 {
		t.Fatalf("%d tools served while in conflict, want 0", got)
	}
	if !reg.Unload("acme", "ver2") {
		t.Fatal("unload ver2")
	}
	if got := len(ts.Tools()); got != 3 || len(reg.Conflicts("acme")) != 0 {
		t.Fatalf("after the conflict: %d tools, conflicts %v", got, reg.Conflicts("acme"))
	}
	// The same module under another tenant is fine.
	if _, err := reg.Load(ctx, "globex", plugins.Source{Name: "ver", Wasm: b}); err != nil {
		t.Fatal(err)
	}

	// A broken version is rejected; the old one keeps serving.
	_, err := reg.Load(ctx, "acme", plugins.Source{Name: "ver", Wasm: []byte("\x00asm\x01\x00\x00\x00garbage")})
	if !errors.Is(err, plugins.ErrInvalidModule) {
		t.Fatalf("broken module: %v", err)
	}
	if c := ch.wait(t, "rejection", func(c plugins.Change) bool { return c.Kind == plugins.Rejected && c.Name == "ver" }); c.Err == nil {
		t.Fatal("rejection without a reason")
	}
	if v, _ := version(t, toolNamed(ts, "version")); v != "A" {
		t.Fatalf("after a broken reload: %s", v)
	}

	// An in-flight call finishes on its version while B is swapped in.
	slow := toolNamed(ts, "slow")
	oldMod, _ := reg.Module("acme", "ver")
	type result struct {
		res host.ToolResult
		err error
	}
	done := make(chan result)
	before := oldMod.Stats().Calls
	go func() {
		res, err := slow.Call(ctx, host.ToolCall{ID: "slow", Input: json.RawMessage(`{"n":150}`)})
		done <- result{res, err}
	}()
	// Swap once the call runs on A.
	for deadline := time.Now().Add(time.Minute); oldMod.Stats().Calls == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slow call did not start")
		}
	}
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "ver", Wasm: b}); err != nil {
		t.Fatal(err)
	}
	if c := ch.wait(t, "replacement", func(c plugins.Change) bool { return c.Kind == plugins.Replaced }); c.Previous != hashOf(a) || c.Hash != hashOf(b) {
		t.Fatalf("replacement %+v", c)
	}
	select {
	case <-oldMod.Done():
		t.Fatal("the old version shut down with a call in flight")
	default:
	}
	r := <-done
	if r.err != nil || !strings.Contains(r.res.Output, `"A"`) || r.res.Source != hashOf(a) {
		t.Fatalf("in-flight call: %+v %v", r.res, r.err)
	}
	select {
	case <-oldMod.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the old version did not shut down after its last call")
	}
	// A tool resolved before the swap is served by the new version.
	if v, res := version(t, stale); v != "B" || res.Source != hashOf(b) {
		t.Fatalf("stale tool: %s from %s", v, res.Source)
	}

	// Unloading removes the tools; a stale tool says so.
	if !reg.Unload("acme", "ver") {
		t.Fatal("unload: nothing to unload")
	}
	if ts.Tools() != nil {
		t.Fatal("tools after unload")
	}
	if _, err := stale.Call(ctx, host.ToolCall{Input: json.RawMessage(`{}`)}); !errors.Is(err, plugins.ErrClosed) || !strings.Contains(err.Error(), "unloaded") {
		t.Fatalf("stale tool after unload: %v", err)
	}
	if got := reg.Tenants(); len(got) != 1 || got[0] != "globex" {
		t.Fatalf("tenants %v", got)
	}
}

// TestHotReloadUnderLoad: four goroutines call a tool nonstop while its
// file is replaced 50 times. No call fails, and every result is attributed
// to the module that produced it.
func TestHotReloadUnderLoad(t *testing.T) {
	rt, _ := newRuntime(t)
	ch := newChanges()
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{OnChange: ch.observe, Limits: func(string) plugins.Limits {
		return plugins.Limits{Instances: 2}
	}})
	t.Cleanup(func() { reg.Close(context.Background()) })
	dir := t.TempDir()
	variants := map[string][]byte{"A": versionWasm(t, "A"), "B": versionWasm(t, "B")}
	expect := sync.Map{} // hash → variant

	write := func(i int) string {
		v := "AB"[i%2 : i%2+1]
		wasm := withSection(variants[v], fmt.Sprint(i))
		expect.Store(hashOf(wasm), v)
		tmp := filepath.Join(dir, ".version.wasm.tmp")
		if err := os.WriteFile(tmp, wasm, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "version.wasm")); err != nil {
			t.Fatal(err)
		}
		return hashOf(wasm)
	}
	write(0)
	w, err := reg.Watch(context.Background(), "acme", dir, plugins.WatchOptions{Debounce: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ts := reg.Toolset("acme")
	if toolNamed(ts, "version") == nil {
		t.Fatal("the initial scan loaded nothing")
	}

	var (
		stop     atomic.Bool
		calls    atomic.Int64
		failures atomic.Int64
		wrong    atomic.Int64
		sources  sync.Map
		wg       sync.WaitGroup
	)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			tool := toolNamed(ts, "version")
			for i := 0; !stop.Load(); i++ {
				if g%2 == 0 || i%16 == 0 {
					tool = toolNamed(ts, "version") // half the callers keep a stale tool for a while
				}
				res, err := tool.Call(context.Background(), host.ToolCall{ID: fmt.Sprint(g, "-", i), Input: json.RawMessage(`{}`)})
				calls.Add(1)
				if err != nil {
					failures.Add(1)
					t.Errorf("call failed: %v", err)
					continue
				}
				v, ok := expect.Load(res.Source)
				if !ok || !strings.Contains(res.Output, `"`+v.(string)+`"`) {
					wrong.Add(1)
					t.Errorf("result %q attributed to %s (expected version %v)", res.Output, res.Source, v)
				}
				sources.Store(res.Source, true)
			}
		}(g)
	}
	swaps := 50
	if testing.Short() {
		swaps = 10
	}
	for i := 1; i <= swaps; i++ {
		h := write(i)
		ch.wait(t, fmt.Sprintf("swap %d", i), func(c plugins.Change) bool { return c.Hash == h && c.Kind == plugins.Replaced })
		time.Sleep(2 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	n := 0
	sources.Range(func(_, _ any) bool { n++; return true })
	t.Logf("%d calls across %d module versions; %d failed, %d misattributed", calls.Load(), n, failures.Load(), wrong.Load())
	if failures.Load() != 0 || wrong.Load() != 0 {
		t.Fatal("hot reload lost or misattributed calls")
	}
	if n < swaps/5 {
		t.Errorf("only %d versions served calls", n)
	}
	if mods := reg.Modules("acme"); len(mods) != 1 || mods[0].Hash() != hashOf(withSection(variants["A"], fmt.Sprint(swaps))) {
		t.Fatalf("modules after the swaps: %v", mods)
	}

	// A broken file is rejected and the last good version keeps serving;
	// removing the file unregisters the module.
	if err := os.WriteFile(filepath.Join(dir, "version.wasm"), []byte("not wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := ch.wait(t, "rejection", func(c plugins.Change) bool { return c.Kind == plugins.Rejected })
	if !errors.Is(c.Err, plugins.ErrInvalidModule) {
		t.Fatalf("rejection reason: %v", c.Err)
	}
	if v, _ := version(t, toolNamed(ts, "version")); v != "A" {
		t.Fatalf("after a broken file: %s", v)
	}
	os.Remove(filepath.Join(dir, "version.wasm"))
	ch.wait(t, "removal", func(c plugins.Change) bool { return c.Kind == plugins.Removed })
	if ts.Tools() != nil {
		t.Fatal("tools after the file was removed")
	}
}

// TestPoolBusyAndStats: calls beyond Limits.Instances wait within their
// deadline, then fail retryably without running; Prewarm fills the pool.
func TestPoolBusyAndStats(t *testing.T) {
	rt, _ := newRuntime(t)
	// The slow calls spin for a fixed amount of work: a long timeout, so
	// that a loaded machine cannot turn them into timeouts.
	m := load(t, rt, "ver", versionWasm(t, "A"), plugins.Limits{Instances: 2, CallTimeout: time.Minute})
	if err := m.Prewarm(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	if s := m.Stats(); s.Instantiated != 2 || s.Idle != 2 {
		t.Fatalf("after Prewarm: %+v", s)
	}
	slow, _ := m.Tool("slow")
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := slow.Call(context.Background(), host.ToolCall{Input: json.RawMessage(`{"n":150}`)}); err != nil {
				t.Error(err)
			}
		}()
	}
	// Both instances are taken (the slow calls spin for well over the
	// 20ms the next call waits).
	for deadline := time.Now().Add(time.Minute); m.Stats().Idle != 0 || m.Stats().Calls < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the slow calls did not start: %+v", m.Stats())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	tool, _ := m.Tool("version")
	_, err := tool.Call(ctx, host.ToolCall{Input: json.RawMessage(`{}`)})
	var pe *plugins.PluginError
	if !errors.As(err, &pe) || !pe.Retryable() {
		t.Fatalf("call on a busy pool: %v", err)
	}
	wg.Wait()
	s := m.Stats()
	if s.Instantiated != 2 || s.Discarded != 0 || s.Calls < 3 {
		t.Fatalf("stats %+v", s)
	}
	if _, err := tool.Call(context.Background(), host.ToolCall{Input: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
}

// TestRegistryClosesWatchers: closing a registry stops its directory
// watchers: files written afterwards are not loaded, and the watcher's
// own Close returns at once.
func TestRegistryClosesWatchers(t *testing.T) {
	rt, _ := newRuntime(t)
	changes := make(chan plugins.Change, 16)
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{OnChange: func(c plugins.Change) { changes <- c }})
	dir := t.TempDir()
	w, err := reg.Watch(context.Background(), "acme", dir, plugins.WatchOptions{Debounce: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "get_account.wasm"), getAccountWasm(t), 0o644); err != nil {
		t.Fatal(err)
	}
	// A watcher still running would try to load the file (and be refused).
	select {
	case c := <-changes:
		t.Fatalf("the watcher still works after Registry.Close: %s %s", c.Kind, c.Name)
	case <-time.After(500 * time.Millisecond):
	}
	done := make(chan struct{})
	go func() { w.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("DirWatcher.Close after Registry.Close did not return")
	}
	if _, err := reg.Watch(context.Background(), "acme", dir, plugins.WatchOptions{}); !errors.Is(err, plugins.ErrClosed) {
		t.Fatalf("Watch on a closed registry: %v", err)
	}
}
