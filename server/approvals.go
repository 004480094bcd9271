package server

import (
	"errors"
	"net/http"

	"github.com/agentichost/agentic/host"
)

// Approvals: the tenant's inbox, and decisions, which continue the run on
// this host (it takes the session's lease).

func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request, t *tenant) {
	pending, err := t.host.PendingApprovals(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "%v", err)
		return
	}
	if pending == nil {
		pending = []host.PendingApproval{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": pending})
}

// decisionRequest is the body of POST /v1/approvals/{id}.
type decisionRequest struct {
	Approve bool   `json:"approve"`
	Reason  string `json:"reason,omitempty"`
	By      string `json:"by,omitempty"`
	// Token, when set, decides with the request's token (see
	// host.Session.DecideWithToken) rather than as the tenant.
	Token string `json:"token,omitempty"`
}

func (s *Server) decideApproval(w http.ResponseWriter, r *http.Request, t *tenant) {
	id := r.PathValue("id")
	var req decisionRequest
	if !s.decodeBody(w, r, &req) {
		return
	}
	pending, err := t.host.PendingApprovals(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "%v", err)
		return
	}
	var found *host.PendingApproval
	for i := range pending {
		if pending[i].ApprovalID == id {
			found = &pending[i]
		}
	}
	if found == nil {
		notFound(w, "pending approval", id)
		return
	}
	sess := t.host.Session(found.SessionID)
	d := host.ApprovalDecision{Approve: req.Approve, Reason: req.Reason, By: req.By}
	var run *host.Run
	if req.Token != "" {
		run, err = sess.DecideWithToken(r.Context(), req.Token, d)
	} else {
		run, err = sess.Decide(r.Context(), id, d)
	}
	switch {
	case errors.Is(err, host.ErrApprovalNotFound):
		notFound(w, "pending approval", id)
	case errors.Is(err, host.ErrApprovalDecided):
		writeError(w, http.StatusConflict, codeConflict, "%v", err)
	case errors.Is(err, host.ErrApprovalExpired):
		writeError(w, http.StatusConflict, codeConflict, "%v", err)
	case errors.Is(err, host.ErrApprovalTokenInvalid), errors.Is(err, host.ErrApprovalTokenMismatch):
		writeError(w, http.StatusBadRequest, codeInvalid, "%v", err)
	case err != nil:
		s.startError(w, err)
	default:
		writeJSON(w, http.StatusOK, map[string]string{"session_id": found.SessionID, "approval_id": id, "run_id": run.ID()})
	}
}
