package host

import (
	"encoding/json"
	"time"

	"github.com/agentichost/agentic/ledger"
)

// ProgressType names a [Progress] event.
type ProgressType string

// The progress event types, in the order a run emits them.
const (
	// ProgressResponseStart: a model pass starts streaming into the
	// response item ResponseID.
	ProgressResponseStart ProgressType = "response-start"
	// ProgressText: Delta is appended to the item's text at Offset.
	ProgressText ProgressType = "text"
	// ProgressReasoning: Delta is appended to the item's reasoning at
	// Offset.
	ProgressReasoning ProgressType = "reasoning"
	// ProgressToolStart: the tool call Tool starts, with its parsed input.
	ProgressToolStart ProgressType = "tool-start"
	// ProgressToolEnd: the tool call Tool ended, with its output.
	ProgressToolEnd ProgressType = "tool-end"
	// ProgressRetry: a model pass failed and will be retried after
	// Retry.DelayMS. When Retry.Reset is set, the text and reasoning the
	// failed attempt streamed into ResponseID are void: the retry streams
	// into the same item again from offset 0, so a client truncates the
	// item and appends what follows. Nothing of a failed attempt is ever
	// persisted, so a transcript never shows it twice.
	ProgressRetry ProgressType = "retry"
	// ProgressRunEnd: the run ended with Status — or, with status
	// approval_required, parked until its approval requests are decided.
	ProgressRunEnd ProgressType = "run-end"
	// ProgressApprovalRequested: a tool call waits for a person's
	// decision (Approval).
	ProgressApprovalRequested ProgressType = "approval-requested"
	// ProgressApprovalDecided: a tool call's approval request was decided
	// (Approval.State).
	ProgressApprovalDecided ProgressType = "approval-decided"
	// ProgressToolWaiting: the tool call Tool waits (Wait): for an event
	// posted to the session, or until a time. It holds nothing while it
	// waits; the run parks (run-end with status waiting) once the pass's
	// other calls are done, and continues when the wait completes.
	ProgressToolWaiting ProgressType = "tool-waiting"
)

// Progress is one live event of a run, for UIs. It is JSON-safe: marshal it
// as it is to stream it to a client. Each event carries the id of the
// transcript item it streams into, so a client can merge the stream into a
// transcript it loaded earlier.
type Progress struct {
	// Seq is the event's position in its run's progress, from 1: a
	// subscriber that comes back subscribes after the last Seq it saw
	// (see [Run.Subscribe]).
	Seq       int          `json:"seq"`
	Type      ProgressType `json:"type"`
	SessionID string       `json:"sessionId"`
	RunID     string       `json:"runId"`
	// TraceID is the OpenTelemetry trace of the run's spans (TraceIDOf),
	// when the host makes spans; "" otherwise.
	TraceID    string `json:"traceId,omitempty"`
	ResponseID string `json:"responseId"`
	// Delta is the new text of a text or reasoning event.
	Delta string `json:"delta,omitempty"`
	// Offset is where Delta starts in the item's text (or reasoning),
	// counted in Unicode code points.
	Offset int `json:"offset"`
	// Tool describes the call of a tool-start or tool-end event.
	Tool *ToolInfo `json:"tool,omitempty"`
	// Retry describes a retry event.
	Retry *RetryInfo `json:"retry,omitempty"`
	// Status and Reason describe how the run ended, on run-end; Timeout
	// names the timeout that ended a timed_out run, if one did.
	Status  ledger.RunStatus `json:"status,omitempty"`
	Reason  string           `json:"reason,omitempty"`
	Timeout TimeoutKind      `json:"timeout,omitempty"`
	// Approval describes the request of an approval event.
	Approval *ApprovalInfo `json:"approval,omitempty"`
	// Wait describes the wait of a tool-waiting event.
	Wait *Waiting `json:"wait,omitempty"`
}

// ApprovalInfo describes an approval request in a [Progress] event.
type ApprovalInfo struct {
	ApprovalID string `json:"approvalId"`
	// SessionID is the session the request belongs to when it is not the
	// stream's own: a sub-agent's child session, whose run the parent's
	// call waits for (see [NewDelegateTool]); "" for the stream's own.
	SessionID string `json:"sessionId,omitempty"`
	// Kind is "" for a tool call's request, else the kind of the run's
	// own request (see [ApprovalNeededError]), which has no call.
	Kind    string          `json:"kind,omitempty"`
	CallID  string          `json:"callId"`
	Tool    string          `json:"tool"`
	Input   json.RawMessage `json:"input,omitempty"`
	Summary string          `json:"summary,omitempty"`
	Reason  string          `json:"reason,omitempty"`
	// State is pending on approval-requested; approved, denied or expired
	// on approval-decided.
	State     ledger.ApprovalState `json:"state"`
	ExpiresAt time.Time            `json:"expiresAt,omitzero"`
	// Token decides the request with [Session.DecideWithToken].
	Token string `json:"token,omitempty"`
}

// ToolInfo describes a tool call in a [Progress] event.
type ToolInfo struct {
	CallID string `json:"callId"`
	Name   string `json:"name"`
	// Input is the call's parsed arguments (a JSON string holding them
	// when the model produced invalid JSON).
	Input json.RawMessage `json:"input,omitempty"`
	// Output and IsError are set on tool-end.
	Output  string `json:"output,omitempty"`
	IsError bool   `json:"isError,omitempty"`
}

// RetryInfo describes a retry in a [Progress] event.
type RetryInfo struct {
	Reason  string `json:"reason"`
	Attempt int    `json:"attempt"`
	// DelayMS is the wait before the next attempt, in milliseconds.
	DelayMS int64 `json:"delayMs"`
	// Reset tells that the item's text streamed so far is void (see
	// ProgressRetry).
	Reset bool `json:"reset"`
	// Model is the model the failed attempt asked.
	Model string `json:"model,omitempty"`
	// Fallback, when set, is the model the next attempt asks instead
	// (Agent.Fallback): Model is not served, or its retries ran out.
	Fallback string `json:"fallback,omitempty"`
}
