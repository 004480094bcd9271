package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	a2av "github.com/a2aproject/a2a-go/a2a"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/protocol/a2a"
	"github.com/agentichost/agentic/storage"
)

// The Agent2Agent routes: each of the tenant's agents is an A2A agent,
// reached with the tenant's API key (see protocol/a2a for the mapping).
//
// GET /a2a/{agent}/.well-known/agent-card.json is the agent's card: its
// JSON-RPC endpoint, streaming, and the bearer scheme of the key. The card
// needs the key too: a tenant's agents are its own.
//
// POST /a2a/{agent} is the JSON-RPC endpoint: message/send, message/stream
// (SSE), tasks/get, tasks/cancel, tasks/resubscribe (SSE). A task is a run
// and its context a session; the server keeps an index, task → session,
// in the tenant's key-value store (namespace agentic:a2a:TENANT), written
// before a task's id is first answered, so that every host sharing the
// storage finds the task. The console lists the index (GET /v1/a2a/tasks).
//
// Errors of the protocol (a bad request or params, a task not found or
// not cancelable) are JSON-RPC errors with HTTP 200; a refusal of the
// service (413, 408, 429, 402, 503; 401 from the key check, in the API's
// shape) keeps its HTTP status, with a JSON-RPC error body whose
// data.code is the API's code. A stream that cannot go on (the client
// fell behind, the key was revoked, the server shuts down, the stream
// reached stream_max_age) ends with a JSON-RPC error event; the run goes
// on, and tasks/resubscribe picks it up.

// a2aNamespace is the tenant's index of A2A tasks: run id → a2aTask.
func a2aNamespace(tenant string) string { return "agentic:a2a:" + tenant }

// a2aTask is an entry of the index.
type a2aTask struct {
	SessionID string    `json:"session_id"`
	Agent     string    `json:"agent"`
	MessageID string    `json:"message_id,omitempty"`
	At        time.Time `json:"at"`
}

// a2aSessionOf is the session of a message that names no context: a
// digest of its messageId, so that the same message sent again (a retry)
// lands in the same session, where its id deduplicates it.
func a2aSessionOf(messageID string) string {
	sum := sha256.Sum256([]byte(messageID))
	return "a2a_" + hex.EncodeToString(sum[:13])
}

// writeRPC answers a JSON-RPC response with the HTTP status.
func writeRPC(w http.ResponseWriter, status int, res a2a.Response) {
	writeJSON(w, status, res)
}

// rpcRefusal answers a refusal of the service: its HTTP status, and a
// JSON-RPC error whose data names the API's code.
func rpcRefusal(w http.ResponseWriter, id json.RawMessage, status int, code, message string) {
	rpcCode := a2a.CodeServerError
	switch code {
	case codeInvalid, codeTooLarge, codeTimeout:
		rpcCode = a2a.CodeInvalidRequest
	case codeInternal:
		rpcCode = a2a.CodeInternalError
	}
	writeRPC(w, status, a2a.Failure(id, &a2a.Error{Code: rpcCode, Message: message, Data: map[string]any{"code": code}}))
}

// a2aAgent returns the route's agent, or false when the tenant has none
// of that name.
func (t *tenant) a2aAgent(r *http.Request) (string, *host.Agent, bool) {
	name := r.PathValue("agent")
	a, ok := t.agents[name]
	if !ok {
		return name, nil, false
	}
	return name, &a, true
}

// a2aBaseURL is the URL of the server as the request reached it.
func a2aBaseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func (s *Server) a2aCard(w http.ResponseWriter, r *http.Request, t *tenant) {
	name, _, ok := t.a2aAgent(r)
	if !ok {
		notFound(w, "agent", name)
		return
	}
	writeJSON(w, http.StatusOK, a2a.Card(a2a.CardOptions{Name: name, Description: t.cfg.Agents[name].Description,
		URL: a2aBaseURL(r) + "/a2a/" + name}))
}

