package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
)

// Options configures a [Runtime]. The zero value is usable.
type Options struct {
	// CacheDir keeps compiled machine code on disk, and beside it the
	// metered modules it was compiled from, so that a module compiled
	// already (by this process or an earlier one that shared the
	// directory) loads with no compiler process: about 0.16 s instead of
	// 1.5 s for a 3.4 MB Go plugin. It is created if missing. Default: "",
	// a temporary directory of the Runtime's own, removed at Close
	// (an in-memory cache under Options.CompileInProcess).
	CacheDir string
	// Logger receives the plugins' log lines (tagged with plugin, tenant
	// and module hash) and the runtime's own warnings. Default:
	// slog.Default().
	Logger *slog.Logger
	// KV keeps the values of the key-value host functions of tenants whose
	// Limits.KV is on, tenant t's in namespace [StorageNamespace]+t. A host
	// gives it its own store (every built-in one implements storage.KV), so
	// that plugins' values are kept where its ledgers are, and shared by
	// every host sharing the store. Default: a store in memory
	// (storage/memory), for the life of the Runtime.
	KV storage.KV
	// CompileWorkers is the number of goroutines compiling one module.
	// Default: 0, which means GOMAXPROCS.
	CompileWorkers int
	// CompileInProcess compiles modules in this process instead of in a
	// compiler process (this program started again, under
	// Limits.CompileTimeout and Limits.MaxCompileBytes). wazero cannot
	// interrupt a compile, so in this process only Limits.MaxModuleBytes
	// bounds one, and modules compile one at a time: set it only when
	// every module is trusted, or where this program cannot start itself.
	// Default: false, a compiler process.
	CompileInProcess bool
	// MaxConcurrentCalls bounds the plugin calls running at once in the
	// runtime, across all modules and tenants; more wait for one to end,
	// within their deadline, and then fail unrun (retryable). A tenant
	// holds at most half of them, and a freed one goes to the waiting
	// tenant with the fewest calls running, so that one tenant's calls
	// never hold every slot. Besides CPU,
	// it bounds the host memory a call holds outside its linear memory: a
	// call that recurses without end grows wazero's native stack to its
	// fixed ceiling, about 170 MB of host memory before the trap, and
	// wazero offers no way to lower it. Default: 0, which means
	// 4 × GOMAXPROCS.
	MaxConcurrentCalls int
}

// Runtime compiles and runs plugins. It holds the compilation cache shared
// by every module it loads and the host functions they import. It is safe
// for concurrent use; most programs need one.
type Runtime struct {
	cache    wazero.CompilationCache
	cacheDir string
	tmpCache bool // cacheDir is the runtime's own, removed at Close
	logger   *slog.Logger
	kv       storage.KV
	workers  int
	funcs    []extism.HostFunction
	calls    *slots // Options.MaxConcurrentCalls

	inProcess bool // Options.CompileInProcess
	// unmetered loads modules as they are, with no fuel and so no bound
	// on a guest: the floor the benchmarks measure metering against. Set
	// only by the package's tests (export_test.go).
	unmetered bool
	compiles  semaphore // compiler processes running at once
	// compilerRuns counts the compiler processes started (a test's way to
	// see a module compiled once: every JavaScript plugin's engine).
	compilerRuns atomic.Int64
	// compilersRunning and compilersPeak count the compiler processes
	// running now and at most at once (for the tests of the bound).
	compilersRunning, compilersPeak atomic.Int64
	prepared                        preparedCache // the metered modules compiled into the cache
	pruneKept                       sync.Once     // other builds' kept modules pruned (compiler.go)
	// loadMu keeps the runtime's calls of extism.NewCompiledPlugin apart
	// (and guards shared). They compile through the shared cache, and
	// wazero v1.12.0 publishes a module it read from the file cache to
	// other compiles before it has finished it (wazero#2547): every
	// plugin's Extism kernel is the same module, so two overlapping loads
	// could instantiate a half-made one, and panic. From the cache a
	// compile takes milliseconds; the compiler process, instantiation and
	// describe run outside the lock.
	loadMu sync.Mutex
	// shared are the compiled modules in use, by compiledKey.
	shared map[string]*sharedPlugin

	mu      sync.Mutex
	modules map[*Module]struct{}
	tenants map[string]*tenantBudget
	closed  bool
}

