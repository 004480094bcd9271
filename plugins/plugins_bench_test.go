package plugins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
)

// Each benchmark runs a Wasm plugin built with the Go kit (the hostile
// test plugin's "echo" tool: decode the JSON input, encode it back) beside
// the same work as a plain Go tool (host.NewTool), so the cost of the
// sandbox is visible. Loads use get_account, a typical Go plugin (3.4 MB).

// payload1KB is a 1 KB JSON object.
var payload1KB = func() json.RawMessage {
	fields := map[string]string{}
	for i := 0; len(mustJSON(fields)) < 1000; i++ {
		fields[fmt.Sprintf("field_%02d", i)] = strings.Repeat("v", 24)
	}
	return mustJSON(fields)
}()

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// goEcho is the plain Go tool doing what the plugin's echo does.
var goEcho = host.NewTool(host.ToolSpec{Name: "echo", Effect: host.EffectRead}, func(_ context.Context, c host.ToolCall) (host.ToolResult, error) {
	var in map[string]any
	if err := json.Unmarshal(c.Input, &in); err != nil {
		return host.ToolResult{}, err
	}
	out, err := json.Marshal(in)
	return host.ToolResult{Output: string(out), Source: "go:echo"}, err
})

// loadOnce loads wasm in a new Runtime with opts, describes it, and closes
// both: a process's first load of a module.
func loadOnce(b *testing.B, wasm []byte, opts plugins.Options) {
	ctx := context.Background()
	rt, err := plugins.NewRuntime(opts)
	if err != nil {
		b.Fatal(err)
	}
	m, err := rt.Load(ctx, plugins.Source{Name: "get_account", Wasm: wasm})
	if err != nil {
		b.Fatal(err)
	}
	m.Close(ctx)
	rt.Close(ctx)
}

// BenchmarkCompileCold: compile a module with an empty compilation cache,
// create its first instance and describe it: a cold start.
func BenchmarkCompileCold(b *testing.B) {
	wasm := getAccountWasm(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		loadOnce(b, wasm, plugins.Options{})
	}
}

// BenchmarkLoadFromCache: the same from an on-disk compilation cache, in a
// new Runtime each time (what a restarted process sees).
func BenchmarkLoadFromCache(b *testing.B) {
	wasm := getAccountWasm(b)
	opts := plugins.Options{CacheDir: filepath.Join(b.TempDir(), "cache")}
	loadOnce(b, wasm, opts) // fills the cache
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		loadOnce(b, wasm, opts)
	}
}

func echoTool(b *testing.B, instances int) (host.Tool, *plugins.Module) {
	rt, _ := newRuntime(b)
	m := load(b, rt, "hostile", hostileWasm(b), plugins.Limits{Instances: instances})
	tool, _ := m.Tool("echo")
	// Warm the pool: every instance created and initialised.
	if err := m.Prewarm(context.Background(), instances); err != nil {
		b.Fatal(err)
	}
	if _, err := tool.Call(context.Background(), host.ToolCall{ID: "warm", Input: payload1KB}); err != nil {
		b.Fatal(err)
	}
	return tool, m
}

// BenchmarkWarmCall: one call with a 1 KB JSON input (and output) on a warm
// pool: no compilation or instantiation on the path (instantiations/op 0).
func BenchmarkWarmCall(b *testing.B) {
	ctx := context.Background()
	call := host.ToolCall{ID: "c", SessionID: "s", Name: "echo", Input: payload1KB}
	b.Run("wasm", func(b *testing.B) {
		tool, m := echoTool(b, 1)
		before := m.Stats()
		b.ReportAllocs()
		b.SetBytes(int64(len(payload1KB)))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := tool.Call(ctx, call); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		after := m.Stats()
		b.ReportMetric(float64(after.Instantiated-before.Instantiated)/float64(b.N), "instantiations/op")
	})
	b.Run("wasm-small", func(b *testing.B) {
		// A typical small call: get_account with a 20-byte input.
		rt, _ := newRuntime(b)
		m := load(b, rt, "get_account", getAccountWasm(b), plugins.Limits{Instances: 1})
		tool, _ := m.Tool("get_account")
		c := host.ToolCall{ID: "c", SessionID: "s", Name: "get_account", Input: json.RawMessage(`{"account_id":"42"}`)}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := tool.Call(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wasm-c", func(b *testing.B) {
		// A C plugin (the C kit reads and scans the 1 KB input, answers 14 bytes).
		rt, _ := newRuntime(b)
		m := load(b, rt, "version", versionWasm(b, "A"), plugins.Limits{Instances: 1})
		tool, _ := m.Tool("size")
		c := call
		c.Name = "size"
		b.ReportAllocs()
		b.SetBytes(int64(len(payload1KB)))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := tool.Call(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wasm-rust", func(b *testing.B) {
		// A Rust plugin (the Rust kit parses the envelope and the 1 KB
		// input into its JSON values, answers a one-member object).
		rt, _ := newRuntime(b)
		m := load(b, rt, "kit", rustKitWasm(b), plugins.Limits{Instances: 1})
		tool, _ := m.Tool("size")
		c := call
		c.Name = "size"
		b.ReportAllocs()
		b.SetBytes(int64(len(payload1KB)))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := tool.Call(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("go", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(payload1KB)))
		for i := 0; i < b.N; i++ {
			if _, err := goEcho.Call(ctx, call); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkPoolContention: 2 and 8 goroutines calling one module whose
// pool holds at most 4 instances (the default), beside the Go tool.
func BenchmarkPoolContention(b *testing.B) {
	ctx := context.Background()
	call := host.ToolCall{ID: "c", SessionID: "s", Name: "echo", Input: payload1KB}
	run := func(b *testing.B, tool host.Tool, goroutines int) {
		b.ReportAllocs()
		b.ResetTimer()
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			n := b.N / goroutines
			if g < b.N%goroutines {
				n++
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < n; i++ {
					if _, err := tool.Call(ctx, call); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	for _, g := range []int{2, 8} {
		b.Run(fmt.Sprintf("wasm-%d", g), func(b *testing.B) {
			tool, m := echoTool(b, plugins.DefaultInstances)
			before := m.Stats()
			run(b, tool, g)
			after := m.Stats()
			b.ReportMetric(float64(after.Instantiated-before.Instantiated)/float64(b.N), "instantiations/op")
		})
		b.Run(fmt.Sprintf("go-%d", g), func(b *testing.B) { run(b, goEcho, g) })
	}
}
