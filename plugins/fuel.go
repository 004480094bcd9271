package plugins

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero/api"

	"github.com/agentichost/agentic/plugins/internal/fuel"
)

// Fuel: every module is metered when it loads (package fuel rewrites it:
// charges on a global at function entries, loop headers and join points,
// some of which test it, a test after every call, run-time charges before
// the instructions whose work grows with an operand, and the charges of
// the host functions it imports). A call's fuel (Limits.Fuel) is given to
// the global a slice at a time; when the guest spends a slice, its next
// test calls check, the host function below, which gives the next one, or
// ends the call when none is left or the call's deadline has passed. So a
// guest returns to Go at least once a slice, however it runs, and the fuel
// a call uses depends only on what the guest does: the same call on the
// same state uses the same fuel.
//
// The bound holds by construction, not by the guest's cooperation: the
// meter refuses a module that names a global, type, local or function it
// does not have (those would be the meter's once rewritten), and wazero
// validates the metered module; the meter's own import module cannot be
// imported; every instruction's
// charge is proportional to its work (bulk memory and table instructions
// by their length, grows by what they leave), every host function the
// guest can import is charged by its work (gate below) or is constant,
// and tables count as memory (Limits.MaxTableElements). A start function
// is a call like the others (startExport).

// fuelSlice is the fuel the global holds at a time: about a million
// instructions, a tenth of a millisecond of guest work here.
const fuelSlice = 1_000_000

// yieldEvery is how long a guest runs between two yields to the other
// goroutines (at a refill of its fuel).
const yieldEvery = time.Millisecond

// startExport is what the meter turns a module's start function into: an
// export, which the host calls after instantiating the module, on the
// fuel and deadline of a call.
const startExport = "agentic-host:start"

// errOutOfFuel ends a call that used all its fuel (a panic of check: the
// call traps, and invoke reads the tank to tell why).
var errOutOfFuel = errors.New("out of fuel")

// meterOptions are the options of the rewrite under l: the import rules,
// the start function as an export, the tables' bound.
func meterOptions(l Limits) fuel.Options {
	return fuel.Options{Imports: importRule, StartExport: startExport, MaxTableElements: l.MaxTableElements}
}

// meter returns the metered form of a module, which must be valid (see
// validate).
func meter(wasm []byte, l Limits) ([]byte, error) {
	return fuel.Instrument(wasm, meterOptions(l))
}

// tank is a call's fuel: the module's global holds a slice of it, left
// what is not given yet.
type tank struct {
	g     api.MutableGlobal
	limit int64
	left  int64
	last  int64 // the global's value the host set last: the guest only lowers it
	out   bool  // a refill found none left
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
	t.set(give)
}

func (t *tank) set(v int64) {
	t.last = v
	t.g.Set(uint64(v))
}

// global is the global's value, which the guest lowers as it runs. A value
// above what the host set last is not the meter's doing (the guest cannot
// name the global): it counts as nothing left, and the call is stopped.
func (t *tank) global() int64 {
	v := int64(t.g.Get())
	if v > t.last {
		panic(errFuelTampered)
	}
	return v
}

// errFuelTampered stops a call whose fuel global rose without the host.
var errFuelTampered = errors.New("the fuel global rose without the host: the module is not metered soundly")

// exhausted reports whether a refill found no fuel left.
func (t *tank) exhausted() bool { return t != nil && t.out }

// settle ends a call that returned having used more than its fuel: the
// guest tests its fuel only now and then (a few thousand instructions
// apart at most), so it may return from its last charges below zero with
// nothing left to give. It reports whether the call ran out.
func (t *tank) settle() bool {
	if t != nil && t.left+t.safeGlobal() < 0 {
		t.out = true
	}
	return t.exhausted()
}

// safeGlobal is global, with a value that rose counted as nothing left
// (after the call, where panicking would not stop anything).
func (t *tank) safeGlobal() int64 {
	v := int64(t.g.Get())
	return min(v, t.last)
}

// used is the fuel the call used: all the host handed out but what the
// guest has not spent of it, an overdraw of the last charge included. It
// is counted from what the host gave, never from more than what it set.
func (t *tank) used() int64 {
	if t == nil {
		return 0
	}
	return t.limit - t.left - t.safeGlobal()
}

// refill gives the global slices until it is not below zero (a charge of
// a bulk instruction or a host function may take it far below); false,
// with the tank marked out, when what is left cannot cover it.
func (t *tank) refill() bool {
	g := t.global()
	if g >= 0 {
		return true
	}
	need := -g
	if t.left < need {
		t.out = true
		return false
	}
	give := min(t.left, max(fuelSlice, need+fuelSlice/2))
	t.left -= give
	t.set(g + give)
	return true
}

