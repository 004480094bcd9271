package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Canaries: a new version of a module may first serve a share of the
// calls, beside the version serving. Registry.StartCanary loads it as the
// module's canary; the tool and policy calls of a Share of the sessions —
// chosen by the session's id, so that a session sees one version — run on
// it, every other call on the version serving. The model is offered the
// serving version's tools (names, descriptions, schemas): the canary
// answers the tools of those names it offers too, and a tool it does not
// offer is served by the version serving, as are calls without a session
// and validators (a deliverable's check names no session).
//
// A version that widens the one serving (see [Widenings]: a new tool, an
// effect moved, a host or store it needs…) runs as a canary only once a
// person approved it, as it would load: under RegistryOptions.HoldWidening,
// StartCanary holds it (a *HeldError; the held version says it is a
// canary's) and ApproveHeld starts it as the canary. A canary is promoted
// — it replaces the version serving, as an approved load: it widens
// nothing not approved, having been approved or widened nothing when it
// started, beside the same version serving — by Registry.PromoteCanary,
// or by itself after PromoteAfter of its calls that did not fail as a
// module. It is rolled
// back — closed, the version serving goes on — by
// Registry.RollbackCanary, or by itself after RollbackAfter of its calls
// failed as a module (a trap, a timeout, out of memory or fuel, an exit:
// what quarantine counts). Another version loaded in the module's place,
// or the module unloaded, ends it too. Each ending is a Change
// (CanaryPromoted, CanaryRolledBack). A canary's calls in flight finish on
// it; a call that reaches a canary closed since is served by the version
// serving.
//
// A registry counts the calls it serves: with several hosts, each runs
// the canaries it was given.

// DefaultCanaryShare is CanaryOptions.Share's default.
const DefaultCanaryShare = 0.1

// CanaryOptions says how a canary serves and ends.
type CanaryOptions struct {
	// Share is the share of sessions whose calls the canary serves,
	// above 0 and at most 1. Default: 0, which means DefaultCanaryShare.
	Share float64
	// PromoteAfter promotes the canary once that many of its calls
	// finished without failing as a module. Default: 0, promoted by a
	// person only.
	PromoteAfter int
	// RollbackAfter rolls the canary back once that many of its calls
	// failed as a module. Default: 0, which means 1; negative: never by
	// itself.
	RollbackAfter int
	// ApprovedOver is the hash of the version serving over which a person
	// approved what the canary widens (ApproveHeld sets it; a caller that
	// sets it approves the widening itself): under HoldWidening, a canary
	// that widens the version serving starts only while that version
	// serves. Default: "", approved over none: a widening canary is held.
	ApprovedOver string
}

// normalize applies the defaults and checks the share.
func (o CanaryOptions) normalize() (CanaryOptions, error) {
	if o.Share == 0 {
		o.Share = DefaultCanaryShare
	}
	if !(o.Share > 0 && o.Share <= 1) {
		return o, fmt.Errorf("plugins: a canary's share is above 0 and at most 1, not %v", o.Share)
	}
	if o.PromoteAfter < 0 {
		return o, fmt.Errorf("plugins: a canary's promote_after is 0 (by a person only) or more, not %d", o.PromoteAfter)
	}
	if o.RollbackAfter == 0 {
		o.RollbackAfter = 1
	}
	return o, nil
}

// Canary is a module's canary: a version serving a share of its calls.
type Canary struct {
	// Name is the module's name; Hash the canary's content hash, Serving
	// the hash of the version serving the other calls.
	Name    string `json:"name"`
	Hash    string `json:"hash"`
	Serving string `json:"serving"`
	// Share, PromoteAfter and RollbackAfter are its options, normalized
	// (RollbackAfter negative: never by itself).
	Share         float64 `json:"share"`
	PromoteAfter  int     `json:"promote_after,omitempty"`
	RollbackAfter int     `json:"rollback_after"`
	// ApprovedOver is the hash of the version serving over which a person
	// approved what it widens ("" when it widens nothing).
	ApprovedOver string `json:"approved_over,omitempty"`
	// Since is when it started.
	Since time.Time `json:"since"`
	// Calls counts the calls it served that did not fail as a module,
	// Failures those that did.
	Calls    int64 `json:"calls"`
	Failures int64 `json:"failures"`
}

