package plugins

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentichost/agentic/host"
	extism "github.com/extism/go-sdk"
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
	rt     *Runtime
	name   string
	tenant string
	hash   string
	limits Limits
	// configBytes is the size of the plugin's configuration (its keys
	// and values): the most config_get copies.
	configBytes int
	log         *slog.Logger
	guard       *httpGuard
	// compiled is shared with the runtime's other modules of the same
	// compiledKey (Runtime.compiledPlugin).
	compiled    *extism.CompiledPlugin
	compiledKey string
	// script is a JavaScript plugin's script, which its engine (the
	// compiled module) runs (jsmodule.go); nil for other plugins.
	script []byte
	// dataLow is the lowest address the engine's data initialise (0
	// when unknown): what of its memory a call need not put back.
	dataLow uint32
	exports map[string]bool
	pool    pool
	budget  *tenantBudget // shared with the tenant's other modules

	desc       Description
	described  bool
	tools      map[string]*moduleTool
	toolList   []host.Tool
	validators map[string]*moduleValidator
	policies   map[string]*modulePolicy

	health health  // its failures, and its quarantine (quarantine.go)
	src    Source  // its name, bytes, sidecar and signature: what loads it again (versions.go)
	signer *Signer // who signed it; nil: no signature

	// warming is set while a goroutine makes warm instances (keepWarm);
	// warmAsked, when it was asked to since its round began.
	warming, warmAsked atomic.Bool

	calls, discarded, evicted atomic.Int64
	fuel                      atomic.Int64 // used by its calls
	// made counts the instances made: all of them in its high 32 bits,
	// those made in the background (warm) in its low 32, so that Stats
	// reads both at one instant.
	made atomic.Uint64

	// refs counts the owner's reference (1 until Close) and the calls in
	// flight; the module shuts down when it drops to 0.
	refs      atomic.Int64
	closing   atomic.Bool // Close was called
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
	if d.Needs != nil {
		n := *d.Needs
		n.AllowedHosts = slices.Clone(n.AllowedHosts)
		d.Needs = &n
	}
	return d
}

// Fingerprint is the fingerprint of the module's description (see
// [Description.Fingerprint]); "" for a module not described.
func (m *Module) Fingerprint() string {
	if !m.described {
		return ""
	}
	return m.desc.Fingerprint()
}

// Signer returns who signed the module, as its signature
// (Source.Signature) says: Verified when a registry whose tenant requires
// signed modules checked it with a trusted key. Nil when the module has no
// signature, or one that does not read.
func (m *Module) Signer() *Signer {
	if m.signer == nil {
		return nil
	}
	s := *m.signer
	return &s
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
func (m *Module) Validator(name string) (host.Validator, bool) {
	v, ok := m.validators[name]
	if !ok {
		return nil, false
	}
	return v, true
}

// Policy returns the named policy.
func (m *Module) Policy(name string) (host.Policy, bool) {
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
		return nil, m.fail(export, "", detailed(ErrNotFound, "the module exports no %q", export))
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
		return m.fail("prewarm", "", ErrClosed)
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
			return m.fail("prewarm", "", err)
		}
		held = append(held, in)
	}
	return nil
}

// keepWarm makes instances in the background until
// Limits.WarmInstances are idle; one goroutine at a time does. An
// instance it cannot make now (no room nobody waits for, a failing start
// function) ends the round: the next ask tries again (a load, a call's
// end that leaves fewer idle than wanted). An ask while a round runs is
// not lost: the round runs once more after it.
func (m *Module) keepWarm() {
	want := m.limits.WarmInstances
	if want <= 0 {
		return
	}
	m.warmAsked.Store(true)
	if !m.warming.CompareAndSwap(false, true) {
		return // the running round sees the ask when it ends
	}
	if !m.acquire() {
		m.warming.Store(false)
		return
	}
	go func() {
		defer m.release()
		for {
			m.warmAsked.Store(false)
			m.warmRound(want)
			m.warming.Store(false)
			// An ask made during the round found warming set and left
			// the work to this goroutine; one made after the line above
			// starts its own.
			if !m.warmAsked.Load() || !m.warming.CompareAndSwap(false, true) {
				return
			}
		}
	}()
}

// warmRound makes idle instances until want are idle, or until one
// cannot be made now.
func (m *Module) warmRound(want int) {
	for len(m.pool.idle) < want && !m.closing.Load() && m.warmOne() {
	}
}