func (s *Server) a2aRPC(w http.ResponseWriter, r *http.Request, t *tenant) {
	body, ok := s.readBodyOr(w, r, s.cfg.MaxRequestBytes, "max_request_bytes", func(status int, code, message string) {
		rpcRefusal(w, nil, status, code, message)
	})
	if !ok {
		return
	}
	req, perr := a2a.ParseRequest(body)
	if perr != nil {
		writeRPC(w, http.StatusOK, a2a.Failure(req.ID, perr))
		return
	}
	name, agent, ok := t.a2aAgent(r)
	if !ok {
		writeRPC(w, http.StatusNotFound, a2a.Failure(req.ID, a2a.Errorf(a2a.CodeInvalidRequest, "no agent %q", name)))
		return
	}
	switch req.Method {
	case a2a.MethodSend, a2a.MethodStream:
		s.a2aSend(w, r, t, name, agent, req)
	case a2a.MethodGet:
		s.a2aGet(w, r, t, req)
	case a2a.MethodCancel:
		s.a2aCancel(w, r, t, req)
	case a2a.MethodResubscribe:
		s.a2aResubscribe(w, r, t, req)
	case a2a.MethodPushSet, a2a.MethodPushGet, a2a.MethodPushList, a2a.MethodPushDelete:
		writeRPC(w, http.StatusOK, a2a.Failure(req.ID, a2a.Errorf(a2a.CodePushNotSupported,
			"push notifications are not supported: follow a task with message/stream or tasks/resubscribe, or poll tasks/get")))
	case a2a.MethodExtendedCard:
		writeRPC(w, http.StatusOK, a2a.Failure(req.ID, a2a.Errorf(a2a.CodeExtendedCardNotConfigured,
			"the agent has no extended card: its card is served to authenticated callers only")))
	default:
		writeRPC(w, http.StatusOK, a2a.Failure(req.ID, a2a.Errorf(a2a.CodeMethodNotFound, "method %q not found: want %s, %s, %s, %s or %s",
			req.Method, a2a.MethodSend, a2a.MethodStream, a2a.MethodGet, a2a.MethodCancel, a2a.MethodResubscribe)))
	}
}

// a2aLookup finds the tenant's task id in the index. A missing task, or
// an id that could be no key, is a TaskNotFound error.
func (s *Server) a2aLookup(ctx context.Context, t *tenant, id string) (a2aTask, *a2a.Error) {
	var rec a2aTask
	b, ok, err := s.kv.Get(ctx, a2aNamespace(t.name), id)
	switch {
	case errors.Is(err, storage.ErrInvalidKey):
		return rec, a2a.TaskNotFound(id)
	case err != nil:
		return rec, &a2a.Error{Code: a2a.CodeInternalError, Message: fmt.Sprintf("cannot read the task index: %v", err), Data: map[string]any{"code": codeUnavailable}}
	case !ok:
		return rec, a2a.TaskNotFound(id)
	}
	if err := json.Unmarshal(b, &rec); err != nil || !storage.ValidSessionID(rec.SessionID) {
		return rec, &a2a.Error{Code: a2a.CodeInternalError, Message: fmt.Sprintf("the task index's entry of %s is damaged", id)}
	}
	return rec, nil
}

// a2aIndexOnce records a task's session, unless the index has the task
// already (a message on it, a decision, a retry): its first entry, with
// the message that started it, stays.
func (s *Server) a2aIndexOnce(ctx context.Context, t *tenant, runID string, rec a2aTask) error {
	if _, ok, err := s.kv.Get(ctx, a2aNamespace(t.name), runID); err != nil || ok {
		return err
	}
	b, _ := json.Marshal(rec)
	return s.kv.Set(ctx, a2aNamespace(t.name), runID, b)
}

