package plugins

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// The pool of a module's instances: how they are made, kept, and thrown away.

// instance is one Extism plugin instance: not safe for concurrent calls,
// hence the pool.
type instance struct {
	p      *extism.Plugin
	stderr *stderrWriter
	// env is the call in progress, set and cleared by the goroutine that
	// runs it (Extism's log callback runs on that goroutine).
	env *callEnv
	mod *Module
	// fast calls exports without go-sdk's per-call lookups, once the
	// first call (through go-sdk, which initialises the guest runtime)
	// made the instance warm; nil when go-sdk's internals moved.
	fast *kernelCall
	warm bool
	// tank is the fuel of the call in progress, on the module's fuel
	// global.
	tank *tank
	// startFuel is what the module's start function used: the first call
	// the instance serves is charged it.
	startFuel int64
	// js is a JavaScript plugin's engine (jsvm.go); nil for others.
	js *jsVM
}

// call runs an export: the first call through go-sdk, which initialises
// the guest's runtime (_initialize), the others through the instance's
// cached functions.
func (in *instance) call(ctx context.Context, export string, input []byte) (uint32, []byte, error) {
	if in.js != nil {
		out, err := in.js.invoke(in.jsContext(ctx), export, input, in.mod.limits.MaxOutputBytes)
		if err != nil {
			return 1, nil, err
		}
		return 0, out, nil
	}
	if in.warm && in.fast != nil {
		return in.fast.call(ctx, export, input)
	}
	in.warm = true
	rc, out, err := in.p.CallWithContext(ctx, export, input)
	return rc, out, in.guestText(ctx, err)
}

// jsContext is ctx with what the host functions a script calls need: the
// instance's kernel, as a fast call's have.
func (in *instance) jsContext(ctx context.Context) context.Context {
	ctx = context.WithValue(ctx, extism.PluginCtxKey("extism"), api.Module(in.fast.kernel))
	return context.WithValue(ctx, extism.PluginCtxKey("plugin"), in.p)
}

// guestText marks, of the errors go-sdk's CallWithContext returns, the
// text the plugin set with error_set as a *guestError. go-sdk returns it as
// a plain errors.New string, as it does some of its own errors ("module is
// closed", "failed to initialize runtime: …"); the plugin's is the one that
// equals the error the instance's Extism kernel holds, which go-sdk read
// after the export returned. wazero's traps wrap their cause, and an exit
// is a *sys.ExitError: neither is the plugin's text, whatever it says.
func (in *instance) guestText(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	first, rest := err, []error(nil)
	if j, ok := err.(interface{ Unwrap() []error }); ok { // the plugin's error joined with a failure to read the output
		if errs := j.Unwrap(); len(errs) > 0 {
			first, rest = errs[0], errs[1:]
		}
	}
	if reflect.TypeOf(first) != plainErrorType {
		return err
	}
	msg := in.p.GetErrorWithContext(ctx)
	if msg == "" || msg != first.Error() {
		return err
	}
	if rest == nil {
		return &guestError{msg: msg}
	}
	return errors.Join(append([]error{&guestError{msg: msg}}, rest...)...)
}

// plainErrorType is the type of errors.New's errors: go-sdk's for a
// plugin's error_set text.
var plainErrorType = reflect.TypeOf(errors.New(""))

// close closes the instance and returns its share of the tenant's budget.
func (in *instance) close() {
	_ = in.p.Close(context.Background())
	in.mod.budget.releaseInstance(in.mod)
}

// newInstance instantiates the compiled module: no filesystem, no
// environment, no arguments; real clocks; crypto-grade randomness; stdout
// discarded; the tail of stderr kept for trap messages. Sleeping does not
// block the host (wazero's nanosleep is a no-op without WithSysNanosleep),
// so a sleeping plugin spins against its timeout.
//
// Then it runs the module's start function, the plugin's own code, as a
// call (the meter made it an export, startExport): on the call's fuel
// (Limits.Fuel), within ctx, which must carry the deadline of the call (or
// load) the instance serves.
func (m *Module) newInstance(ctx context.Context) (*instance, error) {
	if err := m.budget.reserveInstance(ctx, m); err != nil {
		return nil, err
	}
	return m.instantiate(ctx, false)
}

// instantiate is newInstance once the instance's room in the tenant's
// budget is reserved; a failure gives the room back. background counts
// the instance among those made in the background (Stats' Warmed), at
// the instant it counts it made.
func (m *Module) instantiate(ctx context.Context, background bool) (*instance, error) {
	stderr := &stderrWriter{max: 2 << 10}
	src := &sysSource{}
	mc := src.config(wazero.NewModuleConfig()).
		WithStdout(io.Discard).
		WithStderr(stderr)
	p, err := m.compiled.Instance(ctx, extism.PluginInstanceConfig{ModuleConfig: mc})
	if err != nil {
		m.budget.releaseInstance(m)
		return nil, err
	}
	if background {
		m.made.Add(1<<32 | 1)
	} else {
		m.made.Add(1 << 32)
	}
	in := &instance{p: p, stderr: stderr, mod: m, fast: newKernelCall(p), tank: newTank(sdkModule(p, "mainModule"))}
	src.in = in
	if m.script != nil && in.fast != nil {
		if in.js, err = newJSVM(m.script, m.dataLow, in.fast.main, p); err != nil {
			in.close()
			return nil, err
		}
		in.js.random = src
	}
	switch {
	case in.fast == nil:
		// Every call goes through the instance's own kernel (fastcall.go):
		// its start function needs it, and so do the charges of the
		// kernel's functions.
		in.close()
		return nil, errors.New("plugins: go-sdk keeps its modules elsewhere than this host knows (TestKernelCallReachesModules): cannot run the module")
	case in.tank == nil && !m.rt.unmetered:
		in.close()
		return nil, errors.New("the instance has no fuel global: the module was not metered")
	}
	// Extism's own log functions (gated by its process-wide level, off by
	// default) go to the same logger, within the same budget as the log
	// host function: the call in progress's, and with its secrets
	// withheld as its lines are.
	p.SetLogger(func(level extism.LogLevel, msg string) {
		env := in.env
		if env == nil || !env.allowLog(len(msg)) {
			return
		}
		m.log.Log(context.Background(), extismLevels[level], env.mod.guard.withhold(msg), append(env.logAttrs(), "source", "extism")...)
	})
	if err := in.start(ctx); err != nil {
		m.discarded.Add(1)
		in.close()
		return nil, err
	}
	return in, nil
}

