package plugins

import (
	"context"
	"errors"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero/api"

	"github.com/agentichost/agentic/plugins/internal/fuel"
)

// Fuel: every module is metered when it loads (package fuel rewrites it:
// charges on a global at function entries, loop headers and join points,
// some of which test it, and a test after every call). A call's fuel
// (Limits.Fuel) is given to the global a slice at a time; when the guest
// spends a slice, its next test calls refill, the host function below,
// which gives the next one, or ends the call when none is left or the
// call's context is done. So a guest returns to Go at least once a slice,
// however it runs, and the fuel a call uses depends only on what the guest
// does: the same call on the same state uses the same fuel.

// fuelSlice is the fuel the global holds at a time: about a million
// instructions, a tenth of a millisecond of guest work here.
const fuelSlice = 1_000_000

// errOutOfFuel ends a call that used all its fuel (a panic of refill: the
// call traps, and invoke reads the tank to tell why).
var errOutOfFuel = errors.New("out of fuel")

// startPlugin stands for the plugin in the context of an instantiation:
// go-sdk's wrapper of host functions refuses a call without one, and a
// start function that spends Limits.StartFuel calls refill before go-sdk
// has made the instance's Plugin.
var startPlugin = &extism.Plugin{}

// startContext is the context an instance is created in: refill's calls
// from the module's start function see its deadline.
func startContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, extism.PluginCtxKey("plugin"), startPlugin)
}

// meter returns the metered form of a module.
func meter(wasm []byte, l Limits) ([]byte, error) {
	return fuel.Instrument(wasm, fuel.Options{Initial: l.StartFuel})
}

// tank is a call's fuel: the module's global holds a slice of it, left
// what is not given yet.
type tank struct {
	g     api.MutableGlobal
	limit int64
	left  int64
	out   bool // a refill found none left
}

// newTank returns the tank of an instance's module, or nil if the module
// exports no fuel global (it was not metered).
func newTank(m api.Module) *tank {
	if m == nil {
		return nil
	}
	g, ok := m.ExportedGlobal(fuel.Export).(api.MutableGlobal)
	if !ok {
		return nil
	}
	return &tank{g: g}
}

// fill gives the tank limit for a call, its first slice to the global. A
// nil tank (a module loaded unmetered, in the benchmarks) does nothing.
func (t *tank) fill(limit int64) {
	if t == nil {
		return
	}
	give := min(limit, fuelSlice)
	t.limit, t.left, t.out = limit, limit-give, false
	t.g.Set(uint64(give))
}

// exhausted reports whether a refill found no fuel left.
func (t *tank) exhausted() bool { return t != nil && t.out }

// settle ends a call that returned having used more than its fuel: the
// guest tests its fuel only now and then (a few thousand instructions
// apart at most), so it may return from its last charges below zero with
// nothing left to give. It reports whether the call ran out.
func (t *tank) settle() bool {
	if t != nil && t.left+int64(t.g.Get()) < 0 {
		t.out = true
	}
	return t.exhausted()
}

// used is the fuel the call used: all it was given but what is left, an
// overdraw of the last charge included.
func (t *tank) used() int64 {
	if t == nil {
		return 0
	}
	return t.limit - t.left - int64(t.g.Get())
}

// refill gives the global the next slice; false when none is left.
func (t *tank) refill() bool {
	if t.left <= 0 {
		t.out = true
		return false
	}
	give := min(t.left, fuelSlice)
	t.left -= give
	t.g.Set(uint64(int64(t.g.Get()) + give))
	return true
}

// hostRefill is the refill import of every metered module. Outside a call
// (a start function past Limits.StartFuel) it gives nothing: the module's
// every test calls it again, and it ends the start function at its
// deadline.
func hostRefill(ctx context.Context, _ *extism.CurrentPlugin, _ []uint64) {
	if err := ctx.Err(); err != nil {
		panic(err)
	}
	env := envFrom(ctx)
	if env == nil || env.tank == nil {
		return
	}
	if !env.tank.refill() {
		panic(errOutOfFuel)
	}
}

// refillFunction is hostRefill as the module imports it.
func refillFunction() extism.HostFunction {
	f := extism.NewHostFunctionWithStack(fuel.ImportName, hostRefill, nil, nil)
	f.SetNamespace(fuel.ImportModule)
	return f
}
