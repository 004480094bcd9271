package plugins

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero/api"
)

// The engine of a JavaScript plugin (jsmodule.go) in one instance.
//
// The host drives the engine through its C interface (quickjs-wasi's
// qjs_* exports): at an instance's first call it initialises the engine,
// gives the script one host function, __agentic_host, evaluates the
// script, and keeps a copy of the instance's memory (above its stack, when
// its data lie above its stack: quickjs-wasi's layout). Every call after
// that starts from the copy, so no call sees what another left (globals,
// caches, a half-done promise); a call that grew the memory leaves an
// instance that cannot be put back, and the pool makes a new one.
//
// The script's side of the contract (the kit's runtime, pdk/ts) defines
// two functions: __agentic_run(export, input), which starts an export of
// the ABI on its JSON input, and __agentic_take(), which returns its JSON
// output once the promise jobs have run, or undefined while it has none.
// __agentic_host(op, ...args) reaches the host functions every plugin has
// (jsHostCall): the same code, bounds, grants, journal and charges.
//
// The engine is a guest like any: it runs metered, within the call's
// memory and deadline, and nothing it answers is trusted (an answer is
// read within the memory, bounded, and a broken one fails the call).

// jsHostName is the one host function a script is given.
const jsHostName = "__agentic_host"

// jsStackBytes is the most of its native stack the engine lets JavaScript
// recursion use before it throws a RangeError (quickjs-wasi's own ceiling
// is half its 1 MiB stack).
const jsStackBytes = 256 << 10

// jsVM is the engine of one instance.
type jsVM struct {
	script []byte
	mod    api.Module
	mem    api.Memory
	sp     api.MutableGlobal // __stack_pointer: restored with the memory
	fns    map[string]api.Function
	p      *extism.Plugin // its configuration
	random io.Reader      // the instance's random source, journaled in a durable call (sysclock.go)

	ready bool
	// snap is the memory from from on once the script ran, spAt the stack
	// pointer then. Below from is only the engine's stack, dead between
	// calls (dataLow, lowestData).
	snap    []byte
	from    uint32
	spAt    uint64
	dataLow uint32 // the lowest address of its data; 0 when unknown
	// used: a call ran since the memory was last put back.
	used bool
	// spent: a call grew the memory: it cannot be put back.
	spent bool
	// handles of the script's functions and of undefined, and a word of
	// memory the engine writes a length into.
	run, take, undef, lenPtr uint32
	// serving: the host is serving a host_call. The engine functions it
	// calls meanwhile never call host_call; an engine that does is
	// refused, which bounds the nesting of Go and guest frames to one.
	serving bool
}

// newJSVM returns the engine of an instance whose main module is mod.
func newJSVM(script []byte, dataLow uint32, mod api.Module, p *extism.Plugin) (*jsVM, error) {
	v := &jsVM{script: script, dataLow: dataLow, mod: mod, mem: mod.ExportedMemory("memory"), p: p, fns: map[string]api.Function{}}
	if v.mem == nil {
		return nil, errors.New("the JavaScript engine exports no memory")
	}
	if g, ok := mod.ExportedGlobal("__stack_pointer").(api.MutableGlobal); ok {
		v.sp = g
	}
	return v, nil
}

type jsKey struct{}

// jsOf returns the engine of the call in ctx.
func jsOf(ctx context.Context) *jsVM {
	v, _ := ctx.Value(jsKey{}).(*jsVM)
	return v
}

// jsExports are the engine's functions the host calls, with the number
// of their i32 parameters and results: a module that exports one of
// another type is not the engine (and a call on the host's fixed stack
// could not take it).
var jsExports = map[string][2]int{
	"_initialize": {0, 0}, "qjs_init": {0, 1}, "qjs_set_max_stack_size": {1, 0}, "qjs_run_gc": {0, 0},
	"wasm_malloc": {1, 1}, "wasm_free": {1, 0},
	"qjs_eval": {4, 1}, "qjs_call": {4, 1}, "qjs_is_job_pending": {0, 1}, "qjs_execute_pending_job": {0, 1},
	"qjs_new_string": {2, 1}, "qjs_get_string_len": {2, 1}, "qjs_free_cstring": {1, 0}, "qjs_free_value": {1, 0},
	"qjs_is_exception": {1, 1}, "qjs_get_exception": {0, 1}, "qjs_is_function": {1, 1}, "qjs_is_string": {1, 1},
	"qjs_get_global": {0, 1}, "qjs_get_undefined": {0, 1}, "qjs_get_prop_string": {2, 1}, "qjs_set_prop_string": {3, 1},
	"qjs_new_host_function": {3, 1},
}

