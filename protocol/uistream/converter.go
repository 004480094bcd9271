package uistream

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
)

// Chunk is one chunk of the UI message stream, sent as the JSON of one
// server-sent event. Which fields a chunk has depends on its type (see the
// ai package's uiMessageChunkSchema).
type Chunk struct {
	Type               string          `json:"type"`
	MessageID          string          `json:"messageId,omitempty"`
	ID                 string          `json:"id,omitempty"`
	Delta              *string         `json:"delta,omitempty"`
	ToolCallID         string          `json:"toolCallId,omitempty"`
	ToolName           string          `json:"toolName,omitempty"`
	Input              json.RawMessage `json:"input,omitempty"`
	Output             json.RawMessage `json:"output,omitempty"`
	ErrorText          *string         `json:"errorText,omitempty"`
	ApprovalID         string          `json:"approvalId,omitempty"`
	Approved           *bool           `json:"approved,omitempty"`
	Reason             string          `json:"reason,omitempty"`
	ApprovalDescriptor *Descriptor     `json:"approvalDescriptor,omitempty"`
	FinishReason       string          `json:"finishReason,omitempty"`
	// MessageMetadata is the message's metadata, on start and finish
	// (see [Metadata]).
	MessageMetadata *Metadata `json:"messageMetadata,omitempty"`
	// Data is a data part's (type "data-approval": a run's own approval
	// request, see RunApproval).
	Data any `json:"data,omitempty"`
}

// Metadata is the assistant message's metadata (the AI SDK's
// messageMetadata) on its start and finish chunks: what a UI shows beside
// the message, or its error, to find the run in the logs and the traces.
type Metadata struct {
	SessionID string `json:"sessionId"`
	RunID     string `json:"runId"`
	// TraceID is the run's OpenTelemetry trace, when the host traces.
	TraceID string `json:"traceId,omitempty"`
}

// RunApproval is the data of a "data-approval" part: a run's own approval
// request (one of a kind, about no tool call: a budget that asks before it
// stops the run), which the UI message stream has no tool part for. Parts
// of one request share its id, so that the client replaces the pending one
// with the decision.
type RunApproval struct {
	ApprovalID string `json:"approvalId"`
	Kind       string `json:"kind"`
	// State is pending, then approved, denied or expired.
	State     ledger.ApprovalState `json:"state"`
	Reason    string               `json:"reason,omitempty"`
	Summary   string               `json:"summary,omitempty"`
	ExpiresAt string               `json:"expiresAt,omitempty"`
}

// Descriptor is a tool-approval-request's approvalDescriptor: what the
// host tells the person deciding (the part's approval.descriptor).
type Descriptor struct {
	Summary   string `json:"summary,omitempty"`
	ExpiresAt string `json:"expiresAt,omitempty"`
}

// The stages of a tool part, in the order the client sees them.
const (
	stageNone      = iota
	stageInput     // tool-input-available
	stageRequested // tool-approval-request
	stageResponded // tool-approval-response (or the client's own answer)
	stageDone      // tool-output-available, -error or -denied
)

// toolState is what the client was sent of a tool call.
type toolState struct {
	stage      int
	approvalID string
	denied     bool // a person denied it: its error result is sent as tool-output-denied
}

// responseState is what the client was sent of a response item (a model pass).
type responseState struct {
	text, reasoning         int // code points sent
	textOpen, reasoningOpen bool
	textID, reasoningID     string // the parts' ids, made once (partID)
}

// partID returns the id of the response's text part, or of its reasoning
// part, made at its first use rather than at every delta.
func (r *responseState) partID(id string, reasoning bool) string {
	if reasoning {
		if r.reasoningID == "" {
			r.reasoningID = "reasoning-" + id
		}
		return r.reasoningID
	}
	if r.textID == "" {
		r.textID = "text-" + id
	}
	return r.textID
}

// Converter turns one run's progress and snapshots into UI message
// chunks, into one assistant message. It is not safe for concurrent use.
type Converter struct {
	runID     string // "" until a snapshot names the session's run
	messageID string
	emit      func(Chunk) error

	sessionID string                    // for the metadata; "": none sent
	traceOf   func(runID string) string // the run's trace id, for the metadata

	started   bool
	step      string // the response whose step is open; "" when none is
	responses map[string]*responseState
	calls     map[string]*toolState
	ended     bool
}

