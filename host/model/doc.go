// Package model is the contract between the host and a model client: what
// one model pass is asked ([Request]) and answers ([Result], streamed as
// [Delta] values), how a failed call is classified ([Classify]: transient,
// context overflow or fatal; an error may say itself, with a Retryable
// method) and retried ([RetryPolicy], [WithRetries]), and the errors a
// client reports ([Error] and the sentinels).
//
// It depends on nothing but the standard library and ledger, so that
// the host and anything that wraps a model (telemetry, metering, caches)
// need no client library; host/provider implements a client over
// openai-go.
package model
