package host

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The sentinel errors of the package. Test for them with errors.Is.
var (
	// ErrInvalidInput is returned for a message, a session id or an agent
	// that cannot be accepted (an empty message, malformed parts); nothing
	// was appended.
	ErrInvalidInput = errors.New("host: invalid input")
	// ErrBlobQuota is matched by the [*BlobQuotaError] of a message whose
	// parts would pass Options.BlobQuota or Options.MaxBlobBytes; nothing
	// was appended.
	ErrBlobQuota = errors.New("host: blob quota exceeded")
	// ErrDelegateLimit is matched by the [*DelegateLimitError] of a
	// delegate call past a bound of Options.Delegation: no child run
	// started.
	ErrDelegateLimit = errors.New("host: delegation refused")
	// ErrClosed is returned by a Host used after Close, and to the callers
	// of runs that Close stopped (they stay resumable).
	ErrClosed = errors.New("host: closed")
	// ErrNothingToResume is returned by Resume for a session whose ledger
	// holds no interrupted run.
	ErrNothingToResume = errors.New("host: no interrupted run to resume")
	// ErrLeadElsewhere is returned by Resume when another host sharing
	// the storage leads the session (it holds the session's lease): only
	// the lease holder runs or resumes it.
	ErrLeadElsewhere = errors.New("host: another host leads the session")
	// ErrSlowSubscriber is returned by [Subscription.Next] to a subscriber
	// that fell too far behind the run's progress: it was dropped rather
	// than waited for, and may subscribe again after the last
	// [Progress.Seq] it read.
	ErrSlowSubscriber = errors.New("host: subscriber fell behind and was dropped")
	// ErrApprovalNotFound: the session holds no approval request of that
	// id. Nothing changed.
	ErrApprovalNotFound = errors.New("host: no such approval request")
	// ErrInvalidDecision: the decision cannot be made as given (an edit
	// whose input is not a JSON object or breaks the tool's schema, an
	// edit that does not approve, an edit and a response at once, an edit
	// or a response on a run's own request). Nothing changed.
	ErrInvalidDecision = errors.New("host: invalid decision")
	// ErrApprovalDecided: the request was decided already (a second
	// decision, or a replayed token). Nothing changed.
	ErrApprovalDecided = errors.New("host: the approval request was decided already")
	// ErrApprovalExpired: the request lapsed before the decision, which
	// did not count: the call does not run. Session.Decide then records
	// the expiry (what the host records of every lapsed request) and the
	// run goes on, the model told; Session.DecideWithToken changes
	// nothing.
	ErrApprovalExpired = errors.New("host: the approval request expired")
	// ErrApprovalTokenInvalid: a token that is not one, or whose
	// signature does not match the request it names (forged, or the
	// request was changed since). Nothing changed.
	ErrApprovalTokenInvalid = errors.New("host: invalid approval token")
	// ErrApprovalTokenMismatch: a valid-looking token of another
	// approval, session or tenant than the one it is used for. Nothing
	// changed.
	ErrApprovalTokenMismatch = errors.New("host: the approval token is for another request")
	// ErrBusy: a message was refused because a run of its session is
	// working (or waits for approvals) and the message's agent rejects
	// overlapping turns (Agent.Overlap). Nothing was appended. The error
	// is a [*BusyError] naming the run.
	ErrBusy = errors.New("host: the session's run is working")
	// ErrSessionNotFound: the session has no events (it does not exist,
	// or belongs to another tenant's storage). Nothing changed.
	ErrSessionNotFound = errors.New("host: no such session")
	// ErrSessionExists: a fork was asked to make a session that has
	// events already. Nothing changed.
	ErrSessionExists = errors.New("host: the session exists already")
	// ErrSessionInUse: [Session.Delete] refused a session that a run is
	// working on, that waits for approvals, or whose lease a host holds.
	// Nothing was deleted. The error is an [*InUseError].
	ErrSessionInUse = errors.New("host: the session is in use")
	// ErrSessionChanged: an operation that removes or replaces a
	// session's data ([Session.Delete], [Session.Replace]) found the
	// session changed between its check and its act (a message another
	// host queued meanwhile): nothing was removed; or a fork
	// ([Host.Fork]) found a blob its copies refer to gone (the source
	// deleted meanwhile): nothing was forked. Check again, and decide
	// again.
	ErrSessionChanged = errors.New("host: the session changed while it was being removed or replaced")
)

// BusyError refuses a message that would overlap the session's run (see
// Agent.Overlap): nothing was appended. It matches [ErrBusy].
type BusyError struct {
	SessionID string
	// RunID is the run in flight (or parked), "" when another host leads
	// the session and its ledger names no open run (it is between runs).
	RunID string
	// State is the session's: StateRunning, or StateApprovalRequired
	// (StateWaiting) for a run parked for approvals (for its calls'
	// waits).
	State State
}

// Error says which run the message would overlap.
func (e *BusyError) Error() string {
	run := "a run of another host"
	if e.RunID != "" {
		run = "run " + e.RunID
	}
	doing := "is working"
	switch e.State {
	case StateApprovalRequired:
		doing = "waits for approval"
	case StateWaiting:
		doing = "waits for an event or a time"
	}
	return fmt.Sprintf("host: session %s is busy: %s %s, and its agent rejects overlapping turns (overlap: reject); send the message again once the run ended",
		e.SessionID, run, doing)
}

