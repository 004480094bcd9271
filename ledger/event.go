package ledger

import (
	"encoding/json"
	"strings"
	"time"
)

// Kind names what an [Event] records. The kind decides which body field of
// the event is set.
type Kind string

// The event kinds. Each names one body field of [Event].
const (
	KindInput            Kind = "input"             // a user message, sent or queued (Input)
	KindRunStart         Kind = "run-start"         // a run begins answering inputs (RunStart)
	KindStep             Kind = "step"              // one model pass finished (Step)
	KindToolStart        Kind = "tool-start"        // intent to run an external tool (ToolStart)
	KindToolResult       Kind = "tool-result"       // a tool call's result (ToolResult)
	KindApprovalRequest  Kind = "approval-request"  // a tool call waits for approval (ApprovalRequest)
	KindApprovalDecision Kind = "approval-decision" // a decision on an approval request (ApprovalDecision)
	KindCompaction       Kind = "compaction"        // older turns summarised (Compaction)
	KindPoke             Kind = "poke"              // the host nudged the model (Poke)
	KindRunEnd           Kind = "run-end"           // a run ended (RunEnd)
	KindResumeAttempt    Kind = "resume-attempt"    // a host tries to resume an interrupted run (ResumeAttempt)
	KindRetry            Kind = "retry"             // a failed model pass will be retried (Retry)
	KindFork             Kind = "fork"              // the session was forked from another's ledger (Fork)
	KindToolJournal      Kind = "tool-journal"      // what a plugin's call did through its host functions (ToolJournal)
)

// Kinds lists every event kind this version of the codec knows, in a fixed
// order.
func Kinds() []Kind {
	return []Kind{
		KindInput, KindRunStart, KindStep, KindToolStart, KindToolResult,
		KindApprovalRequest, KindApprovalDecision, KindCompaction, KindPoke,
		KindRunEnd, KindResumeAttempt, KindRetry, KindFork, KindToolJournal,
	}
}

// Event is one entry of a session's append-only ledger. The envelope fields
// (ID, Kind, Time, RunID) are common to every kind; exactly one body field,
// the one named by Kind, is set.
//
// Events are values: every id and time in them is minted once, by the host,
// before the append, and never changes afterwards.
type Event struct {
	// ID identifies the event within its session. Required.
	ID string `json:"id"`
	// Kind names the body that is set. Required.
	Kind Kind `json:"kind"`
	// Time is when the host minted the event, in UTC. Required.
	Time time.Time `json:"time"`
	// RunID is the run the event belongs to; empty for an input that no
	// run has picked up yet when it was appended, and for a fork record.
	RunID string `json:"run_id,omitempty"`

	Input            *Input            `json:"input,omitempty"`
	RunStart         *RunStart         `json:"run_start,omitempty"`
	Step             *Step             `json:"step,omitempty"`
	ToolStart        *ToolStart        `json:"tool_start,omitempty"`
	ToolResult       *ToolResult       `json:"tool_result,omitempty"`
	ApprovalRequest  *ApprovalRequest  `json:"approval_request,omitempty"`
	ApprovalDecision *ApprovalDecision `json:"approval_decision,omitempty"`
	Compaction       *Compaction       `json:"compaction,omitempty"`
	Poke             *Poke             `json:"poke,omitempty"`
	RunEnd           *RunEnd           `json:"run_end,omitempty"`
	ResumeAttempt    *ResumeAttempt    `json:"resume_attempt,omitempty"`
	Retry            *Retry            `json:"retry,omitempty"`
	Fork             *Fork             `json:"fork,omitempty"`
	ToolJournal      *ToolJournal      `json:"tool_journal,omitempty"`
}

// Role is the author of a [Message].
type Role string

// The roles of a conversation.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// PartType names what a [Part] carries.
type PartType string

// The content part types.
const (
	PartText  PartType = "text"  // Text
	PartImage PartType = "image" // Data and MIME, or URL
	PartAudio PartType = "audio" // Data and MIME
	PartFile  PartType = "file"  // Data and MIME, or URL; Name optional
)

