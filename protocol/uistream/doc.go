// Package uistream speaks the AI SDK's UI message stream protocol, version
// v1 (the response header x-vercel-ai-ui-message-stream: v1), as the client
// of npm ai 7.0.173 (DefaultChatTransport, AbstractChat, the class useChat
// wraps) reads and validates it. It is a translation and nothing more: no
// routing, no authentication, no tenancy; server/ serves it at
// /v1/ui/chat.
//
// Inbound, it reads what the transport sends: a [ChatRequest] of
// [Message] values, the content of a user's message ([Content]: its text
// and file parts as ledger parts) and the answers a person gave to
// approval requests ([Answers]).
//
// Outbound, a [Converter] turns a run's progress and snapshots
// (host.Update) into [Chunk] values: one assistant message per run, one
// step (start-step … finish-step) per model pass, text and reasoning as
// start/delta/end parts (id: "text-RESPONSE", "reasoning-RESPONSE"), each
// tool call as a tool-NAME part (tool-input-available, then
// tool-output-available, tool-output-error or tool-output-denied;
// tool-approval-request and tool-approval-response in between when a
// person decides), and the run's end as finish (finishReason stop,
// tool-calls when it parks for an approval, interrupted), error + finish
// (error) when it failed or timed out, or abort when it was cancelled. A
// retried pass's void text is taken back with reset-step.
//
// The converter keeps what it sent of each part, so that it can follow a
// run from its progress, from snapshots of its transcript, or from both (a
// resumed stream replays the snapshot, then the progress after it), and
// never sends a character or a tool state twice.
//
// testdata/ holds golden streams, each checked against the converter and
// read by the AI SDK's own parser (testdata/ai-client).
package uistream

// Header and Version name the response header that tells the AI SDK's
// client the body is a UI message stream, and the protocol version this
// package speaks.
const (
	Header  = "x-vercel-ai-ui-message-stream"
	Version = "v1"
)