// canary is a running canary.
type canary struct {
	Canary                  // the static part: Calls and Failures are below
	mod             *Module // the version it serves
	calls, failures atomic.Int64
	ended           atomic.Bool // promoted or rolled back (or being): it ends once
	// off: its sessions go to the version serving. Set at once for a
	// rollback; for a promotion only once its version serves, so that
	// none of its sessions is sent back to the version it replaces
	// meanwhile (TestCanaryHammer).
	off atomic.Bool
}

// info is c's state now.
func (c *canary) info() Canary {
	out := c.Canary
	out.Calls, out.Failures = c.calls.Load(), c.failures.Load()
	return out
}

// selects reports whether session's calls go to the canary: a session is
// in the share by a hash of its id and the canary's, so that the same
// session sees the same version while the canary runs.
func (c *canary) selects(session string) bool {
	if session == "" || c.off.Load() {
		return false
	}
	// (A digest, not FNV: FNV's high bits barely move between ids
	// that differ in their last bytes, as "s1" and "s2" do; and the same
	// on every host and after a restart, unlike maphash.)
	sum := sha256.Sum256([]byte(c.Hash + "\x00" + session))
	return float64(binary.BigEndian.Uint64(sum[:8])>>11)/(1<<53) < c.Share
}

// canaryFor returns the canary of the tenant's module name that serves
// session's calls, nil when none does.
func (r *Registry) canaryFor(tenant, module, session string) *canary {
	tv := r.snap.Load().tenants[tenant]
	if tv == nil || len(tv.canaries) == 0 {
		return nil
	}
	if c := tv.canaries[module]; c != nil && c.selects(session) {
		return c
	}
	return nil
}

// onCanary runs call on the canary c and counts its outcome: a failure
// as a module may roll the canary back, a call that did not fail may
// promote it. ok is false when the canary was closed before the call
// started: the caller serves the call on the version serving.
func onCanary[R any](ctx context.Context, r *Registry, tenant string, c *canary, call func() (R, error)) (res R, ok bool, err error) {
	res, err = call()
	if err != nil && followed(err) {
		return res, false, err
	}
	if err != nil && ctx.Err() == nil && failureCounts(err) {
		if n := c.failures.Add(1); c.RollbackAfter > 0 && n >= int64(c.RollbackAfter) {
			go r.endCanary(context.WithoutCancel(ctx), tenant, c, false, err)
		}
		return res, true, err
	}
	if n := c.calls.Add(1); c.PromoteAfter > 0 && n >= int64(c.PromoteAfter) {
		go r.endCanary(context.WithoutCancel(ctx), tenant, c, true, nil)
	}
	return res, true, err
}

// StartCanary loads src as the canary of the tenant's module src.Name,
// which must serve (ErrNotFound otherwise), in the place of any canary it
// has. It is loaded as any version (the tenant's limits, grants and
// configuration apply). Under HoldWidening, a version that widens the one
// serving is held instead, unless opts.ApprovedOver is that version's
// hash: StartCanary returns a *HeldError, the held version is a canary's
// (HeldVersion.Canary), and ApproveHeld starts it. On any other error
// nothing changes.
func (r *Registry) StartCanary(ctx context.Context, tenant string, src Source, opts CanaryOptions) (Canary, error) {
	opts, err := opts.normalize()
	if err != nil {
		return Canary{}, err
	}
	if _, ok := r.Module(tenant, src.Name); !ok {
		return Canary{}, fmt.Errorf("%w: plugin %s of tenant %s does not serve: a canary runs beside a version serving", ErrNotFound, src.Name, tenant)
	}
	src, err = r.source(tenant, src)
	var m *Module
	if err == nil {
		m, err = r.prepare(ctx, src)
	}
	if err != nil {
		return Canary{}, err
	}
	return r.beginCanary(ctx, tenant, src.Name, m, opts)
}

