package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentichost/agentic/plugins"
)

// Held plugin versions: an upload that widens the version serving (a new
// tool, an effect moved, a changed description or schema: see
// plugins.Widenings) is stored but not loaded — 202, with what it widens —
// while the old version serves on. It waits in PluginsDir/TENANT/.held/
// (NAME.HASH.wasm), where the directory's watcher does not look, so that a
// restart holds it again rather than load it. A person approves it (POST
// /v1/plugins/{name}/versions/{hash} {"approve": true}: it replaces the
// version serving, and its file takes the module's place) or discards it
// ({"approve": false}); GET /v1/plugins lists the held versions. A newer
// upload of the module takes the held one's place. A canary that widens
// the version serving (PUT /v1/plugins/{name}/canary) is held the same
// way, its options beside its bytes (NAME.HASH.canary.json): approved, it
// starts as the canary, its files moving to the canaries' directory.

// onPluginChange drops the held files of a module whose held version the
// registry no longer keeps (another version loaded in its place, as a file
// written into the directory does, or the module was removed).
func (s *Server) onPluginChange(c plugins.Change) {
	s.auditChange(c)
	s.onCanaryChange(c)
	// (A first load takes no held version's place: a version is held
	// only over one serving, as at a restart before holdAgain.)
	if s.cfg.PluginsDir != "" && c.Kind == plugins.Replaced {
		// (Also for the same bytes: their sidecar may have changed.)
		s.keepVersions(c.Tenant, c.Name)
	}
	replaced := c.Kind == plugins.Replaced && c.Hash != c.Previous
	if !replaced && c.Kind != plugins.Removed || s.cfg.PluginsDir == "" {
		return
	}
	for _, v := range s.registry.Held(c.Tenant) {
		if v.Name == c.Name {
			return
		}
	}
	s.dropHeldFiles(c.Tenant, c.Name, "")
}

// heldDir is the directory of a tenant's held versions.
func (s *Server) heldDir(tenant string) string {
	return filepath.Join(s.cfg.PluginsDir, tenant, ".held")
}

// heldPath is the file of a held version.
func (s *Server) heldPath(tenant, name, hash string) string {
	return filepath.Join(s.heldDir(tenant), name+"."+strings.TrimPrefix(hash, "sha256:")+".wasm")
}

// keepHeld stores the held version's bytes and signature (sig, nil for
// none), in the place of any other held version of the module.
func (s *Server) keepHeld(tenant, name, hash string, wasm, sig []byte) error {
	if err := os.MkdirAll(s.heldDir(tenant), 0o755); err != nil {
		return err
	}
	s.dropHeldFiles(tenant, name, hash)
	return writeSigned(s.heldPath(tenant, name, hash), wasm, sig)
}

// heldCanaryPath is the file of the options of a version held as a
// canary, beside its bytes.
func heldCanaryPath(wasmPath string) string {
	return strings.TrimSuffix(wasmPath, ".wasm") + ".canary.json"
}

// keepHeldCanary is keepHeld, for a version held as a canary, with its
// options.
func (s *Server) keepHeldCanary(tenant, name, hash string, wasm, sig []byte, opts plugins.CanaryOptions) error {
	if err := s.keepHeld(tenant, name, hash, wasm, sig); err != nil {
		return err
	}
	b, err := json.Marshal(canaryFile{Hash: hash, Options: opts})
	if err != nil {
		return err
	}
	return writeFileAtomic(heldCanaryPath(s.heldPath(tenant, name, hash)), b)
}

// dropHeldFiles removes the module's held files (and their signatures and
// canary options) but keep's.
func (s *Server) dropHeldFiles(tenant, name, keep string) {
	files, _ := filepath.Glob(filepath.Join(s.heldDir(tenant), name+".*.wasm"))
	for _, f := range files {
		if keep == "" || f != s.heldPath(tenant, name, keep) {
			os.Remove(heldCanaryPath(f))
			os.Remove(f + plugins.SignatureSuffix)
			os.Remove(f)
		}
	}
}

// holdAgain loads the tenant's held files after a restart: each is held
// again (or, if it no longer widens what serves, loads, and its file takes
// the module's place).
func (s *Server) holdAgain(ctx context.Context, tenant string) {
	entries, err := os.ReadDir(s.heldDir(tenant))
	if err != nil {
		return
	}
	for _, e := range entries {
		file := e.Name()
		base, ok := strings.CutSuffix(file, ".wasm")
		dot := strings.LastIndexByte(base, '.')
		if !ok || dot <= 0 {
			continue
		}
		name := base[:dot]
		path := filepath.Join(s.heldDir(tenant), file)
		wasm, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		sig, _ := os.ReadFile(path + plugins.SignatureSuffix)
		if f, ok := readCanaryFile(heldCanaryPath(path)); ok {
			// Held as a canary: held again, or started if it no longer
			// widens what serves.
			var c plugins.Canary
			s.audit.act(tenant, name, "host", func() {
				c, err = s.registry.StartCanary(ctx, tenant, plugins.Source{Name: name, Wasm: wasm, Signature: sig}, f.Options)
			})
			switch {
			case err == nil:
				if err := s.keepCanary(tenant, name, wasm, sig, canaryFile{Hash: c.Hash, Options: f.Options}); err != nil {
					s.log.Error("cannot keep a held canary that starts now", "tenant", tenant, "plugin", name, "err", err)
				}
				s.dropHeldFiles(tenant, name, "")
			case !errors.Is(err, plugins.ErrHeld):
				s.log.Warn("a plugin version held as a canary no longer starts; dropped", "tenant", tenant, "plugin", name, "err", err)
				s.dropHeldFiles(tenant, name, "")
			}
			continue
		}
		written := s.registry.FileWriting(tenant, name)
		s.audit.act(tenant, name, "host", func() {
			_, err = s.registry.Load(ctx, tenant, plugins.Source{Name: name, Wasm: wasm, Signature: sig})
		})
		if err == nil {
			if err := s.placeModule(tenant, name, wasm, sig); err != nil {
				s.log.Error("cannot keep a held plugin version that loads now", "tenant", tenant, "plugin", name, "err", err)
			}
			os.Remove(path + plugins.SignatureSuffix)
			os.Remove(path)
		} else if !errors.Is(err, plugins.ErrHeld) {
			s.log.Warn("a held plugin version no longer loads; dropped", "tenant", tenant, "plugin", name, "err", err)
			os.Remove(path + plugins.SignatureSuffix)
			os.Remove(path)
		}
		written()
	}
}

