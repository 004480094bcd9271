package host

import "errors"

// The sentinel errors of the package. Test for them with errors.Is.
var (
	// ErrInvalidInput is returned for a message, a session id or an agent
	// that cannot be accepted (an empty message, malformed parts); nothing
	// was appended.
	ErrInvalidInput = errors.New("host: invalid input")
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
)

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
