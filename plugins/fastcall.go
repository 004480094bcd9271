package plugins

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// Calls without go-sdk's per-call lookups. go-sdk looks up a wazero
// function each time it calls into an instance's Extism kernel — seven
// times per call of an export (reset, alloc, input_set, the export,
// error_get, output_offset, output_length), and once more for every call
// the guest makes into the kernel (reading its input and writing its
// output byte by byte, for plugins built on Extism's PDKs) — and wazero
// makes a new call engine, with its own stack, for each lookup: most of
// the time and nearly all the memory of a warm call. Here an instance's
// functions are looked up once and reused.

// kernelModule is an instance's Extism kernel with its functions looked up
// once. go-sdk's env functions (the guest's way into the kernel) find the
// kernel in the call's context, under extism.PluginCtxKey("extism"): a
// kernelModule put there serves their lookups from its cache.
type kernelModule struct {
	api.Module
	fns     map[string]api.Function
	memory  api.Memory
	scratch [2]uint64 // for the host functions' block reads and writes
}

// ExportedFunction returns the kernel's function name, looked up once.
func (k *kernelModule) ExportedFunction(name string) api.Function {
	f, ok := k.fns[name]
	if !ok {
		f = k.Module.ExportedFunction(name)
		k.fns[name] = f
	}
	return f
}

// call1 calls a kernel function that returns at most one value.
func (k *kernelModule) call1(ctx context.Context, stack []uint64, name string, args ...uint64) (uint64, error) {
	fn := k.ExportedFunction(name)
	if fn == nil {
		return 0, fmt.Errorf("the Extism kernel has no %s", name)
	}
	copy(stack, args)
	if err := fn.CallWithStack(ctx, stack); err != nil {
		return 0, err
	}
	return stack[0], nil
}

// readBlock returns the bytes of the kernel memory block at off, refusing
// one longer than max.
func (k *kernelModule) readBlock(ctx context.Context, off uint64, max int) ([]byte, error) {
	n, err := k.call1(ctx, k.scratch[:], "length", off)
	if err != nil {
		return nil, err
	}
	if n > uint64(max) {
		return nil, fmt.Errorf("argument of %d bytes exceeds %d", n, max)
	}
	b, ok := k.memory.Read(uint32(off), uint32(n))
	if !ok {
		return nil, fmt.Errorf("block %d of %d bytes is outside the memory", off, n)
	}
	return append([]byte(nil), b...), nil
}

// writeBlock copies b into a new kernel memory block and returns its
// offset.
func (k *kernelModule) writeBlock(ctx context.Context, b []byte) (uint64, error) {
	off, err := k.call1(ctx, k.scratch[:], "alloc", uint64(len(b)))
	if err != nil {
		return 0, err
	}
	if !k.memory.Write(uint32(off), b) {
		return 0, fmt.Errorf("block %d of %d bytes is outside the memory", off, len(b))
	}
	return off, nil
}

// kernelCall runs exports of one instance as go-sdk's
// Plugin.CallWithContext does, through the instance's kernelModule.
type kernelCall struct {
	p       *extism.Plugin
	kernel  *kernelModule
	main    api.Module // the plugin's own module
	exports map[string]api.Function
	stack   [2]uint64
}

// newKernelCall reaches the instance's kernel and main module, which
// go-sdk keeps in unexported fields. It returns nil when go-sdk's Plugin
// no longer has them where version v1.7.1 keeps them
// (TestKernelCallReachesModules pins it): calls then go through go-sdk.
func newKernelCall(p *extism.Plugin) *kernelCall {
	kernel, main := sdkModule(p, "extism"), sdkModule(p, "mainModule")
	if kernel == nil || main == nil {
		return nil
	}
	k := &kernelCall{p: p, main: main, exports: map[string]api.Function{},
		kernel: &kernelModule{Module: kernel, fns: map[string]api.Function{}, memory: kernel.ExportedMemory("memory")}}
	if k.kernel.memory == nil {
		return nil
	}
	return k
}

