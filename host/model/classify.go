package model

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"regexp"
	"slices"
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
	// Unavailable: the model named is not served (an unknown or withdrawn
	// model id, no endpoint serving it): the same request cannot succeed
	// on it, but may on another model (see [WithFallback]).
	Unavailable ClassKind = "unavailable"
)

// Cause says what failed, finer than the [ClassKind]: a [RetryPolicy] may
// pace the retries of each cause its own way (RetryPolicy.ByCause).
type Cause string

// The causes of failures.
const (
	// CauseRateLimit: HTTP 429, or an error chunk mid-stream with 429.
	CauseRateLimit Cause = "rate_limit"
	// CauseServer: HTTP 408, 409, 425 and 5xx, an error chunk mid-stream
	// with another code.
	CauseServer Cause = "server"
	// CauseNetwork: a connection refused, reset or closed mid-response,
	// another network error.
	CauseNetwork Cause = "network"
	// CauseStream: a stream that stalled, ended without a finish reason,
	// or was malformed.
	CauseStream Cause = "stream"
	// CauseTimeout: a timeout, the host's chunk timeouts included.
	CauseTimeout Cause = "timeout"
	// CauseOverflow: the prompt is larger than the model's window.
	CauseOverflow Cause = "context_overflow"
	// CauseUnavailable: the model is not served (kind [Unavailable]).
	CauseUnavailable Cause = "unavailable"
	// CauseOther: everything else (an error that says itself whether it
	// is retryable, a refused request, credits, auth, cancellation).
	CauseOther Cause = "other"
)

// Causes lists every [Cause], in the order of the constants.
func Causes() []Cause {
	return []Cause{CauseRateLimit, CauseServer, CauseNetwork, CauseStream, CauseTimeout, CauseOverflow, CauseUnavailable, CauseOther}
}

