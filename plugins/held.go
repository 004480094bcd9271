package plugins

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Held versions: under RegistryOptions.HoldWidening, a new version of a
// module that widens the one serving (see [Widenings]) is kept, compiled
// and described, but not loaded; the version serving goes on. A person
// approves it (ApproveHeld: it then replaces the old one, as a load would,
// or, held as a canary (StartCanary), starts as the module's canary) or
// discards it. One version a module is held at a time: a newer one, held
// or loaded, takes the place of the held one, as does unloading the
// module.

// ErrHeld: a new version widens the one serving and waits for approval.
var ErrHeld = errors.New("plugins: the new version widens what the module offers: it is held for approval")

// HeldError is the error of a load whose version was held.
type HeldError struct {
	// Version is the version held.
	Version HeldVersion
}

func (e *HeldError) Error() string {
	ws := make([]string, len(e.Version.Widenings))
	for i, w := range e.Version.Widenings {
		ws[i] = w.String()
	}
	as := ""
	if e.Version.Canary {
		as = " as a canary"
	}
	return fmt.Sprintf("%v: plugin %s %s%s (serving %s): %s", ErrHeld, e.Version.Name, e.Version.Hash, as, e.Version.Previous, strings.Join(ws, "; "))
}

func (e *HeldError) Unwrap() error { return ErrHeld }

// HeldVersion is a version of a module waiting for approval.
type HeldVersion struct {
	// Name is the module's name; Hash the held version's content hash,
	// Previous the hash of the version serving.
	Name     string `json:"name"`
	Hash     string `json:"hash"`
	Previous string `json:"previous"`
	// Fingerprint is the held version's (see [Description.Fingerprint]):
	// it tells versions of the same bytes apart whose sidecar manifests
	// differ.
	Fingerprint string `json:"fingerprint"`
	// Widenings are how it widens the version serving.
	Widenings []Widening `json:"widenings"`
	// Canary tells a version held as it was to start as the module's
	// canary (StartCanary): approved, it starts as the canary, with the
	// options it was given, rather than replace the version serving.
	Canary bool `json:"canary,omitempty"`
	// Since is when it was held.
	Since time.Time `json:"since"`
}

type held struct {
	HeldVersion
	module *Module
	canary *CanaryOptions // the options of a version held as a canary
}

// hold keeps m, which widens prev by w, as name's held version; r.mu is
// held, and released here.
func (r *Registry) hold(ctx context.Context, tenant, name string, prev, m *Module, w []Widening) (*Module, error) {
	return r.holdAs(ctx, tenant, name, prev, m, w, nil)
}

// holdAs is hold, of a version that is to start as the canary with
// canary's options when approved (nil: to load).
func (r *Registry) holdAs(ctx context.Context, tenant, name string, prev, m *Module, w []Widening, canary *CanaryOptions) (*Module, error) {
	v := HeldVersion{Name: name, Hash: m.Hash(), Fingerprint: m.Fingerprint(), Previous: prev.Hash(), Widenings: w, Canary: canary != nil, Since: time.Now().UTC()}
	if h := r.held[tenant][name]; h != nil && sameVersion(h.module, m) && (h.canary != nil) == (canary != nil) {
		// Held already (a directory rescanned): keep the first.
		r.mu.Unlock()
		_ = m.Close(ctx)
		return nil, &HeldError{Version: h.HeldVersion}
	}
	dropped := r.dropHeldLocked(tenant, name, nil)
	if r.held[tenant] == nil {
		r.held[tenant] = map[string]*held{}
	}
	r.held[tenant][name] = &held{HeldVersion: v, module: m, canary: canary}
	r.mu.Unlock()
	if dropped != nil {
		_ = dropped.Close(ctx)
	}
	r.log.Warn("plugin version held: it widens the version serving", "tenant", tenant, "plugin", name, "module", v.Hash, "serving", v.Previous, "widenings", (&HeldError{Version: v}).Error())
	r.notify(Change{Kind: Held, Tenant: tenant, Name: name, Hash: v.Hash, Previous: v.Previous, Widenings: w})
	return nil, &HeldError{Version: v}
}

// dropHeldLocked forgets name's held version unless it is the same
// version as keep, and returns its module for the caller to close; r.mu is
// held.
func (r *Registry) dropHeldLocked(tenant, name string, keep *Module) *Module {
	h := r.held[tenant][name]
	if h == nil || keep != nil && sameVersion(h.module, keep) {
		return nil
	}
	delete(r.held[tenant], name)
	return h.module
}

// sameVersion reports whether a and b are the same version of a module:
// the same bytes, described the same (a sidecar manifest may change
// beside the bytes).
func sameVersion(a, b *Module) bool {
	return a.Hash() == b.Hash() && a.Fingerprint() == b.Fingerprint()
}

// Held returns the tenant's versions waiting for approval, by module name.
func (r *Registry) Held(tenant string) []HeldVersion {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []HeldVersion
	for _, h := range r.held[tenant] {
		out = append(out, h.HeldVersion)
	}
	slices.SortFunc(out, func(a, b HeldVersion) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ApproveHeld loads the held version hash of the tenant's module name, in
// the place of the version serving (as Load would, tenant caps checked);
// a version held as a canary (HeldVersion.Canary) starts as the module's
// canary instead, with the options it was given, its widening approved
// over the version serving (CanaryOptions.ApprovedOver), and the module
// returned is the canary's. It fails when no such version is held, and,
// leaving it held, when the tenant requires signed modules
// (RegistryOptions.Trust) and its signature is not by a key the tenant
// trusts now.
func (r *Registry) ApproveHeld(ctx context.Context, tenant, name, hash string) (*Module, error) {
	notHeld := fmt.Errorf("plugins: no version %s of plugin %s is held for tenant %s", hash, name, tenant)
	r.mu.Lock()
	h := r.held[tenant][name]
	r.mu.Unlock()
	if h == nil || h.Hash != hash {
		return nil, notHeld
	}
	// The keys may have changed since it was held.
	if _, err := r.Verify(tenant, h.module.src); err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.held[tenant][name] != h {
		r.mu.Unlock()
		return nil, notHeld
	}
	delete(r.held[tenant], name)
	r.mu.Unlock()
	if h.canary != nil {
		opts := *h.canary
		opts.ApprovedOver = h.Previous
		if _, err := r.beginCanary(ctx, tenant, name, h.module, opts); err != nil {
			return nil, err
		}
		return h.module, nil
	}
	return r.commit(ctx, tenant, name, hash, h.module, nil, true)
}

// DiscardHeld drops the held version hash of the tenant's module name; it
// reports whether there was one.
func (r *Registry) DiscardHeld(ctx context.Context, tenant, name, hash string) bool {
	r.mu.Lock()
	h := r.held[tenant][name]
	if h == nil || h.Hash != hash {
		r.mu.Unlock()
		return false
	}
	delete(r.held[tenant], name)
	r.mu.Unlock()
	_ = h.module.Close(ctx)
	return true
}