// a2aTaskOf reads the task of run runID in sess as it stands.
func a2aTaskOf(ctx context.Context, sess *host.Session, runID string, historyLength *int) (*a2av.Task, *a2a.Error) {
	// The status first, then the transcript: a run that ended between the
	// two reads shows its text with a status that may still say working
	// (the stream's next update ends it), never a completed task without
	// its text.
	st, err := sess.Status(ctx)
	if err != nil {
		return nil, &a2a.Error{Code: a2a.CodeInternalError, Message: fmt.Sprintf("cannot read session %s: %v", sess.ID(), err), Data: map[string]any{"code": codeUnavailable}}
	}
	tr, err := sess.Transcript(ctx)
	if err != nil {
		return nil, &a2a.Error{Code: a2a.CodeInternalError, Message: fmt.Sprintf("cannot read session %s: %v", sess.ID(), err), Data: map[string]any{"code": codeUnavailable}}
	}
	task, ok := a2a.TaskOf(sess.ID(), runID, tr, st, historyLength)
	if !ok {
		return nil, a2a.TaskNotFound(runID)
	}
	return task, nil
}

// a2aSend serves message/send and message/stream.
func (s *Server) a2aSend(w http.ResponseWriter, r *http.Request, t *tenant, agentName string, agent *host.Agent, req a2a.Request) {
	ctx := r.Context()
	stream := req.Method == a2a.MethodStream
	fail := func(err *a2a.Error) { writeRPC(w, http.StatusOK, a2a.Failure(req.ID, err)) }
	params, perr := a2a.DecodeSend(req.Params)
	if perr != nil {
		fail(perr)
		return
	}
	m := params.Message
	content, perr := a2a.ContentOf(m)
	if perr != nil {
		fail(perr)
		return
	}
	// The session: the task's, the context named, or a new one.
	var sessionID string
	taskID := string(m.TaskID)
	switch {
	case taskID != "":
		rec, perr := s.a2aLookup(ctx, t, taskID)
		if perr != nil {
			fail(perr)
			return
		}
		if m.ContextID != "" && m.ContextID != rec.SessionID {
			fail(a2a.Errorf(a2a.CodeInvalidParams, "message.contextId %q is not the context of task %s", m.ContextID, taskID))
			return
		}
		sessionID = rec.SessionID
	case len(content.Decisions) > 0:
		fail(a2a.Errorf(a2a.CodeInvalidParams, "message.taskId is required: a decision answers the task that waits for it"))
		return
	case m.ContextID != "":
		if !storage.ValidSessionID(m.ContextID) {
			fail(a2a.Errorf(a2a.CodeInvalidParams, "message.contextId %q: want a context this agent gave (1 to 128 of [A-Za-z0-9._:-], not starting with '.')", m.ContextID))
			return
		}
		sessionID = m.ContextID
	default:
		sessionID = a2aSessionOf(m.ID)
	}
	sess := t.host.Session(sessionID)
	if taskID != "" && len(content.Decisions) == 0 {
		// A message on a task joins its run while it runs or waits;
		// a task that ended takes no more.
		st, err := sess.Status(ctx)
		if err != nil {
			fail(&a2a.Error{Code: a2a.CodeInternalError, Message: err.Error(), Data: map[string]any{"code": codeUnavailable}})
			return
		}
		if st.RunID != taskID || (st.State != host.StateRunning && st.State != host.StateApprovalRequired) {
			task, perr := a2aTaskOf(ctx, sess, taskID, nil)
			if perr != nil {
				fail(perr)
				return
			}
			fail(a2a.Errorf(a2a.CodeInvalidRequest, "task %s is %s and takes no more messages: send a new message on its context (contextId %s) to start a task", taskID, task.Status.State, sessionID))
			return
		}
	}
	// A stream holds a slot from before anything starts, so that a stream
	// refused starts nothing.
	if stream {
		release, refused := s.acquireStream(t, apiKey(r), userOf(r.Context()))
		if refused != "" {
			w.Header().Set("Retry-After", "1")
			rpcRefusal(w, req.ID, http.StatusTooManyRequests, codeRateLimited, refused+"; close one, or try again later")
			return
		}
		defer release()
	}
	var run *host.Run
	if len(content.Decisions) > 0 {
		var perr *a2a.Error
		var status int
		if run, status, perr = s.a2aDecide(ctx, sess, taskID, content.Decisions); perr != nil {
			writeRPC(w, status, a2a.Failure(req.ID, perr))
			return
		}
	} else {
		release, no := s.admission(r, t, sessionID)
		if no != nil {
			if no.retry {
				w.Header().Set("Retry-After", "1")
			}
			rpcRefusal(w, req.ID, no.status, no.code, no.message)
			return
		}
		var err error
		run, err = sess.Start(ctx, content.Text, host.StartOptions{Parts: content.Parts, RequestID: m.ID, Agent: agent})
		release()
		switch q, quota := errors.AsType[*host.BlobQuotaError](err); {
		case quota:
			fail(a2a.Errorf(a2a.CodeInvalidParams, "%s", blobQuotaMessage(q)))
			return
		case errors.Is(err, host.ErrInvalidInput):
			fail(a2a.Errorf(a2a.CodeInvalidParams, "%v", err))
			return
		case errors.Is(err, host.ErrClosed):
			rpcRefusal(w, req.ID, http.StatusServiceUnavailable, codeUnavailable, "the server is shutting down; send to another host")
			return
		case err != nil:
			s.log.Error("cannot start the run", "err", err)
			rpcRefusal(w, req.ID, http.StatusInternalServerError, codeInternal, fmt.Sprintf("the message could not be accepted: %v", err))
			return
		}
	}
	runID := run.ID()
	if runID == "" {
		runID = taskID
	}
	if runID == "" {
		// Queued for a run another host leads: the ledger names it once
		// that run picks the message up.
		runID = s.a2aRunOfMessage(ctx, sess, run.MessageID())
	}
	if runID == "" {
		fail(&a2a.Error{Code: a2a.CodeServerError, Message: fmt.Sprintf("message %s was accepted into context %s and waits for the run another host leads; its task is not known yet: follow the context's session", run.MessageID(), sessionID),
			Data: map[string]any{"code": codeUnavailable, "message_id": run.MessageID(), "context_id": sessionID}})
		return
	}
	if err := s.a2aIndexOnce(ctx, t, runID, a2aTask{SessionID: sessionID, Agent: agentName, MessageID: run.MessageID(), At: time.Now().UTC()}); err != nil {
		fail(&a2a.Error{Code: a2a.CodeInternalError, Message: fmt.Sprintf("task %s started in context %s, but the task index cannot record it: %v", runID, sessionID, err),
			Data: map[string]any{"code": codeUnavailable, "task_id": runID, "context_id": sessionID}})
		return
	}
	if stream {
		task, perr := a2aTaskOf(ctx, sess, runID, nil)
		if perr != nil {
			fail(perr)
			return
		}
		a, err := sess.Attach(ctx, host.Cursor{RunID: runID})
		if err != nil {
			fail(&a2a.Error{Code: a2a.CodeInternalError, Message: err.Error()})
			return
		}
		defer a.Close()
		s.a2aRelay(w, r, t, a, req.ID, task, false)
		return
	}
	var hl *int
	if c := params.Config; c != nil {
		hl = c.HistoryLength
		if c.Blocking != nil && *c.Blocking {
			// Waiting is bounded by the request; the run is not: a client
			// that leaves leaves the run going.
			if _, err := run.Wait(ctx); err != nil && ctx.Err() != nil {
				return
			}
		}
	}
	task, perr := a2aTaskOf(ctx, sess, runID, hl)
	if perr != nil {
		fail(perr)
		return
	}
	writeRPC(w, http.StatusOK, a2a.Result(req.ID, task))
}

