// Package provider is the host's model client: it streams one model pass
// from any OpenAI-compatible chat-completions endpoint (OpenRouter by
// default) through openai-go v3.
//
// A [Client] implements the host's model contract (package host/model): it
// turns a [model.Request] — the conversation as [ledger.Message] values, the
// tools as [model.ToolSpec] values — into a streamed chat completion. It
// reports text, reasoning and tool-call fragments to a callback as they
// arrive and returns the pass as a [model.Result]: text, reasoning, tool
// calls assembled by index, finish reason, model, generation id and the
// usage the provider reported, including OpenRouter's cost fields (see
// [ledger.Usage.Billed] for the billing rule). The host does not import
// this package: the program that builds a host (the agentic-host command,
// a server) builds a Client and passes it as the host's model.
//
// # Retries
//
// The client never retries: openai-go's own retries are turned off, because
// the host is the one retry owner. Every failure is returned as data that
// [model.Classify] decides on:
//
//   - an HTTP error status, or an error chunk in the middle of a stream, is
//     a [*model.Error] carrying the status, the provider's code, message and
//     metadata, and the Retry-After delay;
//   - a stream that ends without a finish reason is [model.ErrIncompleteStream];
//   - a stream that stays silent longer than [Config.IdleTimeout] is
//     [model.ErrStalled];
//   - a stream whose chunks cannot be decoded is [model.ErrMalformedStream];
//   - cancellation returns the context's error.
//
// On every error [Client.Stream] also returns what had streamed so far (the
// text, the reasoning and the tool calls that were complete), so that the
// host can record a partial pass.
//
// # Wire details
//
// Requests always ask for usage in the stream
// (stream_options.include_usage) and, except towards api.openai.com, which
// rejects unknown fields, for OpenRouter's usage accounting
// (usage.include). The client reads usage from the final usage chunk's raw
// JSON, with the fields OpenRouter adds (cost, is_byok, cost_details).
//
// Requests are sent by openai-go (its request options, status and error
// handling); the event stream is read by the client. Each chunk of the
// usual shape is decoded without reflection, and any other — an error
// member, a field of an unexpected type, anything the fast decoder does
// not read exactly as openai-go would — by openai-go itself; a
// differential test and a fuzzer over the wire fixtures pin the two
// together (chunk.go). Reasoning arrives as the extra delta
// field "reasoning" (or "reasoning_content" on some servers); OpenRouter's
// "reasoning_details" are kept in [model.Result.Raw] for replay.
package provider