// fn returns the engine's export name, looked up (and its type checked)
// once.
func (v *jsVM) fn(name string) (api.Function, error) {
	f, ok := v.fns[name]
	if !ok {
		want, known := jsExports[name]
		f = v.mod.ExportedFunction(name)
		if f == nil || !known {
			return nil, fmt.Errorf("the JavaScript engine exports no %s: the module is not the engine the kit builds with", name)
		}
		d := f.Definition()
		if !allI32(d.ParamTypes(), want[0]) || !allI32(d.ResultTypes(), want[1]) {
			return nil, fmt.Errorf("the JavaScript engine's %s is %s -> %s, not %d i32 -> %d i32: the module is not the engine the kit builds with",
				name, typeNames(d.ParamTypes()), typeNames(d.ResultTypes()), want[0], want[1])
		}
		v.fns[name] = f
	}
	return f, nil
}

// typeNames is "[i64 i32]".
func typeNames(types []api.ValueType) string {
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = api.ValueTypeName(t)
	}
	return "[" + strings.Join(names, " ") + "]"
}

func allI32(types []api.ValueType, n int) bool {
	if len(types) != n {
		return false
	}
	for _, t := range types {
		if t != api.ValueTypeI32 {
			return false
		}
	}
	return true
}

// call calls the engine's export name. Each call has its stack of its
// own: a host function the engine calls calls the engine again.
func (v *jsVM) call(ctx context.Context, name string, args ...uint64) (uint32, error) {
	f, err := v.fn(name)
	if err != nil {
		return 0, err
	}
	var stack [5]uint64
	copy(stack[:], args)
	if err := f.CallWithStack(ctx, stack[:]); err != nil {
		return 0, err
	}
	return uint32(stack[0]), nil
}

// cstring copies b, and a NUL, into memory the engine allocated; free it
// with wasm_free.
func (v *jsVM) cstring(ctx context.Context, b []byte) (uint32, error) {
	p, err := v.call(ctx, "wasm_malloc", uint64(len(b)+1))
	if err != nil {
		return 0, err
	}
	if p == 0 || !v.mem.Write(p, b) || !v.mem.WriteByte(p+uint32(len(b)), 0) {
		return 0, errors.New("the JavaScript engine is out of memory")
	}
	return p, nil
}

func (v *jsVM) free(ctx context.Context, p uint32) {
	if p != 0 {
		_, _ = v.call(ctx, "wasm_free", uint64(p))
	}
}

func (v *jsVM) freeValue(ctx context.Context, h uint32) {
	if h != 0 && h != v.undef {
		_, _ = v.call(ctx, "qjs_free_value", uint64(h))
	}
}

// newString returns a new JavaScript string of b (UTF-8).
func (v *jsVM) newString(ctx context.Context, b []byte) (uint32, error) {
	p, err := v.cstring(ctx, b)
	if err != nil {
		return 0, err
	}
	defer v.free(ctx, p)
	h, err := v.call(ctx, "qjs_new_string", uint64(p), uint64(len(b)))
	if err != nil {
		return 0, err
	}
	if err := v.exception(ctx, h); err != nil {
		return 0, err
	}
	return h, nil
}

// str returns the text of the value h (converted as String(h) would be),
// at most max bytes of it.
func (v *jsVM) str(ctx context.Context, h uint32, max int) ([]byte, error) {
	c, err := v.call(ctx, "qjs_get_string_len", uint64(h), uint64(v.lenPtr))
	if err != nil {
		return nil, err
	}
	if c == 0 {
		return nil, v.pending(ctx)
	}
	defer func() { _, _ = v.call(ctx, "qjs_free_cstring", uint64(c)) }()
	n, ok := v.mem.ReadUint32Le(v.lenPtr)
	if !ok {
		return nil, errors.New("the JavaScript engine's string length is outside its memory")
	}
	if int64(n) > int64(max) {
		return nil, &jsTooLong{n: int64(n), max: max}
	}
	b, ok := v.mem.Read(c, n)
	if !ok {
		return nil, errors.New("the JavaScript engine's string is outside its memory")
	}
	return append([]byte(nil), b...), nil
}