// NewConverter returns a converter of run runID (or, if runID is "", of the
// run the first snapshot shows running) into the assistant message
// messageID (or, if it is "", the run's id). Each chunk goes to emit; an
// error of emit is returned by the method that sent the chunk. Emit may be
// set later, with SetEmit, before the first update.
func NewConverter(runID, messageID string, emit func(Chunk) error) *Converter {
	return &Converter{runID: runID, messageID: messageID, emit: emit,
		responses: map[string]*responseState{}, calls: map[string]*toolState{}}
}

// SetEmit sets where the chunks go.
func (c *Converter) SetEmit(emit func(Chunk) error) { c.emit = emit }

// SetMetadata makes the message's start and finish chunks carry its
// [Metadata]: sessionID, the run's id, and traceOf of it (traceOf may be
// nil: no trace id). Before the first update.
func (c *Converter) SetMetadata(sessionID string, traceOf func(runID string) string) {
	c.sessionID, c.traceOf = sessionID, traceOf
}

// metadata is the message's metadata, nil when none is sent.
func (c *Converter) metadata() *Metadata {
	if c.sessionID == "" {
		return nil
	}
	md := &Metadata{SessionID: c.sessionID, RunID: c.runID}
	if c.traceOf != nil {
		md.TraceID = c.traceOf(c.runID)
	}
	return md
}

// RunID returns the run the converter follows: "" until a snapshot names
// it, when none was given.
func (c *Converter) RunID() string { return c.runID }

// Ended reports whether the message ended: finish, error + finish, or abort
// was sent.
func (c *Converter) Ended() bool { return c.ended }

// Fail ends the stream with an error chunk, for a stream that cannot go on
// (the client fell behind, the server shuts down) while the run goes on:
// the client shows the error, and resumes the stream to see the rest.
func (c *Converter) Fail(message string) error {
	if err := c.start(); err != nil {
		return err
	}
	return c.emit(Chunk{Type: "error", ErrorText: strp(message)})
}

func strp(s string) *string { return &s }

// Seed records that the client holds the run's items of transcript as
// they stand (a continuation after approvals: the client's message is the
// stream that ended when the run parked), so that only what follows is
// sent.
func (c *Converter) Seed(t ledger.Transcript) {
	for _, it := range t.Items {
		if it.Kind != ledger.ItemResponse || it.RunID != c.runID {
			continue
		}
		c.responses[it.ID] = &responseState{text: utf8.RuneCountInString(it.Text), reasoning: utf8.RuneCountInString(it.Reasoning)}
		for _, tc := range it.ToolCalls {
			call := &toolState{stage: stageInput, approvalID: tc.ApprovalID}
			switch {
			case tc.Status == ledger.ToolDone || tc.Status == ledger.ToolError:
				call.stage = stageDone
			case tc.Approval == ledger.ApprovalPending:
				call.stage = stageRequested
			case tc.Approval != "":
				call.stage = stageResponded
			}
			c.calls[tc.ID] = call
		}
	}
}

// Answered records that the client answered approval requests itself
// (its message's tool parts in state approval-responded).
func (c *Converter) Answered(callID, approvalID string) {
	call := c.call(callID)
	call.stage, call.approvalID = max(call.stage, stageResponded), approvalID
}

func (c *Converter) call(id string) *toolState {
	call := c.calls[id]
	if call == nil {
		call = &toolState{}
		c.calls[id] = call
	}
	return call
}

// Update converts one update of the session's attachment; done tells that
// the run's message ended (finish, error or abort was sent).
func (c *Converter) Update(u host.Update) (done bool, err error) {
	if c.ended {
		return true, nil
	}
	if u.Snapshot != nil {
		if c.runID == "" && u.Snapshot.Status.State == host.StateRunning {
			c.runID = u.Snapshot.Status.RunID
		}
		if err := c.start(); err != nil {
			return false, err
		}
		return c.snapshot(u.Snapshot)
	}
	if u.Progress == nil || c.runID == "" || u.Progress.RunID != c.runID {
		return false, nil
	}
	if err := c.start(); err != nil {
		return false, err
	}
	return c.progress(*u.Progress)
}

// Begin emits the stream's start chunk now, when the converter knows its
// run (NewConverter was given the run's id), rather than with the run's
// first update: a server that writes it with the response's headers tells
// the client at once which message streams, in one write. It does nothing
// once the start was emitted, or while the run is not known.
func (c *Converter) Begin() error {
	if c.runID == "" {
		return nil
	}
	return c.start()
}

func (c *Converter) start() error {
	if c.started {
		return nil
	}
	c.started = true
	if c.messageID == "" {
		c.messageID = c.runID
	}
	return c.emit(Chunk{Type: "start", MessageID: c.messageID, MessageMetadata: c.metadata()})
}

