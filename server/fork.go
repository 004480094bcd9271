package server

import (
	"errors"
	"net/http"
	"slices"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// forkRequest is the body of POST /v1/sessions/{id}/fork.
type forkRequest struct {
	// At is the fork point: a user message's id or a response's id (as the
	// transcript shows them), or an input or step event's id. Required.
	At string `json:"at"`
	// SessionID names the new session. Default: a new id, "fork_…".
	SessionID string `json:"session_id,omitempty"`
	// Text replaces the user message's text, at a user message. Default:
	// the message as it was.
	Text string `json:"text,omitempty"`
	// Agent names the tenant's agent that runs the fork. Default: the
	// agent of the source's last run.
	Agent string `json:"agent,omitempty"`
	// Model runs the fork with another model of the tenant's allow-list.
	// Default: the agent's.
	Model string `json:"model,omitempty"`
}

// forkResponse answers an accepted fork.
type forkResponse struct {
	messageResponse
	ForkedFrom forkedFrom `json:"forked_from"`
}

// forkedFrom names a fork's source and fork point.
type forkedFrom struct {
	SessionID string `json:"session_id"`
	At        string `json:"at"`
}

// forkSession makes a new session of the tenant from session id's ledger up
// to a point, and runs it (host.Host.Fork): answered as a message is (202
// with the new session, message and run ids; ?wait=true waits for the
// outcome).
func (s *Server) forkSession(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, ok := sessionID(w, r)
	if !ok {
		return
	}
	var req forkRequest
	if !s.decodeBody(w, r, &req) {
		return
	}
	if req.At == "" {
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"at\": the fork point is required (a message or response id of the transcript)")
		return
	}
	if req.SessionID == "" {
		req.SessionID = ledger.NewID("fork")
	} else if !storage.ValidSessionID(req.SessionID) || req.SessionID == id {
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"session_id\": %q is not a valid id for a new session", req.SessionID)
		return
	}
	wait, ok := boolParam(w, r, "wait")
	if !ok || !s.exists(w, r, t, id) {
		return
	}
	var agent host.Agent
	if req.Agent != "" {
		a, ok := t.agentFor(w, req.Agent)
		if !ok {
			return
		}
		agent = *a
	} else {
		a, err := t.runAgent(r.Context(), id)
		if err != nil {
			readError(w, id, err)
			return
		}
		agent = a
	}
	if req.Model != "" {
		if len(t.cfg.Models) > 0 && !slices.Contains(t.cfg.Models, req.Model) {
			writeError(w, http.StatusBadRequest, codeInvalid, "field \"model\": %q is not among tenant %s's models %v", req.Model, t.name, t.cfg.Models)
			return
		}
		// The model named is the one asked: no fallback to another.
		onlyModel(&agent, req.Model)
	}
	release, ok := s.admitRun(w, r, t, req.SessionID)
	if !ok {
		return
	}
	run, err := t.host.Fork(r.Context(), host.ForkOptions{Source: id, At: req.At, SessionID: req.SessionID, Text: req.Text, Agent: &agent})
	release()
	switch {
	case errors.Is(err, host.ErrSessionNotFound):
		notFound(w, "session", id)
		return
	case errors.Is(err, ledger.ErrForkPointNotFound):
		writeError(w, http.StatusNotFound, codeNotFound, "%v", err)
		return
	case errors.Is(err, ledger.ErrForkPointUnfinished), errors.Is(err, host.ErrSessionExists), errors.Is(err, host.ErrSessionChanged):
		writeError(w, http.StatusConflict, codeConflict, "%v", err)
		return
	case err != nil:
		s.startError(w, err)
		return
	}
	if !wait {
		writeJSON(w, http.StatusAccepted, forkResponse{
			messageResponse: messageResponse{SessionID: run.SessionID(), MessageID: run.MessageID(), RunID: run.ID(), TraceID: s.traceOf(run.ID())},
			ForkedFrom:      forkedFrom{SessionID: id, At: req.At}})
		return
	}
	res, err := run.Wait(r.Context())
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		s.startError(w, err)
		return
	}
	out := resultOf(run.SessionID(), res)
	out.TraceID = s.traceOf(res.RunID)
	writeJSON(w, http.StatusOK, out)
}
