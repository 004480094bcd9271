package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/ledger"
)

// The AI SDK's UI message stream: POST /v1/ui/chat answers the body that
// useChat's DefaultChatTransport sends (id: the session, messages, trigger,
// messageId) with the run's progress as UI message chunks over SSE
// (x-vercel-ai-ui-message-stream: v1); GET /v1/ui/chat/{id}/stream resumes
// the stream of the session's run in flight (204 when there is none). Only
// the new user message is appended: the session's ledger is the history.
// A tool call that waits for a person is sent as tool-approval-request; the
// client's answer (the tool part's approval, in the next request) decides
// it.

// uiMessage is a message of the AI SDK's UI (UIMessage).
type uiMessage struct {
	ID       string          `json:"id"`
	Role     string          `json:"role"`
	Parts    []uiPart        `json:"parts"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// uiPart is a part of a UIMessage; only what the server reads is typed.
type uiPart struct {
	Type       string      `json:"type"`
	Text       string      `json:"text,omitempty"`
	ToolCallID string      `json:"toolCallId,omitempty"`
	State      string      `json:"state,omitempty"`
	Approval   *uiApproval `json:"approval,omitempty"`
}

// uiApproval is a tool part's approval: its request's id and, once the
// person answered, the answer.
type uiApproval struct {
	ID       string `json:"id"`
	Approved *bool  `json:"approved,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// uiChatRequest is the body DefaultChatTransport sends.
type uiChatRequest struct {
	ID        string          `json:"id"`
	Messages  []uiMessage     `json:"messages"`
	Trigger   string          `json:"trigger"`
	MessageID string          `json:"messageId,omitempty"`
	Body      json.RawMessage `json:"body,omitempty"`
}

// decodeLoose reads a JSON body that may carry fields the server does not
// read (the AI SDK's messages carry many), within the size limit.
func (s *Server) decodeLoose(w http.ResponseWriter, r *http.Request, v any) bool {
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxRequestBytes)
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge, "the body is larger than %d bytes", tooBig.Limit)
			return false
		}
		writeError(w, http.StatusBadRequest, codeInvalid, "the body is not the JSON of a chat request: %v", err)
		return false
	}
	return true
}

func (s *Server) uiChat(w http.ResponseWriter, r *http.Request, t *tenant) {
	var req uiChatRequest
	if !s.decodeLoose(w, r, &req) {
		return
	}
	if !validSession(req.ID) {
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"id\" %q: want a session id", req.ID)
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, codeInvalid, "field \"messages\" is empty")
		return
	}
	sess := t.host.Session(req.ID)
	last := req.Messages[len(req.Messages)-1]
	var run *host.Run
	switch {
	case last.Role == "assistant":
		// The person answered approval requests of the assistant's
		// message: decide them; the run goes on.
		var err error
		run, err = s.uiDecide(r.Context(), sess, last)
		if err != nil {
			writeError(w, http.StatusBadRequest, codeInvalid, "%v", err)
			return
		}
	case last.Role == "user":
		text := uiText(last)
		if text == "" {
			writeError(w, http.StatusBadRequest, codeInvalid, "the last message has no text")
			return
		}
		agent, ok := t.agentFor(w, "")
		if !ok || !s.admit(w, r, t, t.host.IsRunning(req.ID)) {
			return
		}
		var err error
		if run, err = sess.Start(r.Context(), text, host.StartOptions{RequestID: last.ID, Agent: agent}); err != nil {
			s.startError(w, err)
			return
		}
	default:
		writeError(w, http.StatusBadRequest, codeInvalid, "the last message's role %q is neither user nor assistant", last.Role)
		return
	}
	s.uiStream(w, r, t, sess, run.ID(), host.Cursor{RunID: run.ID()})
}

// uiText joins a UI message's text parts.
func uiText(m uiMessage) string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// uiDecide decides the approval requests the assistant message m answers,
// and returns the run that goes on.
func (s *Server) uiDecide(ctx context.Context, sess *host.Session, m uiMessage) (*host.Run, error) {
	var run *host.Run
	for _, p := range m.Parts {
		if p.Approval == nil || p.Approval.Approved == nil || p.State != "approval-responded" {
			continue
		}
		r, err := sess.Decide(ctx, p.Approval.ID, host.ApprovalDecision{Approve: *p.Approval.Approved, Reason: p.Approval.Reason, By: "ui"})
		if errors.Is(err, host.ErrApprovalDecided) {
			continue // decided already (a retried request)
		}
		if err != nil {
			return nil, fmt.Errorf("approval %s: %w", p.Approval.ID, err)
		}
		run = r
	}
	if run == nil {
		return nil, errors.New("the last message is the assistant's, and answers no pending approval request")
	}
	return run, nil
}