// exception returns the pending exception as the plugin's error when h is
// the exception marker, nil otherwise.
func (v *jsVM) exception(ctx context.Context, h uint32) error {
	is, err := v.call(ctx, "qjs_is_exception", uint64(h))
	if err != nil {
		return err
	}
	if is == 0 {
		return nil
	}
	return v.pending(ctx)
}

// pending takes the engine's pending exception, as the plugin's error.
func (v *jsVM) pending(ctx context.Context) error {
	e, err := v.call(ctx, "qjs_get_exception")
	if err != nil {
		return err
	}
	defer v.freeValue(ctx, e)
	c, err := v.call(ctx, "qjs_get_string_len", uint64(e), uint64(v.lenPtr))
	if err != nil {
		return err
	}
	if c == 0 {
		return &guestError{msg: "JavaScript: an exception that cannot be said"}
	}
	defer func() { _, _ = v.call(ctx, "qjs_free_cstring", uint64(c)) }()
	n, _ := v.mem.ReadUint32Le(v.lenPtr)
	n = min(n, 4<<10)
	b, _ := v.mem.Read(c, n)
	if string(b) == "InternalError: out of memory" {
		// The engine's allocator found the memory at its bound: the
		// module's failure, as a trap for memory is (and quarantine
		// counts it so).
		return detailed(ErrOutOfMemory, "the JavaScript engine: %s (its memory at %d pages)", b, v.mem.Size()/65536)
	}
	return &guestError{msg: "JavaScript: " + string(b)}
}

// global returns the script's global function name.
func (v *jsVM) global(ctx context.Context, name string) (uint32, error) {
	g, err := v.call(ctx, "qjs_get_global")
	if err != nil {
		return 0, err
	}
	defer v.freeValue(ctx, g)
	key, err := v.cstring(ctx, []byte(name))
	if err != nil {
		return 0, err
	}
	defer v.free(ctx, key)
	h, err := v.call(ctx, "qjs_get_prop_string", uint64(g), uint64(key))
	if err != nil {
		return 0, err
	}
	if err := v.exception(ctx, h); err != nil {
		return 0, err
	}
	isFn, err := v.call(ctx, "qjs_is_function", uint64(h))
	if err != nil {
		return 0, err
	}
	if isFn == 0 {
		v.freeValue(ctx, h)
		return 0, &guestError{msg: "the script defines no function " + name + ": build it with the TypeScript kit (agentic-host plugin build)"}
	}
	return h, nil
}

// init starts the engine, gives the script its host function, runs it,
// and keeps the memory it leaves.
func (v *jsVM) init(ctx context.Context) error {
	ctx = context.WithValue(ctx, jsKey{}, v)
	if v.mod.ExportedFunction("_initialize") != nil {
		if _, err := v.call(ctx, "_initialize"); err != nil {
			return err
		}
	}
	if rc, err := v.call(ctx, "qjs_init"); err != nil {
		return err
	} else if rc != 0 {
		return errors.New("the JavaScript engine did not start (qjs_init)")
	}
	if _, err := v.call(ctx, "qjs_set_max_stack_size", jsStackBytes); err != nil {
		return err
	}
	var err error
	if v.lenPtr, err = v.call(ctx, "wasm_malloc", 4); err != nil {
		return err
	}
	if v.undef, err = v.call(ctx, "qjs_get_undefined"); err != nil {
		return err
	}
	if err := v.defineHost(ctx); err != nil {
		return err
	}
	code, err := v.cstring(ctx, v.script)
	if err != nil {
		return err
	}
	name, err := v.cstring(ctx, []byte("plugin.js"))
	if err != nil {
		return err
	}
	r, err := v.call(ctx, "qjs_eval", uint64(code), uint64(len(v.script)), uint64(name), 0)
	if err != nil {
		return err
	}
	v.free(ctx, code)
	v.free(ctx, name)
	if err := v.exception(ctx, r); err != nil {
		return fmt.Errorf("the script failed as it loaded: %w", err)
	}
	v.freeValue(ctx, r)
	if err := v.jobs(ctx); err != nil {
		return fmt.Errorf("the script failed as it loaded: %w", err)
	}
	if v.run, err = v.global(ctx, "__agentic_run"); err != nil {
		return err
	}
	if v.take, err = v.global(ctx, "__agentic_take"); err != nil {
		return err
	}
	if _, err := v.call(ctx, "qjs_run_gc"); err != nil {
		return err
	}
	if v.sp != nil {
		v.spAt = v.sp.Get()
		if uint64(v.dataLow) >= v.spAt && v.spAt < uint64(v.mem.Size()) {
			v.from = uint32(v.spAt)
		}
	}
	snap, ok := v.mem.Read(v.from, v.mem.Size()-v.from)
	if !ok {
		return errors.New("the JavaScript engine's memory cannot be read")
	}
	v.snap = append([]byte(nil), snap...)
	v.ready = true
	return nil
}

