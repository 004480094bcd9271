package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentichost/agentic/plugins"
)

// Versions and rollback: the registry keeps the last versions each plugin
// replaced (plugins.Registry.Versions); serve keeps their files too, in
// plugins_dir/TENANT/.versions/NAME.HEX.wasm (and a plain module's sidecar
// manifest as NAME.HEX.json), so that they outlive a restart (it remembers
// them at its start). On disk a version is named by its module's hash
// alone: of two versions that differ only by their sidecar, the newest is
// kept there. GET /v1/plugins/{name} lists
// them under "versions"; POST /v1/plugins/{name}/rollback {"hash": …}
// loads one again (the newest without a hash) in the place of the version
// serving — calls in flight finish on theirs — and its files take the
// module's place in the directory.

// versionsDir is the directory of a tenant's replaced versions.
func (s *Server) versionsDir(tenant string) string {
	return filepath.Join(s.cfg.PluginsDir, tenant, ".versions")
}

// versionPath is the module file of a replaced version; its sidecar is
// the same path with .json in place of .wasm.
func (s *Server) versionPath(tenant, name, hash string) string {
	return filepath.Join(s.versionsDir(tenant), name+"."+strings.TrimPrefix(hash, "sha256:")+".wasm")
}

// sidecarPath is the sidecar manifest's file beside a module's file.
func sidecarPath(wasmPath string) string {
	return strings.TrimSuffix(wasmPath, ".wasm") + ".json"
}

// writeVersion writes src's module to path and its sidecar and signature
// beside it, or removes a sidecar or signature there when src has none.
// The sidecar goes first, the signature last (see writeSigned): a
// directory watcher sees the files change within its debounce, and reads
// them together.
func writeVersion(path string, src plugins.Source) error {
	side := sidecarPath(path)
	if src.Sidecar == nil {
		if err := os.Remove(side); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	} else {
		b, err := json.Marshal(src.Sidecar)
		if err == nil {
			err = writeFileAtomic(side, b)
		}
		if err != nil {
			return err
		}
	}
	return writeSigned(path, src.Wasm, src.Signature)
}

// keepVersions writes the files of the module's history the directory
// lacks and removes those the registry no longer keeps.
func (s *Server) keepVersions(tenant, name string) {
	if s.cfg.PluginsDir == "" {
		return
	}
	keep := map[string]bool{}
	for _, v := range s.registry.Versions(tenant, name) {
		path := s.versionPath(tenant, name, v.Hash)
		if keep[path] {
			continue // an older version of the same bytes
		}
		keep[path] = true
		src, ok := s.registry.VersionSource(tenant, name, v.Hash)
		if !ok || s.versionOnDisk(path, src) {
			continue
		}
		err := os.MkdirAll(s.versionsDir(tenant), 0o755)
		if err == nil {
			err = writeVersion(path, src)
		}
		if err != nil {
			s.log.Error("cannot keep a replaced plugin version", "tenant", tenant, "plugin", name, "module", v.Hash, "err", err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(s.versionsDir(tenant), name+".*.wasm"))
	for _, f := range files {
		if !keep[f] {
			os.Remove(sidecarPath(f))
			os.Remove(f + plugins.SignatureSuffix)
			os.Remove(f)
		}
	}
}

// versionOnDisk reports whether path and its sidecar hold src already.
func (s *Server) versionOnDisk(path string, src plugins.Source) bool {
	if _, err := os.Stat(path); err != nil {
		return false
	}
	if sig, _ := os.ReadFile(path + plugins.SignatureSuffix); !bytes.Equal(sig, src.Signature) {
		return false
	}
	side, err := os.ReadFile(sidecarPath(path))
	if src.Sidecar == nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	want, _ := json.Marshal(src.Sidecar)
	return err == nil && bytes.Equal(side, want)
}

// rememberVersions gives the registry the tenant's versions kept on disk,
// newest first.
func (s *Server) rememberVersions(tenant string) {
	entries, err := os.ReadDir(s.versionsDir(tenant))
	if err != nil {
		return
	}
	type file struct {
		name, path string
		info       os.FileInfo
	}
	var files []file
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), ".wasm")
		dot := strings.LastIndexByte(base, '.')
		info, err := e.Info()
		if !ok || dot <= 0 || err != nil {
			continue
		}
		files = append(files, file{base[:dot], filepath.Join(s.versionsDir(tenant), e.Name()), info})
	}
	slices.SortFunc(files, func(a, b file) int { return b.info.ModTime().Compare(a.info.ModTime()) })
	for _, f := range files {
		src, err := plugins.ReadSource(f.path)
		if err != nil {
			s.log.Warn("a kept plugin version does not read", "tenant", tenant, "plugin", f.name, "file", f.path, "err", err)
			continue
		}
		s.registry.Remember(tenant, f.name, src, f.info.ModTime())
	}
}

// rollbackRequest is the body of POST /v1/plugins/{name}/rollback.
type rollbackRequest struct {
	// Hash is the version to load again; "": the newest kept.
	Hash string `json:"hash,omitempty"`
}

// rollbackPlugin loads a kept version of a plugin in the place of the
// version serving.
func (s *Server) rollbackPlugin(w http.ResponseWriter, r *http.Request, t *tenant) {
	name, path := s.pluginPath(w, r, t)
	if name == "" {
		return
	}
	var req rollbackRequest
	if !s.decodeOptionalBody(w, r, &req) {
		return
	}
	if req.Hash != "" && !strings.HasPrefix(req.Hash, "sha256:") {
		req.Hash = "sha256:" + req.Hash
	}
	t.pluginsMu.Lock()
	defer t.pluginsMu.Unlock()
	versions := s.registry.Versions(t.name, name)
	hash := req.Hash
	if hash == "" && len(versions) > 0 {
		hash = versions[0].Hash
	}
	src, ok := s.registry.VersionSource(t.name, name, hash)
	if !ok {
		what := "no earlier version"
		if req.Hash != "" {
			what = "no earlier version " + req.Hash
		}
		writeError(w, http.StatusNotFound, codeNotFound, "plugin %s has %s to roll back to", name, what)
		return
	}
	written := s.registry.FileWriting(t.name, name) // until its file is written
	defer written()
	prev, _ := s.registry.Module(t.name, name)
	s.auditAPI(r, t, auditEntry{Action: "rolled_back", Plugin: name, Hash: hash, Previous: hashOf(prev)})
	var m *plugins.Module
	var err error
	s.audit.act(t.name, name, keyActor(r), func() { m, err = s.registry.Rollback(context.WithoutCancel(r.Context()), t.name, name, hash) })
	if err != nil {
		// The version that served serves on.
		s.auditAPI(r, t, auditEntry{Action: "refused", Plugin: name, Hash: hash, Detail: err.Error()})
		writeError(w, http.StatusUnprocessableEntity, codeInvalid, "the version was refused: %v", err)
		return
	}
	// Its files take the module's place, so that a restart, and the other
	// hosts watching the directory, serve it too.
	err = writeVersion(path, src)
	s.registry.FileWritten(t.name, name) // a read of the file before is stale
	if err != nil {
		s.log.Error("cannot keep a plugin version rolled back to", "tenant", t.name, "plugin", name, "err", err)
		writeError(w, http.StatusInternalServerError, codeInternal, "the version serves, but its file could not be written: %v", err)
		return
	}
	writeJSON(w, http.StatusOK, s.pluginInfo(t.name, m))
}

// hashOf is m's hash, "" for none.
func hashOf(m *plugins.Module) string {
	if m == nil {
		return ""
	}
	return m.Hash()
}
