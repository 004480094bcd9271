package plugins_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	w "github.com/agentichost/agentic/plugins/internal/wasmgen"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// tsKit is the TypeScript kit's directory, relative to testdata/js.
const tsKit = "../../../pdk/ts"

// jsHostileWasm builds testdata/js/hostile.ts with the TypeScript kit.
func jsHostileWasm(t testing.TB) []byte {
	return plugintest.TypeScriptPlugin(t, "testdata/js", "hostile.ts", tsKit)
}

// TestJavaScriptPlugin: a TypeScript plugin's tools, validator and policy
// are described and served as any plugin's, through the same host
// functions (config, log, key-value, HTTP to a granted host only), with
// the fuel of each call reported; each call starts from the state the
// script left when it loaded.
func TestJavaScriptPlugin(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Idempotency-Seen", r.Header.Get("Idempotency-Key"))
		w.Write([]byte("hello " + r.Header.Get("X-Test")))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	rt, logs := newRuntime(t)
	wasm := jsHostileWasm(t)
	m := plugintest.Load(t, rt, plugins.Source{Name: "hostile_js", Wasm: wasm, Tenant: "acme",
		Config: map[string]string{"region": "eu"},
		Limits: plugins.Limits{KV: true, AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true}})

	d := m.Description()
	if len(d.Tools) != 17 || len(d.Validators) != 1 || len(d.Policies) != 1 {
		t.Fatalf("described %d tools, %d validators, %d policies: %+v", len(d.Tools), len(d.Validators), len(d.Policies), d)
	}
	if spin, _ := m.Tool("spin"); spin.Spec().Timeout != time.Second {
		t.Errorf("spin's timeout is %v, want its declared 1s", spin.Spec().Timeout)
	}

	for i := range 3 {
		res, err := callTool(t, m, "state", `{}`)
		if err != nil || res.Output != `{"calls":1,"leak":1}` {
			t.Fatalf("state, call %d: %s, %v: want every call to start afresh", i+1, res.Output, err)
		}
		if res.Fuel <= 0 || res.Source != m.Hash() {
			t.Errorf("state: fuel %d, source %q", res.Fuel, res.Source)
		}
	}
	if st := m.Stats(); st.Instantiated != 1 || st.Discarded != 0 {
		t.Errorf("stats %+v: want the one instance reused", st)
	}

	// Math.random draws anew at every call, though every call starts from
	// the same memory.
	seen := map[string]bool{}
	for range 3 {
		res, err := callTool(t, m, "dice", `{}`)
		if err != nil || seen[res.Output] || !strings.HasPrefix(res.Output, "[0.") {
			t.Fatalf("dice: %s, %v (seen %v)", res.Output, err, seen)
		}
		seen[res.Output] = true
	}

	res, err := callTool(t, m, "config", `{}`)
	if err != nil || res.Output != `{"region":"eu","missing":null}` {
		t.Errorf("config: %s, %v", res.Output, err)
	}
	if !strings.Contains(logs.String(), "config read") || !strings.Contains(logs.String(), "tool=config") && !strings.Contains(logs.String(), "name=config") {
		t.Errorf("the log line is missing or untagged:\n%s", logs.String())
	}
	res, err = callTool(t, m, "kv", `{"key":"k","value":"v é"}`)
	if err != nil || res.Output != `{"before":null,"after":"v é","gone":true}` {
		t.Errorf("kv: %s, %v", res.Output, err)
	}
	res, err = callTool(t, m, "fetch", `{"url":"`+srv.URL+`/"}`)
	var fetched struct {
		Status int
		Body   string
		Key    string
	}
	if err != nil || json.Unmarshal([]byte(res.Output), &fetched) != nil || fetched.Status != 200 || fetched.Body != "hello 1" ||
		!strings.HasPrefix(fetched.Key, "agentic-") {
		t.Errorf("fetch: %s, %v", res.Output, err)
	}
	if _, err := callTool(t, m, "fetch", `{"url":"http://10.1.2.3/"}`); !errors.Is(err, plugins.ErrToolFailed) ||
		!strings.Contains(err.Error(), "not among the hosts this plugin may reach") {
		t.Errorf("fetch of a host not granted: %v", err)
	}

	v, _ := m.Validator("even")
	if got, err := validate(v, `4`); err != nil || !got.OK || string(got.Value) != "2" {
		t.Errorf("validate 4: %+v, %v", got, err)
	}
	if got, err := validate(v, `3`); err != nil || got.OK || len(got.Errors) != 1 || got.Errors[0] != "/: 3 is odd" {
		t.Errorf("validate 3: %+v, %v", got, err)
	}
	p, _ := m.Policy("careful")
	dec, err := p.Decide(context.Background(), host.PolicyRequest{Tool: host.ToolSpec{Name: "publish", Effect: host.EffectWrite}, Input: json.RawMessage(`{}`)})
	if err != nil || dec.Verdict != host.RequireApproval || dec.Summary != "publish for acme" {
		t.Errorf("decide: %+v, %v", dec, err)
	}
}

