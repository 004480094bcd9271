package plugins_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
	w "github.com/agentichost/agentic/plugins/internal/wasmgen"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// The sandbox's bounds, attacked: modules of a few hundred bytes, written
// byte by byte, that try to run past their deadline or fuel without the
// meter's cooperation, to take memory outside the limits, or to reach the
// meter itself. Each is refused when it loads, or stopped by its fuel and
// by its deadline, while Go's collector and the other tenants' calls go
// on.

// Types of the hostile modules.
var hostileTypes = []w.Type{
	{},                             // 0: () -> ()
	{Params: []byte{w.I32, w.I64}}, // 1: log(level, msg)
	{Params: []byte{w.I32, w.I32}, Results: []byte{w.I32}}, // 2: random_get(buf, len)
	{Params: []byte{w.I64}, Results: []byte{w.I64}},        // 3: alloc(n), length(p)
	{Params: []byte{w.I32}},                                // 4: the meter's check
}

// logImport is the host's log function: a hostile module calls log(1, 0)
// (an empty line) right before its attack, so that the test knows it runs.
var logImport = w.Import{Module: "extism:host/user", Name: "log", Type: 1}

// signal is the code of log(1, 0).
var signal = []byte{w.I32Const, 1, w.I64Const, 0, w.Call, 0}

// attack is a module that logs, then attacks in its export "go" (or in its
// start function, when start).
func attack(imports []w.Import, locals []w.Local, code []byte, start bool) []byte {
	m := w.Module{
		Types:   hostileTypes,
		Imports: append([]w.Import{logImport}, imports...),
		Memory:  &w.Memory{Min: 512, Max: 512, HasMax: true},
	}
	idx := uint32(len(m.Imports))
	m.Funcs = []w.Func{{Type: 0, Locals: locals, Code: append(append([]byte{}, signal...), code...)}}
	if start {
		m.Start = &idx
	} else {
		m.Exports = []w.Export{w.ExportFunc("go", idx)}
	}
	return m.Encode()
}

// fillForever fills all 32 MiB of memory, forever: one instruction a turn
// that does 32 MiB of work.
var fillForever = w.Forever(nil, w.MemoryFill(w.I32c(w.I32c(w.I32c(nil, 0), 0), 32<<20))...)

// copyForever copies 16 MiB within memory, forever.
var copyForever = w.Forever(nil, w.MemoryCopy(w.I32c(w.I32c(w.I32c(nil, 0), 16<<20), 16<<20))...)

// randomForever asks WASI for 32 MiB of random bytes, forever: one call a
// turn, whose work is the host's.
var randomForever = w.Forever(nil, append(w.I32c(w.I32c(nil, 0), 32<<20), w.Call, 1, w.Drop)...)

// walkForever allocates 100,000 blocks of Extism's kernel, then asks the
// length of the last, forever: each call walks every block.
var walkForever = func() []byte {
	code := []byte{w.Block, w.Void, w.Loop, w.Void,
		w.I64Const, 1, w.Call, 1, w.LocalSet, 0, // last = alloc(1)
		w.LocalGet, 1, w.I32Const, 1, w.I32Add, w.LocalTee, 1}
	code = w.I32c(code, 100_000)
	code = append(code, 0x49, w.BrIf, 0, w.End, w.End) // i32.lt_u; br_if 0
	return w.Forever(code, w.LocalGet, 0, w.Call, 2, w.Drop)
}()

var (
	randomImport = w.Import{Module: "wasi_snapshot_preview1", Name: "random_get", Type: 2}
	allocImport  = w.Import{Module: "extism:host/env", Name: "alloc", Type: 3}
	lengthImport = w.Import{Module: "extism:host/env", Name: "length", Type: 3}
	walkLocals   = []w.Local{{Count: 1, Type: w.I64}, {Count: 1, Type: w.I32}}
)

// hostileAttacks are the modules that run past any bound a cooperative
// guest would keep.
var hostileAttacks = []struct {
	name  string
	wasm  []byte
	start bool // it attacks in its start function
}{
	{"memory.fill of all memory", attack(nil, nil, fillForever, false), false},
	{"memory.copy of half the memory", attack(nil, nil, copyForever, false), false},
	{"WASI's random_get of all memory", attack([]w.Import{randomImport}, nil, randomForever, false), false},
	{"walks of Extism's kernel blocks", attack([]w.Import{allocImport, lengthImport}, walkLocals, walkForever, false), false},
	{"a start function filling memory", attack(nil, nil, fillForever, true), true},
}

// signalled is a logger that closes entered when a plugin logs an empty
// line: the hostile module's signal that its attack starts.
type signalled struct {
	slog.Handler
	once    *sync.Once
	entered chan struct{}
}

