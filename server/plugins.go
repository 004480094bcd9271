package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

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
	// Fingerprint is its description's (plugins.Description.Fingerprint).
	Fingerprint string `json:"fingerprint"`
	// Needs is what it says it needs of the sandbox; absent when it
	// does not say.
	Needs *plugins.Needs `json:"needs,omitempty"`
	// Grants are what the module may do of the tenant's sandbox: its
	// grant, narrowed to its needs.
	Grants plugins.Grant `json:"grants"`
	// Quarantine is set while the module is quarantined.
	Quarantine *plugins.Quarantine `json:"quarantine,omitempty"`
	// Versions are the versions it replaced, newest first: what POST
	// /v1/plugins/{name}/rollback loads again.
	Versions []plugins.Version `json:"versions"`
	// Canary is the version serving a share of its calls, if any.
	Canary *plugins.Canary `json:"canary,omitempty"`
	// Signature is who signed it (absent when it has no signature):
	// verified when the tenant trusts keys.
	Signature *plugins.Signer `json:"signature,omitempty"`
	// Source is where it came from when not from plugins_dir: the
	// configuration's oci:// reference.
	Source string `json:"source,omitempty"`
}

func (s *Server) pluginInfo(tenant string, m *plugins.Module) pluginInfo {
	d := m.Description()
	info := pluginInfo{Name: m.Name(), Hash: m.Hash(), ABI: d.ABI, Tools: d.Tools, Validators: d.Validators, Policies: d.Policies,
		Fingerprint: m.Fingerprint(), Needs: d.Needs, Grants: plugins.GrantOf(m.Limits()),
		Versions:  append([]plugins.Version{}, s.registry.Versions(tenant, m.Name())...),
		Signature: m.Signer(), Source: s.fromConfig(tenant, m.Name())}
	if c, ok := s.registry.Canary(tenant, m.Name()); ok {
		info.Canary = &c
	}
	for _, q := range s.registry.Quarantined(tenant) {
		if q.Name == m.Name() {
			info.Quarantine = &q
		}
	}
	for _, c := range s.registry.Conflicts(tenant) {
		if slices.Contains(c.Modules, m.Name()) {
			info.Conflicting = append(info.Conflicting, c.String())
		}
	}
	return info
}

