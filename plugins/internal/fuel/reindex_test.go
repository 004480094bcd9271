package fuel_test

import (
	"context"
	"testing"

	"github.com/agentichost/agentic/plugins/internal/fuel"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// reindexed is a module whose every kind of function index the refill
// import moves: an imported function, a direct call, a call through a
// table filled by an element segment, a start function, exports, and the
// name section. run(x) = double(inc(x)) through the table + double(x)
// directly = 4x + 2; the start function sets the global g to 5.
func reindexed() []byte {
	name := func(s string) []byte { return vec(len(s), []byte(s)) }
	body := func(code ...byte) []byte { return append(uleb(len(code)+1), append([]byte{0x00}, code...)...) }
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, sec(1, vec(2, []byte{0x60, 1, i32, 1, i32, 0x60, 0, 0}))...)
	m = append(m, sec(2, vec(1, append(append(name("env"), name("inc")...), 0x00, 0x00)))...)
	m = append(m, sec(3, vec(3, []byte{0, 0, 1}))...)
	m = append(m, sec(4, vec(1, []byte{0x70, 0x00, 0x01}))...)
	m = append(m, sec(6, vec(1, []byte{i32, 0x01, 0x41, 0x00, 0x0B}))...)
	m = append(m, sec(7, vec(2, append(append(name("run"), 0x00, 0x02), append(name("g"), 0x03, 0x00)...)))...)
	m = append(m, sec(8, []byte{0x03})...)
	m = append(m, sec(9, vec(1, []byte{0x00, 0x41, 0x00, 0x0B, 0x01, 0x01}))...)
	codes := body(0x20, 0x00, 0x20, 0x00, 0x6A, 0x0B) // double
	codes = append(codes, body(
		0x20, 0x00, 0x10, 0x00, // inc(x)
		0x41, 0x00, 0x11, 0x00, 0x00, // table[0](…)
		0x20, 0x00, 0x10, 0x01, // double(x)
		0x6A, 0x0B)...)
	codes = append(codes, body(0x41, 0x05, 0x24, 0x00, 0x0B)...) // init: g = 5
	m = append(m, sec(10, vec(3, codes))...)
	names := vec(4, append(append(append(append([]byte{0}, name("inc")...), append([]byte{1}, name("double")...)...),
		append([]byte{2}, name("run")...)...), append([]byte{3}, name("init")...)...))
	m = append(m, sec(0, append(name("name"), append([]byte{0x01}, append(uleb(len(names)), names...)...)...))...)
	return m
}

// TestReindexed: the metered module computes what the original does,
// through an import, a table and a direct call; its start function runs;
// its exports and the names of its functions are where they were.
func TestReindexed(t *testing.T) {
	ctx := context.Background()
	for _, metered := range []bool{false, true} {
		wasm := reindexed()
		if metered {
			wasm = instrument(t, wasm, fuel.Options{})
		}
		r := newRuntime(t, &meter{})
		if _, err := r.NewHostModuleBuilder("env").NewFunctionBuilder().
			WithFunc(func(x uint32) uint32 { return x + 1 }).Export("inc").Instantiate(ctx); err != nil {
			t.Fatal(err)
		}
		cm, err := r.CompileModule(ctx, wasm)
		if err != nil {
			t.Fatalf("metered %v: %v", metered, err)
		}
		if def := cm.ExportedFunctions()["run"]; def == nil || def.Name() != "run" {
			t.Errorf("metered %v: the export run is %v", metered, def)
		}
		m, err := r.InstantiateModule(ctx, cm, wazero.NewModuleConfig())
		if err != nil {
			t.Fatalf("metered %v: %v", metered, err)
		}
		if metered {
			tank(t, m).Set(1 << 40)
		}
		got, err := m.ExportedFunction("run").Call(ctx, 10)
		if err != nil || got[0] != 42 {
			t.Errorf("metered %v: run(10) = %v, %v; want 42", metered, got, err)
		}
		if g := m.ExportedGlobal("g"); g == nil || g.Get() != 5 {
			t.Errorf("metered %v: the start function did not set g to 5", metered)
		}
		if metered {
			if _, ok := m.ExportedGlobal(fuel.Export).(api.MutableGlobal); !ok {
				t.Error("no fuel global")
			}
		}
	}
}