// warmOne makes one idle instance, in background work bounded as a call
// is — a slot of the pool, of the host's concurrent calls and of the
// tenant's, and the tenant's room for an instance — taken only when free
// and wanted by no call: it runs the module's start function and
// describe, the plugin's code. It reports whether it made one.
func (m *Module) warmOne() bool {
	select {
	case m.pool.slots <- struct{}{}:
	default:
		return false // every slot is taken: the busy instances come back idle
	}
	made := false
	defer func() {
		if !made {
			<-m.pool.slots
		}
	}()
	if !m.rt.calls.spare(m.tenant) {
		return false
	}
	defer m.rt.calls.release(m.tenant)
	if !m.budget.spareCall() {
		return false
	}
	defer m.budget.endCall()
	if !m.budget.spareInstance(m) {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.limits.CallTimeout)
	defer cancel()
	in, err := m.instantiate(ctx, true)
	if err == nil {
		if err = m.initInstance(ctx, in); err != nil {
			in.close()
		}
	}
	if err != nil {
		m.log.Warn("plugin: a warm instance could not be made", "err", err)
		return false
	}
	select {
	case <-m.done: // shut down meanwhile (its Runtime closed)
		in.close()
		return false
	default:
	}
	made = true
	m.pool.put(in)
	return true
}

// initInstance runs describe on a new instance, when the module has one,
// as its first call would; after a failure the caller throws the instance
// away.
func (m *Module) initInstance(ctx context.Context, in *instance) error {
	if !m.exports["describe"] {
		return nil
	}
	env := &callEnv{mod: m, export: "describe", tank: in.tank, yielded: time.Now()}
	in.tank.fill(m.limits.Fuel)
	_, _, err := in.call(context.WithValue(ctx, envKey{}, env), "describe", nil)
	m.fuel.Add(in.tank.used())
	if err != nil {
		if in.tank.exhausted() {
			return detailed(ErrOutOfFuel, "describe used %d fuel, the limit of a call (Limits.Fuel)", m.limits.Fuel)
		}
		return m.classify(err, ctx, ctx, m.limits.CallTimeout, in.stderr.String())
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
	if err := m.initInstance(callCtx, in); err != nil {
		m.discard(in)
		return nil, err
	}
	return in, nil
}

// Close releases the caller's reference: the module stops accepting calls,
// and shuts down (closing its instances and compiled code) once the calls
// in flight have finished. It returns at once; [Module.Done] is closed at
// shutdown.
func (m *Module) Close(ctx context.Context) error {
	m.closeOnce.Do(func() {
		m.closing.Store(true) // no call starts on it from now: a registry's caller follows the name to the version serving
		m.release()
	})
	return nil
}

// ModuleStats counts what a module did since it loaded.
type ModuleStats struct {
	// Calls counts the calls that ran on an instance (any export).
	Calls int64
	// Instantiated counts the instances created; Discarded those thrown
	// away after an error, trap or timeout; Evicted idle ones closed to
	// make room for another module of the tenant (Limits.TenantInstances).
	// A call that finds an idle instance adds to none of them.
	Instantiated, Discarded, Evicted int64
	// Warmed counts the instances of Instantiated made in the background,
	// ahead of any call, to keep Limits.WarmInstances idle: the rest were
	// made by the load or by a call that found none idle. The two are
	// counted, and read, at one instant: Instantiated - Warmed is never
	// off by an instance the background is making.
	Warmed int64
	// Idle is the number of free instances in the pool now.
	Idle int
	// Fuel is the fuel its calls used (see Limits.Fuel).
	Fuel int64
}

// Stats returns the module's counters.
func (m *Module) Stats() ModuleStats {
	made := m.made.Load()
	return ModuleStats{
		Calls:        m.calls.Load(),
		Instantiated: int64(made >> 32),
		Warmed:       int64(made & (1<<32 - 1)),
		Discarded:    m.discarded.Load(),
		Evicted:      m.evicted.Load(),
		Idle:         len(m.pool.idle),
		Fuel:         m.fuel.Load(),
	}
}

// Done is closed when the module has shut down.
func (m *Module) Done() <-chan struct{} { return m.done }

// acquire takes a reference for a call; false once the module is closing
// (even while calls that started before are still in flight).
func (m *Module) acquire() bool {
	for {
		n := m.refs.Load()
		if n <= 0 || m.closing.Load() {
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

// shutdown closes the module's instances and hands back its compiled code
// (closed with the last module using it). Calls still in flight (only
// when the Runtime closes) fail.
func (m *Module) shutdown(ctx context.Context) error {
	var err error
	m.downOnce.Do(func() {
		m.refs.Store(0)
		m.pool.drain()
		if m.compiled != nil {
			err = m.rt.releasePlugin(ctx, m.compiledKey)
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
