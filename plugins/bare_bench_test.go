package plugins_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"
)

// bareInstance instantiates wasm with Extism directly, under the manifest,
// runtime and module configuration the plugins runtime uses for lim:
// the same memory pages, timeout, var and HTTP caps, close-on-context-done,
// WASI without filesystem or environment. The host functions the module
// imports are present with their signatures: log drops its line, the
// others are not called by the benchmarked exports.
func bareInstance(b testing.TB, wasm []byte, lim plugins.Limits, stderr io.Writer) *extism.Plugin {
	b.Helper()
	ctx := context.Background()
	manifest := lim.Manifest(wasm)
	cfg := wazero.NewRuntimeConfig().
		WithCompilationCache(bareCache(b)).
		WithCloseOnContextDone(true).
		WithMemoryLimitPages(manifest.Memory.MaxPages)
	i32, i64 := extism.ValueTypeI32, extism.ValueTypeI64
	unused := func(context.Context, *extism.CurrentPlugin, []uint64) { panic("not benchmarked") }
	funcs := []extism.HostFunction{
		extism.NewHostFunctionWithStack("log", func(context.Context, *extism.CurrentPlugin, []uint64) {}, []extism.ValueType{i32, i64}, nil),
		extism.NewHostFunctionWithStack("kv_get", unused, []extism.ValueType{i64}, []extism.ValueType{i64}),
		extism.NewHostFunctionWithStack("kv_set", unused, []extism.ValueType{i64, i64}, []extism.ValueType{i64}),
		extism.NewHostFunctionWithStack("kv_delete", unused, []extism.ValueType{i64}, []extism.ValueType{i64}),
		extism.NewHostFunctionWithStack("http_request", unused, []extism.ValueType{i64}, []extism.ValueType{i64}),
	}
	compiled, err := extism.NewCompiledPlugin(ctx, manifest, extism.PluginConfig{RuntimeConfig: cfg, EnableWasi: true}, funcs)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { compiled.Close(ctx) })
	mc := wazero.NewModuleConfig().WithSysWalltime().WithSysNanotime().WithRandSource(rand.Reader).
		WithStdout(io.Discard).WithStderr(stderr)
	p, err := compiled.Instance(ctx, extism.PluginInstanceConfig{ModuleConfig: mc})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close(ctx) })
	return p
}

// bareCache is the compilation cache of bare instances, on disk under
// plugintest.CacheDir: a Go module compiled in this process under -race
// takes seconds, once per run and not once per instance.
var bareCache = func() func(testing.TB) wazero.CompilationCache {
	var once sync.Once
	var cache wazero.CompilationCache
	var err error
	return func(tb testing.TB) wazero.CompilationCache {
		once.Do(func() {
			cache, err = wazero.NewCompilationCacheWithDir(filepath.Join(plugintest.CacheDir(), "wazero-bare"))
		})
		if err != nil {
			tb.Fatal(err)
		}
		return cache
	}
}()