func (s *Server) listPlugins(w http.ResponseWriter, r *http.Request, t *tenant) {
	out := struct {
		Plugins   []pluginInfo          `json:"plugins"`
		Conflicts []string              `json:"conflicts"`
		Refusals  []refusal             `json:"refusals"`
		Held      []plugins.HeldVersion `json:"held"`
		// Quarantined are the modules quarantined, failing too often.
		Quarantined []plugins.Quarantine `json:"quarantined"`
	}{Plugins: []pluginInfo{}, Conflicts: []string{}, Refusals: []refusal{}, Held: []plugins.HeldVersion{}, Quarantined: []plugins.Quarantine{}}
	out.Held = append(out.Held, s.registry.Held(t.name)...)
	out.Quarantined = append(out.Quarantined, s.registry.Quarantined(t.name)...)
	for _, m := range s.registry.Modules(t.name) {
		out.Plugins = append(out.Plugins, s.pluginInfo(t.name, m))
	}
	for _, c := range s.registry.Conflicts(t.name) {
		out.Conflicts = append(out.Conflicts, c.String())
	}
	for _, f := range s.registry.Refusals(t.name) {
		out.Refusals = append(out.Refusals, refusal{Name: f.Name, Hash: f.Hash, Reason: f.Err.Error()})
	}
	out.Refusals = append(out.Refusals, s.plugins.refusals(t.name)...)
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

// putPlugin loads an uploaded module for the tenant, then keeps it. The
// module is first loaded on its own, outside the tenant's registry: one
// that does not load is refused (422), one offering a tool, validator or
// policy that another module of the tenant offers is refused (409), and
// either way nothing changes — the previous version, if any, serves on,
// and nothing is listed among the refusals (which are the plugin
// directory's). Uploads and removals of a tenant's modules take turns.
func (s *Server) putPlugin(w http.ResponseWriter, r *http.Request, t *tenant) {
	name, path := s.pluginPath(w, r, t)
	if name == "" {
		return
	}
	release, ok := t.uploadSlot(w)
	if !ok {
		return
	}
	defer release()
	releaseProcess, ok := s.uploadSlot(w)
	if !ok {
		return
	}
	defer releaseProcess()
	if s.onUpload != nil {
		s.onUpload()
	}
	wasm, sig, ok := s.readUpload(w, r)
	if !ok {
		return
	}
	t.pluginsMu.Lock()
	defer t.pluginsMu.Unlock()
	if from := s.fromConfig(t.name, name); from != "" {
		writeError(w, http.StatusConflict, codeConflict, "plugin %s comes from the configuration (%s): change the configuration, or upload this module under another name", name, from)
		return
	}
	limits, err := t.cfg.Sandbox.limits().Within(t.cfg.Sandbox.grant(name))
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, codeInvalid, "the module was refused: %v", err)
		return
	}
	src := plugins.Source{Name: name, Wasm: wasm, Signature: sig, Tenant: t.name, Limits: limits}
	// The signature first: a module not signed as the tenant requires is
	// not compiled.
	if _, err := s.registry.Verify(t.name, src); err != nil {
		s.auditAPI(r, t, auditEntry{Action: "refused", Plugin: name, Hash: moduleHash(wasm), Detail: err.Error()})
		writeError(w, http.StatusUnprocessableEntity, codeInvalid, "the module was refused: %v", err)
		return
	}
	probe, err := s.rt.Load(r.Context(), src)
	if err != nil {
		s.auditAPI(r, t, auditEntry{Action: "refused", Plugin: name, Hash: moduleHash(wasm), Detail: err.Error()})
		writeError(w, http.StatusUnprocessableEntity, codeInvalid, "the module was refused: %v", err)
		return
	}
	if !probe.Described() {
		probe.Close(context.WithoutCancel(r.Context()))
		writeError(w, http.StatusUnprocessableEntity, codeInvalid, "the module was refused: it has no describe export (a plain Extism module needs a sidecar manifest, which uploads do not take)")
		return
	}
	conflict := s.conflictOf(t.name, name, probe.Description())
	probe.Close(context.WithoutCancel(r.Context()))
	if conflict != "" {
		writeError(w, http.StatusConflict, codeConflict, "%s", conflict)
		return
	}
	// The watcher of the tenant's directory must not put back what it
	// reads of the file before this version is written there.
	written := s.registry.FileWriting(t.name, name)
	defer written()
	prev, hadPrev := s.registry.Module(t.name, name)
	var prevWasm, prevSig []byte
	if hadPrev {
		prevWasm, _ = os.ReadFile(path)
		prevSig, _ = os.ReadFile(path + plugins.SignatureSuffix)
	}
	var m *plugins.Module
	s.audit.act(t.name, name, keyActor(r), func() { m, err = s.registry.Load(context.WithoutCancel(r.Context()), t.name, src) })
	if he, ok := errors.AsType[*plugins.HeldError](err); ok {
		// It widens what serves: kept, not loaded, until a person decides.
		if err := s.keepHeld(t.name, name, he.Version.Hash, wasm, sig); err != nil {
			s.registry.DiscardHeld(context.WithoutCancel(r.Context()), t.name, name, he.Version.Hash)
			writeError(w, http.StatusInternalServerError, codeInternal, "cannot keep the held version: %v", err)
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"held": he.Version,
			"message": "the new version widens what the plugin offers: it is held, and the version serving goes on, until POST /v1/plugins/" + name + "/versions/" + he.Version.Hash + ` {"approve": true}`})
		return
	}
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, codeInvalid, "the module was refused: %v", err)
		return
	}
	if err := s.placeModule(t.name, name, wasm, sig); err != nil {
		// Not kept, so not taken: put back what served before.
		s.log.Error("cannot keep an uploaded plugin", "tenant", t.name, "plugin", name, "err", err)
		s.audit.act(t.name, name, keyActor(r), func() {
			if hadPrev && len(prevWasm) > 0 && prev.Hash() != m.Hash() {
				s.registry.Load(context.WithoutCancel(r.Context()), t.name, plugins.Source{Name: name, Wasm: prevWasm, Signature: prevSig, Tenant: t.name})
			} else if !hadPrev {
				s.registry.Unload(t.name, name)
			}
		})
		writeError(w, http.StatusInternalServerError, codeInternal, "cannot keep the module: %v", err)
		return
	}
	status := http.StatusCreated
	if hadPrev {
		status = http.StatusOK
	}
	writeJSON(w, status, s.pluginInfo(t.name, m))
}

