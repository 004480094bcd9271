package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentichost/agentic/host"
)

// RegistryOptions configures a [Registry].
type RegistryOptions struct {
	// Limits returns a tenant's sandbox. It is asked when a module of the
	// tenant loads. Default: nil, every tenant gets the zero Limits (the
	// deny-by-default sandbox).
	Limits func(tenant string) Limits
	// Config returns a module's configuration (Source.Config) when it
	// loads. Default: nil, no configuration.
	Config func(tenant, module string) map[string]string
	// OnChange observes every change of the registry (loads, swaps,
	// rejections, removals), after it happened. It must not block for
	// long. Default: none.
	OnChange func(Change)
	// HoldWidening holds, rather than loads, a new version of a module
	// that widens the version it would replace (see [Widenings]): the old
	// version keeps serving until a person approves the new one
	// (Registry.ApproveHeld). Default: false, every valid version loads.
	HoldWidening bool
	// Grants returns what one module may do of its tenant's sandbox (see
	// [Grant]): a module gets only its grant, within the tenant's Limits;
	// a grant beyond them refuses the module. Default: nil, every module
	// gets its tenant's Limits whole.
	Grants func(tenant, module string) Grant
	// Quarantine returns when a tenant's modules are quarantined, failing
	// too often (see [QuarantinePolicy]). Default: nil, never.
	Quarantine func(tenant string) QuarantinePolicy
	// Trust returns the public keys a tenant trusts to sign its modules
	// (see [Keyring]): once it trusts any, a module of the tenant loads
	// only with a signature (Source.Signature; NAME.wasm.minisig in a
	// watched directory) by one of them, checked before the module
	// compiles — for a load, a directory's file, a rollback and the
	// approval of a held version alike. Default: nil, no signature
	// required.
	Trust func(tenant string) *Keyring
	// KeepVersions is how many replaced versions of each module the
	// registry keeps, in memory, for Rollback. Default: 0, which means
	// DefaultKeepVersions; negative keeps none.
	KeepVersions int
}

// ChangeKind says what happened to a module.
type ChangeKind string

// The changes.
const (
	// Loaded: a module was added.
	Loaded ChangeKind = "loaded"
	// Replaced: a module took the place of an older version.
	Replaced ChangeKind = "replaced"
	// Rejected: a module failed to load; the previous version (if any)
	// keeps serving.
	Rejected ChangeKind = "rejected"
	// Removed: a module was unloaded.
	Removed ChangeKind = "removed"
	// Held: a new version widens the one serving (Change.Widenings); it
	// is kept, not loaded, until approved (RegistryOptions.HoldWidening).
	Held ChangeKind = "held"
	// Quarantined: a module failed too often (Change.Err the last
	// failure); its calls answer ErrQuarantined (RegistryOptions.Quarantine).
	Quarantined ChangeKind = "quarantined"
	// Released: a person let a quarantined module serve again.
	Released ChangeKind = "released"
	// CanaryStarted: a version (Hash) serves a share of the module's
	// calls beside the version serving (Previous): see
	// [Registry.StartCanary].
	CanaryStarted ChangeKind = "canary_started"
	// CanaryPromoted: the canary replaced the version serving, by a
	// person or after its PromoteAfter calls; a Replaced change follows.
	CanaryPromoted ChangeKind = "canary_promoted"
	// CanaryRolledBack: the canary was closed and the version serving
	// goes on: by a person (Err nil), after its RollbackAfter failures
	// (Err the last), or as another version or canary took its place.
	CanaryRolledBack ChangeKind = "canary_rolled_back"
)

// Conflict is a name that two or more modules of a tenant offer. None of
// them serves it until all but one are removed (or stop offering it): who
// loaded first does not matter, so a module cannot take a name from
// another by loading earlier. The modules' other items serve as usual.
type Conflict struct {
	// Kind is "tool", "validator" or "policy".
	Kind string
	// Name is the name offered more than once.
	Name string
	// Modules are the modules offering it, sorted.
	Modules []string
}

// String says what is in conflict, for logs and errors.
func (c Conflict) String() string {
	return fmt.Sprintf("%s %s is offered by %s: none of them serves it until one is removed",
		c.Kind, c.Name, strings.Join(c.Modules, " and "))
}

// Refusal is a module the registry refused, with why. The previous version
// of the module, if any, keeps serving.
type Refusal struct {
	// Name is the module's name.
	Name string
	// Hash is the content hash of the module refused ("" when its bytes
	// could not be read).
	Hash string
	// Err is why.
	Err error
}

