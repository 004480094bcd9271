package server

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

// The web console: a single page, built into the binary, over the same
// API as every other client. It needs no authentication to load (it holds
// no data); it signs in with an API key, which it keeps in the tab's
// session storage and sends in the Authorization header only. Its
// Content-Security-Policy lets it load nothing but its own files and talk
// to nothing but this server, so that text a model or a tool wrote cannot
// run as script even if the page's own escaping failed.

//go:embed console
var consoleFiles embed.FS

// consoleCSP is the console's Content-Security-Policy.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// consoleAsset is one embedded file, with its type and entity tag.
type consoleAsset struct {
	body []byte
	typ  string
	etag string
}

// loadConsole reads the embedded console.
func loadConsole() (map[string]consoleAsset, error) {
	assets := map[string]consoleAsset{}
	err := fs.WalkDir(consoleFiles, "console", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := consoleFiles.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		typ := mime.TypeByExtension(path.Ext(p))
		if typ == "" {
			typ = "application/octet-stream"
		}
		assets[strings.TrimPrefix(p, "console/")] = consoleAsset{body: b, typ: typ, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	return assets, err
}

// serveConsole serves /console/ and its files.
func (s *Server) serveConsole(assets map[string]consoleAsset) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/console/")
		if name == "" {
			name = "index.html"
		}
		a, ok := assets[name]
		if !ok {
			writeError(w, http.StatusNotFound, codeNotFound, "no console file %q", name)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", consoleCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		h.Set("Content-Type", a.typ)
		if match := r.Header.Get("If-None-Match"); match != "" && match == a.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Write(a.body)
	}
}

// consoleConfig is what the console reads of the server's configuration
// (GET /console/config.json, which needs no key: it holds nothing of a
// tenant's).
type consoleConfig struct {
	// Tracing says that runs make OpenTelemetry spans: the console shows
	// each run's trace id (host.TraceIDOf).
	Tracing bool `json:"tracing"`
	// TraceURL is the configuration's trace_url: a link to a trace, with
	// {trace_id} where its id goes; "" for none.
	TraceURL string `json:"trace_url,omitempty"`
}

// serveConsoleConfig answers GET /console/config.json.
func (s *Server) serveConsoleConfig(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	writeJSON(w, http.StatusOK, consoleConfig{Tracing: s.tracing, TraceURL: s.cfg.TraceURL})
}
