package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// ClassKind says what a failed model call calls for.
type ClassKind string

// The failure classes.
const (
	// Transient: the same request may well succeed if sent again (after
	// Class.RetryAfter, when the server named a wait).
	Transient ClassKind = "transient"
	// ContextOverflow: the prompt is larger than the model's context
	// window; sending it again cannot succeed, but a shorter one (after
	// compaction) can.
	ContextOverflow ClassKind = "context-overflow"
	// Fatal: retrying cannot help (credits, auth, policy, a malformed
	// request) or must not happen (the caller cancelled).
	Fatal ClassKind = "fatal"
)

// Class is the classification of a failed model call.
type Class struct {
	Kind ClassKind
	// RetryAfter is the wait the server asked for; 0 when it named none.
	RetryAfter time.Duration
	// Reason is a short, human-readable cause ("HTTP 429", "stream
	// stalled", …).
	Reason string
}

// Retryable reports whether the failure is worth retrying as it is.
func (c Class) Retryable() bool { return c.Kind == Transient }

// overflowPatterns match the context-overflow phrasings of OpenAI,
// Anthropic, Google, OpenRouter and other OpenAI-compatible servers.
var overflowPatterns = regexp.MustCompile(`(?i)` + strings.Join([]string{
	`prompt is too long`,
	`input is too long for requested model`,
	`exceeds the context window`,
	`input token count.*exceeds the maximum`,
	`maximum prompt length is \d+`,
	`reduce the length of the messages`,
	`maximum context length is \d+ tokens`,
	`exceeds the limit of \d+`,
	`exceeds the available context size`,
	`greater than the context length`,
	`context window exceeds limit`,
	`exceeded model token limit`,
	`too large for model with \d+ maximum context length`,
	`exceed context limit`,
	`context[_ ]length[_ ]exceeded`,
	`too many tokens`,
	`token limit exceeded`,
}, "|"))

// notOverflow matches phrasings that look like overflow but are not: a
// credit limit on max_tokens can be fixed by asking for fewer tokens.
var notOverflow = regexp.MustCompile(`(?i)can only afford|requires more credits`)

// Classify decides what a model call's error calls for:
//
//   - an error that says itself whether it is worth retrying (it, or an
//     error it wraps, has a method Retryable() bool, as errors of a Model
//     wrapper may) is transient when it says so, fatal otherwise: its own
//     word wins over the rules below;
//   - context-overflow: a provider error whose code is
//     "context_length_exceeded" or whose message, code or upstream
//     metadata.raw matches a known overflow phrasing;
//   - transient: HTTP 408, 409, 425, 429 and 5xx; an error chunk or
//     finish_reason "error" mid-stream (unless it carries 401, 402 or
//     403); a stream that stalled, was severed, ended without a finish
//     reason or was malformed; a connection refused, reset or dropped; a
//     timeout (context.DeadlineExceeded included: a caller must check its
//     own context first, as [WithRetries] does);
//   - fatal: everything else, notably 400, 401, 402, 403 and 404, an
//     invalid request, a host name that does not resolve (a DNS "no such
//     host": the endpoint is misconfigured), and cancellation
//     (context.Canceled).
//
// Retry-After, when the server sent it, is in the class.
func Classify(err error) Class {
	if err == nil {
		return Class{Kind: Fatal, Reason: "no error"}
	}
	if r, ok := errors.AsType[retryabler](err); ok {
		if r.Retryable() {
			return Class{Kind: Transient, Reason: "retryable, the error says"}
		}
		return Class{Kind: Fatal, Reason: "not retryable, the error says"}
	}
	if errors.Is(err, context.Canceled) {
		return Class{Kind: Fatal, Reason: "cancelled"}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// A transport timeout (e.g. awaiting response headers) reads as
		// a deadline too. Whether the caller's own deadline passed is
		// the caller's to check (WithRetries checks ctx first).
		return Class{Kind: Transient, Reason: "timeout"}
	}
	var pe *Error
	if errors.As(err, &pe) {
		return classifyError(pe)
	}
	switch {
	case errors.Is(err, ErrInvalidRequest):
		return Class{Kind: Fatal, Reason: "invalid request"}
	case errors.Is(err, ErrStalled):
		return Class{Kind: Transient, Reason: "stream stalled"}
	case errors.Is(err, ErrIncompleteStream):
		return Class{Kind: Transient, Reason: "stream ended without a finish reason"}
	case errors.Is(err, ErrMalformedStream):
		return Class{Kind: Transient, Reason: "malformed stream"}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return Class{Kind: Transient, Reason: "connection closed mid-response"}
	case errors.Is(err, syscall.ECONNREFUSED):
		return Class{Kind: Transient, Reason: "connection refused"}
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return Class{Kind: Transient, Reason: "connection reset"}
	}
	if dns, ok := errors.AsType[*net.DNSError](err); ok && dns.IsNotFound {
		// The endpoint's host does not exist: a configuration error,
		// which no retry mends.
		return Class{Kind: Fatal, Reason: "the endpoint's host name does not resolve (" + dns.Name + ")"}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return Class{Kind: Transient, Reason: "network error"}
	}
	return Class{Kind: Fatal, Reason: "unclassified error"}
}

