package plugins_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// rustInstanceMemory runs one call of a Rust plugin with wazero alone and
// a minimal Extism kernel (blocks in a Go map) and returns the module's
// memory after it: what an instance holds once it has served a call.
func rustInstanceMemory(b testing.TB, wasm, input []byte) uint32 {
	b.Helper()
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	blocks := map[uint64][]byte{}
	next := uint64(1)
	var output uint64
	u8 := func(p []byte, i uint64) uint32 { return uint32(p[i]) }
	env := r.NewHostModuleBuilder("extism:host/env").
		NewFunctionBuilder().WithFunc(func() uint64 { return uint64(len(input)) }).Export("input_length").
		NewFunctionBuilder().WithFunc(func(off uint64) uint32 { return u8(input, off) }).Export("input_load_u8").
		NewFunctionBuilder().WithFunc(func(off uint64) uint64 { return binary.LittleEndian.Uint64(input[off:]) }).Export("input_load_u64").
		NewFunctionBuilder().WithFunc(func(n uint64) uint64 {
		off := next << 32
		next++
		blocks[off] = make([]byte, n)
		return off
	}).Export("alloc").
		NewFunctionBuilder().WithFunc(func(off uint64) {}).Export("free").
		NewFunctionBuilder().WithFunc(func(off uint64) uint64 { return uint64(len(blocks[off&^0xffffffff])) }).Export("length").
		NewFunctionBuilder().WithFunc(func(off uint64, v uint32) { blocks[off&^0xffffffff][off&0xffffffff] = byte(v) }).Export("store_u8").
		NewFunctionBuilder().WithFunc(func(off, v uint64) {
		binary.LittleEndian.PutUint64(blocks[off&^0xffffffff][off&0xffffffff:], v)
	}).Export("store_u64").
		NewFunctionBuilder().WithFunc(func(off uint64) uint32 { return u8(blocks[off&^0xffffffff], off&0xffffffff) }).Export("load_u8").
		NewFunctionBuilder().WithFunc(func(off uint64) uint64 {
		return binary.LittleEndian.Uint64(blocks[off&^0xffffffff][off&0xffffffff:])
	}).Export("load_u64").
		NewFunctionBuilder().WithFunc(func(off, n uint64) { output = off }).Export("output_set").
		NewFunctionBuilder().WithFunc(func(off uint64) uint64 { return 0 }).Export("config_get")
	if _, err := env.Instantiate(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := r.NewHostModuleBuilder("extism:host/user").
		NewFunctionBuilder().WithFunc(func(level uint32, msg uint64) {}).Export("log").
		Instantiate(ctx); err != nil {
		b.Fatal(err)
	}
	mod, err := r.Instantiate(ctx, wasm)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := mod.ExportedFunction("call").Call(ctx); err != nil {
		b.Fatal(err)
	}
	if out := blocks[output]; !strings.HasPrefix(string(out), `{"output":{`) {
		b.Fatalf("the bare call answered %.100s", out)
	}
	var m api.Memory = mod.Memory()
	return m.Size()
}

// BenchmarkRustCall: a warm call of the Rust example rust_text on 1 KB of
// text through the runtime, the heap the host allocates a call, the
// module's memory once it has served a call (what each instance holds),
// and the first call of a module just loaded (cold-ms: compiled already,
// the instance made, described, called).
func BenchmarkRustCall(b *testing.B) {
	ctx := context.Background()
	wasm := rustTextWasm(b)
	text := strings.Repeat("The cat and the hat. ", 50)[:1000]
	input, _ := json.Marshal(map[string]string{"text": text})
	call := host.ToolCall{ID: "c", SessionID: "s", Name: "rust_text", Input: input}
	req, _ := json.Marshal(map[string]any{"tool": "rust_text", "input": json.RawMessage(input), "call_id": "c", "session_id": "s", "tenant": "acme"})
	memBytes := rustInstanceMemory(b, wasm, req)
	rt, _ := newRuntime(b)
	tool, _ := load(b, rt, "rust_text", wasm, plugins.Limits{Instances: 1}).Tool("rust_text")
	hostCall := func() {
		if _, err := tool.Call(ctx, call); err != nil {
			b.Fatal(err)
		}
	}
	hostCall()
	hostBytes := bytesPerCall(hostCall)
	cold := coldCallMs(b, rt, wasm, call)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		hostCall()
	}
	b.StopTimer()
	b.ReportMetric(hostBytes, "host-B/call")
	b.ReportMetric(float64(memBytes)/1024, "instance-KiB")
	b.ReportMetric(cold, "cold-ms")
	b.ReportMetric(float64(len(wasm))/1024, "module-KiB")
}
