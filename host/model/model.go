package model

import (
	"encoding/json"

	"github.com/agentichost/agentic/ledger"
)

// ToolSpec declares a function tool the model may call.
type ToolSpec struct {
	// Name is the function's name. Required.
	Name string
	// Description tells the model what the tool does. Optional.
	Description string
	// Parameters is the JSON Schema of the arguments, a JSON object; nil
	// means {"type":"object"}.
	Parameters json.RawMessage
}

// Request is one model pass to stream.
type Request struct {
	// Model is the model id, e.g. "openai/gpt-4o-mini". Required.
	Model string
	// System is the system prompt, sent first; empty sends none.
	System string
	// Messages is the conversation, oldest first.
	Messages []ledger.Message
	// Tools the model may call; none sends no tools field.
	Tools []ToolSpec
	// MaxTokens bounds the output; 0 leaves it unset. It is sent as
	// max_tokens, or as max_completion_tokens towards api.openai.com.
	MaxTokens int
	// Temperature is the sampling temperature; nil leaves it unset.
	Temperature *float64
	// Extra are extra top-level fields of the request body, e.g.
	// OpenRouter's "provider" or "reasoning" objects. A key here replaces
	// the field the client would send under the same name (including
	// "usage").
	Extra map[string]any
	// RawChunks asks for every chunk of the provider's stream as it
	// arrives, verbatim (DeltaRaw deltas, before the fragments decoded
	// from it), for a caller that needs what the provider sent. A model
	// with no such stream sends none. Default: false.
	RawChunks bool
}

// DeltaKind names what a [Delta] carries.
type DeltaKind string

// The delta kinds.
const (
	// DeltaText is a fragment of the answer's text.
	DeltaText DeltaKind = "text"
	// DeltaReasoning is a fragment of the model's reasoning.
	DeltaReasoning DeltaKind = "reasoning"
	// DeltaToolCall is progress on a tool call: its id or name just became
	// known, or a fragment of its arguments (in Text) arrived.
	DeltaToolCall DeltaKind = "tool-call"
	// DeltaRaw is one chunk of the provider's stream, verbatim (Raw), sent
	// only when Request.RawChunks asks for it.
	DeltaRaw DeltaKind = "raw"
)

// Delta is one increment of a streaming pass, reported as it arrives.
type Delta struct {
	Kind DeltaKind
	// Text is the text or reasoning fragment, or for DeltaToolCall the
	// arguments fragment (possibly empty when only the name became known).
	Text string
	// ToolIndex is the tool call's position in Result.ToolCalls
	// (DeltaToolCall only).
	ToolIndex int
	// ToolCallID and ToolName are the call's id and name as far as known
	// (DeltaToolCall only).
	ToolCallID, ToolName string
	// Raw is the chunk as the provider sent it (DeltaRaw only: for the
	// OpenAI-compatible provider, the JSON of one chat.completion.chunk);
	// the receiver owns it.
	Raw []byte
}

// Result is a streamed model pass.
type Result struct {
	// Text is the answer's text (and the refusal text, if the model
	// refused): the concatenation of the DeltaText fragments.
	Text string
	// Reasoning is the reasoning text the provider streamed, if any.
	Reasoning string
	// ToolCalls are the calls the model made, in index order. When the
	// stream broke off they are the calls known to be complete: every call
	// but the last, unless a finish reason other than "error" arrived.
	ToolCalls []ledger.ToolCall
	// FinishReason is the provider's finish reason: "stop", "tool_calls",
	// "length", "content_filter", "error", …; empty when none arrived.
	FinishReason string
	// Model is the model that answered, as the provider named it; the
	// requested model when the stream named none.
	Model string
	// GenerationID is the provider's id of the generation: the chunks'
	// id, else the X-Generation-Id response header.
	GenerationID string
	// Usage is the usage the final usage chunk reported, with OpenRouter's
	// cost fields; zero when none arrived.
	Usage ledger.Usage
	// Raw holds provider-specific data worth keeping for replay, as a
	// JSON object: {"reasoning_details": […]} when OpenRouter streamed
	// reasoning details. Nil when there is none.
	Raw json.RawMessage
}
