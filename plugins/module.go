package plugins

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentichost/agentic/host"
	extism "github.com/extism/go-sdk"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/sys"
)

// Module is a compiled, described plugin module bound to a tenant and its
// limits. It is immutable once loaded, safe for concurrent use, and keeps a
// bounded pool of instances: a call takes a free instance (or creates one,
// up to Limits.Instances, or waits within its deadline), and returns it
// unless anything went wrong — an instance that trapped, timed out, ran out
// of memory or output, or answered malformed JSON is discarded, never
// reused. Nothing is compiled or instantiated on the path of a call to a
// warm pool.
type Module struct {
	rt       *Runtime
	name     string
	tenant   string
	hash     string
	limits   Limits
	log      *slog.Logger
	guard    *httpGuard
	compiled *extism.CompiledPlugin
	exports  map[string]bool
	pool     pool
	budget   *tenantBudget // shared with the tenant's other modules

	desc       Description
	described  bool
	tools      map[string]*moduleTool
	toolList   []host.Tool
	validators map[string]*moduleValidator
	policies   map[string]*modulePolicy

	calls, instantiated, discarded, evicted atomic.Int64

	// refs counts the owner's reference (1 until Close) and the calls in
	// flight; the module shuts down when it drops to 0.
	refs      atomic.Int64
	closeOnce sync.Once
	downOnce  sync.Once
	done      chan struct{}
}

// Name returns the module's name.
func (m *Module) Name() string { return m.name }

// Tenant returns the tenant the module runs for.
func (m *Module) Tenant() string { return m.tenant }

// Hash returns the module's content hash, "sha256:<hex>": the Source of
// every result it produces.
func (m *Module) Hash() string { return m.hash }

// Limits returns the module's limits, defaults applied.
func (m *Module) Limits() Limits { return m.limits }

// Described reports whether the module has a description (from describe
// or a sidecar manifest).
func (m *Module) Described() bool { return m.described }

// Description returns what the module offers (empty when not
// [Module.Described]).
func (m *Module) Description() Description {
	d := m.desc
	d.Tools = slices.Clone(d.Tools)
	d.Validators = slices.Clone(d.Validators)
	d.Policies = slices.Clone(d.Policies)
	return d
}