// Change is a change of the registry.
type Change struct {
	// Kind says what happened.
	Kind ChangeKind
	// Tenant is the tenant of the module.
	Tenant string
	// Name is the module's name.
	Name string
	// Hash is the content hash of the module loaded, replacing, rejected or
	// removed.
	Hash string
	// Previous is the hash of the version replaced, if any.
	Previous string
	// Err is why a module was rejected.
	Err error
	// Conflicts are the conflicts the module is part of after a load or a
	// replacement: names it offers that another module of the tenant offers
	// too, which neither serves.
	Conflicts []Conflict
	// Widenings are how a held version widens the one serving.
	Widenings []Widening
	// Canary is the canary as it ended (CanaryPromoted,
	// CanaryRolledBack): how many calls it served, how many failed.
	Canary *Canary
}

// Registry holds the loaded plugin modules of every tenant and serves
// their tools, validators and policies. Loads, reloads and removals build a
// new immutable snapshot and swap it in atomically; readers (Toolset,
// Validator, Policy) never lock. A call runs on the module version its tool
// was resolved from; a replaced version finishes its calls in flight and
// then shuts down, and a tool resolved from it before the swap is served by
// the new version.
type Registry struct {
	rt   *Runtime
	opts RegistryOptions
	log  *slog.Logger

	mu       sync.Mutex // serialises writers
	snap     atomic.Pointer[snapshot]
	closed   bool
	refused  map[string]map[string]Refusal // tenant → module name → why; under mu
	held     map[string]map[string]*held   // tenant → module name → the version waiting; under mu
	versions map[string]map[string][]kept  // tenant → module name → versions replaced, newest first; under mu
	canaries map[string]map[string]*canary // tenant → module name → its canary; under mu (and in the snapshot)
	gens     map[string]uint64             // tenant/module name → its commits and unloads so far; under mu
	writing  map[string]int                // tenant/module name → its files being written (FileWriting); under mu
	watchers map[*DirWatcher]struct{}      // under mu
}

// snapshot is an immutable view of the registry.
type snapshot struct {
	tenants map[string]*tenantView
}

// tenantView is an immutable view of one tenant's modules.
type tenantView struct {
	modules    map[string]*Module // by module name
	tools      map[string]*regTool
	toolList   []host.Tool
	validators map[string]*regValidator
	policies   map[string]*regPolicy
	conflicts  []Conflict         // sorted by kind, then name
	canaries   map[string]*canary // by module name (canary.go)
}

// NewRegistry returns an empty registry over rt.
func NewRegistry(rt *Runtime, opts RegistryOptions) *Registry {
	r := &Registry{rt: rt, opts: opts, log: rt.logger, refused: map[string]map[string]Refusal{}, held: map[string]map[string]*held{}, versions: map[string]map[string][]kept{}, canaries: map[string]map[string]*canary{}, gens: map[string]uint64{}, writing: map[string]int{}, watchers: map[*DirWatcher]struct{}{}}
	r.snap.Store(&snapshot{tenants: map[string]*tenantView{}})
	return r
}

// limits returns a tenant's limits.
func (r *Registry) limits(tenant string) Limits {
	if r.opts.Limits == nil {
		return Limits{}
	}
	return r.opts.Limits(tenant)
}

func (r *Registry) notify(c Change) {
	r.mu.Lock()
	switch c.Kind {
	case Rejected:
		if r.refused[c.Tenant] == nil {
			r.refused[c.Tenant] = map[string]Refusal{}
		}
		r.refused[c.Tenant][c.Name] = Refusal{Name: c.Name, Hash: c.Hash, Err: c.Err}
	default:
		delete(r.refused[c.Tenant], c.Name)
	}
	r.mu.Unlock()
	switch c.Kind {
	case Rejected:
		r.log.Warn("plugin rejected; the previous version (if any) keeps serving", "tenant", c.Tenant, "plugin", c.Name, "module", c.Hash, "err", c.Err)
	case Replaced:
		r.log.Info("plugin replaced", "tenant", c.Tenant, "plugin", c.Name, "module", c.Hash, "previous", c.Previous)
	case Quarantined:
		r.log.Warn("plugin quarantined: it failed too often; its calls are refused until it is released or replaced", "tenant", c.Tenant, "plugin", c.Name, "module", c.Hash, "last", c.Err)
	default:
		r.log.Info("plugin "+string(c.Kind), "tenant", c.Tenant, "plugin", c.Name, "module", c.Hash)
	}
	for _, cf := range c.Conflicts {
		r.log.Warn("plugin name conflict: "+cf.String(), "tenant", c.Tenant, "kind", cf.Kind, "name", cf.Name, "modules", strings.Join(cf.Modules, ","))
	}
	if r.opts.OnChange != nil {
		r.opts.OnChange(c)
	}
}

