package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// The AI SDK UI routes, for useChat / DefaultChatTransport unchanged
// (api: "http://HOST/v1/ui/chat"):
//
// POST /v1/ui/chat takes the transport's body — id (the session), messages,
// trigger, messageId — and answers with the UI message stream of the run
// that answers (SSE, x-vercel-ai-ui-message-stream: v1; see uichunks.go).
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

// uiMessage is a message of the AI SDK's UI (UIMessage).
type uiMessage struct {
	ID    string   `json:"id"`
	Role  string   `json:"role"`
	Parts []uiPart `json:"parts"`
}

// uiPart is a part of a UIMessage; only what the server reads is typed.
type uiPart struct {
	Type       string      `json:"type"`
	Text       string      `json:"text,omitempty"`
	MediaType  string      `json:"mediaType,omitempty"`
	URL        string      `json:"url,omitempty"`
	Filename   string      `json:"filename,omitempty"`
	ToolCallID string      `json:"toolCallId,omitempty"`
	State      string      `json:"state,omitempty"`
	Approval   *uiApproval `json:"approval,omitempty"`
}

// uiApproval is a tool part's approval: its request's id and, once the
// person answered (addToolApprovalResponse), the answer.
type uiApproval struct {
	ID       string `json:"id"`
	Approved *bool  `json:"approved,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// uiChatRequest is the body DefaultChatTransport sends, with the fields of
// its body option beside them.
type uiChatRequest struct {
	ID        string      `json:"id"`
	Messages  []uiMessage `json:"messages"`
	Trigger   string      `json:"trigger"`
	MessageID string      `json:"messageId,omitempty"`
	// Agent names the tenant's agent that runs a new message (the
	// transport's body: {agent: NAME}). Default: "default".
	Agent string `json:"agent,omitempty"`
}

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
	var req uiChatRequest
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
		text, parts, err := uiContent(last)
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
		s.uiStream(w, r, t, sess, host.Cursor{RunID: runID}, newUIConverter(runID, runID, nil))
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
		s.uiStream(w, r, t, sess, host.Cursor{RunID: conv.runID}, conv)
	default:
		writeError(w, http.StatusBadRequest, codeInvalid, "messages[%d]: role %q: the last message must be the user's new message, or the assistant's message with answered tool approvals", len(req.Messages)-1, last.Role)
	}
}

// uiContent reads a user message's content: its text parts, joined by
// newlines, and its file parts (data: URLs, or http(s) URLs for images and
// files). Other parts are the client's own and are ignored.
func uiContent(m uiMessage) (string, []ledger.Part, error) {
	var texts []string
	var parts []ledger.Part
	for i, p := range m.Parts {
		switch p.Type {
		case "text":
			if p.Text != "" {
				texts = append(texts, p.Text)
			}
		case "file":
			part, err := uiFile(p)
			if err != nil {
				return "", nil, fmt.Errorf("parts[%d] (file): %w", i, err)
			}
			parts = append(parts, part)
		}
	}
	if len(texts) == 0 && len(parts) == 0 {
		return "", nil, errors.New("the user's message has no text part and no file part")
	}
	return strings.Join(texts, "\n"), parts, nil
}

// uiFile reads a FileUIPart.
func uiFile(p uiPart) (ledger.Part, error) {
	kind := ledger.PartFile
	switch {
	case strings.HasPrefix(p.MediaType, "image/"):
		kind = ledger.PartImage
	case strings.HasPrefix(p.MediaType, "audio/"):
		kind = ledger.PartAudio
	}
	part := ledger.Part{Type: kind, MIME: p.MediaType, Name: p.Filename}
	if p.MediaType == "" {
		return part, errors.New("mediaType is empty")
	}
	rest, isData := strings.CutPrefix(p.URL, "data:")
	if !isData {
		u, err := url.Parse(p.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return part, fmt.Errorf("url %.60q: want a data: URL or an http(s) URL", p.URL)
		}
		if kind == ledger.PartAudio {
			return part, errors.New("audio must be sent inline, as a data: URL")
		}
		part.URL = p.URL
		return part, nil
	}
	meta, payload, ok := strings.Cut(rest, ",")
	if !ok {
		return part, errors.New("url: a data: URL without a comma")
	}
	var err error
	if strings.HasSuffix(meta, ";base64") {
		part.Data, err = base64.StdEncoding.DecodeString(payload)
	} else {
		var s string
		s, err = url.PathUnescape(payload)
		part.Data = []byte(s)
	}
	if err != nil {
		return part, fmt.Errorf("url: the data: URL's data: %v", err)
	}
	return part, nil
}

// uiDecide decides the approval requests that the assistant message m
// answers (its tool parts in state approval-responded), and returns the
// converter for the stream of the run that continues: it knows what the
// client's message holds (the run as it stood, parked, and the answers).
// The status tells the HTTP status of an error.
func (s *Server) uiDecide(ctx context.Context, sess *host.Session, m uiMessage) (*uiConverter, int, error) {
	type answer struct {
		callID string
		a      uiApproval
	}
	var answers []answer
	for _, p := range m.Parts {
		if !strings.HasPrefix(p.Type, "tool-") && p.Type != "dynamic-tool" {
			continue
		}
		if p.State == "approval-responded" && p.Approval != nil && p.Approval.Approved != nil {
			answers = append(answers, answer{p.ToolCallID, *p.Approval})
		}
	}
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
		r, err := sess.Decide(ctx, a.a.ID, host.ApprovalDecision{Approve: *a.a.Approved, Reason: a.a.Reason, By: "ui"})
		switch {
		case errors.Is(err, host.ErrApprovalDecided):
			decided++
			continue // decided already (a retried request, or decided elsewhere)
		case errors.Is(err, host.ErrApprovalNotFound):
			return nil, http.StatusNotFound, fmt.Errorf("approval %q: no such request in session %s", a.a.ID, sess.ID())
		case errors.Is(err, host.ErrApprovalExpired) && r != nil:
			// The answer came too late: the call is refused as
			// expired, and the run goes on; the stream shows it.
		case err != nil:
			return nil, http.StatusServiceUnavailable, fmt.Errorf("approval %q: %w", a.a.ID, err)
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
				if tc.ApprovalID == answers[0].a.ID {
					runID = it.RunID
				}
			}
		}
	}
	conv := newUIConverter(runID, m.ID, nil)
	conv.seed(prior)
	for _, a := range answers {
		conv.answered(a.callID, a.a.ID)
	}
	return conv, 0, nil
}

// uiResume resumes the stream of the session's run in flight: a replay of
// the run so far, then its live progress.
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
	if st.State != host.StateRunning {
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
	if first.Snapshot == nil || first.Snapshot.Status.State != host.StateRunning {
		w.WriteHeader(http.StatusNoContent) // the run ended meanwhile
		return
	}
	runID := first.Snapshot.Status.RunID
	s.uiRelay(w, r, t, a, newUIConverter(runID, runID, nil), &first)
}

// uiStream attaches to the session from cursor and relays the run as UI
// message chunks.
func (s *Server) uiStream(w http.ResponseWriter, r *http.Request, t *tenant, sess *host.Session, from host.Cursor, conv *uiConverter) {
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
func (s *Server) uiRelay(w http.ResponseWriter, r *http.Request, t *tenant, a *host.Attachment, conv *uiConverter, first *host.Update) {
	w.Header().Set("x-vercel-ai-ui-message-stream", "v1")
	s.metrics.streams.Add(context.Background(), 1)
	defer s.metrics.streams.Add(context.Background(), -1)
	out := newSSE(w)
	var werr error
	conv.emit = func(ch uiChunk) error {
		if werr == nil {
			werr = out.event("", "", ch)
		}
		return werr
	}
	if first != nil {
		if done, err := conv.update(*first); done || err != nil {
			if err == nil {
				out.done()
			}
			return
		}
	}
	s.stream(r.Context(), out, a, apiKey(r), t, func(u host.Update, _ host.Cursor) error {
		done, err := conv.update(u)
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
		conv.start()
		conv.emit(uiChunk{Type: "error", ErrorText: strp(message)})
	})
	if conv.ended && werr == nil {
		out.done()
	}
}
