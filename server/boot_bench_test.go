package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// bootTenants is how many tenants BenchmarkBootTenants boots.
const bootTenants = 100

// BenchmarkBootTenants: server.New for 100 tenants, each with the same
// four plugins in its directory (a platform's tool set: get_account in Go,
// rust_text in Rust, text_stats in AssemblyScript, side_effects in C), until
// every tenant's plugins are served: "cached" on a compilation cache a
// previous process filled (a restart, a deploy), "compile" on an empty one
// (the first boot). The tenants' instances are made afresh either way.
func BenchmarkBootTenants(b *testing.B) {
	kit := "../../../pdk/c"
	wasm := map[string][]byte{
		"get_account.wasm":  plugintest.GoPlugin(b, "../examples/plugins/get_account"),
		"rust_text.wasm":    plugintest.RustPlugin(b, "../examples/plugins/rust_text", "rust_text.rs", []string{"../../../pdk/rust"}, nil),
		"text_stats.wasm":   plugintest.AssemblyScriptPlugin(b, "../examples/plugins/text_stats", "text_stats.ts", "../../../pdk/assemblyscript", []string{"../../../pdk/assemblyscript"}),
		"side_effects.wasm": plugintest.CPlugin(b, "../examples/plugins/side_effects", []string{"side_effects.c", kit + "/agentic.c"}, []string{kit}, nil),
	}
	pluginsDir := b.TempDir()
	cfg := server.Config{PluginsDir: pluginsDir, Tenants: map[string]server.TenantConfig{}}
	for i := range bootTenants {
		name := fmt.Sprintf("t%03d", i)
		cfg.Tenants[name] = server.TenantConfig{Keys: []server.KeyConfig{{Hash: server.HashKey("ak_" + name)}}, Models: []string{hosttest.DefaultModel}}
		dir := filepath.Join(pluginsDir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for file, bytes := range wasm {
			if err := os.WriteFile(filepath.Join(dir, file), bytes, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	boot := func(b *testing.B, cacheDir string) {
		c := cfg
		c.PluginCacheDir = cacheDir
		b.StopTimer()
		debug.FreeOSMemory()
		before := residentBytes(b)
		b.StartTimer()
		start := time.Now()
		srv, err := server.New(server.Options{Config: c, Storage: memory.New(), Model: hosttest.NewModel(), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		b.StopTimer()
		rss := residentBytes(b)
		served := 0
		for i := range bootTenants {
			name := fmt.Sprintf("t%03d", i)
			req := httptest.NewRequest("GET", "/v1/plugins", nil)
			req.Header.Set("Authorization", "Bearer ak_"+name)
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, req)
			var list struct {
				Plugins  []json.RawMessage `json:"plugins"`
				Refusals []json.RawMessage `json:"refusals"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || w.Code != 200 {
				b.Fatalf("%s's plugins: %d %s", name, w.Code, w.Body)
			}
			if len(list.Refusals) > 0 {
				b.Fatalf("%s's plugins: refused: %s", name, w.Body)
			}
			served += len(list.Plugins)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		srv.Close(ctx)
		cancel()
		b.ReportMetric(float64(rss-before)/bootTenants/(1<<20), "MiB/tenant")
		if served != bootTenants*len(wasm) {
			b.Fatalf("%d plugins served after the boot, want %d", served, bootTenants*len(wasm))
		}
		b.ReportMetric(float64(took.Microseconds())/bootTenants/1000, "ms/tenant")
		b.StartTimer()
	}
	b.Run("cached", func(b *testing.B) {
		dir := filepath.Join(b.TempDir(), "cache")
		boot(b, dir) // fills the cache, as a previous process did
		b.ResetTimer()
		for b.Loop() {
			boot(b, dir)
		}
	})
	b.Run("compile", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			dir := filepath.Join(b.TempDir(), "cache")
			b.StartTimer()
			boot(b, dir)
		}
	})
}

// residentBytes is the process's resident memory (VmRSS): the plugins'
// machine code and linear memories are mapped outside Go's heap.
func residentBytes(b *testing.B) int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc/self/status: %v", err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("VmRSS: %q", rest)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}
