package plugins_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// coldStartPlugins are the plugins a cold start is measured on, one of
// each language (the example plugins; for C, whose examples are a
// validator and a policy, the C kit's echo tool), with a call each serves.
func coldStartPlugins(b *testing.B) []struct {
	name, lang, tool, input string
	wasm                    []byte
} {
	return []struct {
		name, lang, tool, input string
		wasm                    []byte
	}{
		{"get_account", "go", "get_account", `{"account_id":"42"}`, getAccountWasm(b)},
		{"rust_text", "rust", "rust_text", `{"text":"b a c b a"}`, rustTextWasm(b)},
		{"text_stats", "assemblyscript", "text_stats", `{"text":"b a c b a"}`, textStatsWasm(b)},
		{"c_echo", "c", "echo", `{"text":"Hello, plugins"}`, cEchoWasm(b)},
		{"ts_weather", "typescript", "", "", plugintest.TypeScriptPlugin(b, "../examples/plugins/ts_weather", "ts_weather.ts", "../../../pdk/ts")},
	}
}

// BenchmarkColdStart: a process's first call of each plugin: a
// new Runtime loads the module (compiles it, or reads it from the on-disk
// cache a previous process filled: "cached"), makes its first instance,
// describes it, and runs one call of a tool (for ts_weather, whose tool
// needs the network, the load alone). "compile" starts from an empty
// cache each time.
func BenchmarkColdStart(b *testing.B) {
	ctx := context.Background()
	for _, p := range coldStartPlugins(b) {
		once := func(b *testing.B, cacheDir string) {
			rt, err := plugins.NewRuntime(plugins.Options{CacheDir: cacheDir})
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close(ctx)
			m, err := rt.Load(ctx, plugins.Source{Name: p.name, Wasm: p.wasm})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(ctx)
			if p.tool != "" {
				if _, err := callTool(b, m, p.tool, p.input); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Run(p.name+"/compile", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dir := filepath.Join(b.TempDir(), "cache")
				b.StartTimer()
				once(b, dir)
			}
		})
		b.Run(p.name+"/cached", func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "cache")
			once(b, dir) // fills the cache, as a previous process did
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				once(b, dir)
			}
		})
	}
}

// BenchmarkFirstBurst: four calls at once of get_account (a Go plugin)
// just loaded: "cold" makes the instances the burst needs beyond the
// load's one; "warm" finds them made (Limits.WarmInstances 4), as a burst
// after a failure does.
func BenchmarkFirstBurst(b *testing.B) {
	ctx := context.Background()
	wasm := getAccountWasm(b)
	rt, _ := newRuntime(b)
	for _, warm := range []int{0, 4} {
		name := "cold"
		if warm > 0 {
			name = "warm"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				m, err := rt.Load(ctx, plugins.Source{Name: "get_account", Wasm: wasm, Limits: plugins.Limits{Instances: 4, WarmInstances: warm}})
				if err != nil {
					b.Fatal(err)
				}
				for m.Stats().Idle < max(warm, 1) {
					time.Sleep(time.Millisecond)
				}
				b.StartTimer()
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() {
						if _, err := callTool(b, m, "get_account", `{"account_id":"42"}`); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				m.Close(ctx)
				b.StartTimer()
			}
		})
	}
}
