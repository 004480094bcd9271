package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/agentichost/agentic/plugins"
)

// Plugins: a tenant's modules — list, read, upload (validated, sandboxed
// with the tenant's limits, hot-loaded for that tenant only, kept in
// PluginsDir/TENANT so that a restart loads it again) and remove.

// pluginName is what an uploaded module may be called (its file name).
var pluginName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$`)

// pluginInfo describes a loaded module.
type pluginInfo struct {
	Name        string                         `json:"name"`
	Hash        string                         `json:"hash"`
	ABI         string                         `json:"abi"`
	Tools       []plugins.ToolDescription      `json:"tools"`
	Validators  []plugins.ValidatorDescription `json:"validators"`
	Policies    []plugins.PolicyDescription    `json:"policies"`
	Conflicting []string                       `json:"conflicting,omitempty"`
}

func (s *Server) pluginInfo(tenant string, m *plugins.Module) pluginInfo {
	d := m.Description()
	info := pluginInfo{Name: m.Name(), Hash: m.Hash(), ABI: d.ABI, Tools: d.Tools, Validators: d.Validators, Policies: d.Policies}
	for _, c := range s.registry.Conflicts(tenant) {
		if slices.Contains(c.Modules, m.Name()) {
			info.Conflicting = append(info.Conflicting, c.String())
		}
	}
	return info
}

func (s *Server) listPlugins(w http.ResponseWriter, r *http.Request, t *tenant) {
	out := struct {
		Plugins   []pluginInfo `json:"plugins"`
		Conflicts []string     `json:"conflicts"`
		Refusals  []refusal    `json:"refusals"`
	}{Plugins: []pluginInfo{}, Conflicts: []string{}, Refusals: []refusal{}}
	for _, m := range s.registry.Modules(t.name) {
		out.Plugins = append(out.Plugins, s.pluginInfo(t.name, m))
	}
	for _, c := range s.registry.Conflicts(t.name) {
		out.Conflicts = append(out.Conflicts, c.String())
	}
	for _, f := range s.registry.Refusals(t.name) {
		out.Refusals = append(out.Refusals, refusal{Name: f.Name, Hash: f.Hash, Reason: f.Err.Error()})
	}
	writeJSON(w, http.StatusOK, out)
}

// refusal is a module the registry refused.
type refusal struct {
	Name   string `json:"name"`
	Hash   string `json:"hash,omitempty"`
	Reason string `json:"reason"`
}

// pluginPath returns the module name's file in the tenant's directory,
// answering an error and returning "" when the name is bad or the server
// keeps no plugins.
func (s *Server) pluginPath(w http.ResponseWriter, r *http.Request, t *tenant) (string, string) {
	name := r.PathValue("name")
	if !pluginName.MatchString(name) {
		writeError(w, http.StatusBadRequest, codeInvalid, "plugin name %q: want 1 to 64 of [A-Za-z0-9._-], not starting with '.' or '-'", name)
		return "", ""
	}
	if s.cfg.PluginsDir == "" {
		writeError(w, http.StatusNotFound, codeNotFound, "this server keeps no plugins (plugins_dir is not set)")
		return "", ""
	}
	return name, filepath.Join(s.cfg.PluginsDir, t.name, name+".wasm")
}

func (s *Server) getPlugin(w http.ResponseWriter, r *http.Request, t *tenant) {
	name := r.PathValue("name")
	m, ok := s.registry.Module(t.name, name)
	if !ok {
		notFound(w, "plugin", name)
		return
	}
	writeJSON(w, http.StatusOK, s.pluginInfo(t.name, m))
}

// putPlugin loads an uploaded module for the tenant, then keeps it. A
// module that does not load is refused (422) and changes nothing; one
// whose tools, validators or policies another module of the tenant offers
// too is refused (409), the previous version (if any) restored.
func (s *Server) putPlugin(w http.ResponseWriter, r *http.Request, t *tenant) {
	name, path := s.pluginPath(w, r, t)
	if name == "" {
		return
	}
	wasm, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxPluginBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, "the module is larger than %d bytes", tooBig.Limit)
			return
		}
		writeError(w, http.StatusBadRequest, codeInvalid, "cannot read the module: %v", err)
		return
	}
	prev, hadPrev := s.registry.Module(t.name, name)
	var prevWasm []byte
	var before []string
	if hadPrev {
		prevWasm, _ = os.ReadFile(path)
		before = s.pluginInfo(t.name, prev).Conflicting
	}
	m, err := s.registry.Load(r.Context(), t.name, plugins.Source{Name: name, Wasm: wasm, Tenant: t.name})
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, codeInvalid, "the module was refused: %v", err)
		return
	}
	if info := s.pluginInfo(t.name, m); len(info.Conflicting) > len(before) {
		// Refused: put back what served before.
		if hadPrev && len(prevWasm) > 0 {
			s.registry.Load(context.WithoutCancel(r.Context()), t.name, plugins.Source{Name: name, Wasm: prevWasm, Tenant: t.name})
		} else {
			s.registry.Unload(t.name, name)
		}
		writeError(w, http.StatusConflict, codeConflict, "%s", info.Conflicting[0])
		return
	}
	if err := writeFileAtomic(path, wasm); err != nil {
		s.log.Error("cannot keep an uploaded plugin; it serves until the server restarts", "tenant", t.name, "plugin", name, "err", err)
	}
	status := http.StatusCreated
	if hadPrev {
		status = http.StatusOK
	}
	writeJSON(w, status, s.pluginInfo(t.name, m))
}

func (s *Server) deletePlugin(w http.ResponseWriter, r *http.Request, t *tenant) {
	name, path := s.pluginPath(w, r, t)
	if name == "" {
		return
	}
	if _, ok := s.registry.Module(t.name, name); !ok {
		notFound(w, "plugin", name)
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		writeError(w, http.StatusInternalServerError, codeInternal, "cannot remove the module: %v", err)
		return
	}
	s.registry.Unload(t.name, name)
	w.WriteHeader(http.StatusNoContent)
}

// writeFileAtomic writes data to path through a temporary file renamed into
// place, so that the directory's watcher never loads half a module.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
