package server

import (
	"mime"
	"net/http"
	"strconv"

	"github.com/agentichost/agentic/storage"
)

// getBlob answers GET /v1/blobs/{digest}: the bytes of one of the tenant's
// blobs (an attachment or a tool output kept by reference), for a console
// or a UI that shows them. The content type is the media type of the part
// that refers to the blob in the session ?session= names (text/plain for
// a tool output), else application/octet-stream. Blobs never change (a
// digest names its bytes): the answer may be cached for good, and an
// If-None-Match of its ETag is answered 304. So that no attachment runs as
// a page of the server's origin, it is sent with nosniff and a sandboxing
// Content-Security-Policy.
func (s *Server) getBlob(w http.ResponseWriter, r *http.Request, t *tenant) {
	digest := r.PathValue("digest")
	if err := storage.CheckBlobDigest(digest); err != nil {
		writeError(w, http.StatusBadRequest, codeInvalid, "blob digest %.80q: want sha256: and 64 lower-case hex digits", digest)
		return
	}
	blobs, ok := t.storage.(storage.Blobs)
	if !ok {
		notFound(w, "blob", digest)
		return
	}
	contentType, name := "application/octet-stream", ""
	if id := r.URL.Query().Get("session"); id != "" {
		if !storage.ValidSessionID(id) {
			writeError(w, http.StatusBadRequest, codeInvalid, "query parameter session=%q: want a session id (1 to 128 of [A-Za-z0-9._:-], not starting with '.')", id)
			return
		}
		events, err := t.host.Session(id).Events(r.Context())
		if err != nil {
			readError(w, id, err)
			return
		}
	find:
		for _, e := range events {
			if in := e.Input; in != nil {
				for _, p := range in.Parts {
					if p.Blob == digest && p.MIME != "" {
						if _, _, err := mime.ParseMediaType(p.MIME); err == nil {
							contentType, name = p.MIME, p.Name
						}
						break find
					}
				}
			}
			if res := e.ToolResult; res != nil && res.OutputBlob == digest {
				contentType = "text/plain; charset=utf-8"
				break find
			}
		}
	}
	etag := `"` + digest + `"`
	h := w.Header()
	h.Set("ETag", etag)
	h.Set("Cache-Control", "private, max-age=31536000, immutable")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	data, found, err := blobs.GetBlob(r.Context(), digest)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot read blob %s: %v", digest, err)
		return
	}
	if !found {
		h.Del("ETag")
		h.Del("Cache-Control")
		notFound(w, "blob", digest)
		return
	}
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(data)))
	if name != "" {
		h.Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": name}))
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}