// Part is one piece of a message's content. Binary data round-trips through
// the codec byte for byte.
type Part struct {
	Type PartType `json:"type"`
	Text string   `json:"text,omitempty"`
	// MIME is the media type of Data, e.g. "image/png" or "audio/wav".
	MIME string `json:"mime,omitempty"`
	// Data holds inline bytes (base64 in JSON).
	Data []byte `json:"data,omitempty"`
	// URL points at the content instead of carrying it inline.
	URL string `json:"url,omitempty"`
	// Name is a file name, for PartFile.
	Name string `json:"name,omitempty"`
	// Blob is set when the part's bytes are kept by reference: the digest
	// ("sha256:" and 64 hex digits) of a blob in the store's blob store
	// (storage.Blobs), holding what Data would hold; Data is then empty.
	// Readers that need the bytes (the model's request, the transcript,
	// the UI stream) resolve it; see [Event.BlobRefs]. Empty for bytes
	// kept inline.
	Blob string `json:"blob,omitempty"`
	// Size is the length in bytes of the blob Blob names; 0 (absent) for
	// a part without Blob.
	Size int64 `json:"size,omitempty"`
}

// TextPart returns a text [Part].
func TextPart(s string) Part { return Part{Type: PartText, Text: s} }

// Input is a user message. It is appended before anything answers it, so a
// crash never loses it.
type Input struct {
	// MessageID is the durable id of the message. Required.
	MessageID string `json:"message_id"`
	// RequestID is the caller's id for the send, used to deduplicate a
	// retried send; empty when the caller gave none.
	RequestID string `json:"request_id,omitempty"`
	// Parts is the content; at least one part. Required.
	Parts []Part `json:"parts"`
	// Parent names the tool call of another session's run that sent the
	// message, when the session is a sub-agent's child session (see
	// host.Delegate); nil for a message from a person or a program.
	Parent *ParentCall `json:"parent,omitempty"`
	// Overlap is set on a message sent while a run of the session worked,
	// whose sender asked it to stop that run: [OverlapInterrupt] or
	// [OverlapRollback]. No run folds such a message in: the run in
	// flight is cancelled, and a run of its own answers it. Empty for
	// every other message.
	Overlap string `json:"overlap,omitempty"`
}

// The overlaps a message may ask for (Input.Overlap).
const (
	// OverlapInterrupt cancels the run in flight; what it did stays, and
	// the model sees it.
	OverlapInterrupt = "interrupt"
	// OverlapRollback cancels the run in flight and drops its turn (its
	// messages, passes and tool results) from what the model sees next;
	// the ledger keeps it (RunEnd.RolledBack).
	OverlapRollback = "rollback"
)

// ChildSessionOf returns the child session a sub-agent's tool result names
// by its source, "agent:NAME/SESSION" (see host.NewDelegateTool); "" for
// any other source.
func ChildSessionOf(source string) string {
	rest, ok := strings.CutPrefix(source, "agent:")
	if !ok {
		return ""
	}
	_, id, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	return id
}

// ParentCall names the tool call that started a child session's run: the
// parent session, its run, and the call whose result the child's outcome
// becomes.
type ParentCall struct {
	// SessionID is the parent session. Required.
	SessionID string `json:"session_id"`
	// RunID is the parent's run that made the call.
	RunID string `json:"run_id,omitempty"`
	// CallID is the parent's tool call. Required.
	CallID string `json:"call_id"`
	// Agent is the parent run's agent.
	Agent string `json:"agent,omitempty"`
}

// RunStart opens a run: the agent loop working to answer one or more inputs.
type RunStart struct {
	// Inputs are the message ids the run answers. Required.
	Inputs []string `json:"inputs"`
	// ResponseID is the id of the run's first response item, minted here
	// so that the item is durable before the model streams into it.
	// Required.
	ResponseID string `json:"response_id"`
	// Agent names the agent configuration that runs.
	Agent string `json:"agent,omitempty"`
	// Model is the model the run starts with.
	Model string `json:"model,omitempty"`
	// MaxSteps bounds the number of model passes of the run.
	MaxSteps int `json:"max_steps,omitempty"`
	// Task marks the run of a task: a host that resumes the run after a
	// restart steers it as that task.
	Task *TaskRun `json:"task,omitempty"`
}

// TaskRun is what a task's run needs to go on after a restart: what it
// must deliver, and how a submission is checked.
type TaskRun struct {
	// Deliverable names what the task must produce.
	Deliverable string `json:"deliverable,omitempty"`
	// Description describes it.
	Description string `json:"description,omitempty"`
	// Schema is the deliverable's JSON Schema. Required.
	Schema json.RawMessage `json:"schema"`
	// Validator names the validator, registered with the host, that
	// checks submissions; empty means the schema's own.
	Validator string `json:"validator,omitempty"`
	// MaxPokes bounds the pokes sent to a model that stops without
	// submitting (0: none).
	MaxPokes int `json:"max_pokes,omitempty"`
}