// defineHost gives the script its host function, global __agentic_host.
func (v *jsVM) defineHost(ctx context.Context) error {
	name, err := v.cstring(ctx, []byte(jsHostName))
	if err != nil {
		return err
	}
	defer v.free(ctx, name)
	h, err := v.call(ctx, "qjs_new_host_function", uint64(name), uint64(len(jsHostName)), 0)
	if err != nil {
		return err
	}
	if err := v.exception(ctx, h); err != nil {
		return err
	}
	defer v.freeValue(ctx, h)
	g, err := v.call(ctx, "qjs_get_global")
	if err != nil {
		return err
	}
	defer v.freeValue(ctx, g)
	if rc, err := v.call(ctx, "qjs_set_prop_string", uint64(g), uint64(name), uint64(h)); err != nil {
		return err
	} else if int32(rc) < 0 {
		return v.pending(ctx)
	}
	return nil
}

// jobs runs the engine's pending promise jobs.
func (v *jsVM) jobs(ctx context.Context) error {
	for {
		pending, err := v.call(ctx, "qjs_is_job_pending")
		if err != nil {
			return err
		}
		if pending == 0 {
			return nil
		}
		rc, err := v.call(ctx, "qjs_execute_pending_job")
		if err != nil {
			return err
		}
		if int32(rc) < 0 {
			return v.pending(ctx)
		}
	}
}

// invoke runs export on input and returns the script's output: the
// instance's call, as kernelCall.call is for other modules.
func (v *jsVM) invoke(ctx context.Context, export string, input []byte, maxOut int) ([]byte, error) {
	ctx = context.WithValue(ctx, jsKey{}, v)
	if !v.ready {
		return nil, errors.New("the JavaScript engine did not start")
	}
	if v.used {
		if v.spent || v.mem.Size() != v.from+uint32(len(v.snap)) {
			return nil, errors.New("the JavaScript engine's memory grew: the instance cannot start afresh")
		}
		v.mem.Write(v.from, v.snap)
		if v.sp != nil {
			v.sp.Set(v.spAt)
		}
	}
	v.used = true
	defer func() {
		if v.mem.Size() != v.from+uint32(len(v.snap)) {
			v.spent = true
		}
	}()
	exp, err := v.newString(ctx, []byte(export))
	if err != nil {
		return nil, err
	}
	in, err := v.newString(ctx, input)
	if err != nil {
		return nil, err
	}
	argv, err := v.call(ctx, "wasm_malloc", 8)
	if err != nil {
		return nil, err
	}
	if argv == 0 || !v.mem.WriteUint32Le(argv, exp) || !v.mem.WriteUint32Le(argv+4, in) {
		return nil, errors.New("the JavaScript engine is out of memory")
	}
	r, err := v.call(ctx, "qjs_call", uint64(v.run), uint64(v.undef), 2, uint64(argv))
	if err != nil {
		return nil, err
	}
	if err := v.exception(ctx, r); err != nil {
		return nil, err
	}
	v.freeValue(ctx, r)
	if err := v.jobs(ctx); err != nil {
		return nil, err
	}
	out, err := v.call(ctx, "qjs_call", uint64(v.take), uint64(v.undef), 0, 0)
	if err != nil {
		return nil, err
	}
	if err := v.exception(ctx, out); err != nil {
		return nil, err
	}
	defer v.freeValue(ctx, out)
	if is, err := v.call(ctx, "qjs_is_string", uint64(out)); err != nil {
		return nil, err
	} else if is == 0 {
		return nil, &guestError{msg: "the " + export + " export's promise never settled: it awaits something no host function answers"}
	}
	b, err := v.str(ctx, out, maxOut)
	var long *jsTooLong
	if errors.As(err, &long) {
		return nil, detailed(ErrOutputTooLarge, "%d bytes, the limit is %d", long.n, maxOut)
	}
	return b, err
}