// charge takes cost from the global on the host's side (a gated host
// function's cost), refilling it as refill does; false when the call has
// not enough fuel left.
func (t *tank) charge(cost int64) bool {
	t.set(t.global() - min(cost, math.MaxInt64/4))
	return t.refill()
}

// hostCheck is the check import of every metered module: check(0) when
// the guest's fuel runs out, check(gate) before a gated host function
// (gates). It stops the call at its deadline, or when its fuel cannot pay.
func hostCheck(ctx context.Context, _ *extism.CurrentPlugin, stack []uint64) {
	if err := ctx.Err(); err != nil {
		panic(err)
	}
	env := envFrom(ctx)
	if env == nil || env.tank == nil {
		// Nothing of the guest runs outside a call: the start function
		// is one (startExport).
		panic(errors.New("plugins: a metered module ran outside a call"))
	}
	why := int32(api.DecodeI32(stack[0]))
	ok := true
	if why == 0 {
		ok = env.tank.refill()
		// A guest that has run a while gives the other goroutines their
		// turn now, not at Go's next preemption, which a goroutine in
		// guest code meets only here and in host functions (a few slices
		// later). A short call never yields: a yield costs a warm Go
		// call a fifth of its time here when another goroutine takes the
		// processor.
		if time.Since(env.yielded) >= yieldEvery {
			runtime.Gosched()
			env.yielded = time.Now()
		}
	} else {
		ok = env.tank.charge(gateCost(ctx, env, why))
	}
	if !ok {
		panic(errOutOfFuel)
	}
}

// checkFunction is hostCheck as the module imports it.
func checkFunction() extism.HostFunction {
	f := extism.NewHostFunctionWithStack(fuel.ImportName, hostCheck, []extism.ValueType{extism.ValueTypeI32}, nil)
	f.SetNamespace(fuel.ImportModule)
	return f
}

// The host functions a plugin may import, and what each call costs.
//
// A call of a host function costs hostCallCost (a call into Go and back is
// about that many simple instructions here), and more when its work grows
// with its arguments or the host's state:
//
//   - Extism's kernel functions walk the kernel's list of memory blocks
//     (alloc, free, length) or clear it (reset): they are gated, and
//     charged a unit per 12 bytes of the kernel's memory (the most blocks
//     it can hold); those that read a name or a value (config_get, var_get,
//     var_set, the log functions, Extism's own http_request) are charged
//     that and the most they copy, a unit per 16 bytes. The others are
//     constant.
//   - The host's own functions (extism:host/user, hostfuncs.go) charge
//     themselves, by the bytes they read and write.
//   - WASI's are charged by the lengths they take: random_get a unit per
//     byte (the system's random source is slower than memory), fd_write
//     and fd_read a unit per 16 bytes of each buffer vector entry's most
//     (the host keeps 4 KiB of stderr per call), poll_oneoff by its
//     subscriptions, the path functions by the path's length.
//
// Any other import is refused when the module loads: the host provides
// nothing else, so such a module could not be instantiated anyway.
const hostCallCost = 50

// kernelBlockBytes is the smallest block the Extism kernel can hold: its
// header (a status byte and two 32-bit sizes, aligned) and a byte.
const kernelBlockBytes = 12

// The gates of Extism's kernel functions whose work is not constant.
const (
	gateWalk       int32 = iota + 1 // alloc, free, length: a walk of the blocks
	gateReset                       // reset: a fill of the blocks
	gateConfig                      // config_get: a walk, a copy of the value
	gateVar                         // var_get, var_set: walks, a copy of a var, a scan of the vars
	gateLog                         // the log functions: a walk, a copy, a free
	gateExtismHTTP                  // Extism's http_request: refused, after reading the request
)

var envRules = map[string]fuel.Import{
	"alloc": {Gate: gateWalk}, "free": {Gate: gateWalk}, "length": {Gate: gateWalk},
	"reset":      {Gate: gateReset},
	"config_get": {Gate: gateConfig},
	"var_get":    {Gate: gateVar}, "var_set": {Gate: gateVar},
	"http_request": {Gate: gateExtismHTTP}, "http_headers": {Gate: gateExtismHTTP},
	"log_trace": {Gate: gateLog}, "log_debug": {Gate: gateLog}, "log_info": {Gate: gateLog},
	"log_warn": {Gate: gateLog}, "log_error": {Gate: gateLog},
	// Constant: a load, a store, a field of the kernel's root.
	"load_u8": {}, "input_load_u8": {}, "store_u8": {}, "load_u64": {}, "input_load_u64": {},
	"store_u64": {}, "input_set": {}, "output_set": {}, "input_length": {}, "input_offset": {},
	"output_length": {}, "output_offset": {}, "length_unsafe": {}, "error_set": {}, "error_get": {},
	"memory_bytes": {}, "http_status_code": {}, "get_log_level": {},
}

