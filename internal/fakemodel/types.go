package fakemodel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Request is a chat-completions request as the server received it.
type Request struct {
	// Model is the requested model id, echoed in the response (unless
	// Models routes the request to another).
	Model string
	// Models is OpenRouter's "models" parameter: the models to try in
	// order after Model (see Options.StrictModels); nil when absent.
	Models []string
	// Messages is the conversation, in order.
	Messages []Message
	// Tools are the function tools offered to the model.
	Tools []Tool
	// Stream reports whether "stream":true was set.
	Stream bool
	// IncludeUsage reports stream_options.include_usage. The server sends
	// usage either way, as OpenRouter does.
	IncludeUsage bool
	// UsageInclude reports OpenRouter's usage.include. Informational only.
	UsageInclude bool
	// MaxTokens is max_completion_tokens, else max_tokens; 0 when absent.
	MaxTokens int
	// Raw is the request body exactly as received.
	Raw json.RawMessage
	// Header is a copy of the request's HTTP headers.
	Header http.Header
}

// Message is one conversation message of a [Request].
type Message struct {
	// Role is "system", "developer", "user", "assistant" or "tool".
	Role string
	// Text is the message's text: the string content, or the text parts
	// joined with "\n".
	Text string
	// Parts holds the content parts when the content was an array, nil when
	// it was a string or null.
	Parts []Part
	// ToolCalls are the tool calls of an assistant message.
	ToolCalls []ToolCall
	// ToolCallID is the id of the call a tool message answers.
	ToolCallID string
	// Name is the optional participant name.
	Name string
}

// Part is one element of an array message content.
type Part struct {
	// Type is the part type: "text", "image_url", "input_audio", "file"….
	Type string
	// Text is the text of a "text" part.
	Text string
	// ImageURL is image_url.url of an "image_url" part (a URL or data URL).
	ImageURL string
	// AudioData and AudioFormat are input_audio.data (base64) and
	// input_audio.format of an "input_audio" part.
	AudioData, AudioFormat string
	// Raw is the part as received, for any other field.
	Raw json.RawMessage
}

// Tool is a function tool offered in a [Request].
type Tool struct {
	// Name is the function name.
	Name string
	// Description is the function description.
	Description string
	// Parameters is the JSON Schema of the arguments (may be nil).
	Parameters json.RawMessage
}

// ToolCall is a function call: one the model makes in a [Reply], or one
// found in an assistant message of a [Request].
type ToolCall struct {
	// ID is the call id. In a Reply, empty means generate "call_…".
	ID string
	// Name is the function name.
	Name string
	// Arguments is the JSON-encoded argument object, e.g. `{"path":"a"}`.
	// In a Reply, empty means "{}".
	Arguments string
}

// Reply is what the fake model answers to one chat request.
type Reply struct {
	// Text is the assistant text, streamed in Options.ChunkSize-word chunks.
	Text string
	// Reasoning is streamed first as delta.reasoning (message.reasoning
	// when not streaming). Default none.
	Reasoning string
	// ToolCalls are the calls the model makes, streamed in order with
	// distinct indexes after Text.
	ToolCalls []ToolCall
	// FinishReason defaults to "tool_calls" when ToolCalls is non-empty,
	// else "stop". native_finish_reason carries the same value.
	FinishReason string
	// Usage overrides the estimated usage. Default nil: estimate tokens from
	// the text lengths (about 4 characters a token), cost 0, is_byok false.
	Usage *Usage
	// Hold, when set, pauses the stream after HoldAfter chunks of Text
	// (the reasoning before it is sent whole) until Hold is closed, the
	// client goes away or the server closes: a test reads the reply
	// mid-stream for as long as it needs, then lets it finish. It applies
	// to a streamed reply with no Fault.
	Hold <-chan struct{}
	// HoldAfter is the number of Text chunks sent before the pause of
	// Hold.
	HoldAfter int
	// Fault, when set, is served instead of this reply on the first request
	// that takes it from the script; the reply stays at the head of the
	// queue, so the next request (the retry) gets it without the fault.
	Fault *Fault
}