// Load compiles and describes a module from bytes and registers it for
// tenant under src.Name (src.Tenant, src.Limits and src.Config are set by
// the registry), replacing the module of that name if any. The module must be
// described (describe or src.Sidecar). A tool, validator or policy name
// that another module of the tenant offers too is a [Conflict]: neither
// module serves it until one of them is removed; the load succeeds and the
// conflict is logged and reported in the Change. On any error the
// registry is unchanged and the previous version keeps serving.
func (r *Registry) Load(ctx context.Context, tenant string, src Source) (*Module, error) {
	src, err := r.source(tenant, src)
	var m *Module
	if err == nil {
		m, err = r.prepare(ctx, src)
	}
	return r.commit(ctx, tenant, src.Name, contentHash(src.Wasm), m, err, false)
}

// source is src as the registry loads it for tenant: with the tenant's
// limits, narrowed to the module's grant, and the module's configuration.
func (r *Registry) source(tenant string, src Source) (Source, error) {
	src.Tenant = tenant
	signer, err := r.Verify(tenant, src)
	if err != nil {
		return src, err
	}
	src.signer = signer
	src.Limits = r.limits(tenant)
	if r.opts.Grants != nil {
		l, err := src.Limits.Within(r.opts.Grants(tenant, src.Name))
		if err != nil {
			return src, &PluginError{Plugin: src.Name, Export: "load", Err: detailed(ErrInvalidModule, "its grant: %v", err)}
		}
		src.Limits = l
	}
	if r.opts.Config != nil {
		src.Config = r.opts.Config(tenant, src.Name)
	}
	return src, nil
}

// Verify checks src's signature as loading it for tenant would: when the
// tenant trusts keys (RegistryOptions.Trust), src must be signed by one
// of them (a *PluginError wrapping ErrUnsigned or ErrBadSignature
// otherwise), and Verify returns who signed; when it trusts none, Verify
// returns nil and no error. Nothing is compiled.
func (r *Registry) Verify(tenant string, src Source) (*Signer, error) {
	if r.opts.Trust == nil {
		return nil, nil
	}
	keys := r.opts.Trust(tenant)
	if keys.Len() == 0 {
		return nil, nil
	}
	s, err := keys.Verify(src.Wasm, src.Signature)
	if err != nil {
		return nil, &PluginError{Plugin: src.Name, Export: "verify", Err: err}
	}
	return &s, nil
}

// prepare is the slow part of a load, which touches nothing of the
// registry and may run beside other loads: compiling, instantiating and
// describing the module.
func (r *Registry) prepare(ctx context.Context, src Source) (*Module, error) {
	m, err := r.rt.Load(ctx, src)
	if err != nil {
		return nil, err
	}
	if !m.Described() {
		_ = m.Close(ctx)
		return nil, &PluginError{Plugin: src.Name, Export: "load", Err: ErrNoDescription}
	}
	return m, nil
}

// commit registers a prepared module as name, or rejects it with err (the
// error of prepare, or one of its own: the registry is closed, or the
// module would pass a tenant cap); hash is the content hash of the module's
// bytes. Order matters to commits only (which of two modules passes a
// tenant cap): loads that prepare together commit in a fixed order.
//
// A version that widens the one it would replace is held instead, under
// HoldWidening, unless approved is set: commit then returns a *HeldError.
func (r *Registry) commit(ctx context.Context, tenant, name, hash string, m *Module, err error, approved bool) (*Module, error) {
	return r.commitIf(ctx, tenant, name, hash, m, err, approved, nil)
}

// errSuperseded: a directory's version was read before another version
// of the module loaded (an upload, a rollback): it does not take that
// one's place; the file's next event decides.
var errSuperseded = errors.New("plugins: another version of the module loaded since its file was read")

// generation counts the commits and unloads of the tenant's module name.
func (r *Registry) generation(tenant, name string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gens[tenant+"/"+name]
}

// FileWritten tells the registry that the caller wrote the file of the
// tenant's module name, in a directory a [DirWatcher] watches, after it
// loaded that version itself (an upload kept on disk, a rollback): a
// watcher that read the file before the write — between the load and the
// write, the file still held the version before — does not put what it
// read in the place of the version loaded; the file's next read decides.
func (r *Registry) FileWritten(tenant, name string) {
	r.mu.Lock()
	r.gens[tenant+"/"+name]++
	r.mu.Unlock()
}

