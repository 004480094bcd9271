package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
)

// Approvals: the tenant's inbox, and decisions, which continue the run on
// this host (it takes the session's lease).
//
// A request's session is found in the inbox while it is pending, and
// afterwards in the host's index of every request's session
// (host.ApprovalSession, written with the inbox entry, before the ledger
// records the request), so that a second decision on a request answers
// 409, as a conflict, rather than 404.

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
	// Approve is the decision: true lets the call run, false denies it.
	// Required, unless Response answers the call: a body that forgets it
	// decides nothing.
	Approve *bool  `json:"approve"`
	Reason  string `json:"reason,omitempty"`
	By      string `json:"by,omitempty"`
	// Input, with approve true, lets the call run with this input (a JSON
	// object the tool's schema accepts) instead of the model's: an edit.
	Input json.RawMessage `json:"input,omitempty"`
	// Response answers the call with this text in the tool's place: the
	// tool does not run.
	Response string `json:"response,omitempty"`
	// Token, when set, decides with the request's token (see
	// host.Session.DecideWithToken) rather than as the tenant: the
	// decision is refused unless the token is that of this very request,
	// as it was asked.
	Token string `json:"token,omitempty"`
}

func (s *Server) decideApproval(w http.ResponseWriter, r *http.Request, t *tenant) {
	id := r.PathValue("id")
	var req decisionRequest
	if !s.decodeBody(w, r, &req) {
		return
	}
	switch {
	case req.Response != "" && req.Approve != nil:
		writeError(w, http.StatusBadRequest, codeInvalid, "fields \"response\" and \"approve\": a response answers the call in the tool's place; give one of them")
		return
	case req.Response == "" && req.Approve == nil:
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"approve\" is required: true approves the call (with \"input\": edited), false denies it; or \"response\" answers it in the tool's place")
		return
	case len(req.Input) > 0 && (req.Approve == nil || !*req.Approve):
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"input\": an edited input comes with \"approve\": true")
		return
	}
	approve := req.Approve != nil && *req.Approve
	sessionID, err := s.approvalSession(r.Context(), t, id)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot find approval request %s: %v", id, err)
		return
	}
	if sessionID == "" {
		notFound(w, "approval request", id)
		return
	}
	sess := t.host.Session(sessionID)
	events, err := sess.Events(r.Context())
	if err != nil {
		readError(w, sessionID, err)
		return
	}
	var found *ledger.Approval
	for _, a := range ledger.Approvals(events, "") {
		if a.Request.ApprovalID == id {
			found = &a
			break
		}
	}
	switch {
	case found == nil:
		notFound(w, "approval request", id)
		return
	case found.State != ledger.ApprovalPending || found.Answered:
		writeError(w, http.StatusConflict, codeConflict, "approval request %s was decided already: it is %s", id, found.State)
		return
	}
	d := host.ApprovalDecision{Approve: approve, Reason: req.Reason, By: req.By, Input: req.Input, Response: req.Response}
	var run *host.Run
	if req.Token != "" {
		// DecideWithToken decides the request its token names: check
		// first that it names this one.
		// (err is the function's: the decision below must be answered
		// through it.)
		var st host.Status
		if st, err = sess.Status(r.Context()); err != nil {
			readError(w, sessionID, err)
			return
		}
		want := ""
		for _, p := range st.Approvals {
			if p.ApprovalID == id {
				want = p.Token
			}
		}
		if want == "" {
			writeError(w, http.StatusConflict, codeConflict, "approval request %s does not wait for a decision now", id)
			return
		}
		if subtle.ConstantTimeCompare([]byte(want), []byte(req.Token)) != 1 {
			writeError(w, http.StatusBadRequest, codeInvalid, "field \"token\": it is not the token of approval request %s as it was asked", id)
			return
		}
		run, err = sess.DecideWithToken(r.Context(), req.Token, d)
	} else {
		run, err = sess.Decide(r.Context(), id, d)
	}
	switch {
	case errors.Is(err, host.ErrApprovalNotFound):
		notFound(w, "approval request", id)
	case errors.Is(err, host.ErrApprovalDecided), errors.Is(err, host.ErrApprovalExpired):
		writeError(w, http.StatusConflict, codeConflict, "%v", err)
	case errors.Is(err, host.ErrNothingToResume):
		// (A decision waits for a run that asked and has not parked yet;
		// a decision made at the same time as this one answers
		// ErrApprovalDecided. This is a ledger with no run to continue.)
		writeError(w, http.StatusConflict, codeConflict, "approval request %s: no run of session %s waits for it: %v", id, sessionID, err)
	case errors.Is(err, host.ErrLeadElsewhere):
		// Another host held the session for longer than the decision
		// waited (it continues the run, after another decision).
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "another host continues session %s now; decide again if the request is still pending", sessionID)
	case errors.Is(err, host.ErrInvalidDecision):
		writeError(w, http.StatusBadRequest, codeInvalid, "%v", err)
	case errors.Is(err, host.ErrApprovalTokenInvalid), errors.Is(err, host.ErrApprovalTokenMismatch):
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"token\": %v", err)
	case err != nil:
		s.startError(w, err)
	default:
		writeJSON(w, http.StatusOK, map[string]string{"session_id": sessionID, "approval_id": id, "run_id": run.ID()})
	}
}

// approvalSession returns the session of the tenant's approval request
// id: from the inbox while it is pending, else from the host's index of
// every request's session; "" when neither knows it.
func (s *Server) approvalSession(ctx context.Context, t *tenant, id string) (string, error) {
	pending, err := t.host.PendingApprovals(ctx)
	if err != nil {
		return "", err
	}
	for _, p := range pending {
		if p.ApprovalID == id {
			return p.SessionID, nil
		}
	}
	return t.host.ApprovalSession(ctx, id)
}
