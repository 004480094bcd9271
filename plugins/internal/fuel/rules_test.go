package fuel_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentichost/agentic/plugins/internal/fuel"
	w "github.com/agentichost/agentic/plugins/internal/wasmgen"
)

func u32(v uint32) *uint32 { return &v }

// run instantiates a metered module with m's host side, gives it fuel and
// calls export with args; it returns the fuel used and the call's error.
func run(t *testing.T, m *meter, wasm []byte, fuelGiven int64, export string, args ...uint64) (int64, []uint64, error) {
	t.Helper()
	mod := instantiate(t, m, wasm)
	g := tank(t, mod)
	g.Set(uint64(fuelGiven))
	res, err := mod.ExportedFunction(export).Call(context.Background(), args...)
	return fuelGiven - int64(g.Get()), res, err
}

// bulkModule has one page of memory (at most 4), a table of 4 funcref,
// and exports fill(n) (memory.fill of n bytes of 1 at 0), copy(n), grow(n)
// (memory.grow, its result), tgrow(n) and tfill(n).
func bulkModule() []byte {
	fill := w.MemoryFill(append(w.I32c(w.I32c(nil, 0), 1), w.LocalGet, 0))
	cp := w.MemoryCopy(append(w.I32c(w.I32c(nil, 0), 0), w.LocalGet, 0))
	tfill := w.TableFill(append(w.RefNull(w.I32c(nil, 0)), w.LocalGet, 0))
	m := w.Module{
		Types:  []w.Type{{Params: []byte{w.I32}}, {Params: []byte{w.I32}, Results: []byte{w.I32}}},
		Memory: &w.Memory{Min: 1, Max: 4, HasMax: true},
		Tables: []w.Table{{Min: 4}},
		Funcs: []w.Func{
			{Type: 0, Code: fill},
			{Type: 0, Code: cp},
			{Type: 1, Code: []byte{w.LocalGet, 0, w.MemoryGrow, 0x00}},
			{Type: 1, Code: w.TableGrow(append(w.RefNull(nil), w.LocalGet, 0))},
			{Type: 0, Code: tfill},
		},
		Exports: []w.Export{w.ExportFunc("fill", 0), w.ExportFunc("copy", 1), w.ExportFunc("grow", 2), w.ExportFunc("tgrow", 3), w.ExportFunc("tfill", 4)},
	}
	return m.Encode()
}

// TestBulkCharged: an instruction whose work grows with its length is
// charged by it (a unit per 16 bytes of memory, per element of a table),
// and a call that cannot pay for one fails before the instruction runs:
// a fill past the fuel leaves the memory as it was.
func TestBulkCharged(t *testing.T) {
	wasm := instrument(t, bulkModule(), fuel.Options{})
	for _, tc := range []struct {
		export string
		n      uint64
		extra  int64 // over n = 0
	}{
		{"fill", 65536, 65536 / 16},
		{"copy", 65536, 65536 / 16},
		{"tfill", 4, 4},
	} {
		base, _, err := run(t, &meter{}, wasm, 1<<40, tc.export, 0)
		if err != nil {
			t.Fatalf("%s(0): %v", tc.export, err)
		}
		used, _, err := run(t, &meter{}, wasm, 1<<40, tc.export, tc.n)
		if err != nil {
			t.Fatalf("%s(%d): %v", tc.export, tc.n, err)
		}
		if used-base != tc.extra {
			t.Errorf("%s(%d) used %d more than %s(0), want %d", tc.export, tc.n, used-base, tc.export, tc.extra)
		}
	}

	// On too little fuel, the fill does not run.
	mod := instantiate(t, &meter{}, wasm)
	tank(t, mod).Set(1000)
	if _, err := mod.ExportedFunction("fill").Call(context.Background(), 65536); err == nil || !strings.Contains(err.Error(), "out of fuel") {
		t.Fatalf("a fill of 4,096 units on 1,000 fuel: %v, want out of fuel", err)
	}
	if b, _ := mod.Memory().ReadByte(100); b != 0 {
		t.Error("the fill ran before its charge failed")
	}
}

