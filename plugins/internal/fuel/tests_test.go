package fuel_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentichost/agentic/plugins/internal/fuel"
)

// straight is n blocks of 30 (i32.const 1; drop): 61 instructions each,
// a region each, with no loop and no call.
func straight(n int) []byte {
	var code []byte
	for range n {
		code = append(code, 0x02, 0x40)
		for range 30 {
			code = append(code, 0x41, 0x01, 0x1A)
		}
		code = append(code, 0x0B)
	}
	return code
}

// TestLeafChargesWithoutTests: a function that calls nothing and has no
// loop is charged all it runs, but tests its fuel only where its charges
// pass a thousand instructions: a short one never calls refill, however
// little fuel it has, and returns below zero by exactly its cost.
func TestLeafChargesWithoutTests(t *testing.T) {
	fm := &meter{}
	m := instantiate(t, fm, instrument(t, module(-1, fn{export: "leaf", code: straight(5)}), fuel.Options{}))
	g := tank(t, m)
	g.Set(0)
	if _, err := m.ExportedFunction("leaf").Call(context.Background()); err != nil {
		t.Fatalf("a leaf of 305 instructions on no fuel: %v", err)
	}
	if left := int64(g.Get()); fm.refills != 0 || left > -305 || left < -320 {
		t.Errorf("a leaf of 305 instructions on no fuel: %d refills, %d fuel left; want none, about -305", fm.refills, left)
	}
}

// TestLongCodeTests: straight-line code that is no region's alone (a long
// run of joins) tests its fuel at least every thousand instructions or
// so: it calls refill before it is far below zero.
func TestLongCodeTests(t *testing.T) {
	fm := &meter{left: 1 << 40, slice: 1}
	m := instantiate(t, fm, instrument(t, module(-1, fn{export: "long", code: straight(100)}), fuel.Options{}))
	g := tank(t, m)
	g.Set(0)
	if _, err := m.ExportedFunction("long").Call(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fm.refills < 5 {
		t.Fatalf("6,100 instructions on no fuel called refill %d times, want at least 5", fm.refills)
	}
	after := int64(0) // the fuel after the last refill, which gives 1
	for i, at := range fm.at {
		if at-after < -1100 {
			t.Errorf("refill %d found the fuel at %d, %d below the last: the code ran more than a thousand instructions untested", i, at, after-at)
		}
		after = at + 1
	}
}

// TestUnwindTests: a recursion 10,000 deep that runs out of fuel as it
// unwinds, each frame running 600 instructions after its call returns,
// calls refill within a frame of running out (a test follows every call),
// not 5,000 frames later.
func TestUnwindTests(t *testing.T) {
	code := []byte{
		0x20, 0x00, 0x04, 0x40, // if n
		0x20, 0x00, 0x41, 0x01, 0x6B, 0x10, 0x00, //   deep(n-1)
		0x0B,
	}
	code = append(code, straight(10)...)
	wasm := instrument(t, module(-1, fn{params: []byte{i32}, export: "deep", code: code}), fuel.Options{})
	ctx := context.Background()

	fm := &meter{}
	m := instantiate(t, fm, wasm)
	g := tank(t, m)
	g.Set(1 << 40)
	if _, err := m.ExportedFunction("deep").Call(ctx, 10_000); err != nil {
		t.Fatal(err)
	}
	whole := 1<<40 - int64(g.Get())

	g.Set(uint64(whole / 2)) // runs out halfway up
	_, err := m.ExportedFunction("deep").Call(ctx, 10_000)
	if err == nil || !strings.Contains(err.Error(), "out of fuel") {
		t.Fatalf("on half its fuel: %v, want out of fuel", err)
	}
	if fm.refills != 1 || fm.at[0] < -1500 {
		t.Errorf("%d refills, the first at %d fuel; want one, within a frame (about 600) of zero", fm.refills, fm.at)
	}
}

// TestRecursionTests: a function that calls itself before anything else
// tests its fuel at its entry: a recursion that never returns runs out of
// fuel, not of stack.
func TestRecursionTests(t *testing.T) {
	fm := &meter{}
	m := instantiate(t, fm, instrument(t, module(-1, fn{export: "down", code: []byte{0x10, 0x00}}), fuel.Options{}))
	tank(t, m).Set(100_000)
	_, err := m.ExportedFunction("down").Call(context.Background())
	if err == nil || !strings.Contains(err.Error(), "out of fuel") || fm.refills != 1 {
		t.Fatalf("an endless recursion on 100,000 fuel: %v after %d refills, want out of fuel after one", err, fm.refills)
	}
}

// TestHostCallsChargeNothing: a call of a host function counts as no call
// for the tests (the host function is not metered): a function that
// calls one three times, and nothing else, never calls refill, however
// little fuel it has.
func TestHostCallsChargeNothing(t *testing.T) {
	name := func(s string) []byte { return vec(len(s), []byte(s)) }
	code := []byte{0x00, 0x10, 0x00, 0x10, 0x00, 0x10, 0x00, 0x0B} // no locals; call nop ×3; end
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, sec(1, vec(1, []byte{0x60, 0, 0}))...)
	m = append(m, sec(2, vec(1, append(append(name("env"), name("nop")...), 0x00, 0x00)))...)
	m = append(m, sec(3, vec(1, []byte{0}))...)
	m = append(m, sec(7, vec(1, append(name("hostly"), 0x00, 0x01)))...)
	m = append(m, sec(10, vec(1, append(uleb(len(code)), code...)))...)

	ctx := context.Background()
	fm := &meter{}
	r := newRuntime(t, fm)
	nops := 0
	if _, err := r.NewHostModuleBuilder("env").NewFunctionBuilder().
		WithFunc(func() { nops++ }).Export("nop").Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	mod, err := r.Instantiate(ctx, instrument(t, m, fuel.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	tank(t, mod).Set(0)
	if _, err := mod.ExportedFunction("hostly").Call(ctx); err != nil || nops != 3 || fm.refills != 0 {
		t.Fatalf("three host calls on no fuel: %v, %d calls, %d refills; want none", err, nops, fm.refills)
	}
}