// TestJavaScriptHostile: each misbehaviour of a script is a clear error of
// its kind, within its time, the instance discarded, and the next call —
// of the same module and of a healthy one — works.
func TestJavaScriptHostile(t *testing.T) {
	rt, logs := newRuntime(t)
	limits := plugins.Limits{Instances: 1, CallTimeout: 2 * time.Minute, Fuel: 1 << 50, MemoryPages: 256}
	m := load(t, rt, "hostile_js", jsHostileWasm(t), limits)
	healthy := load(t, rt, "get_account", getAccountWasm(t), plugins.Limits{})
	tests := []struct {
		tool, input string
		want        []error // any of them
		contains    string
		kept        bool
	}{
		{tool: "spin", want: []error{plugins.ErrTimeout}, contains: "timed out after 1s"},
		{tool: "spin_async", want: []error{plugins.ErrTimeout}, contains: "timed out after 1s"},
		{tool: "memory_bomb", want: []error{plugins.ErrOutOfMemory}, contains: "out of memory"},
		{tool: "string_bomb", want: []error{plugins.ErrOutOfMemory, plugins.ErrToolFailed}}, // "string too long", or memory first
		{tool: "recurse", want: []error{plugins.ErrToolFailed}, contains: "Maximum call stack size exceeded"},
		{tool: "big_output", want: []error{plugins.ErrOutputTooLarge}, contains: "the limit is 1048576"},
		{tool: "never", want: []error{plugins.ErrToolFailed}, contains: "never settled"},
		{tool: "fail", want: []error{plugins.ErrToolFailed}, contains: "account 7 not found"},
		{tool: "fetch", input: `{"url":"https://example.com/"}`, want: []error{plugins.ErrToolFailed}, contains: "HTTP is not allowed for this plugin"},
		{tool: "kv", input: `{"key":"k","value":"v"}`, want: []error{plugins.ErrToolFailed}, contains: "key-value store is not enabled"},
		{tool: "ok", input: `[1,2]`, want: []error{plugins.ErrInvalidInput}, kept: true},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			if tt.input == "" {
				tt.input = `{}`
			}
			before := m.Stats()
			res, err := callTool(t, m, tt.tool, tt.input)
			if err == nil {
				t.Fatalf("%s: no error; output %.200q", tt.tool, res.Output)
			}
			matched := false
			for _, w := range tt.want {
				matched = matched || errors.Is(err, w)
			}
			if !matched {
				t.Fatalf("%s: error %v, want one of %v", tt.tool, err, tt.want)
			}
			var pe *plugins.PluginError
			if !errors.As(err, &pe) || pe.Plugin != "hostile_js" || pe.Name != tt.tool {
				t.Errorf("%s: error %#v is not a *PluginError naming the plugin and tool", tt.tool, err)
			}
			if tt.contains != "" && !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("%s: error %q does not mention %q", tt.tool, err, tt.contains)
			}
			discarded := m.Stats().Discarded - before.Discarded
			switch {
			case tt.kept && discarded != 0:
				t.Errorf("%s: instance discarded, want it kept", tt.tool)
			case !tt.kept && discarded != 1:
				t.Errorf("%s: %d instances discarded, want 1", tt.tool, discarded)
			}
			if res, err := callTool(t, m, "state", `{}`); err != nil || res.Output != `{"calls":1,"leak":1}` {
				t.Errorf("state after %s: %s, %v", tt.tool, res.Output, err)
			}
			if _, err := callTool(t, healthy, "get_account", `{"account_id":"42"}`); err != nil {
				t.Errorf("healthy plugin after %s: %v", tt.tool, err)
			}
		})
	}

	t.Run("flood_log", func(t *testing.T) {
		res, err := callTool(t, m, "flood_log", `{}`)
		if err != nil || res.Output != "logged" {
			t.Fatalf("flood_log: %s, %v", res.Output, err)
		}
		if n := strings.Count(logs.String(), "msg=\"flood "); n == 0 || n > 1000 {
			t.Errorf("%d of the 20,000 lines logged, want the log's limit to hold", n)
		}
	})

	t.Run("out of fuel", func(t *testing.T) {
		m := load(t, rt, "hostile_js", jsHostileWasm(t), plugins.Limits{Instances: 1, CallTimeout: 2 * time.Minute, Fuel: 50_000_000})
		res, err := callTool(t, m, "spin", `{}`)
		if !errors.Is(err, plugins.ErrOutOfFuel) || res.Fuel < 50_000_000 {
			t.Fatalf("spin on 50,000,000 fuel: %v (fuel %d), want ErrOutOfFuel having used it all", err, res.Fuel)
		}
	})
}

