package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentichost/agentic/plugins"
)

// Canaries: PUT /v1/plugins/{name}/canary (the module's bytes, with
// ?share=, ?promote_after= and ?rollback_after=) starts a new version of a
// plugin as its canary, serving that share of the sessions beside the
// version serving (plugins.Registry.StartCanary); POST
// /v1/plugins/{name}/canary/promote makes it the version serving, DELETE
// /v1/plugins/{name}/canary rolls it back; it promotes or rolls back by
// itself after its promote_after calls or rollback_after failures. GET
// /v1/plugins/{name} shows it with its counts. serve keeps a canary in
// plugins_dir/TENANT/.canary/ (NAME.wasm and NAME.json, its options), so
// that a restart starts it again; promoted, its file takes the module's
// place, so that a restart and every host watching the directory serve it.
// A canary runs on the host that started it (and on that host after a
// restart): the other hosts serve the version serving until it is
// promoted.

// canaryFile is what serve keeps of a canary beside its module's bytes.
type canaryFile struct {
	Hash    string                `json:"hash"`
	Options plugins.CanaryOptions `json:"options"`
}

// canaryDir is the directory of a tenant's canaries.
func (s *Server) canaryDir(tenant string) string {
	return filepath.Join(s.cfg.PluginsDir, tenant, ".canary")
}

// canaryPaths are the files of the canary of a tenant's plugin: its
// module, and its options.
func (s *Server) canaryPaths(tenant, name string) (wasm, opts string) {
	base := filepath.Join(s.canaryDir(tenant), name)
	return base + ".wasm", base + ".json"
}

// canaryOptions reads a canary's options from the query.
func canaryOptions(r *http.Request) (plugins.CanaryOptions, error) {
	var o plugins.CanaryOptions
	q := r.URL.Query()
	var errs []error
	if v := q.Get("share"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0 && f <= 1) {
			errs = append(errs, fmt.Errorf("share %q: want a number above 0 and at most 1", v))
		}
		o.Share = f
	}
	for _, p := range []struct {
		key string
		to  *int
		min int
	}{{"promote_after", &o.PromoteAfter, 0}, {"rollback_after", &o.RollbackAfter, -1}} {
		if v := q.Get(p.key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < p.min {
				errs = append(errs, fmt.Errorf("%s %q: want a whole number, %d or more", p.key, v, p.min))
			}
			*p.to = n
		}
	}
	return o, errors.Join(errs...)
}

// putCanary starts an uploaded version of a plugin as its canary.
func (s *Server) putCanary(w http.ResponseWriter, r *http.Request, t *tenant) {
	name, _ := s.pluginPath(w, r, t)
	if name == "" {
		return
	}
	opts, err := canaryOptions(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalid, "%v", err)
		return
	}
	release, ok := t.uploadSlot(w)
	if !ok {
		return
	}
	defer release()
	wasm, sig, ok := s.readUpload(w, r) // the module, and its signature when the tenant wants one
	if !ok {
		return
	}
	t.pluginsMu.Lock()
	defer t.pluginsMu.Unlock()
	if _, ok := s.registry.Module(t.name, name); !ok {
		notFound(w, "plugin", name)
		return
	}
	var c plugins.Canary
	ctx := context.WithoutCancel(r.Context())
	s.audit.act(t.name, name, keyActor(r), func() {
		c, err = s.registry.StartCanary(ctx, t.name, plugins.Source{Name: name, Wasm: wasm, Signature: sig}, opts)
	})
	if he, ok := errors.AsType[*plugins.HeldError](err); ok {
		// It widens what serves: kept, not run, until a person decides.
		if err := s.keepHeldCanary(t.name, name, he.Version.Hash, wasm, sig, opts); err != nil {
			s.registry.DiscardHeld(context.WithoutCancel(r.Context()), t.name, name, he.Version.Hash)
			writeError(w, http.StatusInternalServerError, codeInternal, "cannot keep the held canary: %v", err)
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"held": he.Version,
			"message": "the canary widens what the plugin offers: it is held, and serves nothing, until POST /v1/plugins/" + name + "/versions/" + he.Version.Hash + ` {"approve": true}, which starts it as the canary`})
		return
	}
	if err != nil {
		s.auditAPI(r, t, auditEntry{Action: "refused", Plugin: name, Hash: moduleHash(wasm), Detail: err.Error()})
		writeError(w, http.StatusUnprocessableEntity, codeInvalid, "the canary was refused: %v", err)
		return
	}
	if err := s.keepCanary(t.name, name, wasm, sig, canaryFile{Hash: c.Hash, Options: opts}); err != nil {
		s.log.Error("cannot keep a plugin's canary", "tenant", t.name, "plugin", name, "err", err)
		s.audit.act(t.name, name, keyActor(r), func() { s.registry.RollbackCanary(ctx, t.name, name) })
		writeError(w, http.StatusInternalServerError, codeInternal, "cannot keep the canary: %v", err)
		return
	}
	writeJSON(w, http.StatusCreated, c)
}

// keepCanary writes a canary's files: its module, its signature (if it
// has one) and its options.
func (s *Server) keepCanary(tenant, name string, wasm, sig []byte, f canaryFile) error {
	wasmPath, optsPath := s.canaryPaths(tenant, name)
	b, err := json.Marshal(f)
	if err == nil {
		err = os.MkdirAll(s.canaryDir(tenant), 0o755)
	}
	if err == nil {
		err = writeSigned(wasmPath, wasm, sig)
	}
	if err == nil {
		err = writeFileAtomic(optsPath, b)
	}
	return err
}