// FileWriting tells the registry that the caller is about to load a
// version of the tenant's module name and then write it into the file of
// a directory a [DirWatcher] watches (an upload kept on disk, a rollback,
// an approval): until the returned function is called (after the write),
// no version the watcher reads of that file takes the module's place,
// whenever its read and load happen. FileWritten alone leaves a window: a
// read after the caller's load and before its write, whose load commits
// before the caller says it wrote, would put the version before back in
// place until the file's next event.
func (r *Registry) FileWriting(tenant, name string) (written func()) {
	key := tenant + "/" + name
	r.mu.Lock()
	r.writing[key]++
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			if r.writing[key]--; r.writing[key] <= 0 {
				delete(r.writing, key)
			}
			r.gens[key]++
			r.mu.Unlock()
		})
	}
}

// commitIf is commit, which does nothing (errSuperseded) when gen is set
// and the module's generation is no longer *gen: a version read from a
// file before another loaded must not replace that one.
func (r *Registry) commitIf(ctx context.Context, tenant, name, hash string, m *Module, err error, approved bool, gen *uint64) (*Module, error) {
	reject := func(err error) (*Module, error) {
		r.notify(Change{Kind: Rejected, Tenant: tenant, Name: name, Hash: hash, Err: err})
		return nil, err
	}
	if err != nil {
		return reject(err)
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		_ = m.Close(ctx)
		return reject(&PluginError{Plugin: name, Export: "load", Err: ErrClosed})
	}
	if gen != nil && (r.gens[tenant+"/"+name] != *gen || r.writing[tenant+"/"+name] > 0) {
		r.mu.Unlock()
		_ = m.Close(ctx)
		return nil, errSuperseded
	}
	old := r.snap.Load()
	tv := old.tenants[tenant]
	modules := map[string]*Module{}
	if tv != nil {
		for name, mod := range tv.modules {
			modules[name] = mod
		}
	}
	prev := modules[name]
	// The same bytes may widen too: a sidecar manifest edited beside them.
	if prev != nil && r.opts.HoldWidening && !approved && !sameVersion(prev, m) {
		if w := Widenings(prev.Description(), m.Description()); len(w) > 0 {
			return r.hold(ctx, tenant, name, prev, m, w)
		}
	}
	if prev != nil && sameVersion(prev, m) {
		// The same version again (a directory rescanned, the same
		// upload) is no new version: a quarantine stays, and so do the
		// failures counted towards one.
		m.health.carry(&prev.health)
	}
	modules[name] = m
	next := r.build(tenant, modules)
	if err := next.checkCaps(m.limits); err != nil {
		r.mu.Unlock()
		_ = m.Close(ctx)
		return reject(m.fail("load", "", err))
	}
	var endedCanary *canary
	if prev == nil || !sameVersion(prev, m) {
		// Another version takes the place: a canary beside the old one
		// ends (unless it is the one promoted).
		if endedCanary = r.endCanaryLocked(tenant, name, m); endedCanary != nil {
			next.canaries = r.canaryViewLocked(tenant)
		}
	}
	var dropped *Module
	if prev == nil || !sameVersion(prev, m) {
		// Another version took the place: a held one waits no more (the
		// version serving loaded again, as a directory rescanned, leaves
		// it waiting).
		dropped = r.dropHeldLocked(tenant, name, m)
	}
	if prev != nil && !sameVersion(prev, m) {
		r.rememberLocked(tenant, name, prev, m)
	}
	r.snap.Store(old.with(tenant, next))
	r.gens[tenant+"/"+name]++
	r.mu.Unlock()
	if dropped != nil {
		_ = dropped.Close(ctx) // a version loaded since takes the held one's place
	}
	r.canaryEnded(ctx, tenant, endedCanary, "version "+m.Hash()+" took the place of the version it ran beside")
	change := Change{Kind: Loaded, Tenant: tenant, Name: name, Hash: m.Hash(), Conflicts: next.conflictsOf(name)}
	if prev != nil {
		change.Kind, change.Previous = Replaced, prev.Hash()
		_ = prev.Close(ctx) // finishes its calls in flight, then shuts down
	}
	r.notify(change)
	return m, nil
}

// LoadFile loads path (NAME.wasm) for tenant under NAME, with the sidecar
// manifest NAME.json beside it if there is one. It reads no more of the
// files than the tenant's limits allow (see [ReadSourceWithin]).
func (r *Registry) LoadFile(ctx context.Context, tenant, path string) (*Module, error) {
	src, err := ReadSourceWithin(path, r.limits(tenant))
	if err != nil {
		r.notify(Change{Kind: Rejected, Tenant: tenant, Name: moduleName(path), Err: err})
		return nil, err
	}
	return r.Load(ctx, tenant, src)
}

// ReadSource reads NAME.wasm and, if present, its sidecar NAME.json,
// within the bounds of the zero Limits (see [ReadSourceWithin]): a module
// file over DefaultMaxModuleBytes is refused.
func ReadSource(path string) (Source, error) { return ReadSourceWithin(path, Limits{}) }

