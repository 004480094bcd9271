package plugins_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// bareJS runs a JavaScript plugin's script on its engine with wazero
// alone: no meter, no Extism, no pool, no fresh state per call — the
// engine's own cost of a call, which the host's is measured against. It
// returns a call of export on input, and the engine's memory once the
// script ran.
func bareJS(b testing.TB, wasm []byte) (call func(export string, input []byte) []byte, memBytes uint32) {
	b.Helper()
	engine, err := os.ReadFile(filepath.Join("..", "pdk", "ts", "node_modules", "quickjs-wasi", "quickjs.wasm"))
	if err != nil || !bytes.HasPrefix(wasm, engine) {
		b.Fatalf("the engine: %v", err)
	}
	i := bytes.Index(wasm[len(engine):], []byte(plugins.JavaScriptSection))
	script := wasm[len(engine)+i+len(plugins.JavaScriptSection):]
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	b.Cleanup(func() { r.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	zero2 := func(context.Context, api.Module, uint32, uint32) uint32 { return 0 }
	if _, err := r.NewHostModuleBuilder("env").
		NewFunctionBuilder().WithFunc(func(context.Context, api.Module, uint32, uint32, uint32, uint32, uint32) uint32 {
		panic("no host calls in a bare call")
	}).Export("host_call").
		NewFunctionBuilder().WithFunc(func(context.Context, api.Module) uint32 { return 0 }).Export("host_interrupt").
		NewFunctionBuilder().WithFunc(func(context.Context, api.Module, uint32, uint32, uint32) {}).Export("host_promise_rejection").
		NewFunctionBuilder().WithFunc(zero2).Export("host_module_normalize").
		NewFunctionBuilder().WithFunc(zero2).Export("host_module_load").
		NewFunctionBuilder().WithFunc(zero2).Export("host_get_timezone_offset").
		Instantiate(ctx); err != nil {
		b.Fatal(err)
	}
	mod, err := r.InstantiateWithConfig(ctx, engine, wazero.NewModuleConfig().WithStartFunctions("_initialize"))
	if err != nil {
		b.Fatal(err)
	}
	mem := mod.Memory()
	fns := map[string]api.Function{} // looked up once, as the host does
	fn := func(name string, args ...uint64) uint32 {
		f := fns[name]
		if f == nil {
			f = mod.ExportedFunction(name)
			fns[name] = f
		}
		res, err := f.Call(ctx, args...)
		if err != nil {
			b.Fatal(name, err)
		}
		if len(res) == 0 {
			return 0
		}
		return uint32(res[0])
	}
	cstr := func(s []byte) uint32 {
		p := fn("wasm_malloc", uint64(len(s)+1))
		mem.Write(p, append(s, 0))
		return p
	}
	var lenPtr uint32
	str := func(h uint32) []byte {
		c := fn("qjs_get_string_len", uint64(h), uint64(lenPtr))
		n, _ := mem.ReadUint32Le(lenPtr)
		out, _ := mem.Read(c, n)
		out = bytes.Clone(out)
		fn("qjs_free_cstring", uint64(c))
		return out
	}
	newString := func(s []byte) uint32 {
		p := cstr(s)
		defer fn("wasm_free", uint64(p))
		return fn("qjs_new_string", uint64(p), uint64(len(s)))
	}
	if fn("qjs_init") != 0 {
		b.Fatal("qjs_init")
	}
	lenPtr = fn("wasm_malloc", 4)
	// The kit seeds Math.random through the host at load and every call:
	// the bare engine's host function is a script's, answering that alone.
	name := cstr([]byte("plugin.js"))
	prelude := []byte(`globalThis.__agentic_host = (op) => op === "random" ? "0123456789abcdef" : "";`)
	if r := fn("qjs_eval", uint64(cstr(prelude)), uint64(len(prelude)), uint64(name), 0); fn("qjs_is_exception", uint64(r)) != 0 {
		b.Fatal("the prelude threw")
	}
	code := cstr(script)
	if r := fn("qjs_eval", uint64(code), uint64(len(script)), uint64(name), 0); fn("qjs_is_exception", uint64(r)) != 0 {
		b.Fatal("the script threw")
	}
	global := fn("qjs_get_global")
	get := func(name string) uint32 {
		k := cstr([]byte(name))
		defer fn("wasm_free", uint64(k))
		return fn("qjs_get_prop_string", uint64(global), uint64(k))
	}
	run, take, undef := get("__agentic_run"), get("__agentic_take"), fn("qjs_get_undefined")
	argv := fn("wasm_malloc", 8)
	return func(export string, input []byte) []byte {
		e, in := newString([]byte(export)), newString(input)
		mem.WriteUint32Le(argv, e)
		mem.WriteUint32Le(argv+4, in)
		fn("qjs_free_value", uint64(fn("qjs_call", uint64(run), uint64(undef), 2, uint64(argv))))
		fn("qjs_free_value", uint64(e))
		fn("qjs_free_value", uint64(in))
		for fn("qjs_is_job_pending") != 0 {
			fn("qjs_execute_pending_job")
		}
		out := fn("qjs_call", uint64(take), uint64(undef), 0, 0)
		defer fn("qjs_free_value", uint64(out))
		return str(out)
	}, mem.Size()
}

// BenchmarkJavaScriptCall runs, in one loop, a warm call of a TypeScript
// tool (an echo of 1 KB) through the plugins runtime — metered, its
// memory put back before the call, its request and answer checked — the
// same call through the runtime on the engine loaded unmetered (the
// floor: what the meter costs), and the same call on the same engine run
// bare (bareJS), taking turns to go first. It reports the three,
// host/bare, host/floor, the heap the host allocates a call,
// the engine's memory once the script ran (what each instance holds, and
// copies back before a call), and the first call of a module just loaded
// (cold-ms: compiled engine in the cache, the instance made, the script
// run).
func BenchmarkJavaScriptCall(b *testing.B) {
	ctx := context.Background()
	wasm := jsHostileWasm(b)
	rt, _ := newRuntime(b)
	m := load(b, rt, "hostile_js", wasm, plugins.Limits{Instances: 1})
	tool, _ := m.Tool("echo")
	call := host.ToolCall{ID: "c", SessionID: "s", Name: "echo", Input: payload1KB}
	req, err := json.Marshal(map[string]any{"tool": "echo", "input": payload1KB, "call_id": "c", "session_id": "s", "tenant": m.Tenant()})
	if err != nil {
		b.Fatal(err)
	}
	frt, _ := newRuntime(b)
	plugins.LoadUnmetered(frt)
	floorTool, _ := load(b, frt, "hostile_js", wasm, plugins.Limits{Instances: 1}).Tool("echo")
	bare, memBytes := bareJS(b, wasm)
	if out := bare("call", req); !bytes.HasPrefix(out, []byte(`{"output":{`)) {
		b.Fatalf("bare call answered %.100s", out)
	}
	hostCall := func() {
		if _, err := tool.Call(ctx, call); err != nil {
			b.Fatal(err)
		}
	}
	bareCall := func() { bare("call", req) }
	floorCall := func() {
		if _, err := floorTool.Call(ctx, call); err != nil {
			b.Fatal(err)
		}
	}
	for range 3 {
		hostCall()
		bareCall()
		floorCall()
	}
	hostBytes := bytesPerCall(hostCall)
	cold := coldCallMs(b, rt, wasm, call)
	calls := [3]func(){hostCall, bareCall, floorCall}
	var sum [3]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range 3 {
			k := (i + j) % 3
			t0 := time.Now()
			calls[k]()
			sum[k] += time.Since(t0)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(sum[0].Nanoseconds())/float64(b.N), "host-ns/call")
	b.ReportMetric(float64(sum[1].Nanoseconds())/float64(b.N), "bare-ns/call")
	b.ReportMetric(float64(sum[2].Nanoseconds())/float64(b.N), "floor-ns/call")
	b.ReportMetric(float64(sum[0])/float64(sum[1]), "host/bare")
	b.ReportMetric(float64(sum[0])/float64(sum[2]), "host/floor")
	b.ReportMetric(hostBytes, "host-B/call")
	b.ReportMetric(float64(memBytes)/1024, "instance-KiB")
	b.ReportMetric(cold, "cold-ms")
}