func validSession(id string) bool {
	return id != "" && len(id) <= 128 && !strings.HasPrefix(id, ".") && strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") == ""
}

// uiResume resumes the stream of the session's run in flight, from its
// start (the client replaces the message it had).
func (s *Server) uiResume(w http.ResponseWriter, r *http.Request, t *tenant) {
	id := r.PathValue("id")
	if !validSession(id) {
		writeError(w, http.StatusBadRequest, codeInvalid, "session id %q", id)
		return
	}
	st, err := t.host.Session(id).Status(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "%v", err)
		return
	}
	if st.State != host.StateRunning || !t.host.IsRunning(id) {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	s.uiStream(w, r, t, t.host.Session(id), st.RunID, host.Cursor{RunID: st.RunID})
}

// uiStream streams the run runID (from after the cursor) as UI message
// chunks, until its end. The client leaving stops the stream, never the
// run.
func (s *Server) uiStream(w http.ResponseWriter, r *http.Request, t *tenant, sess *host.Session, runID string, from host.Cursor) {
	a, err := sess.Attach(r.Context(), from)
	if err != nil {
		s.startError(w, err)
		return
	}
	defer a.Close()
	w.Header().Set("x-vercel-ai-ui-message-stream", "v1")
	out := newSSE(w)
	conv := &uiConverter{messageID: runID, emit: func(chunk map[string]any) error { return out.event("", "", chunk) }}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	s.stream(ctx, out, a, apiKey(r), t, func(u host.Update, _ host.Cursor) error {
		if u.Snapshot != nil {
			// The run ended before the stream could follow it (or
			// another host runs it): end the message.
			if err := conv.fromSnapshot(u.Snapshot, runID); err != nil {
				return err
			}
			cancel()
			return io.EOF
		}
		done, err := conv.progress(*u.Progress)
		if err != nil {
			return err
		}
		if done {
			cancel()
			return io.EOF
		}
		return nil
	})
	fmt.Fprint(w, "data: [DONE]\n\n")
	out.flush()
}

// uiConverter turns a run's progress into UI message chunks.
type uiConverter struct {
	messageID string
	emit      func(map[string]any) error

	started   bool
	stepOpen  bool
	text      string // id of the open text part
	reasoning string // id of the open reasoning part
	resets    int
	inputs    map[string]bool // tool calls whose input was sent
}

func (c *uiConverter) send(chunk map[string]any) error { return c.emit(chunk) }

func (c *uiConverter) start() error {
	if c.started {
		return nil
	}
	c.started = true
	c.inputs = map[string]bool{}
	return c.send(map[string]any{"type": "start", "messageId": c.messageID})
}

// closeParts ends the open text and reasoning parts.
func (c *uiConverter) closeParts() error {
	if c.text != "" {
		if err := c.send(map[string]any{"type": "text-end", "id": c.text}); err != nil {
			return err
		}
		c.text = ""
	}
	if c.reasoning != "" {
		if err := c.send(map[string]any{"type": "reasoning-end", "id": c.reasoning}); err != nil {
			return err
		}
		c.reasoning = ""
	}
	return nil
}

func (c *uiConverter) endStep() error {
	if err := c.closeParts(); err != nil {
		return err
	}
	if c.stepOpen {
		c.stepOpen = false
		return c.send(map[string]any{"type": "finish-step"})
	}
	return nil
}

func (c *uiConverter) toolInput(callID, name string, input json.RawMessage) error {
	if c.inputs[callID] {
		return nil
	}
	c.inputs[callID] = true
	if len(input) == 0 {
		input = json.RawMessage(`{}`)
	}
	return c.send(map[string]any{"type": "tool-input-available", "toolCallId": callID, "toolName": name, "input": input})
}

