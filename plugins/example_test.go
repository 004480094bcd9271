package plugins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
)

// greeter assembles a tiny plain Extism module by hand: its export "greet"
// outputs text. (Real plugins are built from Go, AssemblyScript or C with
// the kits in pdk/; this keeps the example self-contained.)
func greeter(text string) []byte {
	vec := func(items ...[]byte) []byte {
		out := uleb(uint64(len(items)))
		for _, it := range items {
			out = append(out, it...)
		}
		return out
	}
	name := func(s string) []byte { return append(uleb(uint64(len(s))), s...) }
	section := func(id byte, body []byte) []byte {
		return append(append([]byte{id}, uleb(uint64(len(body)))...), body...)
	}
	const i32, i64 = 0x7f, 0x7e
	types := vec(
		[]byte{0x60, 0, 1, i32},      // 0: () -> i32, the export
		[]byte{0x60, 1, i64, 1, i64}, // 1: alloc(i64) -> i64
		[]byte{0x60, 2, i64, i32, 0}, // 2: store_u8(i64, i32)
		[]byte{0x60, 2, i64, i64, 0}, // 3: output_set(i64, i64)
	)
	env := func(field string, typ byte) []byte {
		return append(append(name("extism:host/env"), name(field)...), 0x00, typ)
	}
	imports := vec(env("alloc", 1), env("store_u8", 2), env("output_set", 3)) // functions 0, 1, 2
	// greet: off = alloc(len); store each byte; output_set(off, len); return 0
	code := []byte{0x42}
	code = append(code, sleb(int64(len(text)))...)
	code = append(code, 0x10, 0, 0x21, 0) // call alloc; local.set 0
	for i := 0; i < len(text); i++ {
		code = append(code, 0x20, 0, 0x42)
		code = append(code, sleb(int64(i))...)
		code = append(code, 0x7c, 0x41) // i64.add; i32.const
		code = append(code, sleb(int64(text[i]))...)
		code = append(code, 0x10, 1) // call store_u8
	}
	code = append(code, 0x20, 0, 0x42)
	code = append(code, sleb(int64(len(text)))...)
	code = append(code, 0x10, 2, 0x41, 0, 0x0b) // call output_set; i32.const 0; end
	body := append([]byte{1, 1, i64}, code...)  // one local: i64
	var m []byte
	m = append(m, 0, 'a', 's', 'm', 1, 0, 0, 0)
	m = append(m, section(1, types)...)
	m = append(m, section(2, imports)...)
	m = append(m, section(3, vec([]byte{0}))...)
	m = append(m, section(7, vec(append(name("greet"), 0x00, 3)))...)
	m = append(m, section(10, vec(append(uleb(uint64(len(body))), body...)))...)
	return m
}

func uleb(v uint64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}

func sleb(v int64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && b&0x40 == 0) || (v == -1 && b&0x40 != 0) {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}

// A registry serves a tenant's plugins as a host.Toolset. Here the plugin
// is a plain Extism module made a tool by its sidecar manifest.
func ExampleRegistry() {
	ctx := context.Background()
	rt, err := plugins.NewRuntime(plugins.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer rt.Close(ctx)
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
		Limits: func(tenant string) plugins.Limits { return plugins.Limits{} }, // the deny-by-default sandbox
	})
	defer reg.Close(ctx)

	sidecar, err := plugins.ParseSidecar([]byte(`{"name": "greet", "description": "Say hello.",
		"export": "greet", "effect": "read", "idempotent": true}`))
	if err != nil {
		panic(err)
	}
	if _, err := reg.Load(ctx, "acme", plugins.Source{Name: "greeter", Wasm: greeter("hello from Wasm"), Sidecar: sidecar}); err != nil {
		panic(err)
	}

	var toolset host.Toolset = reg.Toolset("acme")
	for _, tool := range toolset.Tools() {
		spec := tool.Spec()
		res, err := tool.Call(ctx, host.ToolCall{ID: "call-1", Name: spec.Name, Input: json.RawMessage(`{}`)})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s (%s): %s\n", spec.Name, spec.Effect, res.Output)
	}
	// Output:
	// greet (read): hello from Wasm
}