// a2aRunOfMessage waits a little for the ledger to name the run of a
// message queued for another host's run.
func (s *Server) a2aRunOfMessage(ctx context.Context, sess *host.Session, msgID string) string {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		events, err := sess.Events(ctx)
		if err != nil {
			return ""
		}
		if id := ledger.RunOfMessage(events, msgID); id != "" {
			return id
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(50 * time.Millisecond):
		}
	}
	return ""
}

// a2aDecide decides the approval requests task taskID waits on; the run
// goes on. It returns the run's handle, or the error and its HTTP status.
func (s *Server) a2aDecide(ctx context.Context, sess *host.Session, taskID string, decisions []a2a.Decision) (*host.Run, int, *a2a.Error) {
	events, err := sess.Events(ctx)
	if err != nil {
		return nil, http.StatusServiceUnavailable, &a2a.Error{Code: a2a.CodeServerError, Message: err.Error(), Data: map[string]any{"code": codeUnavailable}}
	}
	// Every decision names a pending request of this task, or none is
	// made.
	requests := map[string]ledger.Approval{}
	for _, a := range ledger.Approvals(events, taskID) {
		requests[a.Request.ApprovalID] = a
	}
	for _, d := range decisions {
		a, ok := requests[d.ApprovalID]
		switch {
		case !ok:
			return nil, http.StatusOK, a2a.Errorf(a2a.CodeInvalidParams, "approval request %q: task %s has no such request", d.ApprovalID, taskID)
		case a.State != ledger.ApprovalPending || a.Answered:
			return nil, http.StatusOK, a2a.Errorf(a2a.CodeInvalidRequest, "approval request %s was decided already: it is %s", d.ApprovalID, a.State)
		}
	}
	var run *host.Run
	for _, d := range decisions {
		r, err := sess.Decide(ctx, d.ApprovalID, host.ApprovalDecision{Approve: d.Approve, Reason: d.Reason, By: "a2a", Input: d.Input, Response: d.Response})
		switch {
		case err == nil, errors.Is(err, host.ErrApprovalExpired) && r != nil:
			// A late decision: the call is refused as expired, and the
			// run goes on.
			run = r
		case errors.Is(err, host.ErrApprovalDecided):
			if run == nil {
				return nil, http.StatusOK, a2a.Errorf(a2a.CodeInvalidRequest, "approval request %s was decided already", d.ApprovalID)
			}
		case errors.Is(err, host.ErrNothingToResume):
			if run == nil {
				return nil, http.StatusOK, a2a.Errorf(a2a.CodeInvalidRequest, "approval request %s: no run of task %s waits for it: %v", d.ApprovalID, taskID, err)
			}
		case errors.Is(err, host.ErrApprovalNotFound):
			return nil, http.StatusOK, a2a.Errorf(a2a.CodeInvalidParams, "approval request %q: task %s has no such request", d.ApprovalID, taskID)
		case errors.Is(err, host.ErrInvalidDecision):
			return nil, http.StatusOK, a2a.Errorf(a2a.CodeInvalidParams, "approval request %s: %v", d.ApprovalID, err)
		case errors.Is(err, host.ErrLeadElsewhere):
			return nil, http.StatusServiceUnavailable, &a2a.Error{Code: a2a.CodeServerError,
				Message: fmt.Sprintf("another host continues context %s now; decide again if the request is still pending", sess.ID()), Data: map[string]any{"code": codeUnavailable}}
		default:
			return nil, http.StatusInternalServerError, &a2a.Error{Code: a2a.CodeInternalError, Message: fmt.Sprintf("approval request %s: %v", d.ApprovalID, err)}
		}
	}
	return run, 0, nil
}

