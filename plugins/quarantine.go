package plugins

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentichost/agentic/host"
)

// Quarantine: under RegistryOptions.Quarantine, a module whose calls fail
// as a module — a trap, a timeout, running out of memory or fuel, an exit
// — Failures times within Window is quarantined for its tenant: its tools,
// validators and policies answer ErrQuarantined without running, until a
// person releases it (Registry.Release) or a new version replaces it (a
// new version is a new module, not quarantined). The plugin's own error
// answers, invalid inputs, a busy sandbox and calls whose caller gave up
// (the context ended, other than at the call's own deadline: see
// host.WithToolTimeout) do not count: they say nothing of the module's
// health. The registry reports a Quarantined change, and a Released one.
//
// Each Registry counts its own calls: with several hosts, each host
// quarantines a module on the failures it sees, and a release reaches the
// host it is asked of.

// ErrQuarantined: the module failed too often and is quarantined; the call
// did not run.
var ErrQuarantined = errors.New("plugins: the plugin is quarantined")

// QuarantinePolicy says when a module is quarantined: after Failures
// failures within Window.
type QuarantinePolicy struct {
	// Failures is how many failures quarantine a module; 0 turns
	// quarantine off.
	Failures int
	// Window is the span they must fall within. Default: 10 minutes.
	Window time.Duration
}

// DefaultQuarantineWindow is QuarantinePolicy.Window's default.
const DefaultQuarantineWindow = 10 * time.Minute

// Quarantine is a module quarantined.
type Quarantine struct {
	// Name is the module's name, Hash the version quarantined.
	Name string `json:"name"`
	Hash string `json:"hash"`
	// Since is when it was quarantined.
	Since time.Time `json:"since"`
	// Failures is how many failures it had within the window, and Last
	// the last one's error.
	Failures int    `json:"failures"`
	Last     string `json:"last"`
}

// health is a module's failures within the window, and its quarantine.
type health struct {
	mu       sync.Mutex
	failures []time.Time // within the window, oldest first; under mu
	q        atomic.Pointer[Quarantine]
	// next is the health of the same version loaded again, which took
	// this one's over (carry): a call still running on this module when
	// it was replaced counts there.
	next atomic.Pointer[health]
}

// current is the health a failure of h's module counts towards: h's, or
// that of the same version loaded again since.
func (h *health) current() *health {
	for next := h.next.Load(); next != nil; next = h.next.Load() {
		h = next
	}
	return h
}

// carry takes over from's failures and quarantine, for the same version
// loaded again.
func (h *health) carry(from *health) {
	if h.current() == from.current() {
		return // the same module committed again, or back: nothing to take over, and no loop for current
	}
	from.mu.Lock()
	failures := slices.Clone(from.failures)
	from.next.Store(h) // under from.mu: a failure counted after this is h's
	from.mu.Unlock()
	h.mu.Lock()
	h.failures = append(failures, h.failures...) // any counted here since: newer
	if q := from.q.Load(); q != nil {
		h.q.Store(q)
	}
	h.mu.Unlock()
}

// failureCounts reports whether err says the module itself failed.
func failureCounts(err error) bool {
	for _, s := range []error{ErrTrap, ErrTimeout, ErrOutOfMemory, ErrOutOfFuel, ErrExited} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// admit returns the error of a call to a quarantined module, nil when it
// may run.
func (m *Module) admit(export, name string) error {
	q := m.health.q.Load()
	if q == nil {
		return nil
	}
	return &PluginError{Plugin: m.name, Export: export, Name: name, Err: detailed(ErrQuarantined,
		"it failed %d times within the quarantine's window (the last: %s); it serves again when a person releases it or a new version replaces it",
		q.Failures, q.Last)}
}

// observe counts a failed call of m, and quarantines m when it has failed
// often enough; ctx is the call's.
func (r *Registry) observe(ctx context.Context, tenant string, m *Module, err error) {
	if r.opts.Quarantine == nil || err == nil {
		return
	}
	p := r.opts.Quarantine(tenant)
	// A call whose context ended counts only when that was the call's own
	// deadline (host.WithToolTimeout: the tool's timeout, which the host
	// applies as the plugin's): then the plugin ran for all its time.
	if p.Failures <= 0 || (ctx.Err() != nil && !host.ToolDeadline(ctx)) || !failureCounts(err) {
		return
	}
	window := p.Window
	if window <= 0 {
		window = DefaultQuarantineWindow
	}
	now := time.Now()
	h := m.health.current()
	h.mu.Lock()
	for next := h.next.Load(); next != nil; next = h.next.Load() {
		// Carried over since current looked.
		h.mu.Unlock()
		h = next
		h.mu.Lock()
	}
	if h.q.Load() != nil {
		h.mu.Unlock()
		return
	}
	h.failures = append(h.failures, now)
	drop := 0
	for drop < len(h.failures) && now.Sub(h.failures[drop]) > window {
		drop++
	}
	h.failures = slices.Delete(h.failures, 0, drop)
	n := len(h.failures)
	var q *Quarantine
	if n >= p.Failures && h.q.Load() == nil {
		last := err.Error()
		if len(last) > 500 {
			last = clip(last, 500)
		}
		q = &Quarantine{Name: m.name, Hash: m.hash, Since: now.UTC(), Failures: n, Last: last}
		h.q.Store(q)
		h.failures = nil
	}
	h.mu.Unlock()
	if q != nil {
		r.notify(Change{Kind: Quarantined, Tenant: tenant, Name: m.name, Hash: m.hash, Err: err})
	}
}

// Quarantined returns the tenant's quarantined modules, by name.
func (r *Registry) Quarantined(tenant string) []Quarantine {
	var out []Quarantine
	for _, m := range r.Modules(tenant) {
		if q := m.health.q.Load(); q != nil {
			out = append(out, *q)
		}
	}
	slices.SortFunc(out, func(a, b Quarantine) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Release lets the tenant's quarantined module name serve again, its
// failures forgotten; it fails when the module is not quarantined.
func (r *Registry) Release(tenant, name string) error {
	m, ok := r.Module(tenant, name)
	if !ok {
		return fmt.Errorf("%w: tenant %s has no plugin %s", ErrNotFound, tenant, name)
	}
	h := &m.health
	h.mu.Lock()
	q := h.q.Swap(nil)
	h.failures = nil
	h.mu.Unlock()
	if q == nil {
		return fmt.Errorf("plugins: plugin %s of tenant %s is not quarantined", name, tenant)
	}
	r.notify(Change{Kind: Released, Tenant: tenant, Name: name, Hash: m.hash})
	return nil
}