// readUpload reads an upload's module and signature: the body is the
// module's bytes (application/wasm, or anything but multipart), or a
// multipart/form-data body with the part "module" and, optionally, the
// part "signature" (the text of NAME.wasm.minisig), as curl -F
// module=@NAME.wasm -F signature=@NAME.wasm.minisig sends them. It
// answers an error and returns false when the body is not one of these.
func (s *Server) readUpload(w http.ResponseWriter, r *http.Request) (wasm, sig []byte, ok bool) {
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		wasm, ok = s.readBody(w, r, s.cfg.MaxPluginBytes, "max_plugin_bytes")
		if ok && len(wasm) == 0 {
			writeError(w, http.StatusBadRequest, codeInvalid, "the body is empty; want the module's bytes")
			return nil, nil, false
		}
		return wasm, nil, ok
	}
	bad := func(format string, args ...any) ([]byte, []byte, bool) {
		writeError(w, http.StatusBadRequest, codeInvalid, "multipart upload: "+format+` (want the part "module", the module's bytes, and optionally "signature", its minisign signature)`, args...)
		return nil, nil, false
	}
	if params["boundary"] == "" {
		return bad("no boundary")
	}
	// The parts are read as they arrive, each bounded as it is read: the
	// module is the one copy of its bytes held. The parts' headers and
	// boundaries take a few hundred bytes.
	limit := s.cfg.MaxPluginBytes + plugins.MaxSignatureBytes + 64<<10
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, "the body is larger than %d bytes (max_plugin_bytes)", limit)
		return nil, nil, false
	}
	rc := http.NewResponseController(w)
	timeout := time.Duration(s.cfg.BodyTimeout)
	if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		writeError(w, http.StatusInternalServerError, codeInternal, "cannot bound the body's reading: %v", err)
		return nil, nil, false
	}
	// failed answers a failure of the body itself (too large, too slow).
	failed := func(err error) bool {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, "the body is larger than %d bytes (max_plugin_bytes)", tooBig.Limit)
		case errors.Is(err, os.ErrDeadlineExceeded):
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusRequestTimeout, codeTimeout, "the body did not arrive within %v (body_timeout)", timeout)
		default:
			return false
		}
		return true
	}
	mr := multipart.NewReader(http.MaxBytesReader(w, r.Body, limit), params["boundary"])
	var gotModule, gotSig bool
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if failed(err) {
				return nil, nil, false
			}
			return bad("%v", err)
		}
		name := part.FormName()
		max := int64(plugins.MaxSignatureBytes)
		switch {
		case name == "module" && !gotModule:
			max = s.cfg.MaxPluginBytes
		case name == "signature" && !gotSig:
		case name == "module" || name == "signature":
			return bad("part %q twice", name)
		default:
			return bad("an unknown part %q", name)
		}
		b, err := io.ReadAll(io.LimitReader(part, max+1))
		if err != nil {
			if failed(err) {
				return nil, nil, false
			}
			return bad("part %q: %v", name, err)
		}
		if int64(len(b)) > max {
			if name == "module" {
				writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, "the module is larger than %d bytes (max_plugin_bytes)", s.cfg.MaxPluginBytes)
				return nil, nil, false
			}
			return bad("the signature is over %d bytes", plugins.MaxSignatureBytes)
		}
		if name == "module" {
			wasm, gotModule = b, true
		} else {
			sig, gotSig = b, true
		}
	}
	_ = rc.SetReadDeadline(time.Time{})
	switch {
	case len(wasm) == 0:
		return bad("no module, or an empty one")
	case int64(len(wasm)) > s.cfg.MaxPluginBytes:
		writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, "the module is larger than %d bytes (max_plugin_bytes)", s.cfg.MaxPluginBytes)
		return nil, nil, false
	case len(sig) > plugins.MaxSignatureBytes:
		return bad("the signature is over %d bytes", plugins.MaxSignatureBytes)
	case gotSig && len(bytes.TrimSpace(sig)) == 0:
		return bad("an empty signature")
	}
	return wasm, sig, true
}