// TestGrowCharged: a grow that succeeds is charged for the memory (4,096
// a page) or table (one an element) it leaves, its delta and what was
// there before; one that fails, nothing beyond the instruction.
func TestGrowCharged(t *testing.T) {
	wasm := instrument(t, bulkModule(), fuel.Options{})
	for _, tc := range []struct {
		export string
		n      uint64
		ok     bool
		extra  int64
	}{
		// grow(0) succeeds too, charged the page it leaves: 4,096.
		{"grow", 2, true, (1+2)*4096 - 4096},
		{"grow", 9, false, -4096},
		{"tgrow", 6, true, (4 + 6) - 4},
	} {
		base, _, err := run(t, &meter{}, wasm, 1<<40, tc.export, 0)
		if err != nil {
			t.Fatalf("%s(0): %v", tc.export, err)
		}
		used, res, err := run(t, &meter{}, wasm, 1<<40, tc.export, tc.n)
		if err != nil {
			t.Fatalf("%s(%d): %v", tc.export, tc.n, err)
		}
		if ok := int32(res[0]) != -1; ok != tc.ok {
			t.Fatalf("%s(%d) = %d", tc.export, tc.n, int32(res[0]))
		}
		if used-base != tc.extra {
			t.Errorf("%s(%d) used %d more than %s(0), want %d", tc.export, tc.n, used-base, tc.export, tc.extra)
		}
	}
}

// TestTableLimits: the tables' maxima are lowered to fit the bound
// together, so that a grow fails past it; tables that start past it are
// refused.
func TestTableLimits(t *testing.T) {
	wasm := instrument(t, bulkModule(), fuel.Options{MaxTableElements: 100})
	if _, res, err := run(t, &meter{}, wasm, 1<<40, "tgrow", 96); err != nil || int32(res[0]) != 4 {
		t.Fatalf("tgrow(96) to the bound: %v, %v", res, err)
	}
	if _, res, err := run(t, &meter{}, wasm, 1<<40, "tgrow", 97); err != nil || int32(res[0]) != -1 {
		t.Fatalf("tgrow(97) past the bound = %v, %v; want -1", res, err)
	}
	if _, err := fuel.Instrument(bulkModule(), fuel.Options{MaxTableElements: 3}); err == nil || !strings.Contains(err.Error(), "start with 4 elements") {
		t.Errorf("a table of 4 under a bound of 3: %v", err)
	}
	two := w.Module{Tables: []w.Table{{Min: 10, Max: 50, HasMax: true}, {Min: 10}}}
	got := instrument(t, two.Encode(), fuel.Options{MaxTableElements: 100})
	cm, err := newRuntime(t, &meter{}).CompileModule(context.Background(), got)
	if err != nil {
		t.Fatal(err)
	}
	_ = cm
	// The first table keeps its maximum of 50, the second gets what is
	// left: 50 too, 100 together.
	if !strings.Contains(string(got), string([]byte{0x04, 0x09, 0x02, w.Funcref, 0x01, 10, 50, w.Funcref, 0x01, 10, 50})) {
		t.Errorf("the tables' limits are not 10..50 and 10..50: % x", got)
	}
}

// importModule imports env.f(i32, i32) -> i32 and env.g(), and exports
// callf(a, b) = f(a, b) and callg().
func importModule() w.Module {
	return w.Module{
		Types: []w.Type{{Params: []byte{w.I32, w.I32}, Results: []byte{w.I32}}, {}},
		Imports: []w.Import{
			{Module: "env", Name: "f", Type: 0},
			{Module: "env", Name: "g", Type: 1},
		},
		Funcs: []w.Func{
			{Type: 0, Code: []byte{w.LocalGet, 0, w.LocalGet, 1, w.Call, 0}},
			{Type: 1, Code: []byte{w.Call, 1}},
		},
		Exports: []w.Export{w.ExportFunc("callf", 2), w.ExportFunc("callg", 3)},
	}
}