// progress converts one event; done tells that the run ended.
func (c *uiConverter) progress(p host.Progress) (done bool, err error) {
	if err := c.start(); err != nil {
		return false, err
	}
	partID := func(kind string) string {
		if c.resets > 0 {
			return fmt.Sprintf("%s-%s-%d", kind, p.ResponseID, c.resets)
		}
		return kind + "-" + p.ResponseID
	}
	switch p.Type {
	case host.ProgressResponseStart:
		if err := c.endStep(); err != nil {
			return false, err
		}
		c.stepOpen = true
		return false, c.send(map[string]any{"type": "start-step"})
	case host.ProgressText:
		if c.text == "" {
			c.text = partID("text")
			if err := c.send(map[string]any{"type": "text-start", "id": c.text}); err != nil {
				return false, err
			}
		}
		return false, c.send(map[string]any{"type": "text-delta", "id": c.text, "delta": p.Delta})
	case host.ProgressReasoning:
		if c.reasoning == "" {
			c.reasoning = partID("reasoning")
			if err := c.send(map[string]any{"type": "reasoning-start", "id": c.reasoning}); err != nil {
				return false, err
			}
		}
		return false, c.send(map[string]any{"type": "reasoning-delta", "id": c.reasoning, "delta": p.Delta})
	case host.ProgressRetry:
		// The protocol cannot take text back: the failed attempt's part
		// ends, and the retry streams into a new one.
		c.resets++
		return false, c.closeParts()
	case host.ProgressToolStart:
		if err := c.closeParts(); err != nil {
			return false, err
		}
		return false, c.toolInput(p.Tool.CallID, p.Tool.Name, p.Tool.Input)
	case host.ProgressToolEnd:
		if err := c.toolInput(p.Tool.CallID, p.Tool.Name, p.Tool.Input); err != nil {
			return false, err
		}
		if p.Tool.IsError {
			return false, c.send(map[string]any{"type": "tool-output-error", "toolCallId": p.Tool.CallID, "errorText": p.Tool.Output})
		}
		var output any = p.Tool.Output
		if json.Valid([]byte(p.Tool.Output)) {
			output = json.RawMessage(p.Tool.Output)
		}
		return false, c.send(map[string]any{"type": "tool-output-available", "toolCallId": p.Tool.CallID, "output": output})
	case host.ProgressApprovalRequested:
		a := p.Approval
		if err := c.closeParts(); err != nil {
			return false, err
		}
		if err := c.toolInput(a.CallID, a.Tool, a.Input); err != nil {
			return false, err
		}
		return false, c.send(map[string]any{"type": "tool-approval-request", "approvalId": a.ApprovalID, "toolCallId": a.CallID})
	case host.ProgressRunEnd:
		if err := c.endStep(); err != nil {
			return true, err
		}
		switch p.Status {
		case ledger.RunCompleted, ledger.RunApprovalRequired:
		default:
			if err := c.send(map[string]any{"type": "error", "errorText": fmt.Sprintf("the run %s: %s", p.Status, p.Reason)}); err != nil {
				return true, err
			}
		}
		return true, c.send(map[string]any{"type": "finish", "finishReason": uiFinishReason(p.Status)})
	}
	return false, nil
}

// fromSnapshot ends the message from a snapshot of a run that ended (or
// that another host runs): its last response's text, then its end.
func (c *uiConverter) fromSnapshot(s *host.Snapshot, runID string) error {
	if err := c.start(); err != nil {
		return err
	}
	var last *ledger.Item
	for i := range s.Transcript.Items {
		if it := &s.Transcript.Items[i]; it.Kind == ledger.ItemResponse && it.RunID == runID {
			last = it
		}
	}
	if last != nil && last.Text != "" {
		id := "text-" + last.ID
		for _, ch := range []map[string]any{{"type": "start-step"}, {"type": "text-start", "id": id},
			{"type": "text-delta", "id": id, "delta": last.Text}, {"type": "text-end", "id": id}, {"type": "finish-step"}} {
			if err := c.send(ch); err != nil {
				return err
			}
		}
	}
	return c.send(map[string]any{"type": "finish"})
}

// uiFinishReason maps a run's end onto the AI SDK's finish reasons.
func uiFinishReason(s ledger.RunStatus) string {
	switch s {
	case ledger.RunCompleted:
		return "stop"
	case ledger.RunApprovalRequired:
		return "tool-calls"
	default:
		return "error"
	}
}
