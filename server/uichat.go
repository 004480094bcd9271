package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/protocol/uistream"
	"github.com/agentichost/agentic/storage"
)

// The AI SDK UI routes, for useChat / DefaultChatTransport unchanged
// (api: "http://HOST/v1/ui/chat"):
//
// POST /v1/ui/chat takes the transport's body — id (the session), messages,
// trigger, messageId — and answers with the UI message stream of the run
// that answers (SSE, x-vercel-ai-ui-message-stream: v1; see protocol/uistream).
// The session's ledger is the history: of messages, only the last is read.
// A user message is appended (its id deduplicates a retried request) and
// starts or joins a run; an assistant message whose tool parts are in
// state approval-responded decides those approval requests, and the
// stream follows the run that continues, into the same message. The
// client leaving ends the stream, never the run.
//
// GET /v1/ui/chat/{id}/stream resumes the stream of the session's run in
// flight, as a replay from the run's start (the transport's default,
// resumeStreamIsReplay), then live; 204 when no run is in flight.
//
// The ledger is append-only, so what rewrites history is refused with a
// clear error: trigger regenerate-message, and a submit-message whose
// messageId names a user message (an edited message).

// decodeLoose reads a JSON body that may carry fields the server does not
// read (the AI SDK's messages carry many), within the size limit.
func (s *Server) decodeLoose(w http.ResponseWriter, r *http.Request, v any) bool {
	b, ok := s.readBody(w, r, s.cfg.MaxRequestBytes, "max_request_bytes; only the last message is read: send only it (DefaultChatTransport's prepareSendMessagesRequest)")
	if !ok {
		return false
	}
	err := json.NewDecoder(bytes.NewReader(b)).Decode(v)
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil:
		return true
	case errors.As(err, &typ):
		writeError(w, http.StatusBadRequest, codeInvalid, "field %q: want %s, got a JSON %s", typ.Field, jsonKind(typ.Type), typ.Value)
	case errors.Is(err, io.EOF):
		writeError(w, http.StatusBadRequest, codeInvalid, "the body is empty; want the JSON of a chat request (id, messages, trigger)")
	default:
		writeError(w, http.StatusBadRequest, codeInvalid, "the body is not the JSON of a chat request: %v", err)
	}
	return false
}

func (s *Server) uiChat(w http.ResponseWriter, r *http.Request, t *tenant) {
	var req uistream.ChatRequest
	if !s.decodeLoose(w, r, &req) {
		return
	}
	if !storage.ValidSessionID(req.ID) {
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"id\" %q: want the chat's id, a session id (1 to 128 of [A-Za-z0-9._:-], not starting with '.')", req.ID)
		return
	}
	switch req.Trigger {
	case "submit-message", "":
	case "regenerate-message":
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"trigger\": regenerate-message is not supported: the session's history is its append-only ledger, so an answer cannot be replaced; send a new message instead")
		return
	default:
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"trigger\" %q: want submit-message", req.Trigger)
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"messages\" is empty; want the chat's messages, the new one last")
		return
	}
	sess := t.host.Session(req.ID)
	last := req.Messages[len(req.Messages)-1]
	switch last.Role {
	case "user":
		if req.MessageID != "" {
			writeError(w, http.StatusBadRequest, codeInvalid, "field \"messageId\" %q: editing a sent message is not supported: the session's history is its append-only ledger; send a new message instead", req.MessageID)
			return
		}
		text, parts, err := uistream.Content(last)
		if err != nil {
			writeError(w, http.StatusBadRequest, codeInvalid, "messages[%d]: %v", len(req.Messages)-1, err)
			return
		}
		agent, ok := t.agentFor(w, req.Agent)
		if !ok {
			return
		}
		release, ok := s.admitRun(w, r, t, req.ID)
		if !ok {
			return
		}
		run, err := sess.Start(r.Context(), text, host.StartOptions{Parts: parts, RequestID: last.ID, Agent: agent})
		release()
		if err != nil {
			s.startError(w, err)
			return
		}
		runID := run.ID()
		s.uiStream(w, r, t, sess, host.Cursor{RunID: runID}, uistream.NewConverter(runID, runID, nil))
	case "assistant":
		// The person answered approval requests in the assistant's
		// message: decide them; the run goes on, into that message.
		conv, status, err := s.uiDecide(r.Context(), sess, last)
		if err != nil {
			code := codeInvalid
			switch status {
			case http.StatusNotFound:
				code = codeNotFound
			case http.StatusConflict:
				code = codeConflict
			case http.StatusServiceUnavailable:
				code = codeUnavailable
			}
			writeError(w, status, code, "messages[%d]: %v", len(req.Messages)-1, err)
			return
		}
		s.uiStream(w, r, t, sess, host.Cursor{RunID: conv.RunID()}, conv)
	default:
		writeError(w, http.StatusBadRequest, codeInvalid, "messages[%d]: role %q: the last message must be the user's new message, or the assistant's message with answered tool approvals", len(req.Messages)-1, last.Role)
	}
}

