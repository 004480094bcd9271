package server

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentichost/agentic/host"
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
// storage. The archive is checked whole first (400 when malformed,
// nothing imported); a session the tenant has already refuses the import
// (409, nothing imported) unless ?replace=true, and even then one in use
// (a run in progress, approvals pending) refuses it.
func (s *Server) importSessions(w http.ResponseWriter, r *http.Request, t *tenant) {
	replace, ok := boolParam(w, r, "replace")
	if !ok {
		return
	}
	body, ok := s.readBody(w, r, s.cfg.MaxArchiveBytes, "max_archive_bytes")
	if !ok {
		return
	}
	a, err := archive.Read(bytes.NewReader(body), archive.ReadOptions{MaxBytes: s.cfg.MaxArchiveBytes})
	switch {
	case errors.Is(err, archive.ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, "%v (max_archive_bytes)", err)
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, codeInvalid, "%v: nothing was imported", err)
		return
	}
	var existing []string
	if replace {
		// The sessions to replace must not be in use: check them all
		// before deleting any.
		for _, sess := range a.Sessions {
			st, err := t.host.Session(sess.ID).Status(r.Context())
			if err != nil {
				writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot read session %s: %v", sess.ID, err)
				return
			}
			switch st.State {
			case host.StateRunning, host.StateApprovalRequired:
				writeError(w, http.StatusConflict, codeConflict, "session %s is in use (%s): nothing was imported", sess.ID, st.State)
				return
			}
			if events, _ := t.storage.Load(r.Context(), sess.ID); len(events) > 0 {
				existing = append(existing, sess.ID)
			}
		}
		for _, id := range existing {
			if _, err := t.host.Session(id).Delete(r.Context(), host.DeleteOptions{}); err != nil {
				status := http.StatusServiceUnavailable
				if errors.Is(err, host.ErrSessionInUse) {
					status = http.StatusConflict
				}
				writeError(w, status, codeFor(status), "replacing session %s: %v", id, err)
				return
			}
		}
	}
	rep, err := archive.Import(r.Context(), t.storage, a, archive.ImportOptions{Replace: replace})
	if exists, ok := errors.AsType[*archive.ExistsError](err); ok {
		writeError(w, http.StatusConflict, codeConflict, "%s", exists.Error())
		return
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "%v", err)
		return
	}
	rep.Replaced = append(append([]string{}, existing...), rep.Replaced...)
	s.log.Info("sessions imported", "tenant", t.name, "sessions", len(rep.Sessions), "events", rep.Events, "replace", replace)
	writeJSON(w, http.StatusOK, rep)
}

// codeFor is the error code of a status this file answers.
func codeFor(status int) string {
	if status == http.StatusConflict {
		return codeConflict
	}
	return codeUnavailable
}
