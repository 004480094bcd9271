package server

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
)

// Tasks: POST /v1/tasks starts a task — a run that ends with a validated
// deliverable, a cancellation or a failure, never an error — durably, in a
// session of its own; GET /v1/tasks/{id} reads its outcome from the
// ledger (on any host).

// taskRequest is the body of POST /v1/tasks.
type taskRequest struct {
	// Prompt asks for the deliverable. Required.
	Prompt string `json:"prompt"`
	// Schema is the deliverable's JSON Schema. Required unless Validator.
	Schema json.RawMessage `json:"schema,omitempty"`
	// Name and Description tell the model what the deliverable is.
	Name        string `json:"name,omitempty"`
	Description string `json:"description,omitempty"`
	// Validator names a validator of the tenant's plugins. Default: none.
	Validator string `json:"validator,omitempty"`
	// Agent names the tenant's agent. Default: "default".
	Agent string `json:"agent,omitempty"`
	// MaxPokes bounds the reminders to submit. Default: 0, which means 3.
	MaxPokes int `json:"max_pokes,omitempty"`
}

func (s *Server) postTask(w http.ResponseWriter, r *http.Request, t *tenant) {
	var req taskRequest
	if !s.decodeBody(w, r, &req) {
		return
	}
	if strings.TrimSpace(req.Prompt) == "" {
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"prompt\" is required")
		return
	}
	if len(req.Schema) == 0 && req.Validator == "" {
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"schema\" (or \"validator\") is required")
		return
	}
	if len(req.Schema) > 0 {
		if _, err := host.SchemaValidator(req.Schema); err != nil {
			writeError(w, http.StatusBadRequest, codeInvalid, "field \"schema\": %v", err)
			return
		}
	}
	if req.MaxPokes < 0 {
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"max_pokes\": want 0 (the default, 3) or more")
		return
	}
	agent, ok := t.agentFor(w, req.Agent)
	if !ok {
		return
	}
	spec := host.TaskSpec{Agent: agent, Prompt: req.Prompt, SessionID: ledger.NewID("task"), MaxPokes: req.MaxPokes,
		Deliverable: host.Deliverable{Name: req.Name, Description: req.Description, Schema: req.Schema}}
	if req.Validator != "" {
		v, ok := s.registry.Validator(t.name, req.Validator)
		if !ok {
			writeError(w, http.StatusBadRequest, codeInvalid, "field \"validator\": tenant %s has no validator %q", t.name, req.Validator)
			return
		}
		spec.Validator, spec.ValidatorName = v, req.Validator
	}
	release, ok := s.admitRun(w, r, t, spec.SessionID)
	if !ok {
		return
	}
	started := make(chan string, 1)
	spec.OnProgress = func(p host.Progress) {
		release() // the run is in flight: it counts as such
		select {
		case started <- p.RunID:
		default:
		}
	}
	s.tasks.Add(1)
	done := make(chan host.Outcome, 1)
	go func() {
		defer s.tasks.Done()
		defer release()
		done <- t.host.Task(context.Background(), spec)
	}()
	// Answer once the task's message is durable: its run reports
	// progress, or the task ended first (refused).
	select {
	case runID := <-started:
		writeJSON(w, http.StatusAccepted, map[string]string{"task_id": spec.SessionID, "run_id": runID})
	case out := <-done:
		if out.RunID == "" {
			writeError(w, http.StatusBadRequest, codeInvalid, "the task was refused: %s", out.Reason)
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"task_id": spec.SessionID, "run_id": out.RunID})
	case <-r.Context().Done():
	}
}

// getTask answers a task's outcome; while its run has not ended, its
// status is "running", "approval_required" (its run waits for a person) or
// "interrupted" (its run waits to be resumed). A session that is not a
// task is not found.
func (s *Server) getTask(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, ok := sessionID(w, r)
	if !ok {
		return
	}
	sess := t.host.Session(id)
	events, err := sess.Events(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot read task %s: %v", id, err)
		return
	}
	if !slices.ContainsFunc(events, func(e ledger.Event) bool { return e.RunStart != nil && e.RunStart.Task != nil }) {
		notFound(w, "task", id)
		return
	}
	out, done := host.OutcomeOf(events, "")
	if !done {
		st, err := sess.Status(r.Context())
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot read task %s: %v", id, err)
			return
		}
		status := "running"
		switch st.State {
		case host.StateApprovalRequired, host.StateInterrupted:
			status = string(st.State)
		}
		writeJSON(w, http.StatusOK, map[string]any{"task_id": id, "status": status, "run_id": out.RunID, "session": st})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"task_id": id, "status": out.Status, "value": out.Value, "reason": out.Reason,
		"run_id": out.RunID, "usage": out.Usage, "cost": out.Cost})
}
