package mcp_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/protocol/mcp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The test plugins, built from source by the real toolchains (cached by
// source hash under plugintest.CacheDir).

const cKit = "../../pdk/c"

func getAccountWasm(t testing.TB) []byte {
	return plugintest.GoPlugin(t, "../../examples/plugins/get_account")
}

func hostileWasm(t testing.TB) []byte {
	return plugintest.GoPlugin(t, "../../plugins/testdata/hostile")
}

func textStatsWasm(t testing.TB) []byte {
	return plugintest.AssemblyScriptPlugin(t, "../../examples/plugins/text_stats", "text_stats.ts",
		"../../../pdk/assemblyscript", []string{"../../../pdk/assemblyscript"})
}

// kitWasm is the AssemblyScript kit's test plugin: tools remember (write)
// and crash (an abort), and the policy by_agent (denies the agent
// "intern", requires approval for external tools, allows the rest).
func kitWasm(t testing.TB) []byte {
	return plugintest.AssemblyScriptPlugin(t, "../../plugins/testdata/as", "kit.ts",
		"../../../pdk/assemblyscript", []string{"../../../pdk/assemblyscript"})
}

func countVowelsWasm(t testing.TB) ([]byte, []byte) {
	kit, _ := filepath.Abs(cKit)
	wasm := plugintest.CPlugin(t, "../../examples/plugins/count_vowels", []string{"count_vowels.c"}, []string{kit}, nil)
	side, err := os.ReadFile("../../examples/plugins/count_vowels/count_vowels.json")
	if err != nil {
		t.Fatal(err)
	}
	return wasm, side
}

// withCustomSection returns wasm with a custom section appended: another
// module (another hash) that behaves the same.
func withCustomSection(wasm []byte, name string) []byte {
	body := append([]byte{byte(len(name))}, name...)
	body = append(body, name...) // a payload (wazero refuses an empty one at the end)
	out := append(bytes.Clone(wasm), 0, byte(len(body)))
	return append(out, body...)
}

func hashOf(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// writeAtomic puts a file in a watched directory the way the docs ask:
// written beside it under a hidden name, then renamed into place.
func writeAtomic(t *testing.T, dir, name string, data []byte) {
	t.Helper()
	tmp := filepath.Join(dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// env is a server over a watched plugin directory.
type env struct {
	dir string
	rt  *plugins.Runtime
	reg *plugins.Registry
	srv *mcp.Server
	log *logBuffer
	// changes receives the registry's changes after the server saw them.
	changes chan plugins.Change
}

// newEnv serves the plugins of dir (files name → bytes written there
// first) for tenant "acme" under limits.
func newEnv(t *testing.T, files map[string][]byte, limits plugins.Limits, opts mcp.Options) *env {
	t.Helper()
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logs := &logBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the server's log:\n%s", logs.String())
		}
	})
	rt := plugintest.Runtime(t, plugins.Options{Logger: logger})
	var (
		mu   sync.Mutex
		srv  *mcp.Server
		seen = make(chan plugins.Change, 64)
	)
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
		Limits: func(string) plugins.Limits { return limits },
		OnChange: func(c plugins.Change) {
			mu.Lock()
			s := srv
			mu.Unlock()
			if s != nil {
				s.Changed(c)
			}
			select {
			case seen <- c:
			default:
			}
		},
	})
	t.Cleanup(func() { reg.Close(context.Background()) })
	opts.Registry, opts.Tenant, opts.Logger = reg, "acme", logger
	if pp, ok := opts.Policy.(plugins.PolicyRef); ok && pp.Registry == nil {
		pp.Registry = reg // a plugin policy of the registry under test
		opts.Policy = pp
	}
	s, err := mcp.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	srv = s
	mu.Unlock()
	if _, err := reg.Watch(context.Background(), "acme", dir, plugins.WatchOptions{Debounce: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if rf := reg.Refusals("acme"); len(rf) > 0 {
		t.Fatalf("refused: %v", rf)
	}
	for len(seen) > 0 {
		<-seen // the initial loads
	}
	return &env{dir: dir, rt: rt, reg: reg, srv: s, log: logs, changes: seen}
}

// awaitChange waits for the registry's change of module name. A refusal
// of that module, when another change was awaited, fails the test at once
// with the registry's reason (the old version, if any, stays: no
// list_changed will come).
func (e *env) awaitChange(t *testing.T, kind plugins.ChangeKind, name string) {
	t.Helper()
	guard := time.After(2 * time.Minute)
	for {
		select {
		case c := <-e.changes:
			switch {
			case c.Kind == kind && c.Name == name:
				return
			case c.Kind == plugins.Rejected && c.Name == name:
				t.Fatalf("%s was refused, awaiting its %s change: %v", name, kind, c.Err)
			}
		case <-guard:
			t.Fatalf("no %s change of %s (a guard against a hang)", kind, name)
		}
	}
}

// precompile compiles wasm into the runtime's compilation cache (loading
// it once, for another tenant, and closing it), so that a later load of
// the same bytes from the watched directory takes no compile: a swap then
// takes as long as instantiating and describing, however loaded the
// machine (a compile of a Go plugin the cache has not seen can take tens
// of seconds there, with the race detector).
func (e *env) precompile(t *testing.T, wasm []byte, limits plugins.Limits) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	m, err := e.rt.Load(ctx, plugins.Source{Name: "precompile", Wasm: wasm, Tenant: "precompile", Limits: limits})
	if err != nil {
		t.Fatalf("precompiling: %v", err)
	}
	_ = m.Close(ctx)
	t.Logf("precompiled %s in %s", hashOf(wasm)[:19], time.Since(start).Round(time.Millisecond))
}

// transports are the two ways a client reaches the server.
var transports = []string{"stdio", "http"}

// connect connects a Go SDK client named name to the server over
// transport ("stdio": the server's stdio transport over pipes; "http":
// streamable HTTP on a local test server).
func (e *env) connect(t *testing.T, transport, name string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var tr sdk.Transport
	switch transport {
	case "stdio":
		clientIn, serverOut := io.Pipe()
		serverIn, clientOut := io.Pipe()
		done := make(chan error, 1)
		go func() { done <- e.srv.ServeStdio(ctx, serverIn, serverOut) }()
		t.Cleanup(func() {
			clientOut.Close()
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("ServeStdio: %v", err)
				}
			case <-time.After(time.Minute):
				t.Error("ServeStdio did not return (a guard against a hang)")
			}
			serverOut.Close()
		})
		tr = &sdk.IOTransport{Reader: clientIn, Writer: clientOut}
	case "http":
		hs := httptest.NewServer(e.srv.Handler(mcp.HTTPOptions{}))
		t.Cleanup(func() { cancel(); hs.Close() })
		tr = &sdk.StreamableClientTransport{Endpoint: hs.URL}
	default:
		t.Fatalf("transport %q", transport)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: name, Version: "1"}, opts).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("%s: connect: %v", transport, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool with a guard against a hang.
func call(t *testing.T, cs *sdk.ClientSession, tool string, args any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	return res
}

// text is a result's text content.
func text(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// meta returns a result's _meta value as a string.
func meta(res *sdk.CallToolResult, key string) string {
	s, _ := res.Meta[key].(string)
	return s
}

// listTools lists every tool, by name.
func listTools(t *testing.T, cs *sdk.ClientSession) map[string]*sdk.Tool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := map[string]*sdk.Tool{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("list tools: %v", err)
		}
		out[tool.Name] = tool
	}
	return out
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// logBuffer collects log output.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
