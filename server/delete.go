package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/agentichost/agentic/host"
)

// sessionDeletion is what DELETE /v1/sessions/{id} answers: what the host
// removed, and the server's own entries of the session.
type sessionDeletion struct {
	host.DeleteReport
	// A2ATasks is how many A2A tasks of the session were forgotten.
	A2ATasks int `json:"a2a_tasks"`
}

// deleteSession deletes a session of the tenant: its ledger, lease, inbox
// entries, retention override and A2A tasks (the idempotency keys of its messages live in its
// ledger, and go with it). A session in use answers 409 unless ?force=true;
// one that changed while it was deleted (a message another host accepted
// meanwhile) answers 409 too, nothing deleted.
func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, ok := sessionID(w, r)
	if !ok {
		return
	}
	force, ok := boolParam(w, r, "force")
	if !ok || !s.exists(w, r, t, id) {
		return
	}
	rep, err := t.host.Session(id).Delete(r.Context(), host.DeleteOptions{Force: force})
	if inUse, ok := errors.AsType[*host.InUseError](err); ok {
		writeError(w, http.StatusConflict, codeConflict, "%s", inUse.Error())
		return
	}
	if errors.Is(err, host.ErrSessionChanged) {
		writeError(w, http.StatusConflict, codeConflict, "%v (delete again)", err)
		return
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "%v", err)
		return
	}
	if err := s.forgetRetention(r.Context(), t, id); err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "session %s is deleted, but not its retention override: %v (delete it again)", id, err)
		return
	}
	n, err := s.forgetA2ATasks(r.Context(), t, id)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "session %s is deleted, but not its A2A tasks: %v (delete it again)", id, err)
		return
	}
	s.log.Info("session deleted", "tenant", t.name, "session", id, "events", rep.Events, "force", force)
	writeJSON(w, http.StatusOK, sessionDeletion{DeleteReport: rep, A2ATasks: n})
}

// forgetA2ATasks removes the tenant's A2A tasks of a session, and returns
// how many there were.
func (s *Server) forgetA2ATasks(ctx context.Context, t *tenant, sessionID string) (int, error) {
	ids, err := s.kv.Keys(ctx, a2aNamespace(t.name))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		b, ok, err := s.kv.Get(ctx, a2aNamespace(t.name), id)
		if err != nil {
			return n, err
		}
		var task a2aTask
		if !ok || json.Unmarshal(b, &task) != nil || task.SessionID != sessionID {
			continue
		}
		if err := s.kv.Delete(ctx, a2aNamespace(t.name), id); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