// openStep ends the open step, if another, and starts the step of response
// id, if it is not open.
func (c *Converter) openStep(id string) error {
	if c.step == id {
		return nil
	}
	if err := c.endStep(); err != nil {
		return err
	}
	c.step = id
	if c.responses[id] == nil {
		c.responses[id] = &responseState{}
	}
	return c.emit(Chunk{Type: "start-step"})
}

// closeParts ends the open step's text and reasoning parts.
func (c *Converter) closeParts() error {
	r := c.responses[c.step]
	if r == nil {
		return nil
	}
	if r.reasoningOpen {
		r.reasoningOpen = false
		if err := c.emit(Chunk{Type: "reasoning-end", ID: r.partID(c.step, true)}); err != nil {
			return err
		}
	}
	if r.textOpen {
		r.textOpen = false
		if err := c.emit(Chunk{Type: "text-end", ID: r.partID(c.step, false)}); err != nil {
			return err
		}
	}
	return nil
}

func (c *Converter) endStep() error {
	if c.step == "" {
		return nil
	}
	if err := c.closeParts(); err != nil {
		return err
	}
	c.step = ""
	return c.emit(Chunk{Type: "finish-step"})
}

// appendText sends the code points of s that start at offset and were not
// sent yet, into the text (or reasoning) part of response id.
func (c *Converter) appendText(id string, reasoning bool, s string, offset int) error {
	if err := c.openStep(id); err != nil {
		return err
	}
	r := c.responses[id]
	sent, open, start, delta := &r.text, &r.textOpen, "text-start", "text-delta"
	if reasoning {
		sent, open, start, delta = &r.reasoning, &r.reasoningOpen, "reasoning-start", "reasoning-delta"
	}
	for skip := *sent - offset; skip > 0 && s != ""; skip-- {
		_, n := utf8.DecodeRuneInString(s)
		s = s[n:]
	}
	if s == "" {
		return nil
	}
	if !*open {
		if !reasoning && r.reasoningOpen {
			// Text follows the reasoning: the reasoning is done.
			r.reasoningOpen = false
			if err := c.emit(Chunk{Type: "reasoning-end", ID: r.partID(id, true)}); err != nil {
				return err
			}
		}
		*open = true
		if err := c.emit(Chunk{Type: start, ID: r.partID(id, reasoning)}); err != nil {
			return err
		}
	}
	*sent = max(*sent, offset) + utf8.RuneCountInString(s)
	return c.emit(Chunk{Type: delta, ID: r.partID(id, reasoning), Delta: strp(s)})
}

// toolInput sends a tool call's input, once.
func (c *Converter) toolInput(id, name string, input json.RawMessage) error {
	call := c.call(id)
	if call.stage >= stageInput {
		return nil
	}
	call.stage = stageInput
	if len(input) == 0 || !json.Valid(input) {
		input = json.RawMessage(`{}`)
	}
	return c.emit(Chunk{Type: "tool-input-available", ToolCallID: id, ToolName: name, Input: input})
}

// approvalRequest sends a call's approval request, once per request.
func (c *Converter) approvalRequest(callID, approvalID, reason, summary string, expires string) error {
	call := c.call(callID)
	if call.approvalID == approvalID && call.stage >= stageRequested {
		return nil
	}
	call.stage, call.approvalID, call.denied = stageRequested, approvalID, false
	ch := Chunk{Type: "tool-approval-request", ApprovalID: approvalID, ToolCallID: callID, Reason: reason}
	if summary != "" || expires != "" {
		ch.ApprovalDescriptor = &Descriptor{Summary: summary, ExpiresAt: expires}
	}
	return c.emit(ch)
}

