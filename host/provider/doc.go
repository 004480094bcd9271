// Package provider is the host's model client: it streams one model pass
// from any OpenAI-compatible chat-completions endpoint (OpenRouter by
// default) through openai-go v3.
//
// A [Client] turns a [Request] — the conversation as [ledger.Message] values,
// the tools as [ToolSpec] values — into a streamed chat completion. It
// reports text, reasoning and tool-call fragments to a callback as they
// arrive and returns the pass as a [Result]: text, reasoning, tool calls
// assembled by index, finish reason, model, generation id and the usage the
// provider reported, including OpenRouter's cost fields (see
// [ledger.Usage.Billed] for the billing rule).
//
// # Retries
//
// The client never retries: openai-go's own retries are turned off, because
// the host is the one retry owner. Every failure is returned as data the
// host's classifier can decide on:
//
//   - an HTTP error status, or an error chunk in the middle of a stream, is
//     an [*Error] carrying the status, the provider's code, message and
//     metadata, and the Retry-After delay;
//   - a stream that ends without a finish reason is [ErrIncompleteStream];
//   - a stream that stays silent longer than [Config.IdleTimeout] is
//     [ErrStalled];
//   - a stream whose chunks cannot be decoded is [ErrMalformedStream];
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
// (usage.include). openai-go's accumulator drops the fields OpenRouter adds
// to usage (cost, is_byok, cost_details), so the client reads usage from
// the final usage chunk's raw JSON. Reasoning arrives as the extra delta
// field "reasoning" (or "reasoning_content" on some servers); OpenRouter's
// "reasoning_details" are kept in [Result.Raw] for replay.
package provider
