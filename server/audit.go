package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/storage"
)

// The audit log: every transition of a tenant's plugins — a version
// loaded, replaced, held, approved, discarded, refused, removed,
// quarantined, released, rolled back, a canary started, promoted or
// rolled back — is an entry in the tenant's audit log, with who
// did it (the API key, the plugins directory, or the host itself), when,
// on which host, and which hash. The entries live in the storage's
// key-value store, so every host sharing it writes to and reads the same
// log, numbered by a storage counter where the storage keeps counters (as
// every built-in one does); GET /v1/audit reads them.

// auditNamespace is the key-value namespace of a tenant's audit log.
func auditNamespace(tenant string) string { return "agentic:audit:" + tenant }

// auditEntry is one entry of a tenant's audit log.
type auditEntry struct {
	// Seq orders the entries of the tenant's log.
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	// Action is what happened: "loaded", "replaced", "held", "approved",
	// "discarded", "refused", "removed", "quarantined", "released",
	// "rolled_back", "canary_started", "canary_promoted",
	// "canary_rolled_back".
	Action string `json:"action"`
	// Plugin is the module's name; Hash the version concerned, Previous
	// the version it replaced.
	Plugin   string `json:"plugin"`
	Hash     string `json:"hash,omitempty"`
	Previous string `json:"previous,omitempty"`
	// By is who did it: "key ID" (an API key), "directory" (a file in
	// plugins_dir), "configuration" (a module of the tenant's plugins:
	// list), "host" (the host itself: a quarantine, a held version held
	// again at a restart).
	By string `json:"by"`
	// Host is the host that did it.
	Host string `json:"host"`
	// Detail says more: why a version was refused or quarantined, what a
	// held one widens.
	Detail string `json:"detail,omitempty"`
}

// audit keeps the tenants' audit logs.
type audit struct {
	kv      storage.KV
	counter storage.Counter // nil: entries numbered by time
	host    string

	mu     sync.Mutex
	actors map[string]string // tenant/plugin → who acts on it now, through the API
}

// act runs fn as who acting on the tenant's plugin: the changes it makes
// are audited as theirs.
func (a *audit) act(tenant, plugin, who string, fn func()) {
	key := tenant + "/" + plugin
	a.mu.Lock()
	a.actors[key] = who
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.actors, key)
		a.mu.Unlock()
	}()
	fn()
}

// actor is who acts on the tenant's plugin now, through the API; "" when
// nobody does.
func (a *audit) actor(tenant, plugin string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.actors[tenant+"/"+plugin]
}

// record appends e to the tenant's log; a failure is logged by the caller.
func (a *audit) record(ctx context.Context, tenant string, e auditEntry) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	e.Time, e.Host = time.Now().UTC(), a.host
	if a.counter != nil {
		n, _, err := a.counter.AddWithin(ctx, "agentic:audit-seq", tenant, 1, math.MaxInt64)
		if err != nil {
			return err
		}
		e.Seq = n
	} else {
		e.Seq = e.Time.UnixNano()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return a.kv.Set(ctx, auditNamespace(tenant), fmt.Sprintf("%020d", e.Seq), b)
}

// entries returns the tenant's entries, oldest first: the last limit of
// them, of plugin only when plugin is set.
func (a *audit) entries(ctx context.Context, tenant, plugin string, limit int) ([]auditEntry, error) {
	keys, err := a.kv.Keys(ctx, auditNamespace(tenant))
	if err != nil {
		return nil, err
	}
	slices.Sort(keys)
	var out []auditEntry
	for i := len(keys) - 1; i >= 0 && len(out) < limit; i-- {
		b, ok, err := a.kv.Get(ctx, auditNamespace(tenant), keys[i])
		if err != nil {
			return nil, err
		}
		var e auditEntry
		if !ok || json.Unmarshal(b, &e) != nil || plugin != "" && e.Plugin != plugin {
			continue
		}
		out = append(out, e)
	}
	slices.Reverse(out)
	return out, nil
}

// auditChange records a change of the registry in its tenant's log.
func (s *Server) auditChange(c plugins.Change) {
	e := auditEntry{Plugin: c.Name, Hash: c.Hash, Previous: c.Previous, By: s.audit.actor(c.Tenant, c.Name)}
	switch c.Kind {
	case plugins.Loaded:
		e.Action = "loaded"
	case plugins.Replaced:
		if c.Hash == c.Previous {
			return // the same bytes loaded again (a directory rescanned)
		}
		e.Action = "replaced"
	case plugins.Held:
		e.Action = "held"
		ws := make([]string, len(c.Widenings))
		for i, w := range c.Widenings {
			ws[i] = w.String()
		}
		e.Detail = strings.Join(ws, "; ")
	case plugins.Rejected:
		e.Action = "refused"
		if c.Err != nil {
			e.Detail = c.Err.Error()
		}
	case plugins.Removed:
		e.Action = "removed"
	case plugins.Quarantined:
		e.Action, e.By = "quarantined", "host"
		if c.Err != nil {
			e.Detail = c.Err.Error()
		}
	case plugins.Released:
		e.Action = "released"
	case plugins.CanaryStarted, plugins.CanaryPromoted, plugins.CanaryRolledBack:
		e.Action = string(c.Kind)
		if c.Err != nil {
			e.Detail = c.Err.Error()
		}
		if c.Canary != nil {
			e.Detail = strings.TrimPrefix(fmt.Sprintf("%s; after %d calls, %d failed", e.Detail, c.Canary.Calls+c.Canary.Failures, c.Canary.Failures), "; ")
		}
		if e.By == "" {
			e.By = "host" // it ended by itself
		}
	default:
		return
	}
	if e.By == "" {
		e.By = "directory"
	}
	if err := s.audit.record(context.Background(), c.Tenant, e); err != nil {
		s.log.Error("cannot write the audit log", "tenant", c.Tenant, "plugin", c.Name, "action", e.Action, "err", err)
	}
}

// keyActor names the API key of r as the audit log does: "key ID" for a
// stored key (its visible id), "key sha256:…" (the first 12 digits of its
// hash) for one from the configuration.
func keyActor(r *http.Request) string {
	k := apiKey(r)
	if rest, ok := strings.CutPrefix(k, "ak_"); ok {
		if id, _, ok := strings.Cut(rest, "_"); ok {
			return "key " + id
		}
	}
	return "key " + HashKey(k)[:len("sha256:")+12]
}

// getAudit is GET /v1/audit: the tenant's audit log, oldest first; ?plugin
// keeps one plugin's entries, ?limit the last N (default 100, at most
// 1000).
func (s *Server) getAudit(w http.ResponseWriter, r *http.Request, t *tenant) {
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, codeInvalid, "limit: want 1 to 1000, got %q", v)
			return
		}
		limit = n
	}
	entries, err := s.audit.entries(r.Context(), t.name, r.URL.Query().Get("plugin"), limit)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot read the audit log: %v", err)
		return
	}
	if entries == nil {
		entries = []auditEntry{}
	}
	writeJSON(w, http.StatusOK, struct {
		Entries []auditEntry `json:"entries"`
	}{entries})
}