// jsTooLong is a string longer than its reader allows.
type jsTooLong struct {
	n   int64
	max int
}

func (e *jsTooLong) Error() string {
	return fmt.Sprintf("a string of %d bytes, more than the %d allowed", e.n, e.max)
}

// jsHostCall is the engine's import env.host_call: a script's call of
// __agentic_host(op, ...args), every argument a string, answered with a
// string. It serves each op with the host function every plugin imports
// (hostfuncs.go), through the instance's Extism kernel as a guest would:
// the same bounds, grants, journal and charges.
func jsHostCall(ctx context.Context, _ *extism.CurrentPlugin, stack []uint64) {
	v := jsOf(ctx)
	if v == nil {
		panic("host_call: the module is not a JavaScript plugin's engine")
	}
	if v.serving {
		panic("host_call: called again while the host serves one: the module is not the engine the kit builds with")
	}
	v.serving = true
	defer func() { v.serving = false }()
	namePtr, nameLen, argc, argvPtr := uint32(stack[0]), uint32(stack[1]), uint32(stack[3]), uint32(stack[4])
	if name, ok := v.mem.Read(namePtr, nameLen); !ok || string(name) != jsHostName || argc < 1 || argc > 3 {
		panic("host_call: only " + jsHostName + "(op, …up to two strings) is a host function")
	}
	var args [3][]byte
	for i := range argc {
		h, ok := v.mem.ReadUint32Le(argvPtr + 4*i)
		if !ok {
			panic("host_call: arguments outside the memory")
		}
		s, err := v.str(ctx, h, jsArgMax)
		if err != nil {
			panic(fmt.Errorf("host_call: argument %d: %w", i, err))
		}
		chargeHost(ctx, int64(len(s))>>4)
		args[i] = s
	}
	answer := jsServe(ctx, v, string(args[0]), args[1], args[2])
	h, err := v.newString(ctx, answer)
	if err != nil {
		panic(fmt.Errorf("host_call: the answer: %w", err))
	}
	stack[0] = uint64(h)
}

// jsArgMax bounds an argument of __agentic_host (an HTTP request with
// its body, a key-value value) and an answer read from the kernel.
const jsArgMax = 16 << 20