// writeSigned writes a module's file and its signature beside it, or
// removes a signature there when sig is nil. The module goes first: a
// directory's watcher that reads the new module beside the old signature
// waits for the signature (plugins.DirWatcher), whereas one that read an
// old module beside a new signature would load the old module again
// where no signature is required.
func writeSigned(path string, wasm, sig []byte) error {
	if err := writeFileAtomic(path, wasm); err != nil {
		return err
	}
	if sig == nil {
		if err := os.Remove(path + plugins.SignatureSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return writeFileAtomic(path+plugins.SignatureSuffix, sig)
}

// conflictOf says which of the names d offers another module of the
// tenant than name offers too; "" when none.
func (s *Server) conflictOf(tenant, name string, d plugins.Description) string {
	type offer struct{ kind, name string }
	var offers []offer
	for _, x := range d.Tools {
		offers = append(offers, offer{"tool", x.Name})
	}
	for _, x := range d.Validators {
		offers = append(offers, offer{"validator", x.Name})
	}
	for _, x := range d.Policies {
		offers = append(offers, offer{"policy", x.Name})
	}
	for _, m := range s.registry.Modules(tenant) {
		if m.Name() == name {
			continue
		}
		od := m.Description()
		has := map[offer]bool{}
		for _, x := range od.Tools {
			has[offer{"tool", x.Name}] = true
		}
		for _, x := range od.Validators {
			has[offer{"validator", x.Name}] = true
		}
		for _, x := range od.Policies {
			has[offer{"policy", x.Name}] = true
		}
		for _, o := range offers {
			if has[o] {
				return fmt.Sprintf("%s %s is offered by plugin %s already: remove it first, or upload this module under its name", o.kind, o.name, m.Name())
			}
		}
	}
	return ""
}

func (s *Server) deletePlugin(w http.ResponseWriter, r *http.Request, t *tenant) {
	name, path := s.pluginPath(w, r, t)
	if name == "" {
		return
	}
	t.pluginsMu.Lock()
	defer t.pluginsMu.Unlock()
	if _, ok := s.registry.Module(t.name, name); !ok {
		notFound(w, "plugin", name)
		return
	}
	if from := s.fromConfig(t.name, name); from != "" {
		writeError(w, http.StatusConflict, codeConflict, "plugin %s comes from the configuration (%s): remove it there", name, from)
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		writeError(w, http.StatusInternalServerError, codeInternal, "cannot remove the module: %v", err)
		return
	}
	os.Remove(path + plugins.SignatureSuffix)
	// Its held version's file goes with it (onPluginChange).
	s.audit.act(t.name, name, keyActor(r), func() { s.registry.Unload(t.name, name) })
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

// releasePlugin lets a quarantined plugin serve again.
func (s *Server) releasePlugin(w http.ResponseWriter, r *http.Request, t *tenant) {
	name, _ := s.pluginPath(w, r, t)
	if name == "" {
		return
	}
	var req struct{}
	if !s.decodeOptionalBody(w, r, &req) {
		return
	}
	if _, ok := s.registry.Module(t.name, name); !ok {
		notFound(w, "plugin", name)
		return
	}
	var err error
	s.audit.act(t.name, name, keyActor(r), func() { err = s.registry.Release(t.name, name) })
	if err != nil {
		writeError(w, http.StatusConflict, codeConflict, "plugin %s is not quarantined", name)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// auditAPI records in t's audit log what the request's key did that the
// registry reports no change of.
func (s *Server) auditAPI(r *http.Request, t *tenant, e auditEntry) {
	e.By = keyActor(r)
	if err := s.audit.record(r.Context(), t.name, e); err != nil {
		s.log.Error("cannot write the audit log", "tenant", t.name, "plugin", e.Plugin, "action", e.Action, "err", err)
	}
}

// moduleHash is a module's content hash, as plugins.Module.Hash says it.
func moduleHash(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// uploadSlot takes the tenant's one upload slot, from before an upload's
// body is read (a module is held in memory, and compiled, once), and
// returns what frees it; another upload under way answers 429.
// uploadSlot holds one of the process's places for a module upload
// (max_plugin_uploads), answering 429 when none is free.
func (s *Server) uploadSlot(w http.ResponseWriter) (release func(), ok bool) {
	select {
	case s.uploads <- struct{}{}:
		return func() { <-s.uploads }, true
	default:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, codeRateLimited, "the server reads %d module uploads at once, its limit (max_plugin_uploads): send this one after them", s.cfg.MaxPluginUploads)
		return nil, false
	}
}

func (t *tenant) uploadSlot(w http.ResponseWriter) (release func(), ok bool) {
	select {
	case t.uploads <- struct{}{}:
		return func() { <-t.uploads }, true
	default:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, codeRateLimited, "another upload of the tenant's modules is under way; send this one after it")
		return nil, false
	}
}

// placeModule writes a version the registry loaded into the module's place
// in the tenant's directory (with its signature), then tells the registry
// (plugins.Registry.FileWritten), so that the directory's watcher, which
// may have read the file while it still held the version before, does not
// load that one again.
func (s *Server) placeModule(tenant, name string, wasm, sig []byte) error {
	err := writeSigned(filepath.Join(s.cfg.PluginsDir, tenant, name+".wasm"), wasm, sig)
	s.registry.FileWritten(tenant, name)
	return err
}