// TestJavaScriptLoadFailures: a script that throws or spins as it loads,
// and a module that holds a script but is not the engine, fail their load
// with a clear error.
func TestJavaScriptLoadFailures(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed")
	}
	rt, _ := newRuntime(t)
	engine, err := os.ReadFile(filepath.Join("..", "pdk", "ts", "node_modules", "quickjs-wasi", "quickjs.wasm"))
	if err != nil {
		jsHostileWasm(t) // installs the kit's packages
		if engine, err = os.ReadFile(filepath.Join("..", "pdk", "ts", "node_modules", "quickjs-wasi", "quickjs.wasm")); err != nil {
			t.Fatal(err)
		}
	}
	loadScript := func(limits plugins.Limits, wasm []byte) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		m, err := rt.Load(ctx, plugins.Source{Name: "script", Wasm: wasm, Tenant: "acme", Limits: limits})
		if err == nil {
			m.Close(ctx)
		}
		return err
	}
	script := func(s string) []byte {
		wasm, err := plugins.JavaScriptModule(engine, []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return wasm
	}
	if err := loadScript(plugins.Limits{}, script(`throw new Error("no config")`)); !errors.Is(err, plugins.ErrInvalidModule) ||
		!strings.Contains(err.Error(), "no config") {
		t.Errorf("a script that throws: %v", err)
	}
	if err := loadScript(plugins.Limits{}, script(`var x = 1;`)); !errors.Is(err, plugins.ErrInvalidModule) ||
		!strings.Contains(err.Error(), "__agentic_run") {
		t.Errorf("a script without the kit: %v", err)
	}
	if err := loadScript(plugins.Limits{Fuel: 50_000_000}, script(`for (;;) {}`)); !errors.Is(err, plugins.ErrOutOfFuel) {
		t.Errorf("a script that spins as it loads: %v", err)
	}
	notEngine, err := plugins.JavaScriptModule(cEchoWasm(t), []byte(`1`))
	if err != nil {
		t.Fatal(err)
	}
	if err := loadScript(plugins.Limits{}, notEngine); !errors.Is(err, plugins.ErrInvalidModule) || !strings.Contains(err.Error(), "exports no") {
		t.Errorf("a script on a module that is not the engine: %v", err)
	}
	twice := append(script(`1`), script(`2`)[len(engine):]...)
	if err := loadScript(plugins.Limits{}, twice); !errors.Is(err, plugins.ErrInvalidModule) || !strings.Contains(err.Error(), "two JavaScript sections") {
		t.Errorf("two scripts: %v", err)
	}
}

// TestJavaScriptModuleMatchesBuild: the kit's build.mjs writes the module
// JavaScriptModule does, and JavaScriptModule refuses what it must.
func TestJavaScriptModuleMatchesBuild(t *testing.T) {
	wasm := jsHostileWasm(t)
	engine, err := os.ReadFile(filepath.Join("..", "pdk", "ts", "node_modules", "quickjs-wasi", "quickjs.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(wasm, engine) {
		t.Fatal("the built module does not start with the engine")
	}
	// The script is the section's tail: rebuild it from there.
	i := bytes.Index(wasm[len(engine):], []byte(plugins.JavaScriptSection))
	if i < 0 {
		t.Fatal("no script section in the built module")
	}
	script := wasm[len(engine)+i+len(plugins.JavaScriptSection):]
	again, err := plugins.JavaScriptModule(engine, script)
	if err != nil || !bytes.Equal(again, wasm) {
		t.Fatalf("JavaScriptModule differs from build.mjs (%v)", err)
	}
	for _, bad := range []struct {
		engine, script []byte
		want           string
	}{
		{engine, nil, "empty script"},
		{engine, []byte{0xff, 0xfe}, "not UTF-8"},
		{wasm, []byte("1"), "holds a script already"},
	} {
		if _, err := plugins.JavaScriptModule(bad.engine, bad.script); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("JavaScriptModule: %v, want %q", err, bad.want)
		}
	}
}