func (s signalled) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "" {
		s.once.Do(func() { close(s.entered) })
	}
	return nil
}

func (s signalled) Enabled(context.Context, slog.Level) bool { return true }
func (s signalled) WithAttrs([]slog.Attr) slog.Handler       { return s }
func (s signalled) WithGroup(string) slog.Handler            { return s }

func signalRuntime(t *testing.T) (*plugins.Runtime, chan struct{}) {
	entered := make(chan struct{})
	h := signalled{Handler: slog.DiscardHandler, once: &sync.Once{}, entered: entered}
	return plugintest.Runtime(t, plugins.Options{Logger: slog.New(h)}), entered
}

// runAttack loads the module and, unless it attacks in its start function
// (then the load is the attack), calls its export go.
func runAttack(ctx context.Context, rt *plugins.Runtime, wasm []byte, start bool, limits plugins.Limits) error {
	m, err := rt.Load(ctx, plugins.Source{Name: "attack", Wasm: wasm, Tenant: "evil", Limits: limits})
	if err != nil || start {
		return err
	}
	defer m.Close(ctx)
	_, err = m.CallExport(ctx, "go", nil)
	return err
}

// TestAttacksRunOutOfFuel: each attack's work is charged: with a small
// fuel and a deadline it cannot reach, it ends out of fuel. Before the
// meter charged bulk instructions and host functions by their work, each
// of these ran on a handful of units a turn, until killed.
func TestAttacksRunOutOfFuel(t *testing.T) {
	rt, _ := signalRuntime(t)
	for _, a := range hostileAttacks {
		t.Run(a.name, func(t *testing.T) {
			err := within(t, 5*time.Minute, a.name, func() error {
				return runAttack(context.Background(), rt, a.wasm, a.start, plugins.Limits{Fuel: 200_000_000, CallTimeout: time.Hour})
			})
			if !errors.Is(err, plugins.ErrOutOfFuel) {
				t.Fatalf("%v, want out of fuel", err)
			}
		})
	}
}

// TestAttacksStopAtTheirDeadline: with fuel it cannot spend, each attack
// is stopped at its deadline (the host checks it at least once per slice
// of fuel, and in every host function), while the tenant's other plugins
// and another tenant's are served.
func TestAttacksStopAtTheirDeadline(t *testing.T) {
	rt, _ := signalRuntime(t)
	for _, a := range hostileAttacks {
		t.Run(a.name, func(t *testing.T) {
			startBystanders(t, rt, "evil").during(t, a.name, func() {
				err := within(t, 5*time.Minute, a.name, func() error {
					return runAttack(context.Background(), rt, a.wasm, a.start, plugins.Limits{Fuel: 1 << 60, CallTimeout: 300 * time.Millisecond})
				})
				if !errors.Is(err, plugins.ErrTimeout) {
					t.Fatalf("%v, want a timeout", err)
				}
			})
		})
	}
}

// TestAttacksLetTheCollectorRun: Go's collector stops every goroutine at
// a safe point, and a goroutine in guest code reaches none until the guest
// returns to Go; a guest that never did froze the whole process at the
// next collection. While each attack runs, with neither fuel nor a
// deadline to stop it, three collections complete; then the call is
// cancelled and ends.
func TestAttacksLetTheCollectorRun(t *testing.T) {
	for _, a := range hostileAttacks {
		t.Run(a.name, func(t *testing.T) {
			rt, entered := signalRuntime(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ended := make(chan error, 1)
			go func() {
				ended <- runAttack(ctx, rt, a.wasm, a.start, plugins.Limits{Fuel: 1 << 60, CallTimeout: time.Hour})
			}()
			select {
			case <-entered:
			case err := <-ended:
				t.Fatalf("the attack ended before it started: %v", err)
			}
			within(t, 2*time.Minute, "three collections during the attack", func() bool {
				for range 3 {
					runtime.GC()
				}
				return true
			})
			select {
			case err := <-ended:
				t.Fatalf("the attack ended before it was cancelled: %v", err)
			default:
			}
			cancel()
			err := within(t, 2*time.Minute, "the cancelled attack", func() error { return <-ended })
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("the cancelled attack: %v", err)
			}
		})
	}
}