// start runs the module's start function, if it has one, as a call of its
// own: its fuel and errors are a call's; the fuel it used is charged to
// the first call the instance serves (startFuel).
//
// A JavaScript plugin's engine starts here too, and runs its script
// (jsVM.init): its fuel and errors are a start function's.
func (in *instance) start(ctx context.Context) error {
	if in.js == nil && in.fast.main.ExportedFunction(startExport) == nil {
		return nil
	}
	m := in.mod
	env := &callEnv{mod: m, export: "start", tank: in.tank, yielded: time.Now()}
	in.env = env
	defer func() { in.env = nil }()
	in.stderr.reset()
	in.tank.fill(m.limits.Fuel)
	var err error
	if in.js != nil {
		err = in.js.init(in.jsContext(context.WithValue(ctx, envKey{}, env)))
		var guest *guestError
		if errors.As(err, &guest) {
			in.startFuel = in.tank.used()
			m.fuel.Add(in.startFuel)
			return detailed(ErrTrap, "the script: %s", guest.msg)
		}
	} else {
		_, _, err = in.fast.call(context.WithValue(ctx, envKey{}, env), startExport, nil)
	}
	if err == nil && in.tank.settle() {
		err = errOutOfFuel
	}
	in.startFuel = in.tank.used()
	m.fuel.Add(in.startFuel)
	if err == nil {
		return nil
	}
	if in.tank.exhausted() {
		return detailed(ErrOutOfFuel, "the start function used %d fuel, the limit of a call (Limits.Fuel)", m.limits.Fuel)
	}
	if c := m.runtimeFailure(err, ctx, ctx, m.limits.CallTimeout, in.stderr.String()); c != nil {
		return c
	}
	return detailed(ErrTrap, "the start function: %s%s", firstLine(err.Error()), stderrSuffix(in.stderr.String()))
}

var extismLevels = map[extism.LogLevel]slog.Level{
	extism.LogLevelTrace: slog.LevelDebug - 4, extism.LogLevelDebug: slog.LevelDebug,
	extism.LogLevelInfo: slog.LevelInfo, extism.LogLevelWarn: slog.LevelWarn, extism.LogLevelError: slog.LevelError,
}

// pool bounds and recycles a module's instances.
type pool struct {
	idle  chan *instance
	slots chan struct{}
}

func newPool(n int) pool {
	return pool{idle: make(chan *instance, n), slots: make(chan struct{}, n)}
}

// adopt adds a fresh instance to the pool.
func (p *pool) adopt(in *instance) {
	p.slots <- struct{}{}
	p.idle <- in
}

// instantiateError is a failure to create an instance, as opposed to
// waiting in vain for a free one.
type instantiateError struct{ err error }

func (e *instantiateError) Error() string { return e.err.Error() }
func (e *instantiateError) Unwrap() error { return e.err }

// get returns a free instance, creating one if the pool has room, or
// waits for one until ctx is done. A failure to create one is an
// *instantiateError; its slot is freed.
func (p *pool) get(ctx context.Context, create func(context.Context) (*instance, error)) (*instance, error) {
	select {
	case in := <-p.idle:
		return in, nil
	default:
	}
	select {
	case in := <-p.idle:
		return in, nil
	case p.slots <- struct{}{}:
		in, err := create(ctx)
		if err != nil {
			<-p.slots
			return nil, &instantiateError{err}
		}
		return in, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *pool) put(in *instance) { p.idle <- in }

func (p *pool) discard(in *instance) {
	in.close()
	<-p.slots
}

// recycle returns a healthy instance to the pool (a JavaScript engine
// whose memory grew cannot start afresh: it is discarded); then, if a call waits
// for room in the tenant's budget, an idle instance is closed, handing its
// share over. (Put first, look second: a waiter that queued after the look
// finds the idle instance itself.) The warm pool is topped up by the
// call's end (topUp), once its slots are given back.
func (m *Module) recycle(in *instance) {
	if in.js != nil && in.js.spent {
		m.pool.discard(in)
		return
	}
	m.pool.put(in)
	if m.budget.handOver() {
		evictIdle([]*Module{m})
	}
}

// discard throws an instance away after an error.
func (m *Module) discard(in *instance) {
	m.discarded.Add(1)
	m.pool.discard(in)
}

// topUp asks for warm instances when fewer than Limits.WarmInstances are
// idle. A call runs it at its end, after giving back its slot of the
// host's and the tenant's calls: asked while the call still held them, a
// round could find no room (every slot taken, by that very call) and give
// up with nobody left to ask again.
func (m *Module) topUp() {
	if len(m.pool.idle) < m.limits.WarmInstances {
		m.keepWarm()
	}
}

// drain closes the idle instances.
func (p *pool) drain() {
	for {
		select {
		case in := <-p.idle:
			p.discard(in)
		default:
			return
		}
	}
}