// Class is the classification of a failed model call.
type Class struct {
	Kind ClassKind
	// Cause is what failed; a policy may retry each cause its own way.
	Cause Cause
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

// unavailablePatterns match the phrasings of a model that is not served:
// OpenRouter's unknown id (400) and model without an endpoint (404),
// OpenAI's model_not_found, and the "decommissioned" or "deprecated"
// models of other OpenAI-compatible servers.
var unavailablePatterns = regexp.MustCompile(`(?i)` + strings.Join([]string{
	`is not a valid model id`,
	`no endpoints found for`,
	`model[_ ]not[_ ]found`,
	`the model .{0,200} does not exist`,
	`unknown model`,
	`model .{0,200} (has been|was) (decommissioned|deprecated|removed)`,
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
//   - unavailable: the model is not served — HTTP 404 (OpenRouter's "No
//     endpoints found for …", OpenAI's model_not_found), or another 4xx
//     whose code is "model_not_found" or whose message says the id is
//     not a valid model, the model does not exist or was withdrawn;
//   - fatal: everything else, notably 400, 401, 402 and 403, an
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
		cause := CauseOther
		if errors.Is(err, context.DeadlineExceeded) {
			cause = CauseTimeout
		}
		if r.Retryable() {
			return Class{Kind: Transient, Cause: cause, Reason: "retryable, the error says"}
		}
		return Class{Kind: Fatal, Cause: cause, Reason: "not retryable, the error says"}
	}
	if errors.Is(err, context.Canceled) {
		return Class{Kind: Fatal, Cause: CauseOther, Reason: "cancelled"}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// A transport timeout (e.g. awaiting response headers) reads as
		// a deadline too. Whether the caller's own deadline passed is
		// the caller's to check (WithRetries checks ctx first).
		return Class{Kind: Transient, Cause: CauseTimeout, Reason: "timeout"}
	}
	var pe *Error
	if errors.As(err, &pe) {
		return classifyError(pe)
	}
	switch {
	case errors.Is(err, ErrInvalidRequest):
		return Class{Kind: Fatal, Cause: CauseOther, Reason: "invalid request"}
	case errors.Is(err, ErrStalled):
		return Class{Kind: Transient, Cause: CauseStream, Reason: "stream stalled"}
	case errors.Is(err, ErrIncompleteStream):
		return Class{Kind: Transient, Cause: CauseStream, Reason: "stream ended without a finish reason"}
	case errors.Is(err, ErrMalformedStream):
		return Class{Kind: Transient, Cause: CauseStream, Reason: "malformed stream"}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return Class{Kind: Transient, Cause: CauseNetwork, Reason: "connection closed mid-response"}
	case errors.Is(err, syscall.ECONNREFUSED):
		return Class{Kind: Transient, Cause: CauseNetwork, Reason: "connection refused"}
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return Class{Kind: Transient, Cause: CauseNetwork, Reason: "connection reset"}
	}
	if dns, ok := errors.AsType[*net.DNSError](err); ok && dns.IsNotFound {
		// The endpoint's host does not exist: a configuration error,
		// which no retry mends.
		return Class{Kind: Fatal, Cause: CauseNetwork, Reason: "the endpoint's host name does not resolve (" + dns.Name + ")"}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return Class{Kind: Transient, Cause: CauseTimeout, Reason: "network timeout"}
		}
		return Class{Kind: Transient, Cause: CauseNetwork, Reason: "network error"}
	}
	return Class{Kind: Fatal, Cause: CauseOther, Reason: "unclassified error"}
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
		c.Kind, c.Cause, c.Reason = ContextOverflow, CauseOverflow, "context window exceeded"
		return c
	}
	if e.MidStream {
		c.Reason = "error mid-stream"
		if status != 0 {
			c.Reason = fmt.Sprintf("error mid-stream (%d)", status)
		}
		switch status {
		case 401, 402, 403:
			c.Kind, c.Cause = Fatal, CauseOther
		case 429:
			c.Kind, c.Cause = Transient, CauseRateLimit
		default:
			c.Kind, c.Cause = Transient, CauseServer
		}
		return c
	}
	c.Reason = fmt.Sprintf("HTTP %d", status)
	switch {
	case status == 429:
		c.Kind, c.Cause = Transient, CauseRateLimit
	case status == 408, status == 409, status == 425, status >= 500:
		c.Kind, c.Cause = Transient, CauseServer
	case status == 404 || isUnavailable(e):
		c.Kind, c.Cause, c.Reason = Unavailable, CauseUnavailable, fmt.Sprintf("HTTP %d, the model is not served", status)
	default:
		c.Kind, c.Cause = Fatal, CauseOther
	}
	return c
}

func isUnavailable(e *Error) bool {
	if e.Code == "model_not_found" {
		return true
	}
	for _, s := range []string{e.Message, e.RawMetadata()} {
		if s != "" && unavailablePatterns.MatchString(s) {
			return true
		}
	}
	return false
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
	// MaxAttempts bounds the attempts of one call on one model, the
	// first included. Default: 0, which means 6; 1 disables retries.
	MaxAttempts int
	// BaseDelay is the wait after the first failure; it doubles after
	// each failure. Default: 0, which means 500ms.
	BaseDelay time.Duration
	// MaxDelay caps the computed wait. Default: 0, which means 30s.
	MaxDelay time.Duration
	// MaxRetryAfter caps a wait the server asked for with Retry-After; a
	// longer ask is honoured up to this cap. Default: 0, which means 2m.
	MaxRetryAfter time.Duration
	// Jitter spreads the computed waits, so that clients that failed
	// together do not retry together (a wait the server asked for is
	// kept as asked): [JitterEqual], [JitterFull] or [JitterNone].
	// Default: "", which means JitterEqual.
	Jitter Jitter
	// MaxElapsed bounds the time one call may spend retrying a model: a
	// retry whose wait would end more than MaxElapsed after the call's
	// first attempt on that model began is not made, and the last failure
	// is returned, or the next model asked ([WithFallback]) (Retry-After
	// included: a server asking for a longer wait is not waited for).
	// Default: 0, no bound but MaxAttempts.
	MaxElapsed time.Duration
	// ByCause overrides the policy for the failures of one cause: a
	// failure is retried, and waited for, by its cause's policy, whose
	// zero fields are this policy's (a 429 may be waited for longer than a
	// dropped connection). Attempts, and the time bound, are counted over
	// the call's attempts on one model, whatever their causes
	// ([WithFallback] counts afresh for each model). An entry's own
	// ByCause is not allowed. Default: none, one policy for every cause.
	ByCause map[Cause]RetryPolicy
}