func (s *Server) a2aGet(w http.ResponseWriter, r *http.Request, t *tenant, req a2a.Request) {
	p, perr := a2a.DecodeTaskQuery(req.Params)
	if perr == nil {
		var rec a2aTask
		if rec, perr = s.a2aLookup(r.Context(), t, string(p.ID)); perr == nil {
			var task *a2av.Task
			if task, perr = a2aTaskOf(r.Context(), t.host.Session(rec.SessionID), string(p.ID), p.HistoryLength); perr == nil {
				writeRPC(w, http.StatusOK, a2a.Result(req.ID, task))
				return
			}
		}
	}
	writeRPC(w, http.StatusOK, a2a.Failure(req.ID, perr))
}

// a2aCancelWait bounds the wait, after a cancellation, for the run to
// record its end.
const a2aCancelWait = 10 * time.Second

func (s *Server) a2aCancel(w http.ResponseWriter, r *http.Request, t *tenant, req a2a.Request) {
	ctx := r.Context()
	fail := func(err *a2a.Error) { writeRPC(w, http.StatusOK, a2a.Failure(req.ID, err)) }
	p, perr := a2a.DecodeTaskID(req.Params)
	if perr != nil {
		fail(perr)
		return
	}
	id := string(p.ID)
	rec, perr := s.a2aLookup(ctx, t, id)
	if perr != nil {
		fail(perr)
		return
	}
	sess := t.host.Session(rec.SessionID)
	task, perr := a2aTaskOf(ctx, sess, id, nil)
	if perr != nil {
		fail(perr)
		return
	}
	if task.Status.State.Terminal() {
		fail(a2a.Errorf(a2a.CodeTaskNotCancelable, "task %s is %s: it cannot be canceled", id, task.Status.State))
		return
	}
	if !t.host.Cancel(rec.SessionID, "cancelled through A2A (tasks/cancel)") {
		// Nothing in flight here to cancel: the run ended meanwhile, or
		// another host runs it.
		if task, perr = a2aTaskOf(ctx, sess, id, nil); perr == nil && task.Status.State.Terminal() {
			fail(a2a.Errorf(a2a.CodeTaskNotCancelable, "task %s is %s: it cannot be canceled", id, task.Status.State))
			return
		}
		fail(a2a.Errorf(a2a.CodeTaskNotCancelable, "task %s is not running on this host (another host runs it, or it waits to be resumed): cancel it where it runs", id))
		return
	}
	// The cancellation is durable once the run records its end.
	deadline := time.Now().Add(a2aCancelWait)
	for {
		if task, perr = a2aTaskOf(ctx, sess, id, nil); perr != nil {
			fail(perr)
			return
		}
		if task.Status.State.Terminal() || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	writeRPC(w, http.StatusOK, a2a.Result(req.ID, task))
}

func (s *Server) a2aResubscribe(w http.ResponseWriter, r *http.Request, t *tenant, req a2a.Request) {
	ctx := r.Context()
	fail := func(err *a2a.Error) { writeRPC(w, http.StatusOK, a2a.Failure(req.ID, err)) }
	p, perr := a2a.DecodeTaskID(req.Params)
	if perr != nil {
		fail(perr)
		return
	}
	id := string(p.ID)
	rec, perr := s.a2aLookup(ctx, t, id)
	if perr != nil {
		fail(perr)
		return
	}
	release, refused := s.acquireStream(t, apiKey(r), userOf(r.Context()))
	if refused != "" {
		w.Header().Set("Retry-After", "1")
		rpcRefusal(w, req.ID, http.StatusTooManyRequests, codeRateLimited, refused+"; close one, or try again later")
		return
	}
	defer release()
	sess := t.host.Session(rec.SessionID)
	a, err := sess.Attach(ctx, host.Cursor{})
	if err != nil {
		fail(&a2a.Error{Code: a2a.CodeInternalError, Message: err.Error()})
		return
	}
	defer a.Close()
	// The first update is a snapshot, taken with the subscription to the
	// progress after it: the task as it stands, then live.
	first, err := a.Next(ctx)
	if err != nil {
		if ctx.Err() == nil {
			fail(&a2a.Error{Code: a2a.CodeInternalError, Message: err.Error()})
		}
		return
	}
	if first.Snapshot == nil {
		fail(&a2a.Error{Code: a2a.CodeInternalError, Message: "the session's first update is no snapshot"})
		return
	}
	task, ok := a2a.TaskOf(rec.SessionID, id, first.Snapshot.Transcript, first.Snapshot.Status, nil)
	if !ok {
		fail(a2a.TaskNotFound(id))
		return
	}
	s.a2aRelay(w, r, t, a, req.ID, task, true)
}

// a2aRelay streams a task: the task first (its artifacts with it when
// withArtifacts, else as artifact-update events), then the attachment's
// updates, until the final status-update. The client leaving ends the
// stream, never the run.
func (s *Server) a2aRelay(w http.ResponseWriter, r *http.Request, t *tenant, a *host.Attachment, id json.RawMessage, task *a2av.Task, withArtifacts bool) {
	s.metrics.streams.Add(context.Background(), 1)
	defer s.metrics.streams.Add(context.Background(), -1)
	out := newSSE(w)
	out.timeout = time.Duration(s.cfg.StreamWriteTimeout)
	var werr error
	st := a2a.NewStream(string(task.ID), task.ContextID, func(ev any) error {
		if werr == nil {
			werr = out.event("", "", a2a.Result(id, ev))
		}
		return werr
	})
	fail := func(code, message string) {
		if werr == nil {
			werr = out.event("", "", a2a.Failure(id, &a2a.Error{Code: a2a.CodeServerError, Message: message, Data: map[string]any{"code": code}}))
		}
	}
	if err := st.Start(task, withArtifacts); err != nil || st.Ended() {
		return
	}
	// The stream's life is bounded like the session's event streams: the
	// client resubscribes.
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(s.cfg.StreamMaxAge))
	defer cancel()
	s.stream(ctx, out, a, apiKey(r), t, unpaced, func(u host.Update, _ host.Cursor) error {
		done, err := st.Update(u)
		if err == nil && done {
			return errStreamDone
		}
		return err
	}, func(code, message string) {
		switch code {
		case codeTooSlow:
			message = "the client fell too far behind; resubscribe (tasks/resubscribe): the run goes on"
		case codeUnavailable:
			message = "the server is shutting down; the run goes on elsewhere: resubscribe (tasks/resubscribe)"
		}
		fail(code, message)
	})
	if !st.Ended() && r.Context().Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		fail("stream_max_age", fmt.Sprintf("the stream reached its age limit (stream_max_age, %v); the run goes on: resubscribe (tasks/resubscribe)", time.Duration(s.cfg.StreamMaxAge)))
	}
}