// TestJavaScriptEngineCompiledOnce: two TypeScript plugins, two scripts,
// one engine: the runtime meters and compiles the engine once (a cache
// directory of its own, so that no earlier run kept it), and both serve.
func TestJavaScriptEngineCompiledOnce(t *testing.T) {
	rt := plugintest.Runtime(t, plugins.Options{CacheDir: t.TempDir()})
	hostile := load(t, rt, "hostile_js", jsHostileWasm(t), plugins.Limits{})
	weather := load(t, rt, "ts_weather", plugintest.TypeScriptPlugin(t, "../examples/plugins/ts_weather", "ts_weather.ts", "../../../pdk/ts"), plugins.Limits{})
	if hostile.Hash() == weather.Hash() {
		t.Fatal("two plugins with one hash")
	}
	if n := plugins.CompilerRuns(rt); n != 1 {
		t.Errorf("%d compiler processes for two TypeScript plugins, want 1 (the engine's)", n)
	}
	if res, err := callTool(t, hostile, "ok", `{}`); err != nil || res.Output != `{"ok":true}` {
		t.Errorf("ok: %s, %v", res.Output, err)
	}
	if _, ok := weather.Tool("weather"); !ok {
		t.Error("ts_weather has no weather tool")
	}
}

// TestJavaScriptQuarantine: a TypeScript plugin that keeps running out of
// fuel is quarantined as any plugin is.
func TestJavaScriptQuarantine(t *testing.T) {
	rt, _ := newRuntime(t)
	ctx := context.Background()
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
		Quarantine: func(string) plugins.QuarantinePolicy {
			return plugins.QuarantinePolicy{Failures: 3, Window: time.Minute}
		},
		Limits: func(string) plugins.Limits { return plugins.Limits{CallTimeout: time.Minute, Fuel: 50_000_000} },
	})
	t.Cleanup(func() { reg.Close(ctx) })
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "hostile_js", Wasm: jsHostileWasm(t)}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		tool, _ := reg.Tool("acme", "spin")
		if _, err := tool.Call(ctx, hostCall("spin", `{}`)); !errors.Is(err, plugins.ErrOutOfFuel) {
			t.Fatalf("spin %d: %v", i+1, err)
		}
	}
	tool, _ := reg.Tool("acme", "ok")
	if _, err := tool.Call(ctx, hostCall("ok", `{}`)); !errors.Is(err, plugins.ErrQuarantined) {
		t.Fatalf("after three failures: %v, want ErrQuarantined", err)
	}
}