// ReadSourceWithin reads NAME.wasm and, if present, its sidecar NAME.json
// and its signature NAME.wasm.minisig (at most MaxSignatureBytes), reading
// no more of either than l allows, however large the file (or
// endless, like /dev/zero): a module file over l.MaxModuleBytes is refused
// (ErrInvalidModule), and so is a sidecar over l.MaxOutputBytes, which
// bounds what a module's describe may answer (ErrInvalidDescription).
func ReadSourceWithin(path string, l Limits) (Source, error) {
	name := moduleName(path)
	wasm, side, sig, err := readModuleFiles(path, l)
	if err != nil {
		return Source{}, err
	}
	src := Source{Name: name, Wasm: wasm, Signature: sig}
	if side != nil {
		src.Sidecar, err = ParseSidecar(side)
		if err != nil {
			return Source{}, newPluginError(name, "sidecar", "", err, DefaultMaxErrorBytes)
		}
	}
	return src, nil
}

// readModuleFiles reads a module's file (path, NAME.wasm), its sidecar
// (NAME.json; nil when there is none) and its signature
// (NAME.wasm.minisig; nil when there is none) within l's bounds. A
// missing module file is an error wrapping os.ErrNotExist.
func readModuleFiles(path string, l Limits) (wasm, side, sig []byte, err error) {
	name := moduleName(path)
	l, err = l.normalize()
	if err != nil {
		return nil, nil, nil, &PluginError{Plugin: name, Export: "load", Err: err}
	}
	wasm, err = readCapped(path, l.MaxModuleBytes)
	switch {
	case errors.Is(err, errTooLarge):
		return nil, nil, nil, &PluginError{Plugin: name, Export: "load",
			Err: detailed(ErrInvalidModule, "%s is over %d bytes, the limit (Limits.MaxModuleBytes): not read further", path, l.MaxModuleBytes)}
	case err != nil:
		return nil, nil, nil, &PluginError{Plugin: name, Export: "load", Err: err}
	}
	if sig, err = readSignatureFile(path); err != nil {
		return nil, nil, nil, &PluginError{Plugin: name, Export: "verify", Err: err}
	}
	sidePath := strings.TrimSuffix(path, ".wasm") + ".json"
	side, err = readCapped(sidePath, l.MaxOutputBytes)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return wasm, nil, sig, nil
	case errors.Is(err, errTooLarge):
		return nil, nil, nil, &PluginError{Plugin: name, Export: "sidecar",
			Err: detailed(ErrInvalidDescription, "%s is over %d bytes, the limit (Limits.MaxOutputBytes, what a describe may answer): not read further", sidePath, l.MaxOutputBytes)}
	case err != nil:
		return nil, nil, nil, &PluginError{Plugin: name, Export: "sidecar", Err: err}
	}
	return wasm, side, sig, nil
}

// errTooLarge: a file is larger than readCapped's bound.
var errTooLarge = errors.New("plugins: file too large")

// readCapped reads a file of at most max bytes; a longer one is
// errTooLarge, once max+1 bytes of it were read.
func readCapped(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, errTooLarge
	}
	return b, nil
}

func moduleName(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".wasm")
}

// Unload removes a tenant's module. It reports whether there was one. The
// module finishes its calls in flight, then shuts down.
func (r *Registry) Unload(tenant, name string) bool {
	r.mu.Lock()
	old := r.snap.Load()
	tv := old.tenants[tenant]
	if tv == nil || tv.modules[name] == nil {
		r.mu.Unlock()
		return false
	}
	prev := tv.modules[name]
	modules := map[string]*Module{}
	for n, mod := range tv.modules {
		if n != name {
			modules[n] = mod
		}
	}
	ended := r.endCanaryLocked(tenant, name, nil)
	next := r.build(tenant, modules)
	r.snap.Store(old.with(tenant, next))
	r.gens[tenant+"/"+name]++
	dropped := r.dropHeldLocked(tenant, name, nil)
	r.mu.Unlock()
	_ = prev.Close(context.Background())
	if dropped != nil {
		_ = dropped.Close(context.Background())
	}
	r.canaryEnded(context.Background(), tenant, ended, "the module was removed")
	r.notify(Change{Kind: Removed, Tenant: tenant, Name: name, Hash: prev.Hash()})
	return true
}