// NewRuntime returns a Runtime configured by opts.
func NewRuntime(opts Options) (*Runtime, error) {
	r := &Runtime{
		logger:  opts.Logger,
		kv:      opts.KV,
		workers: opts.CompileWorkers,
		funcs:   append(hostFunctions(), jsImports()...),
		modules: map[*Module]struct{}{},
		tenants: map[string]*tenantBudget{},
		shared:  map[string]*sharedPlugin{},
	}
	if r.logger == nil {
		r.logger = slog.Default()
	}
	if r.kv == nil {
		r.kv = memory.New()
	}
	switch {
	case r.workers == 0:
		r.workers = runtime.GOMAXPROCS(0)
	case r.workers < 0:
		return nil, fmt.Errorf("%w: CompileWorkers %d is negative", ErrInvalidLimits, r.workers)
	}
	switch n := opts.MaxConcurrentCalls; {
	case n == 0:
		r.calls = newSlots(4 * runtime.GOMAXPROCS(0))
	case n < 0:
		return nil, fmt.Errorf("%w: MaxConcurrentCalls %d is negative", ErrInvalidLimits, n)
	default:
		r.calls = newSlots(n)
	}
	r.inProcess = opts.CompileInProcess
	r.compiles = newSemaphore(2)
	// A compiler process hands its work over through the cache on disk:
	// without a CacheDir, the runtime keeps one of its own.
	r.cacheDir = opts.CacheDir
	if r.cacheDir == "" && !r.inProcess {
		dir, err := os.MkdirTemp("", "agentic-plugins-cache-")
		if err != nil {
			return nil, fmt.Errorf("plugins: a compilation cache directory: %w", err)
		}
		r.cacheDir, r.tmpCache = dir, true
	}
	if r.cacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(r.cacheDir)
		if err != nil {
			if r.tmpCache {
				os.RemoveAll(r.cacheDir)
			}
			return nil, fmt.Errorf("plugins: compilation cache in %s: %w", r.cacheDir, err)
		}
		r.cache = c
	} else {
		r.cache = wazero.NewCompilationCache()
	}
	return r, nil
}

// Close closes every module the runtime still holds (calls in flight fail)
// and then the compilation cache. The on-disk cache stays for the next
// process.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	mods := make([]*Module, 0, len(r.modules))
	for m := range r.modules {
		mods = append(mods, m)
	}
	r.mu.Unlock()
	var errs []error
	for _, m := range mods {
		errs = append(errs, m.shutdown(ctx))
	}
	// The cache must outlive every CompiledPlugin made with it.
	errs = append(errs, r.cache.Close(ctx))
	if r.tmpCache {
		errs = append(errs, os.RemoveAll(r.cacheDir))
	}
	return errors.Join(errs...)
}

