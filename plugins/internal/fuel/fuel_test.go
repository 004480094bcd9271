package fuel_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/agentichost/agentic/plugins/internal/fuel"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// fn is a function of a module built by hand.
type fn struct {
	params, results []byte // value types
	locals          []byte // (count, type) pairs, encoded
	code            []byte // the instructions, without the final end
	export          string
}

// module assembles a module of fns (start, if >= 0, names its start
// function), with an i32 global and a memory, so that the rewrite meets
// sections it must keep.
func module(start int, fns ...fn) []byte {
	var types, funcs, exports, codes []byte
	nexp := 0
	for i, f := range fns {
		types = append(types, 0x60)
		types = append(types, vec(len(f.params), f.params)...)
		types = append(types, vec(len(f.results), f.results)...)
		funcs = append(funcs, byte(i))
		if f.export != "" {
			exports = append(exports, vec(len(f.export), []byte(f.export))...)
			exports = append(exports, 0x00, byte(i))
			nexp++
		}
		body := append([]byte{}, f.locals...)
		if len(f.locals) == 0 {
			body = []byte{0x00}
		}
		body = append(body, f.code...)
		body = append(body, 0x0B)
		codes = append(codes, uleb(len(body))...)
		codes = append(codes, body...)
	}
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, sec(1, vec(len(fns), types))...)
	m = append(m, sec(3, vec(len(fns), funcs))...)
	m = append(m, sec(5, []byte{0x01, 0x00, 0x01})...)                   // one memory of 1 page
	m = append(m, sec(6, []byte{0x01, 0x7F, 0x01, 0x41, 0x07, 0x0B})...) // (global (mut i32) (i32.const 7))
	m = append(m, sec(7, vec(nexp, exports))...)
	if start >= 0 {
		m = append(m, sec(8, []byte{byte(start)})...)
	}
	m = append(m, sec(10, vec(len(fns), codes))...)
	m = append(m, sec(0, append(vec(len(".debug_info"), []byte(".debug_info")), 1, 2, 3))...)
	return m
}

func vec(n int, items []byte) []byte { return append(uleb(n), items...) }

func sec(id byte, body []byte) []byte { return append(append([]byte{id}, uleb(len(body))...), body...) }