// Close stops the registry's directory watchers, then unloads every
// module. Calls in flight finish first (each module shuts down after its
// last call).
func (r *Registry) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	watchers := make([]*DirWatcher, 0, len(r.watchers))
	for w := range r.watchers {
		watchers = append(watchers, w)
	}
	r.mu.Unlock()
	for _, w := range watchers {
		_ = w.Close()
	}
	r.mu.Lock()
	old := r.snap.Load()
	r.snap.Store(&snapshot{tenants: map[string]*tenantView{}})
	waiting := r.held
	r.held = map[string]map[string]*held{}
	canaries := r.canaries
	r.canaries = map[string]map[string]*canary{}
	r.mu.Unlock()
	for _, byName := range canaries {
		for _, c := range byName {
			c.ended.Store(true)
			_ = c.mod.Close(ctx)
		}
	}
	for _, tv := range old.tenants {
		for _, m := range tv.modules {
			_ = m.Close(ctx)
		}
	}
	for _, byName := range waiting {
		for _, h := range byName {
			_ = h.module.Close(ctx)
		}
	}
	return nil
}

// build makes a tenant's view of modules. A name offered by more than one
// module is a conflict: none of them serves it.
func (r *Registry) build(tenant string, modules map[string]*Module) *tenantView {
	tv := &tenantView{
		canaries:   r.canaryViewLocked(tenant),
		modules:    modules,
		tools:      map[string]*regTool{},
		validators: map[string]*regValidator{},
		policies:   map[string]*regPolicy{},
	}
	type item struct{ kind, name string }
	owners := map[item][]string{}
	for name, m := range modules {
		for tn := range m.tools {
			owners[item{"tool", tn}] = append(owners[item{"tool", tn}], name)
		}
		for vn := range m.validators {
			owners[item{"validator", vn}] = append(owners[item{"validator", vn}], name)
		}
		for pn := range m.policies {
			owners[item{"policy", pn}] = append(owners[item{"policy", pn}], name)
		}
	}
	for it, mods := range owners {
		if len(mods) > 1 {
			sort.Strings(mods)
			tv.conflicts = append(tv.conflicts, Conflict{Kind: it.kind, Name: it.name, Modules: mods})
			continue
		}
		m := modules[mods[0]]
		switch it.kind {
		case "tool":
			tv.tools[it.name] = &regTool{reg: r, tenant: tenant, t: m.tools[it.name]}
		case "validator":
			tv.validators[it.name] = &regValidator{reg: r, tenant: tenant, v: m.validators[it.name]}
		case "policy":
			tv.policies[it.name] = &regPolicy{reg: r, tenant: tenant, p: m.policies[it.name]}
		}
	}
	sort.Slice(tv.conflicts, func(i, j int) bool {
		a, b := tv.conflicts[i], tv.conflicts[j]
		return a.Kind < b.Kind || a.Kind == b.Kind && a.Name < b.Name
	})
	toolNames := make([]string, 0, len(tv.tools))
	for n := range tv.tools {
		toolNames = append(toolNames, n)
	}
	sort.Strings(toolNames)
	for _, n := range toolNames {
		tv.toolList = append(tv.toolList, tv.tools[n])
	}
	return tv
}

// checkCaps refuses a view whose tools pass the tenant's caps on what is
// offered to the model: Limits.TenantTools and
// Limits.TenantDescriptionBytes.
func (tv *tenantView) checkCaps(l Limits) error {
	if n := len(tv.toolList); n > l.TenantTools {
		return fmt.Errorf("%w: the tenant's modules would offer %d tools, the limit is %d (Limits.TenantTools)", ErrTenantLimit, n, l.TenantTools)
	}
	size := 0
	for _, t := range tv.toolList {
		spec := t.Spec()
		size += len(spec.Name) + len(spec.Description) + len(spec.InputSchema)
	}
	if size > l.TenantDescriptionBytes {
		return fmt.Errorf("%w: the tenant's tools would take %d bytes of names, descriptions and schemas, the limit is %d (Limits.TenantDescriptionBytes)", ErrTenantLimit, size, l.TenantDescriptionBytes)
	}
	return nil
}

// conflictsOf returns the conflicts module is part of.
func (tv *tenantView) conflictsOf(module string) []Conflict {
	var out []Conflict
	for _, c := range tv.conflicts {
		if slices.Contains(c.Modules, module) {
			out = append(out, c)
		}
	}
	return out
}

// Conflicts returns the tenant's name conflicts: names offered by more
// than one of its modules, which none of them serves.
func (r *Registry) Conflicts(tenant string) []Conflict {
	tv := r.snap.Load().tenants[tenant]
	if tv == nil {
		return nil
	}
	return slices.Clone(tv.conflicts)
}

// addWatcher registers a directory watcher, to be closed with the
// registry; false once the registry is closed.
func (r *Registry) addWatcher(w *DirWatcher) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.watchers[w] = struct{}{}
	return true
}

func (r *Registry) forgetWatcher(w *DirWatcher) {
	r.mu.Lock()
	delete(r.watchers, w)
	r.mu.Unlock()
}

