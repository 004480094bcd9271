package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"os"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/archive"
)

// exportSession answers a portable archive of a session of the tenant
// (storage/archive): its ledger and the blobs its events refer to.
func (s *Server) exportSession(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, ok := sessionID(w, r)
	if !ok || !s.exists(w, r, t, id) {
		return
	}
	var buf bytes.Buffer
	aw := archive.NewWriter(&buf, t.name)
	err := archive.ExportSession(r.Context(), t.storage, id, aw)
	if err == nil {
		err = aw.Close()
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot export session %s: %v", id, err)
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s.tar.gz"`, id))
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
}

// importSessions puts the sessions of a posted archive into the tenant's
// storage, with bounded memory: the body is spooled to a temporary file
// (never more than max_archive_bytes, whatever Content-Length says), then
// read three times an entry at a time (archive.Check, EachBlob,
// EachSession). The archive is checked whole first (400 when malformed, a
// duplicated event included; 413 past max_archive_bytes or an archive
// bound; nothing imported), then the tenant's bounds: its blobs against
// blob_quota_bytes and max_blob_bytes (413 blob_quota_exceeded), and the
// runs its sessions would start (open runs, queued messages) against the
// run limits of the API (concurrent_runs, max_runs, budgets: 429, 503 or
// 402). A session the tenant has already refuses the import (409, nothing
// imported) unless ?replace=true, and even then one in use (a run in
// progress, approvals pending). Each session is then replaced as every
// operation that removes data does (host.Session.Replace): one that came
// into use, or changed, since the check stops the import there (409,
// naming the sessions imported before it). The imported sessions' runs are
// then started (resumed) under the admissions reserved for them. Imports
// are bounded in number (max_imports in the process, the tenant's
// rate_limit.concurrent_imports).
func (s *Server) importSessions(w http.ResponseWriter, r *http.Request, t *tenant) {
	replace, ok := boolParam(w, r, "replace")
	if !ok {
		return
	}
	if n := t.imports.Add(1); n > int64(t.cfg.RateLimit.ConcurrentImports) {
		t.imports.Add(-1)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, codeRateLimited, "tenant %s has %d imports in progress, its limit (rate_limit.concurrent_imports)", t.name, t.cfg.RateLimit.ConcurrentImports)
		return
	}
	defer t.imports.Add(-1)
	if n := s.imports.Add(1); n > int64(s.cfg.MaxImports) {
		s.imports.Add(-1)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "the server has %d imports in progress, its limit (max_imports): retry shortly", s.cfg.MaxImports)
		return
	}
	defer s.imports.Add(-1)
	spool, ok := s.spoolBody(w, r, s.cfg.MaxArchiveBytes, "max_archive_bytes")
	if !ok {
		return
	}
	defer func() {
		spool.Close()
		os.Remove(spool.Name())
	}()
	again := func() io.Reader {
		spool.Seek(0, io.SeekStart)
		return spool
	}
	ropts := archive.ReadOptions{MaxBytes: s.cfg.MaxArchiveBytes, MaxBlobBytes: t.cfg.MaxBlobBytes}
	sum, err := archive.Check(again(), ropts)
	if limit, ok := errors.AsType[*archive.LimitError](err); ok && limit.Bound == "blob bytes" && t.cfg.MaxBlobBytes > 0 {
		writeError(w, http.StatusRequestEntityTooLarge, codeBlobQuota, "%v: the largest blob allowed is %d bytes (max_blob_bytes): nothing was imported", err, t.cfg.MaxBlobBytes)
		return
	}
	switch {
	case errors.Is(err, archive.ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, "%v (max_archive_bytes and the archive bounds): nothing was imported", err)
		return
	case errors.Is(err, archive.ErrMalformed):
		writeError(w, http.StatusBadRequest, codeInvalid, "%v: nothing was imported", err)
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot read the archive: %v: nothing was imported", err)
		return
	}
	if !s.importQuota(w, r, t, sum) {
		return
	}
	var existing []string
	for _, sess := range sum.Sessions {
		st, err := t.host.Session(sess.ID).Status(r.Context())
		if err != nil && !errors.Is(err, storage.ErrCorrupt) {
			readError(w, sess.ID, err)
			return
		}
		events, _ := t.storage.Load(r.Context(), sess.ID)
		if len(events) == 0 && err == nil {
			continue
		}
		existing = append(existing, sess.ID)
		switch st.State {
		case host.StateRunning, host.StateApprovalRequired:
			if replace {
				writeError(w, http.StatusConflict, codeConflict, "session %s is in use (%s): nothing was imported", sess.ID, st.State)
				return
			}
		}
	}
	if len(existing) > 0 && !replace {
		writeError(w, http.StatusConflict, codeConflict, "%s", (&archive.ExistsError{Sessions: existing}).Error())
		return
	}
	// The runs the sessions would start pass the API's admission, all of
	// them before anything is imported.
	var admitted []func()
	releaseAll := func() {
		for _, release := range admitted {
			release()
		}
		admitted = nil
	}
	defer releaseAll()
	active := map[string]bool{}
	for _, sess := range sum.Sessions {
		if !sess.Active {
			continue
		}
		release, no := s.admission(r, t, sess.ID)
		if no != nil {
			no.message = fmt.Sprintf("the archive's session %s has a run to resume (an open run or queued messages), and no run may start now: %s: nothing was imported", sess.ID, no.message)
			no.write(w)
			return
		}
		admitted = append(admitted, release)
		active[sess.ID] = true
	}
	rep := archive.ImportReport{Sessions: []string{}, Replaced: []string{}}
	// Blobs first, held until every session is in (so that no sweep
	// deletes one before an event refers to it), then the sessions.
	var digests []string
	for _, b := range sum.Manifest.Blobs {
		digests = append(digests, b.Digest)
	}
	unhold, err := host.HoldBlobs(r.Context(), t.storage, digests)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "%v: nothing was imported", err)
		return
	}
	defer unhold()
	if len(digests) > 0 {
		blobs, ok := t.storage.(storage.Blobs)
		if !ok {
			writeError(w, http.StatusConflict, codeConflict, "the archive holds %d blobs, and the storage keeps none: nothing was imported", len(digests))
			return
		}
		err := archive.EachBlob(again(), ropts, func(_ string, data []byte) error {
			_, err := blobs.PutBlob(r.Context(), data)
			if err == nil {
				rep.Blobs++
			}
			return err
		})
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, codeUnavailable, "put the archive's blobs: %v (no session was imported)", err)
			return
		}
	}
	err = archive.EachSession(again(), ropts, func(id string, events iter.Seq2[ledger.Event, error]) error {
		got, err := t.host.Session(id).Replace(r.Context(), events, host.ReplaceOptions{Existing: replace})
		if err != nil {
			return fmt.Errorf("session %s: %w", id, err)
		}
		rep.Sessions = append(rep.Sessions, id)
		rep.Events += got.Events
		if got.Replaced {
			rep.Replaced = append(rep.Replaced, id)
		}
		return nil
	})
	if err != nil {
		status, code := http.StatusServiceUnavailable, codeUnavailable
		switch {
		case errors.Is(err, host.ErrFeatureUnavailable):
			// A live host cannot read what the session holds yet.
			status, code = http.StatusConflict, codeFeature
		case errors.Is(err, host.ErrSessionInUse) || errors.Is(err, host.ErrSessionChanged) || errors.Is(err, host.ErrSessionExists):
			status, code = http.StatusConflict, codeConflict
		}
		writeError(w, status, code, "%v: the sessions imported before it: %v", err, rep.Sessions)
		return
	}
	// The imported sessions' runs start under their admissions.
	for _, id := range rep.Sessions {
		if !active[id] {
			continue
		}
		agent, err := t.runAgent(r.Context(), id)
		if err == nil {
			_, err = t.host.Session(id).StartResume(r.Context(), host.ResumeOptions{Agent: &agent})
		}
		if err != nil && !errors.Is(err, host.ErrNothingToResume) && !errors.Is(err, host.ErrLeadElsewhere) {
			s.log.Warn("an imported session's run did not start; a resume starts it", "tenant", t.name, "session", id, "err", err)
		}
	}
	releaseAll()
	s.log.Info("sessions imported", "tenant", t.name, "sessions", len(rep.Sessions), "events", rep.Events, "replace", replace)
	writeJSON(w, http.StatusOK, rep)
}