// ToolCall is a model's request to run a tool.
type ToolCall struct {
	// ID is the provider's call id; it pairs the call with its result.
	ID string `json:"id"`
	// Name is the tool's name.
	Name string `json:"name"`
	// Arguments is the JSON the model produced, verbatim (it may be
	// malformed: the tool reports that back to the model).
	Arguments string `json:"arguments"`
}

// Usage is what the provider reported for one model pass, as it reported it.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
	CachedTokens     int64 `json:"cached_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	ReasoningTokens  int64 `json:"reasoning_tokens,omitempty"`
	// Cost is the provider's `cost` field: what it charged the account.
	Cost float64 `json:"cost,omitempty"`
	// IsBYOK is the provider's `is_byok` flag; nil when absent.
	IsBYOK *bool `json:"is_byok,omitempty"`
	// UpstreamCost is `cost_details.upstream_inference_cost`.
	UpstreamCost float64 `json:"upstream_cost,omitempty"`
	// CostUnknown tells that the provider reported no cost for the call:
	// no usage, or a usage without a numeric `cost` (an endpoint that does
	// not price its calls, unlike OpenRouter). Its Cost is then 0, and a
	// budget counts the call as over the budget, never as free.
	CostUnknown bool `json:"cost_unknown,omitempty"`
}

// Billed is the spend of the pass: Cost, plus UpstreamCost when the call was
// made with the user's own key (IsBYOK true). When IsBYOK is false or
// absent the upstream cost is already part of Cost (credits) or unknown, and
// is never added.
func (u Usage) Billed() float64 {
	if u.IsBYOK != nil && *u.IsBYOK {
		return u.Cost + u.UpstreamCost
	}
	return u.Cost
}

// Add returns the sum of two usages. The sum's IsBYOK is nil: a total mixes
// calls; use [Usage.Billed] per pass and add the results.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		PromptTokens:     u.PromptTokens + v.PromptTokens,
		CompletionTokens: u.CompletionTokens + v.CompletionTokens,
		TotalTokens:      u.TotalTokens + v.TotalTokens,
		CachedTokens:     u.CachedTokens + v.CachedTokens,
		CacheWriteTokens: u.CacheWriteTokens + v.CacheWriteTokens,
		ReasoningTokens:  u.ReasoningTokens + v.ReasoningTokens,
		Cost:             u.Cost + v.Cost,
		UpstreamCost:     u.UpstreamCost + v.UpstreamCost,
		CostUnknown:      u.CostUnknown || v.CostUnknown,
	}
}

// Step is one finished model pass: what the model said and asked for.
type Step struct {
	// ResponseID is the response item this pass streamed into. Required.
	ResponseID string `json:"response_id"`
	// NextResponseID is minted for the run's next pass, so that its item
	// is durable before it streams. Empty on a run's last pass.
	NextResponseID string `json:"next_response_id,omitempty"`
	// Index is the pass's number within its run, from 0.
	Index int `json:"index"`
	// Inputs are the ids of queued messages (appended while the run
	// worked) that this pass folded in: the model saw them first.
	Inputs []string `json:"inputs,omitempty"`
	// Text is the assistant text of the pass.
	Text string `json:"text,omitempty"`
	// Reasoning is the reasoning text the provider streamed, if any.
	Reasoning string `json:"reasoning,omitempty"`
	// ToolCalls are the tools the model asked to run, in its order.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// FinishReason is the provider's finish reason ("stop", "tool_calls",
	// "length", …).
	FinishReason string `json:"finish_reason,omitempty"`
	// Model is the model that answered, as the provider named it.
	Model string `json:"model,omitempty"`
	// GenerationID is the provider's id of the generation.
	GenerationID string `json:"generation_id,omitempty"`
	// Usage is the provider-reported usage and cost.
	Usage Usage `json:"usage"`
	// Partial marks a pass cut short by cancellation: Text is what had
	// streamed, and ToolCalls holds only calls that were complete.
	Partial bool `json:"partial,omitempty"`
	// Raw is provider-specific payload kept for replay (e.g. reasoning
	// details). Transcripts for clients drop it.
	Raw json.RawMessage `json:"raw,omitempty"`
}

// ToolStart records the intent to run a tool with an external effect,
// before it runs. A tool-start without a tool-result means the outcome is
// unknown.
type ToolStart struct {
	CallID string `json:"call_id"`
	Name   string `json:"name"`
	// Effect is the tool's declared effect ("read", "write", "external").
	Effect string `json:"effect,omitempty"`
	// Idempotent tells that the tool may safely run again with the same
	// call id.
	Idempotent bool `json:"idempotent,omitempty"`
}

// ToolJournal is a stretch of a plugin call's journal: the host functions
// the call made, in order, each with the answer the guest got, made
// durable before the call went on past them. A call's journal is the
// entries of its tool-journal events, in ledger order, without gaps (At
// counts on from the previous stretch). A resumed run replays an
// unanswered call from it: the same module answers its host calls from the
// journal, then goes on live (package plugins).
type ToolJournal struct {
	CallID string `json:"call_id"`
	Name   string `json:"name"`
	// Source is the hash of the module that made the call: a replay runs
	// the same module or none.
	Source string `json:"source"`
	// At is the place of the first entry in the call's journal, from 0.
	At int `json:"at"`
	// Entries are the host calls, in the order the guest made them.
	Entries []JournalEntry `json:"entries"`
}

// The ops of a [JournalEntry].
const (
	// JournalHTTPSend: an HTTP request about to leave the host, journaled
	// before it is sent; Key is its idempotency key. Without the
	// JournalHTTP entry that follows it, the request may or may not have
	// reached its server.
	JournalHTTPSend = "http-send"
	// JournalHTTP: the answer of the request the JournalHTTPSend before it
	// sent (or why there is none).
	JournalHTTP = "http"
	// JournalKVGet, JournalKVSet, JournalKVDelete: a key-value access and
	// its answer.
	JournalKVGet    = "kv-get"
	JournalKVSet    = "kv-set"
	JournalKVDelete = "kv-delete"
	// JournalWaitEvent: the guest waits for the event named Key (posted
	// to the session from outside); JournalWaitTimer: it waits until the
	// time Key (RFC 3339). Until the JournalWaitDone that completes it
	// follows, the call waits, holding nothing: its run is parked
	// ([Parked], [OpenWaits]).
	JournalWaitEvent = "wait-event"
	JournalWaitTimer = "wait-timer"
	// JournalWaitDone completes the wait before it: Answer is the event's
	// payload (none for a timer).
	JournalWaitDone = "wait-done"
	// JournalWalltime, JournalNanotime and JournalRandom: what the guest
	// read of its wall clock, its monotonic clock (8 bytes a reading, big
	// endian nanoseconds) and its random numbers, through WASI; one
	// entry holds a run of readings of one stream. A replay reads them
	// again, in order, as long as there are; they are never checked.
	JournalWalltime = "walltime"
	JournalNanotime = "nanotime"
	JournalRandom   = "random"
)

// JournalEntry is one host call of a plugin and its answer.
type JournalEntry struct {
	// Op names the host call (JournalHTTPSend, JournalHTTP, …).
	Op string `json:"op"`
	// Request is the digest of what the guest passed ("sha256:" and hex):
	// a replay that passes anything else has diverged.
	Request string `json:"request"`
	// What names the call for people: a request's method and URL, a key.
	// Cut to 256 bytes.
	What string `json:"what,omitempty"`
	// Key is a JournalHTTPSend's idempotency key, the one its request
	// carries (and carries again if it is re-sent).
	Key string `json:"key,omitempty"`
	// Answer is what the guest got back, byte for byte.
	Answer []byte `json:"answer,omitempty"`
}

// ToolResult is the outcome of one tool call.
type ToolResult struct {
	CallID string `json:"call_id"`
	Name   string `json:"name"`
	// Output is what the model sees: the tool's output, or the error
	// message when IsError.
	Output string `json:"output"`
	// OutputBlob is set when the output was too large to keep inline:
	// the digest ("sha256:" and 64 hex digits) of the blob (in the store's
	// storage.Blobs) that holds the whole output, which is what the model
	// sees; Output then holds only a preview of it (its first bytes), for
	// people reading the ledger. Empty for an output kept whole in Output.
	OutputBlob string `json:"output_blob,omitempty"`
	// OutputSize is the whole output's length in bytes when OutputBlob is
	// set; 0 (absent) otherwise.
	OutputSize int64 `json:"output_size,omitempty"`
	// IsError tells that the call failed; Output explains why.
	IsError bool `json:"is_error,omitempty"`
	// Source identifies the code that produced the result, e.g. a Wasm
	// module's "sha256:…" digest.
	Source string `json:"source,omitempty"`
	// DurationMS is how long the call ran, in milliseconds.
	DurationMS int64 `json:"duration_ms,omitempty"`
	// Fuel is the work a metered tool (a Wasm plugin) did for the call,
	// in its fuel units — for a task's submission, its validator's; 0
	// (absent) for a tool that is not metered.
	Fuel int64 `json:"fuel,omitempty"`
	// PolicyFuel is the fuel the metered policies (Wasm plugins) that
	// decided on the call used, asking them once more after an approval
	// included; 0 (absent) when none is metered.
	PolicyFuel int64 `json:"policy_fuel,omitempty"`
	// Synthetic marks a result the host made up because the tool never
	// produced one (an interruption, an unknown outcome).
	Synthetic bool `json:"synthetic,omitempty"`
	// Traffic is what a plugin's call did through the host's functions
	// (HTTP requests, key-value accesses), bounded; set on every result of
	// a plugin's tool, nil for other tools and for results recorded before
	// the host recorded it.
	Traffic *ToolTraffic `json:"traffic,omitempty"`
}

// ApprovalRequest records that a tool call waits for a person's decision:
// a policy required approval. Its run parks — nothing runs, nothing is
// held — until every such call of the pass is decided.
type ApprovalRequest struct {
	// ApprovalID identifies the request (and the decision on it).
	ApprovalID string `json:"approval_id"`
	// Kind is "" for a request about a tool call. A request of another
	// kind is the run's own, asked by a hook before a model pass (e.g.
	// "budget_exceeded": a person lets the run go past a budget, or stops
	// it); it has no CallID, and the run waits on it before its next pass.
	Kind string `json:"kind,omitempty"`
	// CallID is the tool call's id; Name its tool.
	CallID string `json:"call_id"`
	Name   string `json:"name"`
	// Effect is the tool's declared effect.
	Effect string `json:"effect,omitempty"`
	// Input is the call's arguments (JSON), for the person to read.
	Input json.RawMessage `json:"input,omitempty"`
	// InputDigest is "sha256:" and the hex SHA-256 of the canonical
	// (compacted) arguments: what an approval is bound to.
	InputDigest string `json:"input_digest,omitempty"`
	// Summary describes the call for the person; Reason is the policy's.
	Summary string `json:"summary,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Policy names the policy that required approval, and PolicySource
	// is its code's identity (a plugin module's content hash); a decision
	// holds only while that code is the same.
	Policy       string `json:"policy,omitempty"`
	PolicySource string `json:"policy_source,omitempty"`
	// PolicyFuel is the fuel the metered policies that asked used.
	PolicyFuel int64 `json:"policy_fuel,omitempty"`
	// ExpiresAt is when the request lapses undecided: the call is then
	// refused as expired.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// The decisions on an approval request.