func uleb(n int) []byte {
	var b []byte
	for {
		c := byte(n & 0x7f)
		n >>= 7
		if n == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

const (
	i32 = 0x7F
	i64 = 0x7E
)

// count(n) loops n times and returns how many times it looped.
var count = fn{params: []byte{i32}, results: []byte{i32}, locals: []byte{0x01, 0x01, i32}, export: "count", code: []byte{
	0x02, 0x40, // block
	0x03, 0x40, //   loop
	0x20, 0x00, 0x45, 0x0D, 0x01, //     local.get 0; i32.eqz; br_if 1
	0x20, 0x00, 0x41, 0x01, 0x6B, 0x21, 0x00, //     n--
	0x20, 0x01, 0x41, 0x01, 0x6A, 0x21, 0x01, //     i++
	0x0C, 0x00, //     br 0
	0x0B, 0x0B, //   end end
	0x20, 0x01,
}}

// spin loops for ever.
var spin = fn{export: "spin", code: []byte{0x03, 0x40, 0x0C, 0x00, 0x0B}}

// tree calls itself twice until its argument is 0: 2^n calls, no loop.
func tree(self byte) fn {
	return fn{params: []byte{i32}, export: "tree", code: []byte{
		0x20, 0x00, 0x04, 0x40, // if n
		0x20, 0x00, 0x41, 0x01, 0x6B, 0x10, self, //   tree(n-1)
		0x20, 0x00, 0x41, 0x01, 0x6B, 0x10, self, //   tree(n-1)
		0x0B,
	}}
}

// meter is the host's side of a metered module, as a test keeps it: fuel
// beyond the global, given slice by slice at each refill, the refills, and
// the gates the module passed.
type meter struct {
	left, slice int64
	refills     int
	at          []int64 // the global at each refill
	gates       []int32
}

// newRuntime returns a runtime that compiles modules as the plugins do,
// with the check import bound to m: a refill (check(0)) takes a slice from
// m.left, or traps when m.left has none; a gate is recorded.
func newRuntime(t *testing.T, m *meter) wazero.Runtime {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig())
	t.Cleanup(func() { r.Close(ctx) })
	_, err := r.NewHostModuleBuilder(fuel.ImportModule).NewFunctionBuilder().
		WithFunc(func(ctx context.Context, mod api.Module, why int32) {
			if why != 0 {
				m.gates = append(m.gates, why)
				return
			}
			m.refills++
			g := mod.ExportedGlobal(fuel.Export).(api.MutableGlobal)
			m.at = append(m.at, int64(g.Get()))
			if m.left <= 0 {
				panic("out of fuel")
			}
			give := min(m.left, m.slice)
			m.left -= give
			g.Set(uint64(int64(g.Get()) + give))
		}).Export(fuel.ImportName).Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func instantiate(t *testing.T, m *meter, wasm []byte) api.Module {
	t.Helper()
	mod, err := newRuntime(t, m).Instantiate(context.Background(), wasm)
	if err != nil {
		t.Fatal(err)
	}
	return mod
}

func instrument(t *testing.T, wasm []byte, opts fuel.Options) []byte {
	t.Helper()
	out, err := fuel.Instrument(wasm, opts)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tank is a metered module's fuel.
func tank(t *testing.T, m api.Module) api.MutableGlobal {
	t.Helper()
	g, ok := m.ExportedGlobal(fuel.Export).(api.MutableGlobal)
	if !ok || g.Type() != api.ValueTypeI64 {
		t.Fatalf("the metered module exports no mutable i64 %q", fuel.Export)
	}
	return g
}

// TestMeteredBehavesAsTheOriginal: a metered function returns what the
// original returns, uses fuel in proportion to its work, the same fuel for
// the same call every time, and leaves the module's own global and memory
// alone.
func TestMeteredBehavesAsTheOriginal(t *testing.T) {
	ctx := context.Background()
	orig := module(-1, count)
	plain := instantiate(t, &meter{}, orig)
	metered := instantiate(t, &meter{}, instrument(t, orig, fuel.Options{}))
	g := tank(t, metered)
	if g.Get() != 0 {
		t.Errorf("the fuel starts at %d, want 0: none until the host gives some", int64(g.Get()))
	}
	used := map[uint64]int64{}
	for _, n := range []uint64{0, 1, 10, 1000, 10, 1000} {
		want, err := plain.ExportedFunction("count").Call(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		g.Set(1 << 40)
		got, err := metered.ExportedFunction("count").Call(ctx, n)
		if err != nil {
			t.Fatalf("count(%d): %v", n, err)
		}
		if got[0] != want[0] {
			t.Errorf("count(%d) = %d metered, %d plain", n, got[0], want[0])
		}
		u := 1<<40 - int64(g.Get())
		if prev, ok := used[n]; ok && prev != u {
			t.Errorf("count(%d) used %d fuel, then %d", n, prev, u)
		}
		used[n] = u
	}
	if !(used[0] > 0 && used[1] > used[0] && used[1000] > 50*used[10]) {
		t.Errorf("fuel used by count(0, 1, 10, 1000): %d %d %d %d: want it to grow with the loop", used[0], used[1], used[10], used[1000])
	}
	// Each pass of the loop's header is charged the loop's body, 13
	// instructions, the last pass too (it leaves at its br_if: the charge
	// bounds what runs from above); the rest of the function 5.
	if used[1000] != 13*1001+5 {
		t.Errorf("count(1000) used %d fuel, want 13,018 (13 a pass of the loop's header, 5 for the rest)", used[1000])
	}
}

// TestStraightLineCodeIsCharged: code after a block's end, which no loop
// header or function entry precedes closely, is charged all the same,
// whichever way the block is left: a call of a function of 20,000 straight
// instructions behind a block costs at least 20,000, when the block runs
// to its end and when a branch skips what a region split inside it.
func TestStraightLineCodeIsCharged(t *testing.T) {
	code := []byte{
		0x02, 0x40, // block
		0x20, 0x00, 0x0D, 0x00, //   br_if 0 when the argument is set
		0x02, 0x40, //   block
	}
	for range 20 {
		code = append(code, 0x41, 0x01, 0x1A) // i32.const 1; drop
	}
	code = append(code, 0x0B, 0x0B) // end end
	for range 10_000 {
		code = append(code, 0x41, 0x01, 0x1A)
	}
	m := instantiate(t, &meter{}, instrument(t, module(-1, fn{params: []byte{i32}, export: "long", code: code}), fuel.Options{}))
	g := tank(t, m)
	for _, skip := range []uint64{0, 1} {
		g.Set(1 << 40)
		if _, err := m.ExportedFunction("long").Call(context.Background(), skip); err != nil {
			t.Fatal(err)
		}
		if used := 1<<40 - int64(g.Get()); used < 20_000 {
			t.Errorf("skip %d: a call of 20,000 straight instructions used %d fuel", skip, used)
		}
	}
}

// TestOutOfFuel: a spinning loop, a loop-free exponential call tree and a
// start function that never returns all call refill once their fuel is
// spent, and trap when the host has none to give, with the global
// negative; a call with enough fuel runs again after a refill.
func TestOutOfFuel(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		wasm []byte
		call func(api.Module) error
	}{
		{"spinning loop", module(-1, spin), func(m api.Module) error {
			_, err := m.ExportedFunction("spin").Call(ctx)
			return err
		}},
		{"exponential call tree", module(-1, tree(0)), func(m api.Module) error {
			_, err := m.ExportedFunction("tree").Call(ctx, 60)
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fm := &meter{}
			m := instantiate(t, fm, instrument(t, tc.wasm, fuel.Options{}))
			g := tank(t, m)
			g.Set(1_000_000)
			err := tc.call(m)
			if err == nil {
				t.Fatal("returned: the fuel did not stop it")
			}
			if left := int64(g.Get()); left >= 0 || fm.refills != 1 || !strings.Contains(err.Error(), "out of fuel") {
				t.Errorf("trapped (%v) with %d fuel left after %d refills, want it negative after one, out of fuel", err, left, fm.refills)
			}
		})
	}

	t.Run("start function", func(t *testing.T) {
		wasm := instrument(t, module(0, fn{code: spin.code}), fuel.Options{})
		fm := &meter{left: 1_000_000, slice: 1000}
		_, err := newRuntime(t, fm).Instantiate(ctx, wasm)
		if err == nil || fm.refills != 1001 {
			t.Fatalf("instantiated (%v) after %d refills: the start function's fuel did not stop it", err, fm.refills)
		}
	})

	t.Run("refill", func(t *testing.T) {
		fm := &meter{}
		m := instantiate(t, fm, instrument(t, module(-1, tree(0)), fuel.Options{}))
		g := tank(t, m)
		g.Set(100)
		if _, err := m.ExportedFunction("tree").Call(ctx, 20); err == nil {
			t.Fatal("2^20 calls ran on 100 fuel")
		}
		g.Set(1 << 40)
		if _, err := m.ExportedFunction("tree").Call(ctx, 10); err != nil {
			t.Fatalf("after a refill: %v", err)
		}
	})

	// A call that needs more than the global holds runs on refills, one
	// slice at a time, and uses the same fuel as in one go.
	t.Run("slices", func(t *testing.T) {
		orig := module(-1, count)
		fm := &meter{}
		m := instantiate(t, fm, instrument(t, orig, fuel.Options{}))
		g := tank(t, m)
		g.Set(1 << 40)
		if _, err := m.ExportedFunction("count").Call(ctx, 1000); err != nil {
			t.Fatal(err)
		}
		whole := 1<<40 - int64(g.Get())
		fm.left, fm.slice = 1<<40, 1000
		g.Set(1000)
		if got, err := m.ExportedFunction("count").Call(ctx, 1000); err != nil || got[0] != 1000 {
			t.Fatalf("count(1000) on slices: %v %v", got, err)
		}
		sliced := 1000 + (1<<40 - fm.left) - int64(g.Get())
		if sliced != whole || fm.refills < int(whole/1000)-1 {
			t.Errorf("on slices of 1,000: %d fuel in %d refills; in one go: %d", sliced, fm.refills, whole)
		}
	})
}

// TestRewriteRefuses: what is not a module, or cannot be metered, is
// refused with an error, never a module that would run unmetered.
func TestRewriteRefuses(t *testing.T) {
	good := module(-1, count)
	for _, tc := range []struct {
		name string
		wasm []byte
	}{
		{"empty", nil},
		{"not wasm", []byte("hello, world")},
		{"version 2", append([]byte("\x00asm\x02\x00\x00\x00"), good[8:]...)},
		{"a section past the end", good[:len(good)-3]},
		{"an unknown opcode", module(-1, fn{code: []byte{0x06, 0x40, 0x0B}})}, // try (exception handling)
		{"the fuel export taken", module(-1, fn{export: fuel.Export})},
	} {
		if out, err := fuel.Instrument(tc.wasm, fuel.Options{}); err == nil {
			t.Errorf("%s: metered (%d bytes)", tc.name, len(out))
		}
	}
}

// TestDebugSectionsDropped: DWARF, whose code offsets the rewrite moves,
// is not kept; the module's other sections are.
func TestDebugSectionsDropped(t *testing.T) {
	wasm := instrument(t, module(-1, count), fuel.Options{})
	m, err := newRuntime(t, &meter{}).CompileModule(context.Background(), wasm)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range m.CustomSections() {
		if s.Name() == ".debug_info" {
			t.Error("the .debug_info section is still there")
		}
	}
	if _, ok := m.ExportedFunctions()["count"]; !ok {
		t.Error("the export count is gone")
	}
}

// plausible reports whether no section of wasm declares more items than it
// has bytes: wazero sizes its tables by the declared counts before it
// reads the items, and a count of 2^28 takes the fuzzing process down.
// (The plugins compile modules in a process of their own for this.)
func plausible(wasm []byte) bool {
	for i := 8; i < len(wasm); {
		id := wasm[i]
		size, n := readULEB(wasm[i+1:])
		if n == 0 || uint64(i+1+n)+size > uint64(len(wasm)) {
			return false
		}
		body := wasm[i+1+n : i+1+n+int(size)]
		if id != 0 && id != 8 && id != 12 {
			if count, m := readULEB(body); m == 0 || count > uint64(len(body)) {
				return false
			}
		}
		i += 1 + n + int(size)
	}
	return true
}

func readULEB(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}

// FuzzInstrument: whatever the bytes, the rewrite does not panic, a
// module wazero compiles compiles once metered too, and one it refuses is
// refused once metered too (the rewrite must never make valid what names
// the meter's own global, type, import or locals).
func FuzzInstrument(f *testing.F) {
	f.Add(module(-1, count))
	f.Add(module(-1, spin, tree(1)))
	f.Add(module(0, fn{code: spin.code}))
	f.Add(reindexed())
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	ctx := context.Background()
	// The interpreter: it validates as the compiler does, without
	// keeping machine code of every input.
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	compiles := func(wasm []byte) error {
		m, err := r.CompileModule(ctx, wasm)
		if err == nil {
			m.Close(ctx)
		}
		return err
	}
	f.Fuzz(func(t *testing.T, wasm []byte) {
		out, err := fuel.Instrument(wasm, fuel.Options{StartExport: "s", MaxTableElements: 1 << 16})
		if err != nil || !plausible(wasm) {
			return
		}
		before, after := compiles(wasm), compiles(out)
		if strings.Contains(fmt.Sprint(before, after), "custom section") {
			// wazero reads a custom section's data a byte past its end
			// (its size less the name's, not less the name's and its
			// length's): whether that fails depends on what follows, which
			// the rewrite changes. Custom sections never run.
			return
		}
		switch {
		case before == nil && after != nil:
			t.Fatalf("wazero compiles the module but not its metered form: %v", after)
		case before != nil && after == nil:
			t.Fatalf("wazero refuses the module (%v) but compiles its metered form", before)
		}
	})
}

// BenchmarkMeter is what metering costs compiled code: count(10,000), a
// tight loop of 13 instructions, plain and metered: the overhead of a
// charge at every pass of the loop's header, near the worst case. The
// metered case reports fuel/s, the fuel a second of this loop burns: the
// calibration of fuel to CPU time on the machine.
func BenchmarkMeter(b *testing.B) {
	ctx := context.Background()
	orig := module(-1, count)
	metered, err := fuel.Instrument(orig, fuel.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		wasm []byte
	}{{"plain", orig}, {"metered", metered}} {
		b.Run(c.name, func(b *testing.B) {
			r := wazero.NewRuntime(ctx)
			defer r.Close(ctx)
			if _, err := r.NewHostModuleBuilder(fuel.ImportModule).NewFunctionBuilder().
				WithFunc(func(context.Context, api.Module, int32) {}).Export(fuel.ImportName).Instantiate(ctx); err != nil {
				b.Fatal(err)
			}
			m, err := r.Instantiate(ctx, c.wasm)
			if err != nil {
				b.Fatal(err)
			}
			f := m.ExportedFunction("count")
			g, _ := m.ExportedGlobal(fuel.Export).(api.MutableGlobal)
			stack := make([]uint64, 1)
			if g != nil {
				g.Set(math.MaxInt64)
			}
			b.ResetTimer()
			for b.Loop() {
				stack[0] = 10_000
				if err := f.CallWithStack(ctx, stack); err != nil {
					b.Fatal(err)
				}
			}
			if g != nil {
				used := math.MaxInt64 - int64(g.Get())
				b.ReportMetric(float64(used)/b.Elapsed().Seconds(), "fuel/s")
			}
		})
	}
}