// versionDecision is the body of POST /v1/plugins/{name}/versions/{hash}.
type versionDecision struct {
	// Approve loads the held version (true) or discards it (false).
	// Required.
	Approve *bool `json:"approve"`
}

// decideVersion approves or discards a held version.
func (s *Server) decideVersion(w http.ResponseWriter, r *http.Request, t *tenant) {
	name, _ := s.pluginPath(w, r, t)
	if name == "" {
		return
	}
	hash := r.PathValue("hash")
	if !strings.HasPrefix(hash, "sha256:") {
		hash = "sha256:" + hash
	}
	var req versionDecision
	if !s.decodeBody(w, r, &req) {
		return
	}
	if req.Approve == nil {
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"approve\" is required: true loads the held version, false discards it")
		return
	}
	t.pluginsMu.Lock()
	defer t.pluginsMu.Unlock()
	held, asCanary := false, false
	for _, v := range s.registry.Held(t.name) {
		if v.Name == name && v.Hash == hash {
			held, asCanary = true, v.Canary
		}
	}
	if !held {
		notFound(w, "held version of plugin "+name, hash)
		return
	}
	if !*req.Approve {
		s.registry.DiscardHeld(context.WithoutCancel(r.Context()), t.name, name, hash)
		s.dropHeldFiles(t.name, name, "")
		s.auditAPI(r, t, auditEntry{Action: "discarded", Plugin: name, Hash: hash})
		w.WriteHeader(http.StatusNoContent)
		return
	}
	wasm, err := os.ReadFile(s.heldPath(t.name, name, hash))
	if err != nil {
		writeError(w, http.StatusInternalServerError, codeInternal, "cannot read the held version: %v", err)
		return
	}
	sig, _ := os.ReadFile(s.heldPath(t.name, name, hash) + plugins.SignatureSuffix)
	s.auditAPI(r, t, auditEntry{Action: "approved", Plugin: name, Hash: hash})
	written := s.registry.FileWriting(t.name, name) // until its file is written
	defer written()
	var m *plugins.Module
	s.audit.act(t.name, name, keyActor(r), func() { m, err = s.registry.ApproveHeld(context.WithoutCancel(r.Context()), t.name, name, hash) })
	if err != nil {
		// Its signature is no longer by a key the tenant trusts: it
		// stays held, for a person to discard.
		s.auditAPI(r, t, auditEntry{Action: "refused", Plugin: name, Hash: hash, Detail: err.Error()})
		writeError(w, http.StatusUnprocessableEntity, codeInvalid, "the held version was refused: %v", err)
		return
	}
	if asCanary {
		// It runs as the canary: its files are the canary's.
		c, ok := s.registry.Canary(t.name, name)
		if ok && c.Hash == hash {
			opts := plugins.CanaryOptions{Share: c.Share, PromoteAfter: c.PromoteAfter, RollbackAfter: c.RollbackAfter, ApprovedOver: c.ApprovedOver}
			if err := s.keepCanary(t.name, name, wasm, sig, canaryFile{Hash: c.Hash, Options: opts}); err != nil {
				s.log.Error("cannot keep an approved canary", "tenant", t.name, "plugin", name, "err", err)
				s.audit.act(t.name, name, keyActor(r), func() { s.registry.RollbackCanary(context.WithoutCancel(r.Context()), t.name, name) })
				writeError(w, http.StatusInternalServerError, codeInternal, "cannot keep the canary: %v", err)
				return
			}
		}
		s.dropHeldFiles(t.name, name, "")
		serving, _ := s.registry.Module(t.name, name)
		writeJSON(w, http.StatusOK, s.pluginInfo(t.name, serving))
		return
	}
	// Its files take the module's place (the held one is dropped as the
	// version loads: onPluginChange).
	if err := s.placeModule(t.name, name, wasm, sig); err != nil {
		s.log.Error("cannot keep an approved plugin version", "tenant", t.name, "plugin", name, "err", err)
	}
	writeJSON(w, http.StatusOK, s.pluginInfo(t.name, m))
}