// jsServe answers one op of __agentic_host.
func jsServe(ctx context.Context, v *jsVM, op string, a, b []byte) []byte {
	k := kernelOf(ctx)
	if k == nil {
		panic("host_call: no Extism kernel in the call")
	}
	put := func(fn string, data []byte) uint64 { return write(ctx, nil, fn, data) }
	get := func(fn string, off uint64) []byte {
		if off == 0 {
			return nil
		}
		data, err := read(ctx, nil, off, jsArgMax)
		if err != nil {
			panic(fmt.Sprintf("host function %s: reading its answer: %v", fn, err))
		}
		_, _ = k.call1(ctx, k.scratch[:], "free", off)
		return data
	}
	var stack [2]uint64
	switch op {
	case "log":
		level, _ := strconv.Atoi(string(a))
		stack[0], stack[1] = uint64(level), put("log", b)
		hostLog(ctx, nil, stack[:])
		_, _ = k.call1(ctx, k.scratch[:], "free", stack[1])
		return nil
	case "kv_get":
		stack[0] = put("kv_get", a)
		hostKVGet(ctx, nil, stack[:])
		return get("kv_get", stack[0])
	case "kv_set":
		stack[0], stack[1] = put("kv_set", a), put("kv_set", b)
		hostKVSet(ctx, nil, stack[:])
		return get("kv_set", stack[0])
	case "kv_delete":
		stack[0] = put("kv_delete", a)
		hostKVDelete(ctx, nil, stack[:])
		return get("kv_delete", stack[0])
	case "http_request":
		stack[0] = put("http_request", a)
		hostHTTP(ctx, nil, stack[:])
		return get("http_request", stack[0])
	case "idempotency_key":
		hostIdempotencyKey(ctx, nil, stack[:])
		return get("idempotency_key", stack[0])
	case "wait_event":
		stack[0] = put("wait_event", a)
		hostWaitEvent(ctx, nil, stack[:])
		return get("wait_event", stack[0])
	case "wait_for":
		ms, err := strconv.ParseInt(string(a), 10, 64)
		if err != nil {
			return []byte("denied: bad duration " + strconv.Quote(string(a)))
		}
		stack[0] = uint64(ms)
		hostWaitFor(ctx, nil, stack[:])
		return get("wait_for", stack[0])
	case "random":
		// Eight random bytes, hex: the kit seeds Math.random with them at
		// every call, which would otherwise repeat the sequence the
		// copied memory holds.
		var b [8]byte
		if v.random == nil {
			panic("host_call: no random source")
		}
		if _, err := io.ReadFull(v.random, b[:]); err != nil {
			panic(fmt.Errorf("host_call: random: %w", err))
		}
		return []byte(hex.EncodeToString(b[:]))
	case "config":
		value, ok := v.p.Config[string(a)]
		chargeHost(ctx, int64(len(value))>>4)
		if !ok {
			return []byte{0}
		}
		return append([]byte{1}, value...)
	}
	panic("host_call: no op " + strconv.Quote(op) + " (log, kv_get, kv_set, kv_delete, http_request, idempotency_key, wait_event, wait_for, random, config)")
}

// jsImports are the functions of module env the engine imports: its host
// function trampoline, and hooks the host leaves off (no interrupt
// handler, no rejection handler, no module loader: a script is one
// bundle; UTC).
func jsImports() []extism.HostFunction {
	i32 := extism.ValueTypeI32
	fns := []extism.HostFunction{
		extism.NewHostFunctionWithStack("host_call", jsHostCall, []extism.ValueType{i32, i32, i32, i32, i32}, []extism.ValueType{i32}),
		extism.NewHostFunctionWithStack("host_interrupt", func(_ context.Context, _ *extism.CurrentPlugin, stack []uint64) { stack[0] = 0 },
			nil, []extism.ValueType{i32}),
		extism.NewHostFunctionWithStack("host_promise_rejection", func(context.Context, *extism.CurrentPlugin, []uint64) {},
			[]extism.ValueType{i32, i32, i32}, nil),
		extism.NewHostFunctionWithStack("host_module_normalize", func(_ context.Context, _ *extism.CurrentPlugin, stack []uint64) { stack[0] = 0 },
			[]extism.ValueType{i32, i32}, []extism.ValueType{i32}),
		extism.NewHostFunctionWithStack("host_module_load", func(_ context.Context, _ *extism.CurrentPlugin, stack []uint64) { stack[0] = 0 },
			[]extism.ValueType{i32, i32}, []extism.ValueType{i32}),
		extism.NewHostFunctionWithStack("host_get_timezone_offset", func(_ context.Context, _ *extism.CurrentPlugin, stack []uint64) { stack[0] = 0 },
			[]extism.ValueType{i32, i32}, []extism.ValueType{i32}),
	}
	for i := range fns {
		fns[i].SetNamespace(jsEnv)
	}
	return fns
}

// jsEnv is the module the engine imports its host hooks from.
const jsEnv = "env"

// jsImportNames are the functions a module may import from jsEnv.
var jsImportNames = map[string]bool{"host_call": true, "host_interrupt": true, "host_promise_rejection": true,
	"host_module_normalize": true, "host_module_load": true, "host_get_timezone_offset": true}