// errStreamDone ends a relay whose stream ended.
var errStreamDone = errors.New("server: the stream ended")

// a2aTaskSummary is an entry of GET /v1/a2a/tasks.
type a2aTaskSummary struct {
	TaskID    string `json:"task_id"`
	ContextID string `json:"context_id"`
	Agent     string `json:"agent"`
	MessageID string `json:"message_id,omitempty"`
	// At is when the task was first answered.
	At time.Time `json:"at"`
	// State is the task's A2A state; Reason, the status message's text.
	State  a2av.TaskState `json:"state"`
	Reason string         `json:"reason,omitempty"`
}

// listA2ATasks lists the tenant's A2A tasks, newest first: ?limit (1 to
// 200, default 50) before ?before (a task id). Each task's state is read
// from its session, so a page costs a read of each session it names.
func (s *Server) listA2ATasks(w http.ResponseWriter, r *http.Request, t *tenant) {
	limit := 50
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 200 {
			writeError(w, http.StatusBadRequest, codeInvalid, "limit %q: want 1 to 200", v)
			return
		}
		limit = n
	}
	before := r.URL.Query().Get("before")
	ids, err := s.kv.Keys(r.Context(), a2aNamespace(t.name))
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot read the task index: %v", err)
		return
	}
	// Run ids sort by the time they were minted: newest last.
	end := len(ids)
	if before != "" {
		end, _ = slices.BinarySearch(ids, before)
	}
	out := struct {
		Tasks []a2aTaskSummary `json:"tasks"`
		Next  string           `json:"next,omitempty"`
	}{Tasks: []a2aTaskSummary{}}
	start := max(0, end-limit)
	for i := end - 1; i >= start; i-- {
		rec, perr := s.a2aLookup(r.Context(), t, ids[i])
		if perr != nil {
			continue // gone meanwhile, or damaged: its own route says
		}
		sum := a2aTaskSummary{TaskID: ids[i], ContextID: rec.SessionID, Agent: rec.Agent, MessageID: rec.MessageID, At: rec.At}
		task, perr := a2aTaskOf(r.Context(), t.host.Session(rec.SessionID), ids[i], nil)
		switch {
		case perr != nil:
			sum.State, sum.Reason = a2av.TaskStateUnknown, perr.Message
		default:
			sum.State = task.Status.State
			if m := task.Status.Message; m != nil && len(m.Parts) > 0 {
				if tp, ok := m.Parts[0].(a2av.TextPart); ok {
					sum.Reason = tp.Text
				}
			}
		}
		out.Tasks = append(out.Tasks, sum)
	}
	if start > 0 {
		out.Next = ids[start]
	}
	writeJSON(w, http.StatusOK, out)
}