// retryabler is an error that says whether it is worth retrying.
type retryabler interface {
	error
	Retryable() bool
}

func classifyError(e *Error) Class {
	c := Class{RetryAfter: e.RetryAfter}
	status := e.StatusCode
	if isOverflow(e) {
		c.Kind, c.Reason = ContextOverflow, "context window exceeded"
		return c
	}
	if e.MidStream {
		c.Reason = "error mid-stream"
		if status != 0 {
			c.Reason = fmt.Sprintf("error mid-stream (%d)", status)
		}
		switch status {
		case 401, 402, 403:
			c.Kind = Fatal
		default:
			c.Kind = Transient
		}
		return c
	}
	c.Reason = fmt.Sprintf("HTTP %d", status)
	switch {
	case status == 408, status == 409, status == 425, status == 429, status >= 500:
		c.Kind = Transient
	default:
		c.Kind = Fatal
	}
	return c
}

func isOverflow(e *Error) bool {
	if e.Code == "context_length_exceeded" {
		return true
	}
	for _, s := range []string{e.Message, e.Code, e.RawMetadata()} {
		if s != "" && overflowPatterns.MatchString(s) && !notOverflow.MatchString(s) {
			return true
		}
	}
	return false
}

// RetryPolicy bounds and paces retries of transient failures. The zero
// value is the default policy.
type RetryPolicy struct {
	// MaxAttempts bounds the attempts of one call, the first included.
	// Default: 0, which means 6; 1 disables retries.
	MaxAttempts int
	// BaseDelay is the wait after the first failure; it doubles after
	// each failure. Default: 0, which means 500ms.
	BaseDelay time.Duration
	// MaxDelay caps the computed wait. Default: 0, which means 30s.
	MaxDelay time.Duration
	// MaxRetryAfter caps a wait the server asked for with Retry-After; a
	// longer ask is honoured up to this cap. Default: 0, which means 2m.
	MaxRetryAfter time.Duration
}

// The defaults of [RetryPolicy].
const (
	DefaultMaxAttempts   = 6
	DefaultBaseDelay     = 500 * time.Millisecond
	DefaultMaxDelay      = 30 * time.Second
	DefaultMaxRetryAfter = 2 * time.Minute
)

func (p RetryPolicy) normalized() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = DefaultBaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultMaxDelay
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = DefaultMaxRetryAfter
	}
	return p
}

// Attempts returns the attempt bound in effect.
func (p RetryPolicy) Attempts() int { return p.normalized().MaxAttempts }

// Delay returns the wait before the attempt after failed attempt number
// attempt (from 1): the server's Retry-After when it named one (capped at
// MaxRetryAfter), else BaseDelay·2^(attempt-1) capped at MaxDelay, with
// "equal jitter" (a uniformly random point in its upper half), so that
// clients that failed together do not retry together.
func (p RetryPolicy) Delay(attempt int, c Class) time.Duration {
	p = p.normalized()
	if c.RetryAfter > 0 {
		return min(c.RetryAfter, p.MaxRetryAfter)
	}
	d := p.BaseDelay
	for i := 1; i < attempt && d < p.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, p.MaxDelay)
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// RetryInfo describes one retry, for [WithRetries]'s onRetry.
type RetryInfo struct {
	// Attempt is the number of the attempt that failed, from 1.
	Attempt int
	Err     error
	Class   Class
	// Delay is the wait before the next attempt.
	Delay time.Duration
}

// WithRetries calls fn until it succeeds, fails with an error that
// [Classify] does not call transient, the policy's attempts run out, or
// ctx is done. Before each wait it calls onRetry (when non-nil); an error
// from onRetry stops the retries and is returned. The last error is
// returned as it is, so callers can classify it again.
func WithRetries[T any](ctx context.Context, p RetryPolicy, fn func(ctx context.Context, attempt int) (T, error), onRetry func(RetryInfo) error) (T, error) {
	p = p.normalized()
	for attempt := 1; ; attempt++ {
		v, err := fn(ctx, attempt)
		if err == nil {
			return v, nil
		}
		if ctx.Err() != nil {
			return v, err
		}
		c := Classify(err)
		if !c.Retryable() || attempt >= p.MaxAttempts {
			return v, err
		}
		info := RetryInfo{Attempt: attempt, Err: err, Class: c, Delay: p.Delay(attempt, c)}
		if onRetry != nil {
			if rerr := onRetry(info); rerr != nil {
				return v, rerr
			}
		}
		t := time.NewTimer(info.Delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
	}
}