const (
	// DecisionApprove lets the call run.
	DecisionApprove = "approve"
	// DecisionDeny refuses it: the model is told, and the run goes on.
	DecisionDeny = "deny"
	// DecisionExpire refuses it because nobody decided in time.
	DecisionExpire = "expire"
	// DecisionVoid withdraws the request: the policy's code changed since
	// it asked, so the call is asked about again.
	DecisionVoid = "void"
	// DecisionEdit lets the call run with the input a person changed
	// (ApprovalDecision.Input): the tool's schema and the policies decide
	// it again, and the model's call stays recorded as it asked.
	DecisionEdit = "edit"
	// DecisionRespond answers the call with a person's text
	// (ApprovalDecision.Response) as its result: the tool never runs.
	DecisionRespond = "respond"
)

// ApprovalDecision records the decision on an [ApprovalRequest].
type ApprovalDecision struct {
	ApprovalID string `json:"approval_id"`
	// Decision is DecisionApprove, DecisionDeny, DecisionExpire,
	// DecisionVoid, DecisionEdit or DecisionRespond.
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
	// By names who decided ("" for the host itself: an expiry, a void).
	By string `json:"by,omitempty"`
	// Input is the input an edit lets the call run with (a JSON object),
	// and InputDigest its digest (see [InputDigest]), which the call is
	// checked against when it runs. Set for DecisionEdit alone.
	Input       json.RawMessage `json:"input,omitempty"`
	InputDigest string          `json:"input_digest,omitempty"`
	// Response is the text a respond gives the model as the call's
	// result. Set for DecisionRespond alone.
	Response string `json:"response,omitempty"`
}