// Source is a module to load.
type Source struct {
	// Name names the module in errors, logs and the registry: 1 to 128
	// characters of [A-Za-z0-9._-]. A watched directory uses the file name
	// without ".wasm". Required.
	Name string
	// Wasm is the module's bytes. Required.
	Wasm []byte
	// Tenant is the tenant the module runs for: its key-value scope, and
	// what calls report to the plugin. Default: "".
	Tenant string
	// Limits is the module's sandbox.
	Limits Limits
	// Config is the plugin's configuration (endpoints, modes; never
	// secrets, which belong on the host side), read by the plugin through
	// Extism's config_get. Manifest: Config. Default: none.
	Config map[string]string
	// Sidecar describes a plain Extism module (one without describe): the
	// tools it offers and the exports they call. Default: nil, the module's
	// own describe export is used; a module without either loads, but
	// offers only [Module.CallExport].
	Sidecar *Sidecar
	// ForReplay loads the module to replay recorded calls ([ReplayCall]),
	// whose HTTP requests and key-value accesses are answered from their
	// records: what the module says it needs of the sandbox is not checked
	// against Limits, and its live calls get only what Limits grant (by
	// default no network and no key-value store). Default: false.
	ForReplay bool
	// Signature is the module's detached minisign signature (the text of
	// NAME.wasm.minisig), checked by a [Registry] whose tenant requires
	// signed modules (RegistryOptions.Trust) before the module compiles.
	// Default: nil, unsigned.
	Signature []byte

	signer *Signer // set by a Registry that verified Signature
	hash   string  // contentHash(Wasm), when the caller has it already
}