// beginCanary makes m, prepared, the canary of the tenant's module name,
// or holds it (see StartCanary); m is closed when it is neither.
func (r *Registry) beginCanary(ctx context.Context, tenant, name string, m *Module, opts CanaryOptions) (Canary, error) {
	r.mu.Lock()
	tv := r.snap.Load().tenants[tenant]
	serving := tv.moduleOrNil(name)
	if r.closed || serving == nil || sameVersion(serving, m) {
		r.mu.Unlock()
		if serving != nil && !r.closed {
			_ = m.Close(ctx)
			return Canary{}, fmt.Errorf("plugins: plugin %s of tenant %s: the canary %s is the version serving", name, tenant, m.Hash())
		}
		_ = m.Close(ctx)
		if r.closed {
			return Canary{}, &PluginError{Plugin: name, Export: "load", Err: ErrClosed}
		}
		return Canary{}, fmt.Errorf("%w: plugin %s of tenant %s was unloaded", ErrNotFound, name, tenant)
	}
	approvedOver := ""
	if w := Widenings(serving.Description(), m.Description()); len(w) > 0 {
		if r.opts.HoldWidening && opts.ApprovedOver != serving.Hash() {
			// It would serve what nobody approved, and be promoted by
			// itself: held, as an upload of it would be.
			_, err := r.holdAs(ctx, tenant, name, serving, m, w, &opts)
			return Canary{}, err
		}
		approvedOver = opts.ApprovedOver
	}
	c := &canary{mod: m, Canary: Canary{Name: name, Hash: m.Hash(), Serving: serving.Hash(), Share: opts.Share,
		PromoteAfter: opts.PromoteAfter, RollbackAfter: opts.RollbackAfter, ApprovedOver: approvedOver, Since: time.Now().UTC()}}
	if r.canaries[tenant] == nil {
		r.canaries[tenant] = map[string]*canary{}
	}
	prev := r.canaries[tenant][name]
	r.canaries[tenant][name] = c
	r.republishLocked(tenant)
	r.mu.Unlock()
	if prev != nil {
		prev.ended.Store(true)
		_ = prev.mod.Close(ctx)
		r.notify(Change{Kind: CanaryRolledBack, Tenant: tenant, Name: name, Hash: prev.Hash, Previous: prev.Serving,
			Err: fmt.Errorf("plugins: canary %s replaced by canary %s", prev.Hash, c.Hash)})
	}
	r.notify(Change{Kind: CanaryStarted, Tenant: tenant, Name: name, Hash: c.Hash, Previous: c.Serving})
	return c.info(), nil
}