// importQuota checks the archive's blobs against the tenant's blob quota:
// the bytes of those it does not hold yet, added to those it holds.
func (s *Server) importQuota(w http.ResponseWriter, r *http.Request, t *tenant, sum *archive.Summary) bool {
	if t.cfg.BlobQuotaBytes <= 0 || len(sum.Manifest.Blobs) == 0 {
		return true
	}
	blobs, ok := t.storage.(storage.Blobs)
	if !ok {
		return true
	}
	infos, err := blobs.ListBlobs(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "list blobs for the quota: %v", err)
		return false
	}
	var used, add int64
	stored := map[string]bool{}
	for _, in := range infos {
		used += in.Size
		stored[in.Digest] = true
	}
	for _, b := range sum.Manifest.Blobs {
		if !stored[b.Digest] {
			add += b.Size
		}
	}
	if add > 0 && used+add > t.cfg.BlobQuotaBytes {
		q := &host.BlobQuotaError{Limit: "quota", Max: t.cfg.BlobQuotaBytes, Used: used, Size: add}
		writeError(w, http.StatusRequestEntityTooLarge, codeBlobQuota, "the archive's blobs: %s: nothing was imported", blobQuotaMessage(q))
		return false
	}
	return true
}

// spoolBody copies the request's body to a temporary file, bounded by limit
// and by body_timeout, and returns the file (the caller closes and removes
// it); it answers the request itself when it fails. Memory holds a buffer
// at a time, whatever the body declares.
func (s *Server) spoolBody(w http.ResponseWriter, r *http.Request, limit int64, limitKey string) (*os.File, bool) {
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, "the body is larger than %d bytes (%s)", limit, limitKey)
		return nil, false
	}
	rc := http.NewResponseController(w)
	timeout := time.Duration(s.cfg.BodyTimeout)
	if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		writeError(w, http.StatusInternalServerError, codeInternal, "cannot bound the body's reading: %v", err)
		return nil, false
	}
	f, err := os.CreateTemp("", "agentic-import-*.tar.gz")
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot spool the archive: %v", err)
		return nil, false
	}
	_, err = io.Copy(f, http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		_ = rc.SetReadDeadline(time.Time{})
		return f, true
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, "the body is larger than %d bytes (%s)", tooBig.Limit, limitKey)
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestTimeout, codeTimeout, "the body did not arrive within %v (body_timeout)", timeout)
	default:
		writeError(w, http.StatusBadRequest, codeInvalid, "cannot read the body: %v", err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil, false
}