// Usage is an explicit usage object for a [Reply]. Zero fields are sent as 0.
type Usage struct {
	// PromptTokens and CompletionTokens are the token counts.
	// CompletionTokens includes ReasoningTokens.
	PromptTokens, CompletionTokens int
	// TotalTokens defaults to PromptTokens+CompletionTokens.
	TotalTokens int
	// CachedTokens and CacheWriteTokens fill prompt_tokens_details.
	CachedTokens, CacheWriteTokens int
	// ReasoningTokens fills completion_tokens_details.reasoning_tokens.
	ReasoningTokens int
	// Cost is usage.cost, what OpenRouter charged.
	Cost float64
	// IsBYOK is usage.is_byok; nil omits the key (the legacy shape).
	IsBYOK *bool
	// UpstreamCost is cost_details.upstream_inference_cost. When it is zero
	// and the call is not BYOK, Cost is copied into it, as OpenRouter does on
	// credit-billed calls.
	UpstreamCost float64
	// UpstreamPromptCost and UpstreamCompletionsCost split UpstreamCost.
	// When both are zero, all of it is reported as completion cost except a
	// share proportional to the prompt tokens.
	UpstreamPromptCost, UpstreamCompletionsCost float64
}

// Bool returns a pointer to b, for [Usage].IsBYOK.
func Bool(b bool) *bool { return &b }

// wire shapes of the request.

type wireRequest struct {
	Model         string        `json:"model"`
	Models        []string      `json:"models"`
	Messages      []wireMessage `json:"messages"`
	Tools         []wireTool    `json:"tools"`
	Stream        bool          `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Usage *struct {
		Include bool `json:"include"`
	} `json:"usage"`
	MaxTokens           int `json:"max_tokens"`
	MaxCompletionTokens int `json:"max_completion_tokens"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

type wirePart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url"`
	InputAudio *struct {
		Data   string `json:"data"`
		Format string `json:"format"`
	} `json:"input_audio"`
}

type wireTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// parseRequest decodes a chat-completions request body.
func parseRequest(body []byte, h http.Header) (Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return Request{}, fmt.Errorf("invalid JSON body: %v", err)
	}
	if len(w.Messages) == 0 {
		return Request{}, errors.New("messages: at least one message is required")
	}
	req := Request{
		Model:        w.Model,
		Models:       w.Models,
		Stream:       w.Stream,
		IncludeUsage: w.StreamOptions != nil && w.StreamOptions.IncludeUsage,
		UsageInclude: w.Usage != nil && w.Usage.Include,
		MaxTokens:    w.MaxTokens,
		Raw:          append(json.RawMessage(nil), body...),
		Header:       h.Clone(),
	}
	if w.MaxCompletionTokens > 0 {
		req.MaxTokens = w.MaxCompletionTokens
	}
	for i, wm := range w.Messages {
		m := Message{Role: wm.Role, Name: wm.Name, ToolCallID: wm.ToolCallID}
		content := bytes.TrimSpace(wm.Content)
		switch {
		case len(content) == 0 || string(content) == "null":
		case content[0] == '"':
			if err := json.Unmarshal(content, &m.Text); err != nil {
				return Request{}, fmt.Errorf("messages[%d].content: %v", i, err)
			}
		case content[0] == '[':
			var raws []json.RawMessage
			if err := json.Unmarshal(content, &raws); err != nil {
				return Request{}, fmt.Errorf("messages[%d].content: %v", i, err)
			}
			var texts []string
			for j, raw := range raws {
				var wp wirePart
				if err := json.Unmarshal(raw, &wp); err != nil {
					return Request{}, fmt.Errorf("messages[%d].content[%d]: %v", i, j, err)
				}
				p := Part{Type: wp.Type, Text: wp.Text, Raw: raw}
				if wp.ImageURL != nil {
					p.ImageURL = wp.ImageURL.URL
				}
				if wp.InputAudio != nil {
					p.AudioData, p.AudioFormat = wp.InputAudio.Data, wp.InputAudio.Format
				}
				if p.Type == "text" {
					texts = append(texts, p.Text)
				}
				m.Parts = append(m.Parts, p)
			}
			m.Text = strings.Join(texts, "\n")
		default:
			return Request{}, fmt.Errorf("messages[%d].content: want a string, an array or null", i)
		}
		for _, tc := range wm.ToolCalls {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		req.Messages = append(req.Messages, m)
	}
	for _, wt := range w.Tools {
		req.Tools = append(req.Tools, Tool{Name: wt.Function.Name, Description: wt.Function.Description, Parameters: wt.Function.Parameters})
	}
	return req, nil
}