// promoteCanary makes a plugin's canary the version serving.
func (s *Server) promoteCanary(w http.ResponseWriter, r *http.Request, t *tenant) {
	name, _ := s.pluginPath(w, r, t)
	if name == "" {
		return
	}
	var req struct{}
	if !s.decodeOptionalBody(w, r, &req) {
		return
	}
	t.pluginsMu.Lock()
	defer t.pluginsMu.Unlock()
	var m *plugins.Module
	var err error
	s.audit.act(t.name, name, keyActor(r), func() { m, err = s.registry.PromoteCanary(context.WithoutCancel(r.Context()), t.name, name) })
	switch {
	case errors.Is(err, plugins.ErrNotFound):
		notFound(w, "canary of plugin", name)
	case err != nil:
		writeError(w, http.StatusUnprocessableEntity, codeInvalid, "the canary could not be promoted: %v", err)
	default:
		writeJSON(w, http.StatusOK, s.pluginInfo(t.name, m))
	}
}

// deleteCanary rolls a plugin's canary back.
func (s *Server) deleteCanary(w http.ResponseWriter, r *http.Request, t *tenant) {
	name, _ := s.pluginPath(w, r, t)
	if name == "" {
		return
	}
	t.pluginsMu.Lock()
	defer t.pluginsMu.Unlock()
	var err error
	s.audit.act(t.name, name, keyActor(r), func() { err = s.registry.RollbackCanary(context.WithoutCancel(r.Context()), t.name, name) })
	if err != nil {
		notFound(w, "canary of plugin", name)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// onCanaryChange keeps a canary's files as it ends: promoted, its module
// takes the module's place in the directory; either way its files go
// (unless they are another canary's, started since).
func (s *Server) onCanaryChange(c plugins.Change) {
	if s.cfg.PluginsDir == "" || c.Kind != plugins.CanaryPromoted && c.Kind != plugins.CanaryRolledBack {
		return
	}
	wasmPath, optsPath := s.canaryPaths(c.Tenant, c.Name)
	b, err := os.ReadFile(optsPath)
	var f canaryFile
	if err != nil || json.Unmarshal(b, &f) != nil || f.Hash != c.Hash {
		return
	}
	if c.Kind == plugins.CanaryPromoted {
		wasm, err := os.ReadFile(wasmPath)
		sig, _ := os.ReadFile(wasmPath + plugins.SignatureSuffix)
		if err == nil {
			err = s.placeModule(c.Tenant, c.Name, wasm, sig)
		}
		if err != nil {
			s.log.Error("cannot keep a promoted canary in the module's place: a restart serves the version before it", "tenant", c.Tenant, "plugin", c.Name, "module", c.Hash, "err", err)
		}
	}
	os.Remove(optsPath)
	os.Remove(wasmPath + plugins.SignatureSuffix)
	os.Remove(wasmPath)
}

// readCanaryFile reads a canary's options kept on disk.
func readCanaryFile(path string) (canaryFile, bool) {
	var f canaryFile
	b, err := os.ReadFile(path)
	return f, err == nil && json.Unmarshal(b, &f) == nil
}

// startCanaries starts again the canaries of the tenant kept on disk. One
// that widens the version serving starts only as approved over it (its
// options' ApprovedOver); else it is held again.
func (s *Server) startCanaries(ctx context.Context, tenant string) {
	entries, err := os.ReadDir(s.canaryDir(tenant))
	if err != nil {
		return
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		wasmPath, optsPath := s.canaryPaths(tenant, name)
		f, ok := readCanaryFile(optsPath)
		err := error(nil)
		if !ok {
			err = fmt.Errorf("its options (%s) do not read", optsPath)
		}
		var wasm []byte
		if err == nil {
			wasm, err = os.ReadFile(wasmPath)
		}
		if err == nil && moduleHash(wasm) != f.Hash {
			err = fmt.Errorf("its module's hash is %s, not %s", moduleHash(wasm), f.Hash)
		}
		if err == nil {
			sig, _ := os.ReadFile(wasmPath + plugins.SignatureSuffix)
			s.audit.act(tenant, name, "host", func() {
				_, err = s.registry.StartCanary(ctx, tenant, plugins.Source{Name: name, Wasm: wasm, Signature: sig}, f.Options)
			})
			if he, ok := errors.AsType[*plugins.HeldError](err); ok {
				// It widens what serves now, unapproved (a canary started
				// before widening ones were held): held, its files moved.
				if err = s.keepHeldCanary(tenant, name, he.Version.Hash, wasm, sig, f.Options); err == nil {
					s.log.Warn("a plugin's canary kept on disk widens the version serving: it is held for approval", "tenant", tenant, "plugin", name, "module", he.Version.Hash)
					os.Remove(optsPath)
					os.Remove(wasmPath + plugins.SignatureSuffix)
					os.Remove(wasmPath)
					continue
				}
				s.registry.DiscardHeld(ctx, tenant, name, he.Version.Hash)
			}
		}
		if err != nil {
			s.log.Warn("a plugin's canary kept on disk does not start again; it is dropped", "tenant", tenant, "plugin", name, "err", err)
			os.Remove(optsPath)
			os.Remove(wasmPath + plugins.SignatureSuffix)
			os.Remove(wasmPath)
		}
	}
}