// Load compiles a module (through the shared compilation cache), creates
// its first instance, and asks it to describe itself (or applies the
// sidecar manifest). The description is validated: the ABI major version,
// names, effects and schemas, and the exports it needs. Errors are
// *PluginError values.
//
// The returned Module is the caller's: close it when done (a [Registry]
// does that for the modules it loads).
func (r *Runtime) Load(ctx context.Context, src Source) (*Module, error) {
	maxErr := DefaultMaxErrorBytes // Limits.MaxErrorBytes, once they are read
	fail := func(export string, err error) (*Module, error) {
		return nil, newPluginError(src.Name, export, "", err, maxErr)
	}
	if !validModuleName(src.Name) {
		return fail("load", detailed(ErrInvalidModule, "module name %q: want 1 to 128 characters of [A-Za-z0-9._-]", src.Name))
	}
	if len(src.Wasm) == 0 {
		return fail("load", detailed(ErrInvalidModule, "no bytes"))
	}
	limits, err := src.Limits.normalize()
	if err != nil {
		return fail("load", err)
	}
	maxErr = limits.MaxErrorBytes
	if len(src.Wasm) > limits.MaxModuleBytes {
		return fail("load", detailed(ErrInvalidModule, "%d bytes, the limit is %d (Limits.MaxModuleBytes)", len(src.Wasm), limits.MaxModuleBytes))
	}
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return fail("load", ErrClosed)
	}
	m := &Module{
		rt:     r,
		name:   src.Name,
		tenant: src.Tenant,
		hash:   src.hash,
		src:    Source{Name: src.Name, Wasm: src.Wasm, Sidecar: src.Sidecar, Signature: src.Signature},
		signer: signerOf(src),
		limits: limits,
		guard:  newHTTPGuard(limits),
		pool:   newPool(limits.Instances),
		done:   make(chan struct{}),
	}
	if m.hash == "" {
		m.hash = contentHash(src.Wasm)
	}
	m.log = r.logger.With("plugin", m.name, "tenant", m.tenant, "module", m.hash[:len("sha256:")+12])
	m.refs.Store(1)

	for k, v := range src.Config {
		m.configBytes += len(k) + len(v)
	}
	// A JavaScript plugin runs its engine (jsmodule.go): the engine is
	// what is metered and compiled, the same bytes, and so the same
	// machine code, for every such plugin.
	wasm, script, isJS, err := splitJavaScript(src.Wasm)
	if err != nil {
		return fail("load", detailed(ErrInvalidModule, "%v", err))
	}
	if isJS {
		m.script = script
		if low, ok := lowestData(wasm); ok {
			m.dataLow = low
		}
	}
	// The module runs metered (fuel.go); the compilation cache keys on the
	// metered bytes. The meter runs in the compiler process, under its
	// deadline and memory bound.
	hash := m.hash
	if isJS {
		hash = contentHash(wasm)
	}
	if r.inProcess && !r.unmetered {
		metered, err := prepare(wasm, limits)
		if err != nil {
			return fail("load", detailed(ErrInvalidModule, "%v", err))
		}
		wasm = metered
	}
	if !r.inProcess {
		prepared, err := r.compileIsolated(ctx, wasm, hash, limits)
		if err != nil {
			return fail("compile", err)
		}
		wasm = prepared
	}
	manifest := limits.Manifest(wasm)
	// No timeout in the manifest: the call's deadline is the host's own
	// (invoke), checked at every refill of the call's fuel, and with one
	// go-sdk would turn close-on-context-done back on (see runtimeConfig).
	manifest.Timeout = 0
	manifest.Config = maps.Clone(src.Config)
	m.compiledKey = compiledKey(r.preparedKey(hash, limits), manifest)
	var own []byte // the bytes that make the key, nil for a JavaScript plugin (its key is its engine's)
	if !isJS {
		own = m.src.Wasm
	}
	shared, err := r.compiledPlugin(m.compiledKey, own, func() (*extism.CompiledPlugin, error) {
		return extism.NewCompiledPlugin(experimental.WithCompilationWorkers(ctx, r.workers),
			manifest, extism.PluginConfig{RuntimeConfig: runtimeConfig(r.cache, limits.MemoryPages), EnableWasi: true}, r.funcs)
	})
	if err != nil {
		return fail("compile", detailed(ErrInvalidModule, "%v", oneLine(err)))
	}
	m.compiled = shared.plugin
	if own != nil && shared.wasm != nil {
		m.src.Wasm = shared.wasm // the same bytes: one copy kept, not one a tenant
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		_ = r.releasePlugin(ctx, m.compiledKey)
		m.compiled = nil
		return fail("load", ErrClosed)
	}
	r.modules[m] = struct{}{}
	r.mu.Unlock()
	m.budget = r.tenant(m.tenant, m)

	// The first instance: it tells the exports, and serves describe. Its
	// start function, if any, runs within the call timeout.
	instCtx, cancel := context.WithTimeout(ctx, limits.CallTimeout)
	inst, err := m.newInstance(instCtx)
	if err != nil {
		err = m.instantiateFailure(err, ctx, instCtx, limits.CallTimeout)
		cancel()
		_ = m.shutdown(ctx)
		if !errors.Is(err, ErrInvalidModule) {
			err = fmt.Errorf("%w: %w", ErrInvalidModule, err)
		}
		return fail("instantiate", err)
	}
	cancel()
	m.exports = map[string]bool{}
	for name := range inst.p.Module().ExportedFunctions() {
		m.exports[name] = true
	}
	if isJS {
		// The script serves the ABI's exports; the engine's own are not
		// the plugin's.
		m.exports = map[string]bool{"describe": true, "call": true, "validate": true, "decide": true}
	}
	m.pool.adopt(inst)

	if err := m.describe(ctx, src.Sidecar); err != nil {
		_ = m.shutdown(ctx)
		var pe *PluginError
		if errors.As(err, &pe) {
			return nil, err
		}
		return fail("describe", err)
	}
	if n := m.desc.Needs; n != nil && !src.ForReplay {
		// It runs with what it needs, no more (needs.go); describe and
		// the start function ran before it said.
		narrowed, err := m.limits.Needing(*n)
		if err != nil {
			_ = m.shutdown(ctx)
			return fail("describe", detailed(ErrInvalidModule, "%v", err))
		}
		m.guard.close()
		m.limits, m.guard = narrowed, newHTTPGuard(narrowed)
	}
	m.keepWarm()
	return m, nil
}

// sharedPlugin is a compiled module, the bytes it was made from (when
// they are the modules' own: not a JavaScript plugin's), and how many
// modules use it.
type sharedPlugin struct {
	plugin *extism.CompiledPlugin
	wasm   []byte
	refs   int
}