// wasiRules are the WASI functions charged by their arguments; the others
// are constant (the sandbox gives WASI no files, arguments or environment:
// what takes a path or a directory fails at once).
var wasiRules = map[string][]fuel.ArgCost{
	"random_get":  {{Param: 1}},                      // (buf, len)
	"fd_write":    {{Param: 2, Per: 4096, Shift: 4}}, // (fd, iovs, iovs_len, nwritten)
	"fd_read":     {{Param: 2, Per: 4096, Shift: 4}}, // (fd, iovs, iovs_len, nread)
	"fd_pwrite":   {{Param: 2, Per: 4096, Shift: 4}}, // (fd, iovs, iovs_len, offset, nwritten)
	"fd_pread":    {{Param: 2, Per: 4096, Shift: 4}}, // (fd, iovs, iovs_len, offset, nread)
	"poll_oneoff": {{Param: 2, Per: 16}},             // (in, out, nsubscriptions, nevents)
	"path_open":   {{Param: 3, Shift: 4}},            // (fd, dirflags, path, path_len, …)
	"fd_readdir":  {{Param: 2, Shift: 4}},            // (fd, buf, buf_len, cookie, bufused)
}

// The namespaces of the host functions a plugin may import.
const (
	extismEnv = "extism:host/env"
	userEnv   = "extism:host/user"
	wasi      = "wasi_snapshot_preview1"
)

// importRule is the meter's rule for each import a plugin makes: the host
// functions above, charged as they cost; anything else refused.
func importRule(module, name string, kind fuel.ImportKind) (fuel.Import, error) {
	if kind != fuel.ImportFunction {
		what := map[fuel.ImportKind]string{fuel.ImportTable: "a table", fuel.ImportMemory: "a memory",
			fuel.ImportGlobal: "a global", fuel.ImportTag: "a tag"}[kind]
		return fuel.Import{}, fmt.Errorf("it imports %s: the host provides functions only", what)
	}
	switch module {
	case extismEnv:
		rule, ok := envRules[name]
		if !ok {
			return fuel.Import{}, fmt.Errorf("the Extism kernel has no function %q", name)
		}
		rule.Base = hostCallCost
		return rule, nil
	case userEnv:
		if !userFunctions[name] {
			return fuel.Import{}, fmt.Errorf("the host has no function %q (it offers %s)", name, userFunctionList)
		}
		return fuel.Import{Base: hostCallCost}, nil
	case wasi:
		return fuel.Import{Base: hostCallCost, Args: wasiRules[name]}, nil
	case jsEnv:
		// A JavaScript engine's hooks (jsvm.go); a module that is not a
		// JavaScript plugin's engine traps if it calls them.
		if !jsImportNames[name] {
			return fuel.Import{}, fmt.Errorf("the host has no function %q in module %q (a JavaScript engine's hooks)", name, jsEnv)
		}
		return fuel.Import{Base: hostCallCost}, nil
	}
	return fuel.Import{}, fmt.Errorf("the host provides no module %q (plugins import %s, %s and %s)", module, extismEnv, userEnv, wasi)
}

// gateCost is what the gated kernel function about to be called costs:
// its walk of the kernel's blocks, and what it copies.
func gateCost(ctx context.Context, env *callEnv, gate int32) int64 {
	kernel, _ := ctx.Value(extism.PluginCtxKey("extism")).(api.Module)
	var memBytes int64
	if kernel != nil {
		if mem := kernelMemory(kernel); mem != nil {
			memBytes = int64(mem.Size())
		}
	}
	walk := memBytes / kernelBlockBytes
	copyCost := func(n int64) int64 { return n >> 4 }
	switch gate {
	case gateWalk:
		return walk
	case gateReset:
		return copyCost(memBytes)
	case gateConfig:
		return 2*walk + copyCost(int64(env.mod.configBytes))
	case gateVar:
		// A var_set reads the name and the value (walks), scans the
		// vars to size them, and copies the value; var_get walks, and
		// allocates and copies the value.
		return 3*walk + copyCost(max(env.mod.limits.MaxVarBytes, 0))
	case gateLog:
		return 2*walk + copyCost(memBytes)
	case gateExtismHTTP:
		return walk + copyCost(memBytes)
	}
	return walk
}

// kernelMemory is the kernel's memory: the cached one of a kernelCall's
// kernel, else looked up.
func kernelMemory(kernel api.Module) api.Memory {
	if k, ok := kernel.(*kernelModule); ok {
		return k.memory
	}
	return kernel.ExportedMemory("memory")
}