// TestImportRules: an import is renamed as its rule says, charged its
// base and from its arguments (which reach it unchanged), and a gated one
// is called after the check import with the gate's number.
func TestImportRules(t *testing.T) {
	rules := func(module, name string, kind fuel.ImportKind) (fuel.Import, error) {
		switch name {
		case "f":
			return fuel.Import{Module: "env2", Base: 7, Args: []fuel.ArgCost{{Param: 1, Per: 3, Shift: 1}}}, nil
		case "g":
			return fuel.Import{Gate: 42}, nil
		}
		return fuel.Import{}, errors.New("unknown")
	}
	wasm := instrument(t, importModule().Encode(), fuel.Options{Imports: rules})
	ctx := context.Background()
	fm := &meter{}
	r := newRuntime(t, fm)
	gs := 0
	if _, err := r.NewHostModuleBuilder("env2").NewFunctionBuilder().
		WithFunc(func(a, b uint32) uint32 { return a*1000 + b }).Export("f").Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.NewHostModuleBuilder("env").NewFunctionBuilder().
		WithFunc(func() { gs++ }).Export("g").Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	mod, err := r.Instantiate(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	g := tank(t, mod)
	usedBy := func(export string, args ...uint64) (int64, []uint64) {
		g.Set(1 << 40)
		res, err := mod.ExportedFunction(export).Call(ctx, args...)
		if err != nil {
			t.Fatalf("%s%v: %v", export, args, err)
		}
		return 1<<40 - int64(g.Get()), res
	}
	small, res := usedBy("callf", 1, 2)
	if res[0] != 1002 {
		t.Fatalf("callf(1, 2) = %d: the arguments did not reach f unchanged", res[0])
	}
	big, res := usedBy("callf", 1, 2002)
	if res[0] != 3002 {
		t.Fatalf("callf(1, 2002) = %d", res[0])
	}
	if big-small != (2002*3)>>1-(2*3)>>1 {
		t.Errorf("f charged %d more for b = 2002 than for 2, want (b×3)>>1: %d", big-small, (2002*3)>>1-(2*3)>>1)
	}
	if small < 7+(2*3)>>1 {
		t.Errorf("callf(1, 2) used %d, less than f's base and argument cost", small)
	}
	usedBy("callg")
	if gs != 1 || len(fm.gates) != 1 || fm.gates[0] != 42 {
		t.Errorf("callg: g ran %d times, gates %v; want once after gate 42", gs, fm.gates)
	}
}

// TestImportRefusals: what would let a call escape its charge is refused:
// importing the meter's own module, a charged import in a table or a
// reference, a table imported when tables are bounded, an import the
// rules refuse.
func TestImportRefusals(t *testing.T) {
	charged := func(module, name string, kind fuel.ImportKind) (fuel.Import, error) {
		if kind != fuel.ImportFunction {
			return fuel.Import{}, errors.New("functions only")
		}
		return fuel.Import{Gate: 1}, nil
	}
	own := importModule()
	own.Imports[1] = w.Import{Module: fuel.ImportModule, Name: fuel.ImportName, Type: 1}
	inTable := importModule()
	inTable.Tables = []w.Table{{Min: 1}}
	inTable.Elems = []w.Elem{{Offset: 0, Funcs: []uint32{1}}}
	ref := importModule()
	ref.Funcs[1].Code = []byte{w.RefFunc, 1, w.Drop}
	ref.Elems = []w.Elem{{Offset: 0, Funcs: []uint32{1}}}
	table := importModule()
	table.Imports = append(table.Imports, w.Import{Module: "env", Name: "t", Kind: 1, Desc: []byte{w.Funcref, 0x00, 0x01}})
	for _, tc := range []struct {
		name string
		wasm []byte
		opts fuel.Options
		want string
	}{
		{"the meter's module", own.Encode(), fuel.Options{}, "the meter's own"},
		{"a charged import in a table", inTable.Encode(), fuel.Options{Imports: charged}, "table or reference holds the import env.g"},
		{"a reference of a charged import", ref.Encode(), fuel.Options{Imports: charged}, "table or reference holds the import env.g"},
		{"an imported table", table.Encode(), fuel.Options{MaxTableElements: 10}, "imported table"},
		{"a refused import", table.Encode(), fuel.Options{Imports: charged}, "functions only"},
	} {
		out, err := fuel.Instrument(tc.wasm, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %d bytes, %v; want an error saying %q", tc.name, len(out), err, tc.want)
		}
	}
}

// TestStartExport: with StartExport, the start function no longer runs
// when the module is instantiated; it is an export the host calls, on the
// call's fuel.
func TestStartExport(t *testing.T) {
	m := w.Module{
		Types:   []w.Type{{}},
		Globals: []w.Global{{Type: w.I32, Mutable: true, Init: w.I32c(nil, 0)}},
		Funcs:   []w.Func{{Type: 0, Code: append(w.I32c(nil, 5), w.GlobalSet, 0)}},
		Exports: []w.Export{w.ExportGlobal("g", 0)},
		Start:   u32(0),
	}
	wasm := instrument(t, m.Encode(), fuel.Options{StartExport: "agentic-host:start"})
	mod := instantiate(t, &meter{}, wasm)
	if mod.ExportedGlobal("g").Get() != 0 {
		t.Fatal("the start function ran when the module was instantiated")
	}
	g := tank(t, mod)
	g.Set(100)
	if _, err := mod.ExportedFunction("agentic-host:start").Call(context.Background()); err != nil {
		t.Fatal(err)
	}
	if mod.ExportedGlobal("g").Get() != 5 || int64(g.Get()) >= 100 {
		t.Errorf("the start export set g to %d using %d fuel", mod.ExportedGlobal("g").Get(), 100-int64(g.Get()))
	}
	m.Exports = append(m.Exports, w.ExportFunc("agentic-host:start", 0))
	if _, err := fuel.Instrument(m.Encode(), fuel.Options{StartExport: "agentic-host:start"}); err == nil {
		t.Error("a module exporting the start export's name already was metered")
	}
}