// sdkModule returns one of the wazero modules go-sdk keeps in a Plugin:
// "extism" (the kernel) or "mainModule" (the plugin's own); nil if go-sdk's
// internals moved.
func sdkModule(p *extism.Plugin, field string) api.Module {
	f := reflect.ValueOf(p).Elem().FieldByName(field)
	if !f.IsValid() || f.Type() != reflect.TypeFor[api.Module]() {
		return nil
	}
	return *(*api.Module)(unsafe.Pointer(f.UnsafeAddr()))
}

// call runs export with input, as Plugin.CallWithContext does. The guest
// runtime must be initialised already: an instance's first call goes
// through go-sdk, which does that.
func (k *kernelCall) call(ctx context.Context, export string, input []byte) (uint32, []byte, error) {
	if k.main.IsClosed() {
		return 0, nil, errors.New("module is closed")
	}
	fn := k.exports[export]
	if fn == nil {
		if fn = k.main.ExportedFunction(export); fn == nil {
			return 1, nil, fmt.Errorf("unknown function: %s", export)
		}
		if n := len(fn.Definition().ResultTypes()); n > 1 {
			return 1, nil, fmt.Errorf("function %s has %v results, expected 0 or 1", export, n)
		}
		k.exports[export] = fn
	}
	ctx = context.WithValue(ctx, extism.PluginCtxKey("extism"), api.Module(k.kernel))
	ctx = context.WithValue(ctx, extism.PluginCtxKey("plugin"), k.p)
	off, err := k.setInput(ctx, input)
	if err != nil {
		return 1, nil, err
	}
	ctx = context.WithValue(ctx, extism.InputOffsetKey("inputOffset"), off)

	s := k.stack[:]
	err = fn.CallWithStack(ctx, s)
	var rc uint32
	switch exitErr, exited := err.(*sys.ExitError); { // as go-sdk: not wrapped
	case err == nil && len(fn.Definition().ResultTypes()) == 1:
		rc = api.DecodeU32(s[0])
	case err == nil:
	case exited:
		if rc = exitErr.ExitCode(); rc == 0 {
			err = nil
		}
	default:
		rc = 1
	}
	if err != nil {
		return rc, nil, err
	}
	var returnErr error
	if msg := k.errorText(ctx); msg != "" {
		returnErr = &guestError{msg: msg} // the plugin's error_set, not the runtime's
	}
	out, err := k.output(ctx)
	if err != nil {
		return rc, nil, errors.Join(returnErr, fmt.Errorf("failed to get output: %v", err))
	}
	return rc, out, returnErr
}

func (k *kernelCall) setInput(ctx context.Context, data []byte) (uint64, error) {
	if _, err := k.kernel.call1(ctx, k.stack[:], "reset"); err != nil {
		return 0, errors.New("reset")
	}
	ptr, err := k.kernel.call1(ctx, k.stack[:], "alloc", uint64(len(data)))
	if err != nil {
		return 0, err
	}
	k.kernel.memory.Write(uint32(ptr), data)
	if _, err := k.kernel.call1(ctx, k.stack[:], "input_set", ptr, uint64(len(data))); err != nil {
		return 0, err
	}
	return ptr, nil
}

func (k *kernelCall) errorText(ctx context.Context) string {
	off, err := k.kernel.call1(ctx, k.stack[:], "error_get")
	if err != nil || off == 0 {
		return ""
	}
	n, err := k.kernel.call1(ctx, k.stack[:], "length", off)
	if err != nil {
		return ""
	}
	b, _ := k.kernel.memory.Read(uint32(off), uint32(n))
	return string(b)
}

func (k *kernelCall) output(ctx context.Context) ([]byte, error) {
	off, err := k.kernel.call1(ctx, k.stack[:], "output_offset")
	if err != nil {
		return nil, err
	}
	n, err := k.kernel.call1(ctx, k.stack[:], "output_length")
	if err != nil {
		return nil, err
	}
	b, _ := k.kernel.memory.Read(uint32(off), uint32(n))
	return append([]byte(nil), b...), nil
}

// kernelOf returns the cached kernel of the call in ctx, when the call
// went through a kernelCall.
func kernelOf(ctx context.Context) *kernelModule {
	k, _ := ctx.Value(extism.PluginCtxKey("extism")).(*kernelModule)
	return k
}