// Exports returns the names of the module's exported functions, sorted.
func (m *Module) Exports() []string {
	out := make([]string, 0, len(m.exports))
	for name := range m.exports {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Tools returns the module's tools, sorted by name.
func (m *Module) Tools() []host.Tool { return append([]host.Tool(nil), m.toolList...) }

// Tool returns the named tool.
func (m *Module) Tool(name string) (host.Tool, bool) {
	t, ok := m.tools[name]
	if !ok {
		return nil, false
	}
	return t, true
}

// Validator returns the named validator.
func (m *Module) Validator(name string) (Validator, bool) {
	v, ok := m.validators[name]
	if !ok {
		return nil, false
	}
	return v, true
}

// Policy returns the named policy.
func (m *Module) Policy(name string) (Policy, bool) {
	p, ok := m.policies[name]
	if !ok {
		return nil, false
	}
	return p, true
}

// CallExport calls an export with raw input and returns its raw output,
// under the module's limits. It is how plain Extism modules are called
// without a sidecar manifest. An error set by the plugin (Extism's
// error_set) wraps ErrToolFailed.
func (m *Module) CallExport(ctx context.Context, export string, input []byte) ([]byte, error) {
	if !m.exports[export] {
		return nil, &PluginError{Plugin: m.name, Export: export, Err: detailed(ErrNotFound, "the module exports no %q", export)}
	}
	var out []byte
	err := m.invoke(ctx, export, "", "", input, 0, func(b []byte) error {
		out = b
		return nil
	})
	return out, err
}

// Prewarm fills the pool with up to n instances (at most
// Limits.Instances), created and initialised now rather than by the first
// calls that need them. Initialisation runs the module's describe, when it
// has one.
func (m *Module) Prewarm(ctx context.Context, n int) error {
	n = min(n, m.limits.Instances)
	if !m.acquire() {
		return &PluginError{Plugin: m.name, Export: "prewarm", Err: ErrClosed}
	}
	defer m.release()
	var held []*instance
	defer func() {
		for _, in := range held {
			m.pool.put(in)
		}
	}()
	for len(held) < n {
		in, err := m.prewarmOne(ctx)
		if err != nil {
			return &PluginError{Plugin: m.name, Export: "prewarm", Err: err}
		}
		held = append(held, in)
	}
	return nil
}

// prewarmOne takes an instance from the pool (creating it, within the call
// timeout) and runs describe on it, when the module has one.
func (m *Module) prewarmOne(ctx context.Context) (*instance, error) {
	callCtx, cancel := context.WithTimeout(ctx, m.limits.CallTimeout)
	defer cancel()
	in, err := m.pool.get(callCtx, m.newInstance)
	if err != nil {
		var ie *instantiateError
		if errors.As(err, &ie) {
			return nil, m.instantiateFailure(ie.err, ctx, callCtx, m.limits.CallTimeout)
		}
		return nil, err
	}
	if m.exports["describe"] {
		_, _, err = in.p.CallWithContext(context.WithValue(callCtx, envKey{}, &callEnv{mod: m, export: "describe"}), "describe", nil)
		if err != nil {
			m.discard(in)
			return nil, m.classify(err, ctx, callCtx, m.limits.CallTimeout, in.stderr.String())
		}
	}
	return in, nil
}

// Close releases the caller's reference: the module stops accepting calls,
// and shuts down (closing its instances and compiled code) once the calls
// in flight have finished. It returns at once; [Module.Done] is closed at
// shutdown.
func (m *Module) Close(ctx context.Context) error {
	m.closeOnce.Do(m.release)
	return nil
}

// ModuleStats counts what a module did since it loaded.
type ModuleStats struct {
	// Calls counts the calls that ran on an instance (any export).
	Calls int64
	// Instantiated counts the instances created; Discarded those thrown
	// away after an error, trap or timeout; Evicted idle ones closed to
	// make room for another module of the tenant (Limits.TenantInstances).
	// On a warm pool none grows.
	Instantiated, Discarded, Evicted int64
	// Idle is the number of free instances in the pool now.
	Idle int
}

// Stats returns the module's counters.
func (m *Module) Stats() ModuleStats {
	return ModuleStats{
		Calls:        m.calls.Load(),
		Instantiated: m.instantiated.Load(),
		Discarded:    m.discarded.Load(),
		Evicted:      m.evicted.Load(),
		Idle:         len(m.pool.idle),
	}
}

// Done is closed when the module has shut down.
func (m *Module) Done() <-chan struct{} { return m.done }

// acquire takes a reference for a call; false once the module is closing.
func (m *Module) acquire() bool {
	for {
		n := m.refs.Load()
		if n <= 0 {
			return false
		}
		if m.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (m *Module) release() {
	if m.refs.Add(-1) == 0 {
		_ = m.shutdown(context.Background())
	}
}

// shutdown closes the module's instances and compiled code. Calls still in
// flight (only when the Runtime closes) fail.
func (m *Module) shutdown(ctx context.Context) error {
	var err error
	m.downOnce.Do(func() {
		m.refs.Store(0)
		m.pool.drain()
		if m.compiled != nil {
			err = m.compiled.Close(ctx)
		}
		if m.budget != nil {
			m.budget.leave(m)
		}
		m.guard.close()
		m.rt.forget(m)
		close(m.done)
	})
	return err
}

// instance is one Extism plugin instance: not safe for concurrent calls,
// hence the pool.
type instance struct {
	p      *extism.Plugin
	stderr *stderrWriter
	// env is the call in progress, set and cleared by the goroutine that
	// runs it (Extism's log callback runs on that goroutine).
	env *callEnv
	mod *Module
}

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
// Instantiating runs the module's start function, the plugin's own code:
// ctx must carry the deadline of the call (or load) it serves, which
// interrupts a start function that does not return (close-on-context-done
// watches it while the start function runs, and only then).
func (m *Module) newInstance(ctx context.Context) (*instance, error) {
	if err := m.budget.reserveInstance(ctx, m); err != nil {
		return nil, err
	}
	stderr := &stderrWriter{max: 2 << 10}
	mc := wazero.NewModuleConfig().
		WithSysWalltime().
		WithSysNanotime().
		WithRandSource(rand.Reader).
		WithStdout(io.Discard).
		WithStderr(stderr)
	p, err := m.compiled.Instance(ctx, extism.PluginInstanceConfig{ModuleConfig: mc})
	if err != nil {
		m.budget.releaseInstance(m)
		return nil, err
	}
	m.instantiated.Add(1)
	in := &instance{p: p, stderr: stderr, mod: m}
	// Extism's own log functions (gated by its process-wide level, off by
	// default) go to the same logger, within the same budget as the log
	// host function: the call in progress's.
	p.SetLogger(func(level extism.LogLevel, msg string) {
		env := in.env
		if env == nil || !env.allowLog(len(msg)) {
			return
		}
		m.log.Log(context.Background(), extismLevels[level], msg, append(env.logAttrs(), "source", "extism")...)
	})
	return in, nil
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

// recycle returns a healthy instance to the pool; then, if a call waits
// for room in the tenant's budget, an idle instance is closed, handing its
// share over. (Put first, look second: a waiter that queued after the look
// finds the idle instance itself.)
func (m *Module) recycle(in *instance) {
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

// errMalformed marks a decode failure: the instance is discarded.
func errMalformed(format string, args ...any) error {
	return detailed(ErrMalformedOutput, format, args...)
}

// invoke runs one export on a pooled instance. decode checks and keeps the
// output; an ErrMalformedOutput from it discards the instance. timeout 0
// means the tenant's CallTimeout (and it can only be shorter).
func (m *Module) invoke(ctx context.Context, export, name, callID string, input []byte, timeout time.Duration, decode func([]byte) error) error {
	fail := func(err error) error {
		return &PluginError{Plugin: m.name, Export: export, Name: name, Err: err}
	}
	if len(input) > m.limits.MaxInputBytes {
		return fail(detailed(ErrInputTooLarge, "%d bytes, the limit is %d", len(input), m.limits.MaxInputBytes))
	}
	if !m.acquire() {
		return fail(ErrClosed)
	}
	defer m.release()
	if timeout <= 0 || timeout > m.limits.CallTimeout {
		timeout = m.limits.CallTimeout
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := m.budget.startCall(callCtx); err != nil {
		return fail(err)
	}
	defer m.budget.endCall()
	if err := m.rt.calls.acquire(callCtx); err != nil {
		return fail(&busyError{what: fmt.Sprintf("the host's %d concurrent plugin calls", cap(m.rt.calls)), cause: err})
	}
	defer m.rt.calls.release()
	env := &callEnv{mod: m, export: export, name: name, callID: callID}
	runCtx := context.WithValue(callCtx, envKey{}, env)
	for attempt := 0; ; attempt++ {
		inst, err := m.pool.get(callCtx, m.newInstance)
		if err != nil {
			var ie *instantiateError
			if errors.As(err, &ie) {
				// The module's start function ran, and failed or ran out of
				// time: the plugin's own code, like a call.
				return fail(m.instantiateFailure(ie.err, ctx, callCtx, timeout))
			}
			// Waiting for a free instance: the plugin did not run.
			return fail(&busyError{what: fmt.Sprintf("all %d instances", m.limits.Instances), cause: err})
		}
		inst.stderr.reset()
		m.calls.Add(1)
		inst.env = env
		rc, out, err := inst.p.CallWithContext(runCtx, export, input)
		inst.env = nil
		if err != nil && err.Error() == "module is closed" && attempt < 2 && callCtx.Err() == nil {
			// The instance exited in an earlier call (exit code 0 closes
			// it too); this call did not run. Retry on another.
			m.discard(inst)
			continue
		}
		if err != nil {
			m.discard(inst)
			return fail(m.classify(err, ctx, callCtx, timeout, inst.stderr.String()))
		}
		if rc != 0 {
			m.discard(inst)
			return fail(m.remote(fmt.Sprintf("export %s returned %d without an error message", export, rc)))
		}
		if len(out) > m.limits.MaxOutputBytes {
			m.discard(inst)
			return fail(detailed(ErrOutputTooLarge, "%d bytes, the limit is %d", len(out), m.limits.MaxOutputBytes))
		}
		if err := decode(out); err != nil {
			if errors.Is(err, ErrMalformedOutput) {
				m.discard(inst)
			} else {
				m.recycle(inst)
			}
			return fail(err)
		}
		m.recycle(inst)
		return nil
	}
}

// classify turns an Extism/wazero call error into one of the package's.
func (m *Module) classify(err error, parent, callCtx context.Context, timeout time.Duration, stderr string) error {
	interrupted := func() error {
		if parent.Err() != nil && !errors.Is(parent.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("call cancelled: %w", parent.Err())
		}
		return &timeoutError{msg: fmt.Sprintf("timed out after %s (interrupted)", timeout)}
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded, sys.ExitCodeContextCanceled:
			return interrupted()
		}
		if outOfMemory(stderr) {
			return m.oom(stderr)
		}
		return detailed(ErrExited, "exit code %d%s", exit.ExitCode(), stderrSuffix(stderr))
	}
	if callCtx.Err() != nil {
		return interrupted()
	}
	msg := err.Error()
	if msg == "stack overflow" { // wazero's ErrRuntimeStackOverflow, returned as is
		return detailed(ErrTrap, "stack overflow: the call nested deeper than the host's native stack allows")
	}
	if strings.Contains(msg, "wasm error") || strings.Contains(msg, "wasm stack trace") ||
		strings.Contains(msg, "recovered by wazero") || strings.Contains(msg, "module is closed") ||
		strings.Contains(msg, "failed to initialize runtime") {
		if outOfMemory(stderr) || strings.Contains(msg, "out of memory") {
			return m.oom(stderr)
		}
		return detailed(ErrTrap, "%s%s", firstLine(msg), stderrSuffix(stderr))
	}
	// What remains is the plugin's own error (Extism's error_set).
	return m.remote(msg)
}

// remote is the plugin's own error message, cut to its first 20 lines and
// Limits.MaxErrorBytes.
func (m *Module) remote(msg string) error {
	return &remoteError{msg: m.clip(firstLines(msg, 20))}
}

// clip cuts a text the plugin returned to Limits.MaxErrorBytes.
func (m *Module) clip(s string) string { return clip(s, m.limits.MaxErrorBytes) }

// instantiateFailure says why an instance could not be made: its start
// function trapped or ran out of time (as a call would), or the module
// cannot be instantiated at all (ErrInvalidModule).
func (m *Module) instantiateFailure(err error, parent, ctx context.Context, timeout time.Duration) error {
	var busy *busyError
	if errors.As(err, &busy) || errors.Is(err, ErrInvalidLimits) {
		return err // the tenant's budget: nothing ran
	}
	c := m.classify(err, parent, ctx, timeout, "")
	if errors.Is(c, ErrToolFailed) { // not the plugin's answer: wazero's or Extism's
		c = detailed(ErrInvalidModule, "%v", oneLine(err))
	}
	return fmt.Errorf("instantiating: %w", c)
}

func (m *Module) oom(stderr string) error {
	return detailed(ErrOutOfMemory, "the limit is %d pages (%d MiB)%s", m.limits.MemoryPages, m.limits.MemoryPages/16, stderrSuffix(stderr))
}

func outOfMemory(stderr string) bool {
	return strings.Contains(stderr, "out of memory")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// stderrSuffix quotes the first lines of a plugin's stderr for an error.
func stderrSuffix(stderr string) string {
	stderr = strings.TrimSpace(stderr)
	if stderr == "" {
		return ""
	}
	return " (stderr: " + strings.Join(strings.Fields(firstLines(stderr, 3)), " ") + ")"
}

// describe loads the module's description from describe or a sidecar, and
// builds its tools, validators and policies.
func (m *Module) describe(ctx context.Context, sidecar *Sidecar) error {
	var (
		d       Description
		schemas map[string]*jsonschema.Schema
		err     error
	)
	switch {
	case sidecar != nil:
		d = sidecar.description()
		schemas, err = d.validate(true)
		if err != nil {
			return &PluginError{Plugin: m.name, Export: "sidecar", Err: err}
		}
		for _, t := range d.Tools {
			if !m.exports[t.Export] {
				return &PluginError{Plugin: m.name, Export: "sidecar", Name: t.Name,
					Err: detailed(ErrInvalidDescription, "the module exports no %q", t.Export)}
			}
		}
	case m.exports["describe"]:
		var perr error
		err = m.invoke(ctx, "describe", "", "", nil, 0, func(out []byte) error {
			d, schemas, perr = parseDescription(out)
			if errors.Is(perr, ErrMalformedOutput) {
				return perr
			}
			return nil
		})
		if err == nil {
			err = perr
		}
		if err != nil {
			var pe *PluginError
			if errors.As(err, &pe) {
				return err
			}
			return &PluginError{Plugin: m.name, Export: "describe", Err: err}
		}
		need := map[string]bool{"call": len(d.Tools) > 0, "validate": len(d.Validators) > 0, "decide": len(d.Policies) > 0}
		for export, needed := range need {
			if needed && !m.exports[export] {
				return &PluginError{Plugin: m.name, Export: "describe",
					Err: detailed(ErrInvalidDescription, "it describes items its module cannot serve: no %q export", export)}
			}
		}
	default:
		return nil // bare: only CallExport
	}
	m.desc, m.described = d, true
	m.tools = map[string]*moduleTool{}
	m.validators = map[string]*moduleValidator{}
	m.policies = map[string]*modulePolicy{}
	for _, t := range d.Tools {
		mt := &moduleTool{mod: m, desc: t, spec: t.spec(), schema: schemas["tool:"+t.Name]}
		m.tools[t.Name] = mt
		m.toolList = append(m.toolList, mt)
	}
	for _, v := range d.Validators {
		m.validators[v.Name] = &moduleValidator{mod: m, desc: v, schema: schemas["validator:"+v.Name]}
	}
	for _, p := range d.Policies {
		m.policies[p.Name] = &modulePolicy{mod: m, desc: p}
	}
	return nil
}