// BenchmarkWarmCallVsBare runs, in one loop, a warm tool call through the
// plugins runtime (schema check, request envelope, pool, classification,
// output decoding, hash attribution), a bare Extism call of the same
// export with the same bytes and limits, and the floor: the same tool call
// through the runtime on the module loaded unmetered (no bound on the
// guest at all), taking turns to go first. It reports the three, host/bare (what the runtime adds to
// Extism itself, or saves), host/floor (what metering costs), the same two
// as ratios of the calls' medians (p50-, steadier on a busy machine), and
// the heap the host and the bare call allocate a call.
func BenchmarkWarmCallVsBare(b *testing.B) {
	cases := []struct {
		name, tool string
		wasm       func(testing.TB) []byte
		input      json.RawMessage
	}{
		{"c-echo-16B", "echo", cEchoWasm, json.RawMessage(`{"a":"12345678"}`)},
		{"c-echo-1KB", "echo", cEchoWasm, payload1KB},
		{"go-echo-1KB", "echo", hostileWasm, payload1KB},
		{"get_account", "get_account", getAccountWasm, json.RawMessage(`{"account_id":"42"}`)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			wasm := c.wasm(b)
			lim := plugins.Limits{Instances: 1}
			rt, _ := newRuntime(b)
			m := load(b, rt, c.tool, wasm, lim)
			tool, _ := m.Tool(c.tool)
			frt, _ := newRuntime(b)
			plugins.LoadUnmetered(frt)
			floorTool, _ := load(b, frt, c.tool, wasm, lim).Tool(c.tool)
			call := host.ToolCall{ID: "c", SessionID: "s", Name: c.tool, Input: c.input}
			// The bare call gets the request the runtime sends.
			req, err := json.Marshal(map[string]any{"tool": c.tool, "input": c.input, "call_id": "c", "session_id": "s", "tenant": m.Tenant()})
			if err != nil {
				b.Fatal(err)
			}
			bare := bareInstance(b, wasm, lim, io.Discard)
			for range 3 { // warm all three
				if _, err := tool.Call(ctx, call); err != nil {
					b.Fatal(err)
				}
				if _, err := floorTool.Call(ctx, call); err != nil {
					b.Fatal(err)
				}
				if rc, _, err := bare.CallWithContext(ctx, "call", req); err != nil || rc != 0 {
					b.Fatal(rc, err)
				}
			}
			hostCall := func() {
				if _, err := tool.Call(ctx, call); err != nil {
					b.Fatal(err)
				}
			}
			bareCall := func() {
				if rc, _, err := bare.CallWithContext(ctx, "call", req); err != nil || rc != 0 {
					b.Fatal(rc, err)
				}
			}
			floorCall := func() {
				if _, err := floorTool.Call(ctx, call); err != nil {
					b.Fatal(err)
				}
			}
			hostBytes, bareBytes := bytesPerCall(hostCall), bytesPerCall(bareCall)
			// The three take turns first, so that none always follows the
			// bare call, whose garbage and cache misses the next call pays.
			calls := [3]func(){hostCall, bareCall, floorCall}
			var took [3][]time.Duration
			var sum [3]time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := range 3 {
					k := (i + j) % 3
					t0 := time.Now()
					calls[k]()
					d := time.Since(t0)
					took[k] = append(took[k], d)
					sum[k] += d
				}
			}
			b.StopTimer()
			hostNs, bareNs, floorNs := sum[0], sum[1], sum[2]
			hosts, bares, floors := took[0], took[1], took[2]
			b.ReportMetric(float64(hostNs.Nanoseconds())/float64(b.N), "host-ns/call")
			b.ReportMetric(float64(bareNs.Nanoseconds())/float64(b.N), "bare-ns/call")
			b.ReportMetric(float64(floorNs.Nanoseconds())/float64(b.N), "floor-ns/call")
			b.ReportMetric(float64(hostNs)/float64(bareNs), "host/bare")
			b.ReportMetric(float64(hostNs)/float64(floorNs), "host/floor")
			// The same ratios of the medians: what a busy machine's
			// stalls, which land on one call or another, move less.
			b.ReportMetric(float64(median(hosts))/float64(median(bares)), "p50-host/bare")
			b.ReportMetric(float64(median(hosts))/float64(median(floors)), "p50-host/floor")
			b.ReportMetric(hostBytes, "host-B/call")
			b.ReportMetric(bareBytes, "bare-B/call")
		})
	}
}

// median is the median of ds, which it sorts.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// bytesPerCall is the heap f allocates a call, over 50 calls.
func bytesPerCall(f func()) float64 {
	const n = 50
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / n
}

// coldCallMs is the mean, over three, of a first call: wasm loaded into rt
// afresh (its machine code in the cache already) and its tool call.Name
// called once, in milliseconds.
func coldCallMs(b *testing.B, rt *plugins.Runtime, wasm []byte, call host.ToolCall) float64 {
	b.Helper()
	ctx := context.Background()
	var cold time.Duration
	for range 3 {
		start := time.Now()
		fresh := load(b, rt, "cold", wasm, plugins.Limits{Instances: 1})
		t, _ := fresh.Tool(call.Name)
		if _, err := t.Call(ctx, call); err != nil {
			b.Fatal(err)
		}
		cold += time.Since(start)
		fresh.Close(ctx)
	}
	return float64(cold.Microseconds()) / 3000
}