// compiledKey names what a compiled module is made of: the metered module
// (preparedKey) and the rest of its manifest (the memory bounds and the
// plugin's configuration, which Extism keeps in the compiled module).
// Modules with the same key share one compiled module.
func compiledKey(prepared string, manifest extism.Manifest) string {
	config, _ := json.Marshal(manifest.Config) // a map's keys sorted: one encoding
	mem := manifest.Memory
	return fmt.Sprintf("%s/%d/%d/%d/%s", prepared, mem.MaxPages, mem.MaxHttpResponseBytes, mem.MaxVarBytes, config)
}

// compiledPlugin returns the compiled module for key: a module loaded
// before, and not yet shut down, made it, or compile makes it now. A
// platform whose tenants load the same plugins so decodes, validates and
// maps each one's machine code once, not once a tenant; what is a
// tenant's (its instances, their memories, its key-value scope, its
// limits enforced by the host) stays per module. releasePlugin hands it
// back.
func (r *Runtime) compiledPlugin(key string, wasm []byte, compile func() (*extism.CompiledPlugin, error)) (*sharedPlugin, error) {
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	if s, ok := r.shared[key]; ok {
		s.refs++
		if s.wasm == nil {
			s.wasm = wasm
		}
		return s, nil
	}
	p, err := compile()
	if err != nil {
		return nil, err
	}
	s := &sharedPlugin{plugin: p, wasm: wasm, refs: 1}
	r.shared[key] = s
	return s, nil
}

// releasePlugin hands back a module's compiled module; the last one
// closes it (and with it any instance of it still open).
func (r *Runtime) releasePlugin(ctx context.Context, key string) error {
	r.loadMu.Lock()
	s := r.shared[key]
	if s.refs--; s.refs > 0 {
		r.loadMu.Unlock()
		return nil
	}
	delete(r.shared, key)
	r.loadMu.Unlock()
	return s.plugin.Close(ctx)
}

// contentHash is a module's identity: "sha256:<hex>" of its bytes.
func contentHash(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// forget drops a closed module from the runtime's set.
func (r *Runtime) forget(m *Module) {
	r.mu.Lock()
	delete(r.modules, m)
	r.mu.Unlock()
}

func validModuleName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// stderrWriter keeps the beginning and the end of what a plugin writes to
// stderr during a call: shown in trap errors (a Go plugin's fatal error and
// panic messages land there, its stack trace after them).
type stderrWriter struct {
	mu   sync.Mutex
	head []byte
	tail []byte
	max  int // of head and of tail each
	cut  bool
}

func (w *stderrWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(b)
	if room := w.max - len(w.head); room > 0 {
		k := min(room, len(b))
		w.head = append(w.head, b[:k]...)
		b = b[k:]
	}
	if len(b) == 0 {
		return n, nil
	}
	if len(b) >= w.max {
		w.cut = w.cut || len(w.tail) > 0 || len(b) > w.max
		b = b[len(b)-w.max:]
		w.tail = w.tail[:0]
	}
	if over := len(w.tail) + len(b) - w.max; over > 0 {
		w.cut = true
		w.tail = append(w.tail[:0], w.tail[over:]...)
	}
	w.tail = append(w.tail, b...)
	return n, nil
}

func (w *stderrWriter) reset() {
	w.mu.Lock()
	w.head, w.tail, w.cut = w.head[:0], w.tail[:0], false
	w.mu.Unlock()
}

// String returns the beginning, and the end if there was more.
func (w *stderrWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cut {
		return string(w.head) + "\n…\n" + string(w.tail)
	}
	return string(w.head) + string(w.tail)
}

var _ io.Writer = (*stderrWriter)(nil)

// semaphore bounds how many of something run at once.
type semaphore chan struct{}

func newSemaphore(n int) semaphore { return make(semaphore, n) }

// acquire takes a slot, waiting until ctx is done at most.
func (s semaphore) acquire(ctx context.Context) error {
	select {
	case s <- struct{}{}:
		return nil
	default:
	}
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s semaphore) release() { <-s }
