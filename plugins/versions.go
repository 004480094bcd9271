package plugins

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Versions and rollback: a registry keeps the last versions of each module
// that served and were replaced (RegistryOptions.KeepVersions, 3 by
// default), their bytes in memory. Rollback loads one of them again in the
// place of the version serving, atomically as any load: calls in flight
// finish on the version they started on. A rollback is a person's choice
// of a version that served before, so it is never held (see
// [Widenings]). The version that served goes into the history in its turn.

// DefaultKeepVersions is RegistryOptions.KeepVersions's default.
const DefaultKeepVersions = 3

// Version is a version of a module that served and was replaced.
type Version struct {
	// Hash is its content hash; Fingerprint its description's ("" for
	// a version remembered from elsewhere and not loaded since).
	Hash        string `json:"hash"`
	Fingerprint string `json:"fingerprint,omitempty"`
	// Replaced is when another version took its place.
	Replaced time.Time `json:"replaced"`
}

// kept is a version in the history, with what loads it again.
type kept struct {
	Version
	src Source // Name, Wasm and Sidecar
}

// keep returns how many versions a module's history holds.
func (r *Registry) keep() int {
	switch n := r.opts.KeepVersions; {
	case n < 0:
		return 0
	case n == 0:
		return DefaultKeepVersions
	default:
		return n
	}
}

// rememberLocked puts prev, replaced by next, at the head of the history
// of the tenant's module name; r.mu is held.
func (r *Registry) rememberLocked(tenant, name string, prev, next *Module) {
	if r.keep() == 0 || prev.src.Wasm == nil {
		return
	}
	r.pushLocked(tenant, name, kept{Version: Version{Hash: prev.Hash(), Fingerprint: prev.Fingerprint(), Replaced: time.Now().UTC()}, src: prev.src}, next)
}

// pushLocked adds k at the head of the history, dropping the entries of
// the same version and of serving's, and the oldest past the bound.
func (r *Registry) pushLocked(tenant, name string, k kept, serving *Module) {
	if r.versions[tenant] == nil {
		r.versions[tenant] = map[string][]kept{}
	}
	same := func(a kept, hash, fp string) bool {
		return a.Hash == hash && (a.Fingerprint == "" || fp == "" || a.Fingerprint == fp)
	}
	h := slices.DeleteFunc(slices.Clone(r.versions[tenant][name]), func(e kept) bool {
		return same(e, k.Hash, k.Fingerprint) || serving != nil && same(e, serving.Hash(), serving.Fingerprint())
	})
	h = append([]kept{k}, h...)
	if len(h) > r.keep() {
		h = h[:r.keep()]
	}
	r.versions[tenant][name] = h
}

// Remember adds a version of the tenant's module name to the end of its
// history (the oldest), as a host that kept versions on disk does at a
// start; replaced is when it stopped serving. The bytes are not checked
// until a rollback loads them.
func (r *Registry) Remember(tenant, name string, src Source, replaced time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keep() == 0 {
		return
	}
	hash := contentHash(src.Wasm)
	if m := r.snap.Load().tenants[tenant]; m != nil && m.modules[name] != nil && m.modules[name].Hash() == hash {
		return // it serves
	}
	h := r.versions[tenant][name]
	if slices.ContainsFunc(h, func(e kept) bool { return e.Hash == hash }) || len(h) >= r.keep() {
		return
	}
	if r.versions[tenant] == nil {
		r.versions[tenant] = map[string][]kept{}
	}
	src.Name = name
	r.versions[tenant][name] = append(h, kept{Version: Version{Hash: hash, Replaced: replaced.UTC()}, src: Source{Name: name, Wasm: src.Wasm, Sidecar: src.Sidecar, Signature: src.Signature}})
}

// Versions returns the history of the tenant's module name: the versions
// that served before the one serving, newest first.
func (r *Registry) Versions(tenant, name string) []Version {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Version
	for _, k := range r.historyLocked(tenant, name) {
		out = append(out, k.Version)
	}
	return out
}

// historyLocked is the history of the tenant's module name without the
// version serving (a version remembered at a start may be the one that
// loads then); r.mu is held.
func (r *Registry) historyLocked(tenant, name string) []kept {
	var serving *Module
	if tv := r.snap.Load().tenants[tenant]; tv != nil {
		serving = tv.modules[name]
	}
	var out []kept
	for _, k := range r.versions[tenant][name] {
		if serving != nil && k.Hash == serving.Hash() && (k.Fingerprint == "" || k.Fingerprint == serving.Fingerprint()) {
			continue
		}
		out = append(out, k)
	}
	return out
}

// VersionSource returns the bytes (and sidecar manifest) of a version in
// the history of the tenant's module name.
func (r *Registry) VersionSource(tenant, name, hash string) (Source, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range r.versions[tenant][name] {
		if k.Hash == hash {
			return k.src, true
		}
	}
	return Source{}, false
}

// Rollback loads a version of the history of the tenant's module name in
// the place of the version serving: the one of hash, or with hash "" the
// newest. It is loaded as any version (the tenant's limits, grants and
// caps apply) but never held. It fails, changing nothing, when the history
// has no such version or the version no longer loads.
func (r *Registry) Rollback(ctx context.Context, tenant, name, hash string) (*Module, error) {
	r.mu.Lock()
	h := r.historyLocked(tenant, name)
	i := slices.IndexFunc(h, func(k kept) bool { return hash == "" || k.Hash == hash })
	if i < 0 {
		r.mu.Unlock()
		if hash == "" {
			return nil, fmt.Errorf("%w: plugin %s of tenant %s has no earlier version to roll back to", ErrNotFound, name, tenant)
		}
		return nil, fmt.Errorf("%w: plugin %s of tenant %s has no earlier version %s", ErrNotFound, name, tenant, hash)
	}
	k := h[i]
	r.mu.Unlock()
	src, err := r.source(tenant, k.src)
	var m *Module
	if err == nil {
		m, err = r.prepare(ctx, src)
	}
	if err != nil {
		return nil, err // nothing changed: not a change to report
	}
	return r.commit(ctx, tenant, name, k.Hash, m, nil, true)
}