// Jitter says how a retry's computed wait is spread.
type Jitter string

// The jitters of a [RetryPolicy].
const (
	// JitterEqual waits a uniformly random point in the upper half of the
	// computed wait (the default).
	JitterEqual Jitter = "equal"
	// JitterFull waits a uniformly random point between zero and the
	// computed wait.
	JitterFull Jitter = "full"
	// JitterNone waits the computed wait exactly.
	JitterNone Jitter = "none"
)

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
	if p.Jitter == "" {
		p.Jitter = JitterEqual
	}
	return p
}

// For returns the policy that decides a failure of cause c: the entry of
// ByCause for c, its zero fields p's, or p itself. The result has no
// ByCause.
func (p RetryPolicy) For(c Cause) RetryPolicy {
	o, ok := p.ByCause[c]
	p.ByCause = nil
	if !ok {
		return p
	}
	o.MaxAttempts = cmp.Or(o.MaxAttempts, p.MaxAttempts)
	o.BaseDelay = cmp.Or(o.BaseDelay, p.BaseDelay)
	o.MaxDelay = cmp.Or(o.MaxDelay, p.MaxDelay)
	o.MaxRetryAfter = cmp.Or(o.MaxRetryAfter, p.MaxRetryAfter)
	o.Jitter = cmp.Or(o.Jitter, p.Jitter)
	o.MaxElapsed = cmp.Or(o.MaxElapsed, p.MaxElapsed)
	o.ByCause = nil
	return o
}

// Validate reports what is wrong with the policy: a negative bound, an
// unknown jitter or cause, a ByCause entry with a ByCause of its own.
func (p RetryPolicy) Validate() error {
	var errs []error
	check := func(where string, q RetryPolicy) {
		for _, f := range []struct {
			name string
			v    int64
		}{{"MaxAttempts", int64(q.MaxAttempts)}, {"BaseDelay", int64(q.BaseDelay)}, {"MaxDelay", int64(q.MaxDelay)},
			{"MaxRetryAfter", int64(q.MaxRetryAfter)}, {"MaxElapsed", int64(q.MaxElapsed)}} {
			if f.v < 0 {
				errs = append(errs, fmt.Errorf("%s%s is negative", where, f.name))
			}
		}
		switch q.Jitter {
		case "", JitterEqual, JitterFull, JitterNone:
		default:
			errs = append(errs, fmt.Errorf("%sJitter %q is none of %q, %q, %q", where, q.Jitter, JitterEqual, JitterFull, JitterNone))
		}
	}
	check("", p)
	for _, c := range slices.Sorted(maps.Keys(p.ByCause)) {
		q := p.ByCause[c]
		where := fmt.Sprintf("ByCause[%q].", c)
		if !slices.Contains(Causes(), c) {
			errs = append(errs, fmt.Errorf("ByCause: unknown cause %q (known: %v)", c, Causes()))
			continue
		}
		check(where, q)
		if len(q.ByCause) > 0 {
			errs = append(errs, fmt.Errorf("%sByCause: a cause's policy has no causes of its own", where))
		}
	}
	return errors.Join(errs...)
}

// Attempts returns the attempt bound in effect (ByCause aside).
func (p RetryPolicy) Attempts() int { return p.normalized().MaxAttempts }