// Compaction replaces the turns before it, for the model, with a summary.
// Transcripts never show it.
type Compaction struct {
	// Summary is the hand-off message that stands for the older turns.
	Summary string `json:"summary"`
	// Through is the id of the last event the summary covers.
	Through string `json:"through"`
	// PromptTokens is the prompt size that triggered the compaction.
	PromptTokens int64 `json:"prompt_tokens,omitempty"`
	Usage        Usage `json:"usage"`
}

// Poke is a host message that nudges the model (e.g. to finish a task).
// Transcripts never show it; the model sees it as a user message.
type Poke struct {
	Text string `json:"text"`
}

// RunStatus is how a run ended.
type RunStatus string

// The terminal run statuses.
const (
	RunCompleted   RunStatus = "completed"
	RunCancelled   RunStatus = "cancelled"
	RunFailed      RunStatus = "failed"
	RunTimedOut    RunStatus = "timed_out"
	RunInterrupted RunStatus = "interrupted"
	// RunApprovalRequired is the state of a run parked until people
	// decide its pending approval requests. It is never a run-end's
	// status: a parked run has not ended.
	RunApprovalRequired RunStatus = "approval_required"
	// RunWaiting is the state of a run parked until the events or times
	// its plugins' calls wait for come ([OpenWaits]); like
	// RunApprovalRequired, never a run-end's status.
	RunWaiting RunStatus = "waiting"
)