// TestJavaScriptNeeds: a TypeScript plugin that says what it needs runs
// with that and no more, and is refused where it is granted less.
func TestJavaScriptNeeds(t *testing.T) {
	rt, _ := newRuntime(t)
	wasm := plugintest.TypeScriptPlugin(t, "testdata/js", "needy.ts", tsKit)
	m := load(t, rt, "needy", wasm, plugins.Limits{KV: true, AllowedHosts: []string{"api.example.com", "other.example.com"}})
	if d := m.Description(); d.ABI != "1.1" || d.Needs == nil || !d.Needs.KV || len(d.Needs.AllowedHosts) != 1 {
		t.Fatalf("description %+v", d)
	}
	if l := m.Limits(); len(l.AllowedHosts) != 1 || l.AllowedHosts[0] != "api.example.com" || !l.KV {
		t.Errorf("limits %+v, want narrowed to api.example.com and the store", l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := rt.Load(ctx, plugins.Source{Name: "needy", Wasm: wasm, Tenant: "acme", Limits: plugins.Limits{AllowedHosts: []string{"api.example.com"}}}); err == nil ||
		!errors.Is(err, plugins.ErrInvalidModule) || !strings.Contains(err.Error(), "it needs the key-value store") {
		t.Errorf("loaded without the store it needs: %v", err)
	}
}

// fakeEngine is a module that passes for the JavaScript engine as far as
// its exports' names and types go, whose qjs_eval calls __agentic_host,
// and whose qjs_get_string_len — which the host calls to read that call's
// argument — calls __agentic_host again: were the host to serve it, Go
// and guest frames would nest without end. With mistyped, qjs_init takes
// an i64.
func fakeEngine(mistyped bool) []byte {
	i32 := byte(w.I32)
	types := []w.Type{{}, {Results: []byte{i32}}, {Params: []byte{i32}}, {Params: []byte{i32}, Results: []byte{i32}},
		{Params: []byte{i32, i32}, Results: []byte{i32}}, {Params: []byte{i32, i32, i32}, Results: []byte{i32}},
		{Params: []byte{i32, i32, i32, i32}, Results: []byte{i32}}, {Params: []byte{i32, i32, i32, i32, i32}, Results: []byte{i32}},
		{Params: []byte{w.I64}, Results: []byte{i32}}}
	hostCall := []byte{w.I32Const, 16, w.I32Const, 14, w.I32Const, 0, w.I32Const, 1}
	hostCall = w.I32c(hostCall, 2048)
	hostCall = append(hostCall, w.Call, 0)
	const0 := w.I32c(nil, 0)
	funcs := []struct {
		name string
		f    w.Func
	}{
		{"_initialize", w.Func{Type: 0}}, {"qjs_init", w.Func{Type: 1, Code: const0}}, {"qjs_set_max_stack_size", w.Func{Type: 2}},
		{"qjs_run_gc", w.Func{Type: 0}}, {"wasm_malloc", w.Func{Type: 3, Code: w.I32c(nil, 1024)}}, {"wasm_free", w.Func{Type: 2}},
		{"qjs_get_undefined", w.Func{Type: 1, Code: const0}}, {"qjs_new_host_function", w.Func{Type: 5, Code: w.I32c(nil, 1)}},
		{"qjs_get_global", w.Func{Type: 1, Code: w.I32c(nil, 2)}}, {"qjs_set_prop_string", w.Func{Type: 5, Code: w.I32c(nil, 1)}},
		{"qjs_free_value", w.Func{Type: 2}}, {"qjs_is_exception", w.Func{Type: 3, Code: const0}},
		{"qjs_eval", w.Func{Type: 6, Code: hostCall}}, {"qjs_get_string_len", w.Func{Type: 4, Code: hostCall}},
		{"qjs_free_cstring", w.Func{Type: 2}}, {"qjs_new_string", w.Func{Type: 4, Code: w.I32c(nil, 3)}},
		{"qjs_get_exception", w.Func{Type: 1, Code: const0}},
	}
	m := w.Module{Types: types, Imports: []w.Import{{Module: "env", Name: "host_call", Type: 7}},
		Memory: &w.Memory{Min: 1}, Exports: []w.Export{{Name: "memory", Kind: 2}},
		Data: []w.Data{{Offset: 16, Bytes: []byte("__agentic_host")}}}
	for i, f := range funcs {
		if mistyped && f.name == "qjs_init" {
			f.f = w.Func{Type: 8, Code: const0}
		}
		m.Funcs = append(m.Funcs, f.f)
		m.Exports = append(m.Exports, w.ExportFunc(f.name, uint32(i+1)))
	}
	return m.Encode()
}

// TestJavaScriptFakeEngine: the engine is a guest like any, shipped in
// the plugin's file: one whose exports are not the engine's types, or
// that calls the host back while the host serves its call, fails its load
// with a clear error instead of taking the host's stack.
func TestJavaScriptFakeEngine(t *testing.T) {
	rt, _ := newRuntime(t)
	for _, tt := range []struct {
		name     string
		mistyped bool
		want     string
	}{
		{"re-entered", false, "called again while the host serves one"},
		{"mistyped", true, "qjs_init is [i64] -> [i32], not 0 i32 -> 1 i32"},
	} {
		wasm, err := plugins.JavaScriptModule(fakeEngine(tt.mistyped), []byte("1"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		_, err = rt.Load(ctx, plugins.Source{Name: "fake", Wasm: wasm, Tenant: "acme"})
		cancel()
		if !errors.Is(err, plugins.ErrInvalidModule) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want ErrInvalidModule saying %q", tt.name, err, tt.want)
		}
	}
}