// runApproval sends a run's own approval request, or the decision on it,
// as a data part.
func (c *Converter) runApproval(a *host.ApprovalInfo) error {
	d := RunApproval{ApprovalID: a.ApprovalID, Kind: a.Kind, State: a.State, Reason: a.Reason, Summary: a.Summary}
	if !a.ExpiresAt.IsZero() {
		d.ExpiresAt = a.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return c.emit(Chunk{Type: "data-approval", ID: a.ApprovalID, Data: d})
}

// approvalResponse sends the decision on a call's approval request, once.
func (c *Converter) approvalResponse(callID, approvalID string, state ledger.ApprovalState) error {
	call := c.call(callID)
	call.denied = state == ledger.ApprovalDenied
	if call.stage >= stageResponded && call.approvalID == approvalID {
		return nil
	}
	call.stage, call.approvalID = max(call.stage, stageResponded), approvalID
	approved := state == ledger.ApprovalApproved
	return c.emit(Chunk{Type: "tool-approval-response", ApprovalID: approvalID, Approved: &approved})
}

// toolOutput sends a call's result, once.
func (c *Converter) toolOutput(id, output string, isError bool) error {
	call := c.call(id)
	if call.stage >= stageDone {
		return nil
	}
	call.stage = stageDone
	switch {
	case isError && call.denied && call.approvalID != "":
		return c.emit(Chunk{Type: "tool-output-denied", ToolCallID: id})
	case isError:
		return c.emit(Chunk{Type: "tool-output-error", ToolCallID: id, ErrorText: strp(output)})
	}
	out := json.RawMessage(output)
	if !json.Valid(out) {
		out, _ = json.Marshal(output)
	}
	return c.emit(Chunk{Type: "tool-output-available", ToolCallID: id, Output: out})
}

// progress converts one progress event of the run.
func (c *Converter) progress(p host.Progress) (done bool, err error) {
	switch p.Type {
	case host.ProgressResponseStart:
		return false, c.openStep(p.ResponseID)
	case host.ProgressText:
		return false, c.appendText(p.ResponseID, false, p.Delta, p.Offset)
	case host.ProgressReasoning:
		return false, c.appendText(p.ResponseID, true, p.Delta, p.Offset)
	case host.ProgressRetry:
		// The failed attempt's text is void, and the retry streams into
		// the same item from its start: reset-step takes back the parts
		// the step received.
		r := c.responses[p.ResponseID]
		if p.Retry == nil || !p.Retry.Reset || r == nil || c.step != p.ResponseID || r.text+r.reasoning == 0 {
			return false, nil
		}
		*r = responseState{}
		return false, c.emit(Chunk{Type: "reset-step"})
	case host.ProgressToolStart:
		if err := c.closeParts(); err != nil {
			return false, err
		}
		return false, c.toolInput(p.Tool.CallID, p.Tool.Name, p.Tool.Input)
	case host.ProgressToolEnd:
		if err := c.closeParts(); err != nil {
			return false, err
		}
		if err := c.toolInput(p.Tool.CallID, p.Tool.Name, p.Tool.Input); err != nil {
			return false, err
		}
		return false, c.toolOutput(p.Tool.CallID, p.Tool.Output, p.Tool.IsError)
	case host.ProgressApprovalRequested:
		a := p.Approval
		if a.SessionID != "" {
			// A sub-agent's child's request, relayed to its parent's
			// viewers: the stream has no part for a call of another
			// session (the inbox and the child's stream have it).
			return false, nil
		}
		if err := c.closeParts(); err != nil {
			return false, err
		}
		if a.CallID == "" {
			return false, c.runApproval(a)
		}
		if err := c.toolInput(a.CallID, a.Tool, a.Input); err != nil {
			return false, err
		}
		expires := ""
		if !a.ExpiresAt.IsZero() {
			expires = a.ExpiresAt.UTC().Format(time.RFC3339)
		}
		return false, c.approvalRequest(a.CallID, a.ApprovalID, a.Reason, a.Summary, expires)
	case host.ProgressApprovalDecided:
		a := p.Approval
		if a.SessionID != "" {
			return false, nil // a sub-agent's child's (see above)
		}
		if a.CallID == "" {
			return false, c.runApproval(a)
		}
		switch a.State {
		case ledger.ApprovalApproved, ledger.ApprovalDenied, ledger.ApprovalExpired:
			if err := c.toolInput(a.CallID, a.Tool, a.Input); err != nil {
				return false, err
			}
			return false, c.approvalResponse(a.CallID, a.ApprovalID, a.State)
		}
		return false, nil // void: the call is asked about again
	case host.ProgressRunEnd:
		return true, c.end(p.Status, p.Reason)
	}
	return false, nil
}

// snapshot sends what the snapshot shows of the run that the client was
// not sent yet, and ends the message when the run no longer runs.
func (c *Converter) snapshot(s *host.Snapshot) (done bool, err error) {
	var items []ledger.Item
	for _, it := range s.Transcript.Items {
		if it.Kind == ledger.ItemResponse && it.RunID == c.runID && c.runID != "" {
			items = append(items, it)
		}
	}
	for _, it := range items {
		if err := c.item(it); err != nil {
			return false, err
		}
	}
	// A run parked on its own request (no tool part shows it): its
	// data-approval part.
	for _, p := range s.Status.Approvals {
		if p.RunID == c.runID && c.runID != "" && p.CallID == "" && p.Kind != "" {
			if err := c.runApproval(&host.ApprovalInfo{ApprovalID: p.ApprovalID, Kind: p.Kind, Reason: p.Reason, Summary: p.Summary,
				State: ledger.ApprovalPending, ExpiresAt: p.ExpiresAt}); err != nil {
				return false, err
			}
		}
	}
	if s.Status.RunID == c.runID && s.Status.State == host.StateRunning {
		return false, nil
	}
	// The run ended (or parked) before its progress could be followed
	// here, or another host ran it.
	status, reason := ledger.RunCompleted, ""
	switch {
	case s.Status.RunID == c.runID:
		status, reason = runStatusOf(s.Status.State), s.Status.Reason
	case len(items) > 0:
		last := items[len(items)-1]
		status, reason = runStatusOfItem(last.Status), last.Reason
	}
	if err := c.endStep(); err != nil {
		return true, err
	}
	return true, c.end(status, reason)
}

// item sends what is new in a response item of the run.
func (c *Converter) item(it ledger.Item) error {
	r := c.responses[it.ID]
	live := it.Status == ledger.StatusStreaming
	if r == nil || c.step == it.ID {
		if err := c.appendText(it.ID, true, it.Reasoning, 0); err != nil {
			return err
		}
		if err := c.appendText(it.ID, false, it.Text, 0); err != nil {
			return err
		}
		if !live || len(it.ToolCalls) > 0 {
			if err := c.closeParts(); err != nil {
				return err
			}
		}
	}
	for _, tc := range it.ToolCalls {
		if err := c.toolInput(tc.ID, tc.Name, tc.Input); err != nil {
			return err
		}
		if tc.ApprovalID != "" && tc.Approval != ledger.ApprovalVoid {
			if err := c.approvalRequest(tc.ID, tc.ApprovalID, "", "", ""); err != nil {
				return err
			}
			if tc.Approval != ledger.ApprovalPending {
				if err := c.approvalResponse(tc.ID, tc.ApprovalID, tc.Approval); err != nil {
					return err
				}
			}
		}
		if tc.Status == ledger.ToolDone || tc.Status == ledger.ToolError {
			if err := c.toolOutput(tc.ID, tc.Output, tc.Status == ledger.ToolError); err != nil {
				return err
			}
		}
	}
	return nil
}

// end ends the message as the run ended.
func (c *Converter) end(status ledger.RunStatus, reason string) error {
	if err := c.endStep(); err != nil {
		return err
	}
	c.ended = true
	switch status {
	case ledger.RunCompleted:
		return c.emit(Chunk{Type: "finish", FinishReason: "stop", MessageMetadata: c.metadata()})
	case ledger.RunApprovalRequired, ledger.RunWaiting:
		// The message ends with calls that wait: for people, or for an
		// event or a time (a waiting call continues the run later).
		return c.emit(Chunk{Type: "finish", FinishReason: "tool-calls", MessageMetadata: c.metadata()})
	case ledger.RunInterrupted:
		return c.emit(Chunk{Type: "finish", FinishReason: "interrupted", MessageMetadata: c.metadata()})
	case ledger.RunCancelled:
		if reason == "" {
			reason = "cancelled"
		}
		return c.emit(Chunk{Type: "abort", Reason: reason})
	}
	text := fmt.Sprintf("the run %s", status)
	if reason != "" {
		text += ": " + reason
	}
	if err := c.emit(Chunk{Type: "error", ErrorText: strp(text)}); err != nil {
		return err
	}
	return c.emit(Chunk{Type: "finish", FinishReason: "error", MessageMetadata: c.metadata()})
}

// runStatusOf maps a session's state after its run onto the run's end.
func runStatusOf(s host.State) ledger.RunStatus {
	switch s {
	case host.StateApprovalRequired:
		return ledger.RunApprovalRequired
	case host.StateWaiting:
		return ledger.RunWaiting
	case host.StateFailed:
		return ledger.RunFailed
	case host.StateCancelled:
		return ledger.RunCancelled
	case host.StateTimedOut:
		return ledger.RunTimedOut
	case host.StateInterrupted:
		return ledger.RunInterrupted
	}
	return ledger.RunCompleted
}

// runStatusOfItem maps a run's last response item onto the run's end.
func runStatusOfItem(s ledger.ItemStatus) ledger.RunStatus {
	switch s {
	case ledger.StatusApprovalRequired:
		return ledger.RunApprovalRequired
	case ledger.StatusWaiting:
		return ledger.RunWaiting
	case ledger.StatusFailed:
		return ledger.RunFailed
	case ledger.StatusCancelled:
		return ledger.RunCancelled
	case ledger.StatusTimedOut:
		return ledger.RunTimedOut
	case ledger.StatusInterrupted:
		return ledger.RunInterrupted
	}
	return ledger.RunCompleted
}