// Is reports whether target is ErrBusy.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// errParked tells that the session's run waits for approvals: there is
// nothing to resume until they are decided.
var errParked = errors.New("host: the run waits for approval")

// errNotRecorded wraps the failure to record what a resume's prepare step
// returned (decisions on approvals): nothing changed.
var errNotRecorded = errors.New("host: could not record the decision")

// errResumeFirst tells a message looking for its run that the session's
// interrupted run is to be resumed first (see Run.leadLocked).
var errResumeFirst = errors.New("host: the session's interrupted run is resumed first")

// errNotResumed refuses a message to a session whose interrupted run could
// not be resumed first (see enterSession): the message was not accepted.
var errNotResumed = errors.New("host: the session's interrupted run is to be answered first, and could not be resumed now; try again")

// errReconciled tells that the interrupted run had been cancelled before
// the crash, and was closed as such.
var errReconciled = errors.New("host: interrupted run reconciled as cancelled")

// CancelledError is the cause of a run's context when [Host.Cancel] stopped
// it.
type CancelledError struct{ Reason string }

// Error returns the reason the run was cancelled for.
func (e *CancelledError) Error() string { return e.Reason }

// callerGone is the cause of a run's context when the caller bound to it
// stopped: err is its context's error, cause its cause.
type callerGone struct{ err, cause error }

func (e *callerGone) Error() string { return "the caller stopped waiting: " + e.err.Error() }

// TimeoutError tells that one of the host's bounds was reached: which one
// (Kind), after how long. It wraps the error the bounded operation
// returned, and context.DeadlineExceeded.
type TimeoutError struct {
	// Kind names the bound.
	Kind TimeoutKind
	// Name names what was bounded, when there is a name: the tool, for
	// TimeoutTool.
	Name string
	// Step is the index of the step, for TimeoutStep.
	Step int
	// After is the bound.
	After time.Duration
	// Err is what the bounded operation returned.
	Err error
}

// TimeoutKind names a bound of the host's.
type TimeoutKind string

// The bounds of the host's.
const (
	// TimeoutAppend: a ledger append of a run (Timeouts.Append).
	TimeoutAppend TimeoutKind = "append"
	// TimeoutLeaseRelease: giving a session's lease back
	// (Timeouts.LeaseRelease).
	TimeoutLeaseRelease TimeoutKind = "lease-release"
	// TimeoutTool: a tool call (ToolSpec.Timeout, AgentTimeouts.Tool,
	// Options.ToolTimeout). The model is told, and the run goes on.
	TimeoutTool TimeoutKind = "tool"
	// TimeoutTotal: a run's working time (AgentTimeouts.Total). The run
	// ends timed_out.
	TimeoutTotal TimeoutKind = "total"
	// TimeoutStep: one step, a model pass and its tool calls
	// (AgentTimeouts.Step). The run ends timed_out.
	TimeoutStep TimeoutKind = "step"
	// TimeoutFirstChunk: the wait for a model pass's first streamed
	// fragment (AgentTimeouts.FirstChunk). The attempt is retried as a
	// transient failure; the run ends timed_out once retries are spent.
	TimeoutFirstChunk TimeoutKind = "first-chunk"
	// TimeoutChunk: the silence between two streamed fragments of a model
	// pass (AgentTimeouts.Chunk); retried like TimeoutFirstChunk.
	TimeoutChunk TimeoutKind = "chunk"
)

// Error describes the bound reached.
func (e *TimeoutError) Error() string {
	switch e.Kind {
	case TimeoutTool:
		return fmt.Sprintf("tool %s timed out after %s", e.Name, e.After)
	case TimeoutAppend:
		return fmt.Sprintf("host: a ledger append timed out after %s: %v", e.After, e.Err)
	case TimeoutTotal:
		return fmt.Sprintf("the run timed out: it worked for its total timeout of %s", e.After)
	case TimeoutStep:
		return fmt.Sprintf("the run timed out: step %d ran past its step timeout of %s", e.Step, e.After)
	case TimeoutFirstChunk:
		return fmt.Sprintf("the model sent nothing for %s after the request (first-chunk timeout)", e.After)
	case TimeoutChunk:
		return fmt.Sprintf("the model stream was silent for %s (chunk timeout)", e.After)
	}
	return fmt.Sprintf("host: %s timed out after %s: %v", e.Kind, e.After, e.Err)
}

// Retryable reports whether the operation may be tried again: a model
// attempt cut by a chunk timeout may (nothing of it was kept); the other
// bounds end what they bound.
func (e *TimeoutError) Retryable() bool {
	return e.Kind == TimeoutFirstChunk || e.Kind == TimeoutChunk
}

// Unwrap returns what the bounded operation returned, and
// context.DeadlineExceeded.
func (e *TimeoutError) Unwrap() []error { return []error{e.Err, context.DeadlineExceeded} }

// Timeout reports true: the error is a timeout (as net.Error has it).
func (e *TimeoutError) Timeout() bool { return true }