// TestModulesThatReachTheMeter: a module that names the meter's global,
// type or import, or takes what no limit counts, is refused when it loads,
// with the reason.
func TestModulesThatReachTheMeter(t *testing.T) {
	topUp := w.Forever(nil, append(w.I32c(nil, 0), w.Drop, w.I64Const, 0xC0, 0x84, 0x3D, w.GlobalSet, 0)...) // global 0 = 1,000,000
	noGlobals := w.Module{Types: hostileTypes[:1], Funcs: []w.Func{{Type: 0, Code: topUp}}, Exports: []w.Export{w.ExportFunc("go", 0)}}
	oneGlobal := noGlobals
	oneGlobal.Globals = []w.Global{{Type: w.I32, Mutable: true, Init: w.I32c(nil, 0)}}
	oneGlobal.Funcs = []w.Func{{Type: 0, Code: w.Forever(nil, w.I64Const, 0xC0, 0x84, 0x3D, w.GlobalSet, 1)}}
	check := w.Module{Types: hostileTypes, Imports: []w.Import{{Module: "agentic:host/fuel", Name: "check", Type: 4}},
		Funcs: []w.Func{{Type: 0, Code: w.Forever(nil, w.I32Const, 0, w.Call, 0)}}, Exports: []w.Export{w.ExportFunc("go", 1)}}
	refill := check
	refill.Types = hostileTypes[:1]
	refill.Imports = []w.Import{{Module: "agentic:host/fuel", Name: "refill", Type: 0}}
	refill.Funcs = []w.Func{{Type: 0, Code: w.Forever(nil, w.Call, 0)}}
	// call_indirect through type 1, which only the meter's (i32) -> ()
	// would be.
	typeIdx := w.Module{Types: hostileTypes[:1], Tables: []w.Table{{Min: 1}},
		Funcs:   []w.Func{{Type: 0, Code: []byte{w.I32Const, 0, w.I32Const, 0, w.CallInd, 1, 0}}},
		Exports: []w.Export{w.ExportFunc("go", 0)}}
	bigTable := w.Module{Tables: []w.Table{{Min: 1 << 27}}}
	tables := w.Module{Tables: []w.Table{{Min: 100_000}, {Min: 100_000}}}
	memory := w.Module{Types: hostileTypes, Imports: []w.Import{{Module: "env", Name: "memory", Kind: 2, Desc: []byte{0x00, 0x01}}}}
	unknown := w.Module{Types: hostileTypes, Imports: []w.Import{{Module: "env", Name: "abort", Type: 0}}}
	inTable := w.Module{Types: hostileTypes, Imports: []w.Import{randomImport}, Tables: []w.Table{{Min: 1}},
		Elems: []w.Elem{{Offset: 0, Funcs: []uint32{0}}}}

	rt, _ := newRuntime(t)
	for _, tc := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"the meter's global, in a module of none", noGlobals.Encode(), "global 0 of a module of 0"},
		{"the meter's global, past the module's own", oneGlobal.Encode(), "global 1 of a module of 1"},
		{"the meter's check import", check.Encode(), "the meter's own"},
		{"the meter's old refill import", refill.Encode(), "the meter's own"},
		{"the meter's type", typeIdx.Encode(), "type 1 of a module of 1"},
		{"a table of 2^27 elements", bigTable.Encode(), "start with 134217728 elements, the limit is 131072"},
		{"two tables past the bound together", tables.Encode(), "start with 200000 elements"},
		{"an imported memory", memory.Encode(), "imports a memory"},
		{"an import the host does not provide", unknown.Encode(), `the host has no function`},
		{"a WASI function in a table", inTable.Encode(), "table or reference holds the import wasi_snapshot_preview1.random_get"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rt.Load(context.Background(), plugins.Source{Name: "meterish", Wasm: tc.wasm})
			if !errors.Is(err, plugins.ErrInvalidModule) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("load: %v, want an invalid module: %s", err, tc.want)
			}
		})
	}
}

// TestTableGrowBounded: table.grow past Limits.MaxTableElements fails (it
// returns -1, as past a table's maximum) instead of taking gigabytes of
// the host's memory.
func TestTableGrowBounded(t *testing.T) {
	grow := w.Module{Types: hostileTypes[:1], Tables: []w.Table{{Min: 0}},
		// table.grow(null, 2^27); unreachable unless it returned -1
		Funcs: []w.Func{{Type: 0, Code: append(w.TableGrow(w.I32c(w.RefNull(nil), 1<<27)),
			w.I32Const, 0x7F, 0x47, w.If, w.Void, w.Unreachable, w.End)}}, // i32.const -1; i32.ne; if unreachable
		Exports: []w.Export{w.ExportFunc("go", 0)}}
	rt, _ := newRuntime(t)
	m := load(t, rt, "grow", grow.Encode(), plugins.Limits{})
	if _, err := m.CallExport(context.Background(), "go", nil); err != nil {
		t.Fatalf("table.grow by 2^27 elements: %v, want it to fail and the call to return", err)
	}
}