// RunEnd closes a run.
type RunEnd struct {
	Status RunStatus `json:"status"`
	// Reason explains a status other than completed.
	Reason string `json:"reason,omitempty"`
	// Timeout names the timeout that ended a timed_out run: "total",
	// "step", "first-chunk" or "chunk" (see host.AgentTimeouts); empty
	// for a run that timed out on its caller's deadline.
	Timeout string `json:"timeout,omitempty"`
	// Inputs are the ids of queued messages that the run's last pass had
	// folded in when the run ended without recording that pass (it failed
	// or was cancelled before streaming): the run answered them with its
	// end.
	Inputs []string `json:"inputs,omitempty"`
	// RestartedBy names the run that re-runs this run's inputs from
	// scratch. The model no longer sees this run's passes and tool
	// results; the transcript still shows them, as failed.
	RestartedBy string `json:"restarted_by,omitempty"`
	// Deliverable is the validated deliverable of a task run that ended
	// with an accepted submission.
	Deliverable json.RawMessage `json:"deliverable,omitempty"`
	// RolledBack marks a run a message sent with [OverlapRollback]
	// cancelled: the model no longer sees its messages, passes and tool
	// results; the transcript still shows them.
	RolledBack bool `json:"rolled_back,omitempty"`
}

// ResumeAttempt records that a host set out to resume an interrupted run,
// so that a run which crashes the process on every resume is given up after
// a bounded number of attempts.
type ResumeAttempt struct {
	Attempt int    `json:"attempt"`
	Host    string `json:"host,omitempty"`
}

// Retry records that a model pass failed with a transient error and will be
// tried again. The retried pass streams into the same response item, from
// its start: nothing of the failed attempt was persisted.
type Retry struct {
	// ResponseID is the item the failed attempt streamed into.
	ResponseID string `json:"response_id"`
	// Attempt is the number of the attempt that failed, from 1.
	Attempt int `json:"attempt"`
	// Reason is the failure, as classified.
	Reason string `json:"reason"`
	// DelayMS is the wait before the next attempt, in milliseconds.
	DelayMS int64 `json:"delay_ms"`
}

// Fork is the first event of a session made from another session's ledger
// (a fork). The Copied events that follow it are copies of the source's
// events up to the fork point, with their ids, run ids and times as the
// source recorded them (so that a message or a response keeps its id in
// the fork); everything after them is the fork's own. The source is never
// changed.
type Fork struct {
	// Source is the id of the session the fork was made from. Required.
	Source string `json:"source"`
	// At is the id of the source's event the fork was made at: the input
	// event of a user message (the fork answers it anew) or a step event
	// (the fork goes on after that model pass, with its tool results).
	// Required.
	At string `json:"at"`
	// Item is the fork point as a transcript shows it: the user message's
	// id or the step's response id.
	Item string `json:"item,omitempty"`
	// Copied is the number of events copied from the source that follow
	// this one. Their usage and cost were the source's: [UsageOf] does not
	// count them again.
	Copied int `json:"copied"`
	// Agent names the agent the fork runs with, when the caller chose one.
	Agent string `json:"agent,omitempty"`
	// Model is the model the fork runs with, when the caller chose one.
	Model string `json:"model,omitempty"`
}