// Delay returns the wait before the attempt after failed attempt number
// attempt (from 1), by the policy of c's cause: the server's Retry-After
// when it named one (capped at MaxRetryAfter), else BaseDelay·2^(attempt-1)
// capped at MaxDelay and spread by Jitter (by default "equal jitter", a
// uniformly random point in its upper half), so that clients that failed
// together do not retry together.
func (p RetryPolicy) Delay(attempt int, c Class) time.Duration {
	p = p.For(c.Cause).normalized()
	if c.RetryAfter > 0 {
		return min(c.RetryAfter, p.MaxRetryAfter)
	}
	d := p.BaseDelay
	for i := 1; i < attempt && d < p.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, p.MaxDelay)
	switch p.Jitter {
	case JitterNone:
		return d
	case JitterFull:
		return time.Duration(rand.Int64N(int64(d) + 1))
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// RetryInfo describes one retry, for [WithRetries]'s and [WithFallback]'s
// onRetry.
type RetryInfo struct {
	// Attempt is the number of the attempt that failed, from 1, counted
	// over every model of a fallback.
	Attempt int
	Err     error
	Class   Class
	// Delay is the wait before the next attempt.
	Delay time.Duration
	// Model is the model the failed attempt asked ([WithFallback] only).
	Model string
	// Fallback is the model the next attempt asks when it is another
	// (the failed one is not served, or its retries ran out); "" when the
	// next attempt asks the same model again.
	Fallback string
	// GaveUp, when Fallback is set, says why Model was left: its retries
	// ran out ("6 attempts", "the retry time bound of 1m0s") or it is not
	// served ("").
	GaveUp string
}

// WithRetries calls fn until it succeeds, fails with an error that
// [Classify] does not call transient, the policy's attempts or time bound
// run out, or ctx is done. Before each wait it calls onRetry (when
// non-nil); an error from onRetry stops the retries and is returned. The
// last error is returned as it is, so callers can classify it again.
func WithRetries[T any](ctx context.Context, p RetryPolicy, fn func(ctx context.Context, attempt int) (T, error), onRetry func(RetryInfo) error) (T, error) {
	return WithFallback(ctx, p, []string{""}, func(ctx context.Context, _ string, attempt int) (T, error) {
		return fn(ctx, attempt)
	}, onRetry)
}

// WithFallback is [WithRetries] over models in order: it calls fn with
// the first model, retrying its transient failures by the policy; when
// the model is not served ([Unavailable]) or its transient failures
// outlast the policy (attempts, or the time bound, counted afresh for
// each model), it goes on with the next model at once, telling onRetry
// (RetryInfo.Fallback). Any other failure — a fatal one, a context
// overflow, ctx done — ends it, on any model: a request that is wrong for
// one model is wrong for the next. The attempt fn is given counts over
// every model, from 1.
func WithFallback[T any](ctx context.Context, p RetryPolicy, models []string, fn func(ctx context.Context, model string, attempt int) (T, error), onRetry func(RetryInfo) error) (T, error) {
	var v T
	var err error
	attempt := 0
	for i, m := range models {
		first, start := attempt+1, time.Now()
		for {
			attempt++
			v, err = fn(ctx, m, attempt)
			if err == nil {
				return v, nil
			}
			if ctx.Err() != nil {
				return v, err
			}
			c := Classify(err)
			info := RetryInfo{Attempt: attempt, Err: err, Class: c, Model: m}
			switch c.Kind {
			case Transient:
				q, n := p.For(c.Cause).normalized(), attempt-first+1
				info.Delay = p.Delay(n, c)
				switch {
				case n >= q.MaxAttempts:
					info.GaveUp = fmt.Sprintf("%d attempts", n)
				case q.MaxElapsed > 0 && time.Since(start)+info.Delay > q.MaxElapsed:
					info.GaveUp = fmt.Sprintf("the retry time bound of %s", q.MaxElapsed)
				}
			case Unavailable:
			default:
				return v, err
			}
			if c.Kind == Unavailable || info.GaveUp != "" {
				// Not served, or its retries spent: the next model, if any.
				if i == len(models)-1 {
					return v, err
				}
				info.Delay, info.Fallback = 0, models[i+1]
			}
			if onRetry != nil {
				if rerr := onRetry(info); rerr != nil {
					return v, rerr
				}
			}
			if info.Fallback != "" {
				break
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
	return v, err
}