// Canaries returns the tenant's canaries, by module name.
func (r *Registry) Canaries(tenant string) []Canary {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Canary
	for _, c := range r.canaries[tenant] {
		out = append(out, c.info())
	}
	slices.SortFunc(out, func(a, b Canary) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Canary returns the canary of the tenant's module name.
func (r *Registry) Canary(tenant, name string) (Canary, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.canaries[tenant][name]; c != nil {
		return c.info(), true
	}
	return Canary{}, false
}

// PromoteCanary makes the canary of the tenant's module name the version
// serving: it replaces the old one as an approved load would (calls in
// flight finish on their version; the old one joins the history).
func (r *Registry) PromoteCanary(ctx context.Context, tenant, name string) (*Module, error) {
	c := r.canaryOf(tenant, name)
	if c == nil {
		return nil, fmt.Errorf("%w: plugin %s of tenant %s has no canary", ErrNotFound, name, tenant)
	}
	return r.endCanary(ctx, tenant, c, true, nil)
}

// RollbackCanary closes the canary of the tenant's module name: every
// call goes to the version serving again.
func (r *Registry) RollbackCanary(ctx context.Context, tenant, name string) error {
	c := r.canaryOf(tenant, name)
	if c == nil {
		return fmt.Errorf("%w: plugin %s of tenant %s has no canary", ErrNotFound, name, tenant)
	}
	_, err := r.endCanary(ctx, tenant, c, false, nil)
	return err
}

func (r *Registry) canaryOf(tenant, name string) *canary {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.canaries[tenant][name]
}

// endCanary promotes or rolls back c, once: the first of a person and the
// canary's own counts to end it does; the others find it ended. why is
// the failure that rolls it back by itself (nil: a person did).
func (r *Registry) endCanary(ctx context.Context, tenant string, c *canary, promote bool, why error) (*Module, error) {
	r.mu.Lock()
	if r.canaries[tenant][c.Name] != c || !c.ended.CompareAndSwap(false, true) {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: the canary %s of plugin %s of tenant %s has ended", ErrNotFound, c.Hash, c.Name, tenant)
	}
	if !promote {
		c.off.Store(true)
		delete(r.canaries[tenant], c.Name)
		r.republishLocked(tenant)
	}
	r.mu.Unlock()
	info := c.info()
	if promote {
		// A listener (serve) writes the promoted version into the
		// module's file when told (OnChange, below): until then a
		// directory watcher's read of that file — the version before —
		// must not take the promoted one's place.
		written := r.FileWriting(tenant, c.Name)
		defer written()
		// Approved: it widens nothing a person did not approve over the
		// version it replaces (beginCanary), which has served since it
		// started (another would have ended it).
		m, err := r.commit(ctx, tenant, c.Name, c.Hash, c.mod, nil, true)
		// It leaves the list once its version serves (or could not):
		// until then its sessions stay on it, never back on the version
		// it replaces for a call (TestCanaryHammer).
		r.mu.Lock()
		c.off.Store(true)
		if r.canaries[tenant][c.Name] == c {
			delete(r.canaries[tenant], c.Name)
			r.republishLocked(tenant)
		}
		r.mu.Unlock()
		if err == nil {
			r.notify(Change{Kind: CanaryPromoted, Tenant: tenant, Name: c.Name, Hash: c.Hash, Previous: c.Serving, Canary: &info})
			return m, nil
		}
		// (commit closed the module it refused.)
		why = fmt.Errorf("plugins: canary %s could not be promoted: %w", c.Hash, err)
		r.notify(Change{Kind: CanaryRolledBack, Tenant: tenant, Name: c.Name, Hash: c.Hash, Previous: c.Serving, Err: why, Canary: &info})
		return nil, err
	}
	_ = c.mod.Close(ctx)
	r.notify(Change{Kind: CanaryRolledBack, Tenant: tenant, Name: c.Name, Hash: c.Hash, Previous: c.Serving, Err: why, Canary: &info})
	return nil, nil
}

// endCanaryLocked ends the tenant's canary of name, if any, as another
// version takes the module's place or the module goes; r.mu is held. The
// caller closes the canary's module and notifies the change (see
// [Registry.canaryEnded]) once r.mu is released.
func (r *Registry) endCanaryLocked(tenant, name string, keep *Module) *canary {
	c := r.canaries[tenant][name]
	if c == nil || c.mod == keep {
		return nil
	}
	delete(r.canaries[tenant], name)
	c.ended.Store(true)
	c.off.Store(true)
	return c
}

// canaryEnded closes a canary ended by another version or an unload, and
// says so.
func (r *Registry) canaryEnded(ctx context.Context, tenant string, c *canary, why string) {
	if c == nil {
		return
	}
	_ = c.mod.Close(ctx)
	info := c.info()
	r.notify(Change{Kind: CanaryRolledBack, Tenant: tenant, Name: c.Name, Hash: c.Hash, Previous: c.Serving,
		Err: fmt.Errorf("plugins: canary %s ended: %s", c.Hash, why), Canary: &info})
}

// republishLocked publishes the tenant's view again with its canaries as
// they are now; r.mu is held.
func (r *Registry) republishLocked(tenant string) {
	old := r.snap.Load()
	tv := old.tenants[tenant]
	if tv == nil {
		return
	}
	next := *tv
	next.canaries = r.canaryViewLocked(tenant)
	r.snap.Store(old.with(tenant, &next))
}

// canaryViewLocked is a copy of the tenant's canaries, for a view; r.mu is
// held.
func (r *Registry) canaryViewLocked(tenant string) map[string]*canary {
	if len(r.canaries[tenant]) == 0 {
		return nil
	}
	out := make(map[string]*canary, len(r.canaries[tenant]))
	for name, c := range r.canaries[tenant] {
		out[name] = c
	}
	return out
}

// moduleOrNil is the view's module name, nil without a view or module.
func (tv *tenantView) moduleOrNil(name string) *Module {
	if tv == nil {
		return nil
	}
	return tv.modules[name]
}