// forgetRefusal drops the refusal of a module whose file is gone.
func (r *Registry) forgetRefusal(tenant, name string) {
	r.mu.Lock()
	delete(r.refused[tenant], name)
	r.mu.Unlock()
}

// Refusals returns the tenant's modules whose last load was refused, with
// why, sorted by name. A refusal is forgotten when the module loads or is
// removed.
func (r *Registry) Refusals(tenant string) []Refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Refusal, 0, len(r.refused[tenant]))
	for _, rf := range r.refused[tenant] {
		out = append(out, rf)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// with returns a copy of s with tenant's view replaced (nil or empty:
// removed).
func (s *snapshot) with(tenant string, tv *tenantView) *snapshot {
	next := &snapshot{tenants: make(map[string]*tenantView, len(s.tenants)+1)}
	for t, v := range s.tenants {
		next.tenants[t] = v
	}
	if tv == nil || len(tv.modules) == 0 {
		delete(next.tenants, tenant)
	} else {
		next.tenants[tenant] = tv
	}
	return next
}

// Toolset returns the tenant's tools as a host.Toolset: each call of Tools
// returns the current snapshot's tools, sorted by name.
func (r *Registry) Toolset(tenant string) host.Toolset { return tenantToolset{r: r, tenant: tenant} }

type tenantToolset struct {
	r      *Registry
	tenant string
}

func (ts tenantToolset) Tools() []host.Tool {
	tv := ts.r.snap.Load().tenants[ts.tenant]
	if tv == nil {
		return nil
	}
	return append([]host.Tool(nil), tv.toolList...)
}

// Tool returns a tenant's tool by name.
func (r *Registry) Tool(tenant, name string) (host.Tool, bool) {
	t := r.tool(tenant, name)
	if t == nil {
		return nil, false
	}
	return t, true
}

func (r *Registry) tool(tenant, name string) *regTool {
	if tv := r.snap.Load().tenants[tenant]; tv != nil {
		return tv.tools[name]
	}
	return nil
}

// Validator returns a tenant's validator by name.
func (r *Registry) Validator(tenant, name string) (host.Validator, bool) {
	v := r.validator(tenant, name)
	if v == nil {
		return nil, false
	}
	return v, true
}

func (r *Registry) validator(tenant, name string) *regValidator {
	if tv := r.snap.Load().tenants[tenant]; tv != nil {
		return tv.validators[name]
	}
	return nil
}

// Policy returns a tenant's policy by name.
func (r *Registry) Policy(tenant, name string) (host.Policy, bool) {
	p := r.policy(tenant, name)
	if p == nil {
		return nil, false
	}
	return p, true
}

func (r *Registry) policy(tenant, name string) *regPolicy {
	if tv := r.snap.Load().tenants[tenant]; tv != nil {
		return tv.policies[name]
	}
	return nil
}

// Module returns a tenant's module by name.
func (r *Registry) Module(tenant, name string) (*Module, bool) {
	if tv := r.snap.Load().tenants[tenant]; tv != nil {
		m, ok := tv.modules[name]
		return m, ok
	}
	return nil, false
}

// Modules returns a tenant's modules, sorted by name.
func (r *Registry) Modules(tenant string) []*Module {
	tv := r.snap.Load().tenants[tenant]
	if tv == nil {
		return nil
	}
	out := make([]*Module, 0, len(tv.modules))
	for _, m := range tv.modules {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// Tenants returns the tenants with modules, sorted.
func (r *Registry) Tenants() []string {
	s := r.snap.Load()
	out := make([]string, 0, len(s.tenants))
	for t := range s.tenants {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// maxFollow bounds how often a call follows its item to a newer
// version, should versions be swapped faster than a call starts.
const maxFollow = 8

// followed reports whether err means the item's module was unloaded before
// the call started, so a newer version may serve it.
func followed(err error) bool {
	var pe *PluginError
	return errors.As(err, &pe) && errors.Is(pe.Err, ErrClosed)
}

// follow runs call on item, and, when item's module was unloaded before the
// call started, again on the item of that name the registry serves now
// (lookup), up to maxFollow times. lookup returns nil when the registry
// serves no item of that name any more.
func follow[T comparable, R any](item T, lookup func() (T, bool), call func(T) (R, error)) (R, error) {
	cur := item
	for i := 0; ; i++ {
		res, err := call(cur)
		if err == nil || !followed(err) || i == maxFollow {
			return res, err
		}
		next, ok := lookup()
		if !ok || next == cur {
			return res, err
		}
		cur = next
	}
}

// regTool is a registered tool: a host.Tool that follows its name to the
// current version when the version it was resolved from was replaced before
// the call started.
type regTool struct {
	reg    *Registry
	tenant string
	t      *moduleTool
}

func (t *regTool) Spec() host.ToolSpec { return t.t.spec }

// Metered reports true: a plugin's calls are metered, and their results
// carry the fuel they used (host.ToolResult.Fuel).
func (t *regTool) Metered() bool { return true }

// Journaled reports true, as a module's tool does.
func (t *regTool) Journaled() bool { return true }

func (t *regTool) Call(ctx context.Context, call host.ToolCall) (host.ToolResult, error) {
	if c := t.reg.canaryFor(t.tenant, t.t.mod.name, call.SessionID); c != nil {
		if mt := c.mod.tools[t.t.spec.Name]; mt != nil {
			if res, ok, err := onCanary(ctx, t.reg, t.tenant, c, func() (host.ToolResult, error) { return mt.Call(ctx, call) }); ok {
				return res, err
			}
		}
	}
	lookup := func() (*moduleTool, bool) {
		if rt := t.reg.tool(t.tenant, t.t.spec.Name); rt != nil {
			return rt.t, true
		}
		return nil, false
	}
	res, err := follow(t.t, lookup, func(mt *moduleTool) (host.ToolResult, error) {
		if err := mt.mod.admit("call", mt.spec.Name); err != nil {
			return host.ToolResult{}, err
		}
		res, err := mt.Call(ctx, call)
		t.reg.observe(ctx, t.tenant, mt.mod, err)
		return res, err
	})
	if err != nil && followed(err) {
		if _, ok := lookup(); !ok {
			return res, &PluginError{Plugin: t.t.mod.name, Export: "call", Name: t.t.spec.Name, Err: detailed(ErrClosed, "the tool was unloaded")}
		}
	}
	return res, err
}

type regValidator struct {
	reg    *Registry
	tenant string
	v      *moduleValidator
}

func (v *regValidator) Validate(ctx context.Context, deliverable json.RawMessage) (json.RawMessage, []string, error) {
	res, err := v.ValidateMetered(ctx, deliverable)
	return res.Value, res.Problems, err
}

// ValidateMetered is Validate, with the fuel the check used (see
// [host.MeteredValidator]).
func (v *regValidator) ValidateMetered(ctx context.Context, deliverable json.RawMessage) (host.Validation, error) {
	lookup := func() (*moduleValidator, bool) {
		if rv := v.reg.validator(v.tenant, v.v.desc.Name); rv != nil {
			return rv.v, true
		}
		return nil, false
	}
	var source string
	res, err := follow(v.v, lookup, func(mv *moduleValidator) (validation, error) {
		source = mv.mod.hash
		if err := mv.mod.admit("validate", mv.desc.Name); err != nil {
			return validation{}, err
		}
		res, err := mv.check(ctx, deliverable)
		v.reg.observe(ctx, v.tenant, mv.mod, err)
		return res, err
	})
	return hostVerdict(res, err, deliverable, source)
}

// Metered reports true: a plugin's checks are metered.
func (v *regValidator) Metered() bool { return true }

type regPolicy struct {
	reg    *Registry
	tenant string
	p      *modulePolicy
}

// Name returns the policy's name.
func (p *regPolicy) Name() string { return p.p.desc.Name }

// Metered reports true: a plugin's decisions are metered.
func (p *regPolicy) Metered() bool { return true }

func (p *regPolicy) Decide(ctx context.Context, req host.PolicyRequest) (host.Decision, error) {
	if c := p.reg.canaryFor(p.tenant, p.p.mod.name, req.SessionID); c != nil {
		if mp := c.mod.policies[p.p.desc.Name]; mp != nil {
			if d, ok, err := onCanary(ctx, p.reg, p.tenant, c, func() (host.Decision, error) { return mp.Decide(ctx, req) }); ok {
				return d, err
			}
		}
	}
	lookup := func() (*modulePolicy, bool) {
		if rp := p.reg.policy(p.tenant, p.p.desc.Name); rp != nil {
			return rp.p, true
		}
		return nil, false
	}
	return follow(p.p, lookup, func(mp *modulePolicy) (host.Decision, error) {
		if err := mp.mod.admit("decide", mp.desc.Name); err != nil {
			return host.Decision{}, err
		}
		d, err := mp.Decide(ctx, req)
		p.reg.observe(ctx, p.tenant, mp.mod, err)
		return d, err
	})
}

var (
	_ host.Toolset          = tenantToolset{}
	_ host.Tool             = (*regTool)(nil)
	_ host.MeteredValidator = (*regValidator)(nil)
	_ host.Policy           = (*regPolicy)(nil)
)