// uiDecide decides the approval requests that the assistant message m
// answers (its tool parts in state approval-responded), and returns the
// converter for the stream of the run that continues: it knows what the
// client's message holds (the run as it stood, parked, and the answers).
// The status tells the HTTP status of an error.
func (s *Server) uiDecide(ctx context.Context, sess *host.Session, m uistream.Message) (*uistream.Converter, int, error) {
	answers := uistream.Answers(m)
	if len(answers) == 0 {
		return nil, http.StatusBadRequest, errors.New("the assistant's message answers no approval: none of its tool parts is in state approval-responded with approval.approved set (addToolApprovalResponse)")
	}
	prior, err := sess.Transcript(ctx)
	if err != nil {
		return nil, http.StatusServiceUnavailable, err
	}
	var run *host.Run
	decided := 0
	for _, a := range answers {
		r, err := sess.Decide(ctx, a.Approval.ID, host.ApprovalDecision{Approve: *a.Approval.Approved, Reason: a.Approval.Reason, By: "ui"})
		switch {
		case errors.Is(err, host.ErrApprovalDecided):
			decided++
			continue // decided already (a retried request, or decided elsewhere)
		case errors.Is(err, host.ErrApprovalNotFound):
			return nil, http.StatusNotFound, fmt.Errorf("approval %q: no such request in session %s", a.Approval.ID, sess.ID())
		case errors.Is(err, host.ErrApprovalExpired) && r != nil:
			// The answer came too late: the call is refused as
			// expired, and the run goes on; the stream shows it.
		case err != nil:
			return nil, http.StatusServiceUnavailable, fmt.Errorf("approval %q: %w", a.Approval.ID, err)
		}
		run = r
	}
	if run == nil {
		return nil, http.StatusConflict, fmt.Errorf("the %d approval requests the message answers were decided already", decided)
	}
	runID := run.ID()
	if runID == "" {
		// Another host continues the run: find it in the transcript.
		for _, it := range prior.Items {
			for _, tc := range it.ToolCalls {
				if tc.ApprovalID == answers[0].Approval.ID {
					runID = it.RunID
				}
			}
		}
	}
	conv := uistream.NewConverter(runID, m.ID, nil)
	conv.Seed(prior)
	for _, a := range answers {
		conv.Answered(a.CallID, a.Approval.ID)
	}
	return conv, 0, nil
}

// uiResume resumes the stream of the session's run in flight: a replay of
// the run so far, then its live progress. A session whose run a host left
// interrupted (its agent leaves it so, or nothing resumed it yet) answers
// the replay of that run, ending with finish reason "interrupted".
func (s *Server) uiResume(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, ok := sessionID(w, r)
	if !ok {
		return
	}
	sess := t.host.Session(id)
	st, err := sess.Status(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "%v", err)
		return
	}
	shown := func(st host.Status) bool {
		return st.State == host.StateRunning || (st.State == host.StateInterrupted && st.RunID != "")
	}
	if !shown(st) {
		w.WriteHeader(http.StatusNoContent) // no active stream
		return
	}
	a, err := sess.Attach(r.Context(), host.Cursor{})
	if err != nil {
		s.startError(w, err)
		return
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	first, err := a.Next(ctx)
	cancel()
	if err != nil {
		if r.Context().Err() == nil {
			s.startError(w, err)
		}
		return
	}
	if first.Snapshot == nil || !shown(first.Snapshot.Status) {
		w.WriteHeader(http.StatusNoContent) // the run ended meanwhile
		return
	}
	runID := first.Snapshot.Status.RunID
	s.uiRelay(w, r, t, a, uistream.NewConverter(runID, runID, nil), &first)
}

// uiStream attaches to the session from cursor and relays the run as UI
// message chunks.
func (s *Server) uiStream(w http.ResponseWriter, r *http.Request, t *tenant, sess *host.Session, from host.Cursor, conv *uistream.Converter) {
	a, err := sess.Attach(r.Context(), from)
	if err != nil {
		s.startError(w, err)
		return
	}
	defer a.Close()
	s.uiRelay(w, r, t, a, conv, nil)
}

// uiRelay streams the attachment's updates (first, if set, then the next
// ones) through conv until the run's message ends, then data: [DONE]. The
// client leaving ends the stream, never the run.
func (s *Server) uiRelay(w http.ResponseWriter, r *http.Request, t *tenant, a *host.Attachment, conv *uistream.Converter, first *host.Update) {
	w.Header().Set(uistream.Header, uistream.Version)
	s.metrics.streams.Add(context.Background(), 1)
	defer s.metrics.streams.Add(context.Background(), -1)
	// The headers leave with the stream's start (or the first update) in
	// one write.
	out := newSSEHeld(w)
	var werr error
	conv.SetMetadata(a.SessionID(), s.traceOf)
	conv.SetEmit(func(ch uistream.Chunk) error {
		if werr == nil {
			werr = out.chunk(ch)
		}
		return werr
	})
	// The chunks of an update are written, then flushed with whatever else
	// was ready (stream flushes before it waits).
	var (
		done bool
		err  error
	)
	if first != nil {
		done, err = conv.Update(*first)
	} else {
		err = conv.Begin()
	}
	if ferr := out.flushPending(); err == nil && ferr != nil {
		werr, err = ferr, ferr
	}
	if done || err != nil {
		if err == nil {
			out.done()
		}
		return
	}
	agent := ""
	if first != nil && first.Snapshot != nil {
		agent = first.Snapshot.Status.Agent
	}
	s.stream(r.Context(), out, a, apiKey(r), t, agent, func(u host.Update, _ host.Cursor) error {
		done, err := conv.Update(u)
		if err == nil && done {
			return io.EOF
		}
		return err
	}, func(code, message string) {
		// The stream cannot go on: the client sees an error; the run goes
		// on, and resumeStream replays it.
		switch code {
		case "too_slow":
			message = "the client fell too far behind; resume the stream (resumeStream)"
		case codeUnavailable:
			message = "the server is shutting down; the run goes on elsewhere: resume the stream (resumeStream)"
		}
		conv.Fail(message)
	})
	if werr == nil {
		werr = out.flushPending()
	}
	if conv.Ended() && werr == nil {
		out.done()
	}
}
