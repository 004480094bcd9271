package host

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/agentichost/agentic/ledger"
)

// The end of a run: its outcome settled into a run-end (or left for a
// resume), its waiters answered, its lease and its place in the session
// released.

// doneStatus maps a done context to the run status it ends with, and the
// agent's timeout that ended it, if one did.
func doneStatus(ctx context.Context) (ledger.RunStatus, string, TimeoutKind) {
	cause, ctxErr := context.Cause(ctx), ctx.Err()
	var ce *CancelledError
	if gone, ok := errors.AsType[*callerGone](cause); ok {
		ctxErr, cause = gone.err, gone.cause
	}
	if te, ok := errors.AsType[*TimeoutError](cause); ok {
		return ledger.RunTimedOut, te.Error(), te.Kind
	}
	switch {
	case errors.As(cause, &ce):
		return ledger.RunCancelled, ce.Reason, ""
	case errors.Is(ctxErr, context.DeadlineExceeded):
		return ledger.RunTimedOut, "the run's deadline passed", ""
	case cause != nil && !errors.Is(cause, context.Canceled):
		return ledger.RunCancelled, cause.Error(), ""
	}
	return ledger.RunCancelled, "cancelled by the caller", ""
}

// end records the run's end (unless o.err says the ledger cannot take it:
// then the run stays open in the ledger, interrupted and resumable),
// publishes it, and settles the waiters: those whose messages the run
// answered get its result, and release tells them. Messages still pending
// get one successor run, started here under the same appendMu as the end,
// so that none is left behind; their waiters move to it, and end returns
// it, to be run next.
func (r *run) end(o outcome) *run {
	st := r.st
	status, reason, storeErr := o.status, o.reason, o.err
	st.appendMu.Lock()
	st.mu.Lock()
	r.ending = true // no send queues into the run from now on
	if r.bound != nil && r.bound.stop != nil {
		r.bound.stop()
	}
	st.mu.Unlock()
	if storeErr == nil && !o.parked {
		e := r.newEvent(ledger.KindRunEnd)
		// Messages the last pass had folded in, if it left no step,
		// are answered by this end.
		st.mu.Lock()
		rolledBack := r.rollback && status == ledger.RunCancelled
		st.mu.Unlock()
		e.RunEnd = &ledger.RunEnd{Status: status, Reason: reason, Timeout: string(o.timeout), Inputs: r.unrecordedFolds(), RolledBack: rolledBack}
		if status == ledger.RunCompleted && r.hooks != nil && r.hooks.deliverable != nil {
			e.RunEnd.Deliverable = r.hooks.deliverable()
		}
		storeErr = r.appendLocked(e)
	}
	var next *run
	if storeErr == nil && !o.parked {
		// (A parked run starts no successor: messages queued meanwhile
		// wait for it to continue.)
		next = r.successorLocked()
	}
	st.mu.Lock()
	if st.cur == r {
		st.cur = nil
		r.h.running.Add(-1)
		st.notifyLocked()
	}
	events := r.events
	waiters := r.waiters
	r.waiters = nil
	st.mu.Unlock()
	st.appendMu.Unlock()

	switch {
	case errors.Is(storeErr, ErrClosed):
		status, reason = ledger.RunInterrupted, "the host closed; the run can be resumed"
		r.h.log.Info("run stopped by the host's shutdown; it stays resumable", "session", r.sessionID, "run", r.id)
	case storeErr != nil:
		status, reason = ledger.RunInterrupted, fmt.Sprintf("storage: %v", storeErr)
		r.h.log.Error("run interrupted: the ledger could not be written",
			"session", r.sessionID, "run", r.id, "err", storeErr)
		r.h.healLater(r.sessionID)
	}
	view, _ := ledger.ProjectRun(events, r.id)
	res := RunResult{Status: status, Reason: reason, Text: view.Text, RunID: r.id,
		ResponseID: r.responseID, Usage: view.Usage, Cost: view.Cost}
	if status == ledger.RunTimedOut {
		res.Timeout = o.timeout
	}
	if o.parked && storeErr == nil {
		res = r.h.parkedResult(r.sessionID, events, r.id)
		status, reason = res.Status, res.Reason
		if len(res.Waits) > 0 && !r.st.key.private {
			r.h.afterParked(r.sessionID, events, r.id, r.agent)
		}
	}
	var err error
	if storeErr != nil {
		err = fmt.Errorf("host: session %s run %s: %w", r.sessionID, r.id, storeErr)
	}
	r.publish(Progress{Type: ProgressRunEnd, Status: status, Reason: reason, Timeout: res.Timeout})
	r.emitEnd(status, reason, res.Timeout)
	// Senders whose messages the run answered get its result; the others
	// (queued after its last pass began) go on to the successor run.
	answered := ledger.RunInputs(events, r.id)
	var successorInputs []string
	if next != nil {
		successorInputs = ledger.RunInputs(next.view(), next.id)
	}
	// The run's result is its waiters' (see waiter.result): set once,
	// here, before release tells them.
	r.res, r.err = res, err
	told := waiters[:0] // filtered in place: told never overtakes the loop
	for _, w := range waiters {
		switch {
		case slices.Contains(answered, w.msgID):
			w.res, w.err = &r.res, err
			told = append(told, w)
		case o.parked && storeErr == nil:
			// Every message in the run, folded in or queued, waits for
			// the run to continue.
			w.res = &r.res
			told = append(told, w)
		case next != nil && slices.Contains(successorInputs, w.msgID):
			st.mu.Lock()
			w.run, w.after = next, 0
			next.waiters = append(next.waiters, w)
			st.mu.Unlock()
		default:
			w.again = true
			told = append(told, w)
		}
	}
	r.told = told
	return next
}

// release tells the waiters the run's end set aside (see end) and closes
// the run's progress. Its driver calls it last, once it has no more work
// for the session, so that the callers it wakes run at once.
func (r *run) release() {
	for _, w := range r.told {
		close(w.done)
	}
	r.told = nil
	r.hub.Close()
}

// unrecordedFolds returns the messages the current pass folded in when no
// step of the run records them.
func (r *run) unrecordedFolds() []string {
	if len(r.folding) == 0 {
		return nil
	}
	recorded := ledger.RunInputs(r.view(), r.id)
	var out []string
	for _, id := range r.folding {
		if !slices.Contains(recorded, id) {
			out = append(out, id)
		}
	}
	return out
}
