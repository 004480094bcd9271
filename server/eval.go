package server

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/eval"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// The bounds of POST /v1/eval.
const (
	// MaxEvalSessions is the most sessions one evaluation replays.
	MaxEvalSessions = 20
	// DefaultEvalTimeout bounds an evaluation whose request names no
	// timeout.
	DefaultEvalTimeout = 2 * time.Minute
	// MaxEvalTimeout is the longest timeout a request may name.
	MaxEvalTimeout = 10 * time.Minute
)

// evalRequest is the body of POST /v1/eval.
type evalRequest struct {
	// Sessions are the tenant's sessions to replay, 1 to MaxEvalSessions.
	Sessions []string `json:"sessions"`
	// Agent names the tenant's agent that is the candidate (its system
	// prompt, bounds and tools' specs). Default: "default".
	Agent string `json:"agent,omitempty"`
	// Model is the candidate model, one of the tenant's allow-list.
	// Default: the agent's.
	Model string `json:"model,omitempty"`
	// TimeoutSeconds bounds the evaluation. Default: 120; at most 600.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
}

// postEval replays some of the tenant's sessions against a candidate model
// or agent (package host/eval), synchronously: every tool call is answered
// from the recorded results, nothing is written to the tenant's sessions,
// and the report comes back when every session was replayed.
func (s *Server) postEval(w http.ResponseWriter, r *http.Request, t *tenant) {
	var req evalRequest
	if !s.decodeBody(w, r, &req) {
		return
	}
	switch n := len(req.Sessions); {
	case n == 0:
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"sessions\": name 1 to %d sessions", MaxEvalSessions)
		return
	case n > MaxEvalSessions:
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"sessions\": %d sessions, at most %d in one evaluation", n, MaxEvalSessions)
		return
	}
	for _, id := range req.Sessions {
		if !storage.ValidSessionID(id) {
			writeError(w, http.StatusBadRequest, codeInvalid, "field \"sessions\": invalid session id %q", id)
			return
		}
	}
	timeout := DefaultEvalTimeout
	if req.TimeoutSeconds < 0 || time.Duration(req.TimeoutSeconds)*time.Second > MaxEvalTimeout {
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"timeout_seconds\": %d, want 1 to %d", req.TimeoutSeconds, int(MaxEvalTimeout/time.Second))
		return
	} else if req.TimeoutSeconds > 0 {
		timeout = time.Duration(req.TimeoutSeconds) * time.Second
	}
	a, ok := t.agentFor(w, req.Agent)
	if !ok {
		return
	}
	agent := *a
	if req.Model != "" {
		if len(t.cfg.Models) > 0 && !slices.Contains(t.cfg.Models, req.Model) {
			writeError(w, http.StatusBadRequest, codeInvalid, "field \"model\": %q is not among tenant %s's models %v", req.Model, t.name, t.cfg.Models)
			return
		}
		// The model named is the one asked: no fallback to another.
		onlyModel(&agent, req.Model)
	}
	// The evaluation holds one of the tenant's run places while it works,
	// and is refused past its budget, as a run is — and past its own
	// budget when it has one. Its model calls spend from that budget (its
	// own, else the tenant's), which stops them as it stops a run's.
	if t.evalBudget != nil && t.evalBudget != t.budget {
		over, err := t.evalBudget.exceeded(r.Context())
		if err != nil {
			s.log.Warn("cannot read the evaluation budget's spend; admitting", "tenant", t.name, "err", err)
		}
		if over != nil {
			writeError(w, http.StatusPaymentRequired, codeBudget, "%s", over.Error())
			return
		}
	}
	release, ok := s.admitRun(w, r, t, ledger.NewID("eval"))
	if !ok {
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	opts := eval.Options{Source: t.storage, Model: t.model, Agent: agent, Sessions: req.Sessions}
	if t.evalBudget != nil {
		opts.Hooks = []host.Hook{t.evalBudget.evalHook()}
	}
	rep, err := eval.Run(ctx, opts)
	switch {
	case errors.Is(err, eval.ErrInvalidOptions):
		writeError(w, http.StatusBadRequest, codeInvalid, "%v", err)
		return
	case r.Context().Err() != nil:
		return // the client left
	case err != nil:
		writeError(w, http.StatusGatewayTimeout, codeTimeout, "the evaluation did not finish within %s (%d of %d sessions replayed): name fewer sessions, or a longer timeout_seconds",
			timeout, len(rep.Sessions), len(req.Sessions))
		return
	}
	writeJSON(w, http.StatusOK, rep)
}
