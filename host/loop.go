package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/agentichost/agentic/host/internal/hub"
	"github.com/agentichost/agentic/host/model"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// The agent loop: a run goes live on a goroutine of the host's, makes model
// passes (with retries of transient failures), runs their tools, and ends.
// The loop is a function of the ledger: every pass replays the events
// appended so far.

// run is one execution of the agent loop over a session's ledger. The loop is
// a function of the ledger: every pass replays the events appended so far.
// A run belongs to the host: it runs on a goroutine of its own, with a
// context of its own, which only Cancel, the caller bound to it (see
// Session.Send), a lost lease or the host's shutdown end.
type run struct {
	h         *Host
	st        *sessionState
	sessionID string
	id        string
	agent     Agent
	hooks     *runHooks
	lease     storage.Lease // the session's lease, when the store has leases

	// ctx is the context the run's work is done under: base, or while a
	// pass runs under a step timeout, the pass's. Both are used by the
	// run's goroutine only (cancel may be called from anywhere).
	ctx    context.Context
	base   context.Context // the run's own: cancel and its total timeout end it
	cancel context.CancelCauseFunc
	hub    hub.Hub[event] // the run's progress, for every subscriber

	// The loop's own state, used by the run's goroutine only.
	fresh      bool            // this run's run-start was minted here (not resumed)
	startedAt  time.Time       // its run-start's time, once known
	passStart  time.Time       // when the pass in flight started
	retryClass string          // the class of the failure retried last
	responseID string          // the item the next pass streams into
	step       int             // index of the next pass
	folding    []string        // queued messages the current pass folded in
	holdFrom   int             // > 0: the next pass holds back the messages queued from this position on (see afterRun)
	callIDs    map[string]bool // the session's tool call ids, once a pass made calls (uniqueCallIDs)
	tools      map[string]Tool
	specs      []model.ToolSpec

	// Guarded by st.mu.
	events          []ledger.Event // the whole ledger, as this host knows it
	live            liveView       // the item streaming
	ending          bool           // the run decided to end: sends no longer queue into it
	waiters         []*waiter      // the messages whose senders wait for the run's answer
	firstWaiter     [1]*waiter     // room for the first of them, the common case
	cancelRequested bool
	bound           *binding // set before the run goes live; its fields are guarded by st.mu

	onLive func() // called once the run is the session's run in flight

	// What launch hands to the goroutine that works the run (see work).
	body                 func(*run) outcome
	stopLease, stopWatch func()

	// How the run ended, once it has (see end), and the waiters to tell
	// (see release).
	res  RunResult
	err  error
	told []*waiter
}

// outcome is how a run's loop ended: its status and reason, or the error
// that kept the ledger from recording more (storage failed, or the host is
// closing): then nothing more is recorded and the run stays resumable.
type outcome struct {
	status  ledger.RunStatus
	reason  string
	timeout TimeoutKind // the timeout that ended a timed_out run, if one did
	err     error
	// parked: the run waits for approvals; it does not end (no run-end),
	// and continues once they are decided.
	parked bool
}

// newRun returns a run of the session over events, not started yet.
func (h *Host) newRun(st *sessionState, id string, agent Agent, hooks *runHooks, lease storage.Lease, events []ledger.Event) *run {
	ctx, cancel := context.WithCancelCause(context.Background())
	// Room for the events of a one-pass run (message, run-start, step,
	// run-end): its view grows once, here, instead of on every append.
	events = slices.Grow(events, 4)
	r := &run{h: h, st: st, sessionID: st.key.id, id: id, agent: agent, hooks: hooks, lease: lease,
		ctx: ctx, base: ctx, cancel: cancel, events: events}
	r.hub.Init(hub.Options{Capacity: 8})
	r.waiters = r.firstWaiter[:0]
	return r
}

// launch makes r the session's run in flight and runs it on a goroutine of
// the host's — body, then each successor run that a run's end starts for
// messages still pending — while holding the session's lease (when r has
// one) and watching the session for other hosts' appends. The session must
// be claimed (busy): the goroutine frees it, and releases the lease, once
// the last run ended.
func (h *Host) launch(r *run, body func(*run) outcome) {
	st := r.st
	h.adopt(st)
	r.body = body
	r.stopLease = h.holdLease(st, r.lease)
	r.stopWatch = h.watchRemote(st)
	r.goLive()
	h.spawn(r)
}

// work is what launch runs on a goroutine of the host's: r's body, then
// each successor run its end starts, then the session's release.
func (h *Host) work(r *run) {
	st, body, stopLease, stopWatch := r.st, r.body, r.stopLease, r.stopWatch
	defer h.unref(st)
	for {
		next := r.execute(body)
		if next == nil {
			break
		}
		next.goLive()
		r.release()
		r, body = next, (*run).loop
	}
	stopWatch()
	stopLease()
	st.free()
	r.release()
}

// maxIdleDrivers bounds the goroutines that, having run a run, wait for the
// next one.
const maxIdleDrivers = 8

// spawn works r (see work) on a goroutine of the host's: an idle one that
// worked a run before, when there is one, else a new one. A busy host so
// reuses its goroutines, and the stacks they grew, instead of growing a
// fresh stack for every run. The run itself is the job: handing it over
// allocates nothing.
func (h *Host) spawn(r *run) {
	select {
	case h.jobs <- r:
	default:
		go h.drive(r)
	}
}

// drive works r, then the runs spawn hands it while at most
// maxIdleDrivers goroutines wait for one, until the host closes.
func (h *Host) drive(r *run) {
	for {
		h.work(r)
		if h.idleDrivers.Add(1) > maxIdleDrivers {
			h.idleDrivers.Add(-1)
			return
		}
		select {
		case r = <-h.jobs:
			h.idleDrivers.Add(-1)
		case <-h.bg.Done():
			h.idleDrivers.Add(-1)
			return
		}
	}
}

// goLive makes r the session's run in flight: sends queue into it and
// Cancel reaches it from now on.
func (r *run) goLive() {
	r.st.mu.Lock()
	r.live.responseID = r.responseID
	r.st.cur = r
	r.st.notifyLocked()
	r.st.mu.Unlock()
	if r.h.stopping.Load() {
		r.cancel(ErrClosed)
	}
	if r.onLive != nil {
		r.onLive()
	}
}

// execute runs body under the run's total timeout and records the run's
// end (see end); a panic ends the run failed. It returns the successor run
// the end started, if any.
func (r *run) execute(body func(*run) outcome) *run {
	stop := r.armTotal()
	defer stop()
	span := r.startRunSpan()
	r.approvalWaitSpans()
	r.emitStart()
	next := r.end(r.protect(body))
	r.endRunSpan(span, r.res)
	return next
}

// armTotal bounds the run's context by what is left of the agent's total
// timeout: the ledger tells how long the run has worked already (see
// ledger.ActiveTime), on this host or another.
func (r *run) armTotal() (stop func()) {
	total := r.agent.Timeouts.Total
	if total <= 0 {
		return func() {}
	}
	now := time.Now()
	left := total - ledger.ActiveTime(r.view(), r.id, now)
	ctx, cancel := context.WithDeadlineCause(r.base, now.Add(left), &TimeoutError{Kind: TimeoutTotal, After: total})
	r.base, r.ctx = ctx, ctx
	return cancel
}

// armStep bounds the context of the pass about to run by the agent's step
// timeout; done restores the run's own.
func (r *run) armStep() (done func()) {
	d := r.agent.Timeouts.Step
	if d <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithTimeoutCause(r.base, d, &TimeoutError{Kind: TimeoutStep, Step: r.step, After: d})
	r.ctx = ctx
	return func() {
		cancel()
		r.ctx = r.base
	}
}

// protect runs body, turning a panic into a failed outcome.
func (r *run) protect(body func(*run) outcome) (o outcome) {
	defer func() {
		if p := recover(); p != nil {
			r.h.log.Error("run panicked", "session", r.sessionID, "run", r.id, "panic", p, "stack", string(debug.Stack()))
			o = outcome{status: ledger.RunFailed, reason: fmt.Sprintf("host: the run panicked: %v", p)}
		}
	}()
	return body(r)
}

// startEvent mints the run-start event, and with it the first response id.
func (r *run) startEvent(inputs []string, now time.Time) ledger.Event {
	r.responseID = ledger.NewID("resp")
	r.fresh, r.startedAt = true, now
	return ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunStart, Time: now, RunID: r.id,
		RunStart: &ledger.RunStart{Inputs: inputs, ResponseID: r.responseID, Agent: r.agent.Name,
			Model: r.agent.Model, MaxSteps: r.agent.MaxSteps, Task: r.taskRecord()}}
}

// taskRecord returns the task the run works on, nil for an ordinary run.
func (r *run) taskRecord() *ledger.TaskRun {
	if r.hooks == nil {
		return nil
	}
	return r.hooks.task
}

// requestCancel asks the run to stop, with reason; it returns true only when
// this call newly asked.
func (r *run) requestCancel(reason string) bool {
	if reason == "" {
		reason = "cancelled"
	}
	r.st.mu.Lock()
	first := !r.cancelRequested
	r.cancelRequested = true
	r.st.mu.Unlock()
	if first {
		r.cancel(&CancelledError{Reason: reason})
	}
	return first
}

// stopped reports whether the run's context ended, deciding first the fate
// of a run whose bound caller has just stopped.
func (r *run) stopped() bool {
	r.checkBound()
	return r.ctx.Err() != nil
}

// loop runs model passes and tools until the model stops, the step bound is
// reached, the run is stopped or something fails.
func (r *run) loop() outcome {
	for {
		if o, stop := r.pass(); stop {
			return o
		}
	}
}

// pass runs one model pass and its tools. It returns stop when the run must
// end with the outcome o.
func (r *run) pass() (o outcome, stop bool) {
	defer r.armStep()()
	span := r.startStepSpan()
	defer func() { endStepSpan(span, o, stop) }()
	r.passStart = time.Now()
	ctx := r.ctx
	if shutDown(ctx) || r.h.draining.Load() {
		return outcome{err: ErrClosed}, true // a step boundary: the next host makes this pass
	}
	if r.stopped() {
		// Stopped between passes (or resumed past its total timeout):
		// no model call is made.
		status, reason, timeout := doneStatus(ctx)
		return outcome{status: status, reason: reason, timeout: timeout}, true
	}
	r.snapshotTools()
	// Messages queued while the run worked join this pass, but for those
	// it holds back for the next.
	r.sync()
	events := r.view()
	var later []string
	if r.holdFrom > 0 {
		later, r.holdFrom = queuedFrom(events, r.holdFrom), 0
	}
	r.folding = ledger.PendingInputs(events)
	if later != nil {
		r.folding = slices.DeleteFunc(r.folding, func(id string) bool { return slices.Contains(later, id) })
	}
	r.publish(Progress{Type: ProgressResponseStart})
	if r.needsCompaction(ctx) {
		if _, err := r.compact(ctx); err != nil {
			// The pass goes on uncompacted; an overflow, should it come,
			// compacts again.
			r.h.log.Warn("compaction failed", "session", r.sessionID, "run", r.id, "err", err)
		}
		events = r.view()
	}
	req := model.Request{Model: r.agent.Model, System: r.agent.System,
		Messages: ledger.ReplayMessages(withoutQueued(events, later)), Tools: r.specs, MaxTokens: r.agent.MaxTokens}
	var res model.Result
	var merr error
	var tries streamTries
	for overflowed := false; ; overflowed = true {
		res, tries, merr = r.stream(req)
		if merr == nil || ctx.Err() != nil || tries.ledgerErr != nil || overflowed || model.Classify(merr).Kind != model.ContextOverflow {
			break
		}
		// The prompt no longer fits: compact, and try once more.
		ok, cerr := r.compact(ctx)
		if cerr != nil || !ok {
			if cerr != nil {
				r.h.log.Warn("compaction after a context overflow failed", "session", r.sessionID, "err", cerr)
			}
			break
		}
		req.Messages = ledger.ReplayMessages(withoutQueued(r.view(), later))
	}
	if tries.ledgerErr != nil {
		return outcome{err: tries.ledgerErr}, true
	}
	if tries.retried == tries.attempts {
		// Stopped while waiting to retry: what the failed attempt
		// streamed was declared void; there is nothing to keep.
		res = model.Result{}
	}
	if merr != nil {
		if !r.stopped() {
			if te, ok := errors.AsType[*TimeoutError](merr); ok {
				// The stream stayed silent past a chunk timeout, on every
				// attempt.
				reason := te.Error()
				if tries.attempts > 1 {
					reason = fmt.Sprintf("%s (gave up after %d attempts)", reason, tries.attempts)
				}
				return outcome{status: ledger.RunTimedOut, reason: reason, timeout: te.Kind}, true
			}
			c := model.Classify(merr)
			reason := fmt.Sprintf("model: %v", merr)
			if tries.attempts > 1 {
				reason = fmt.Sprintf("model: %v (%s; gave up after %d attempts)", merr, c.Reason, tries.attempts)
			} else if c.Kind != model.Transient {
				reason = fmt.Sprintf("model: %v (%s: %s, not retried)", merr, c.Kind, c.Reason)
			}
			return outcome{status: ledger.RunFailed, reason: reason}, true
		}
		if shutDown(ctx) {
			return outcome{err: ErrClosed}, true // the pass restarts on resume
		}
		// Cancelled or timed out mid-pass: keep what streamed.
		status, reason, timeout := doneStatus(ctx)
		if res.Text != "" || res.Reasoning != "" {
			step := r.stepEvent(res, "")
			step.Step.Partial = true
			step.Step.ToolCalls = nil // a cut-short pass asked for nothing
			if err := r.append(step); err != nil {
				return outcome{err: err}, true
			}
		}
		return outcome{status: status, reason: reason, timeout: timeout}, true
	}
	res.ToolCalls = r.uniqueCallIDs(res.ToolCalls)
	if reason := cutShort(res.FinishReason); reason != "" {
		return r.failCutShort(res, reason), true
	}
	if len(res.ToolCalls) == 0 {
		return r.turnEnd(res)
	}
	next := ""
	if r.step+1 < r.agent.MaxSteps {
		next = ledger.NewID("resp")
	}
	if err := r.append(r.stepEvent(res, next)); err != nil {
		return outcome{err: err}, true
	}
	waiting, err := r.runTools(res.ToolCalls, nil)
	if err != nil {
		return outcome{err: err}, true
	}
	if len(waiting) > 0 {
		return outcome{status: ledger.RunApprovalRequired, parked: true}, true
	}
	return r.afterTools(next)
}

// cutShort returns why a pass that finished for finishReason is no answer,
// "" when it is one: a reply cut at its max tokens, or stopped by the
// provider's content filter, is a failure, never a completed turn.
func cutShort(finishReason string) string {
	switch finishReason {
	case "length":
		return "truncated at max tokens"
	case "content_filter":
		return "stopped by the provider's content filter"
	}
	return ""
}

// failCutShort records a pass that was cut short (see cutShort) as it
// streamed — its tool calls, whose arguments may be cut, are answered
// without running — and fails the run with reason.
func (r *run) failCutShort(res model.Result, reason string) outcome {
	if err := r.append(r.stepEvent(res, "")); err != nil {
		return outcome{err: err}
	}
	for _, c := range res.ToolCalls {
		if err := r.appendResult(c, "error: not run: the model's reply was "+reason, true); err != nil {
			return outcome{err: err}
		}
	}
	return outcome{status: ledger.RunFailed, reason: reason}
}

// turnEnd records a pass in which the model ended its turn, and decides
// whether the run ends. A hook may poke the model to go on, or fail the run;
// otherwise the run is done — unless messages were queued meanwhile: then
// it goes on to answer them. The check and the step's append are one
// decision under appendMu, so that no send can queue into a run that has
// decided to end.
func (r *run) turnEnd(res model.Result) (outcome, bool) {
	var poke, failReason string
	if r.hooks != nil && r.hooks.turnEnd != nil {
		poke, failReason = r.hooks.turnEnd()
	}
	r.st.appendMu.Lock()
	if err := r.reloadIfStale(); err != nil {
		r.h.log.Warn("cannot reload the session before ending the run", "session", r.sessionID, "err", err)
	}
	r.st.mu.Lock()
	pending := len(ledger.PendingInputs(r.events)) - len(r.folding)
	more := (pending > 0 || poke != "") && failReason == "" && r.step+1 < r.agent.MaxSteps
	if !more {
		r.ending = true
	}
	r.st.mu.Unlock()
	next := ""
	if more {
		next = ledger.NewID("resp")
	}
	evs := []ledger.Event{r.stepEvent(res, next)}
	if more && poke != "" {
		p := r.newEvent(ledger.KindPoke)
		p.Poke = &ledger.Poke{Text: poke}
		evs = append(evs, p)
	}
	err := r.appendLocked(evs...)
	r.st.appendMu.Unlock()
	switch {
	case err != nil:
		return outcome{err: err}, true
	case failReason != "":
		return outcome{status: ledger.RunFailed, reason: failReason}, true
	case !more && poke != "":
		return outcome{status: ledger.RunFailed, reason: fmt.Sprintf("the run reached its bound of %d model passes before the model finished", r.agent.MaxSteps)}, true
	case !more:
		return outcome{status: ledger.RunCompleted}, true
	}
	r.advance(next)
	return outcome{}, false
}

// afterTools decides what follows a pass whose tool calls were all
// answered: the run stops (stopped, the host closing, a task's hook), fails
// at its bound of passes (no next item was minted), or goes on with the
// pass that streams into next.
func (r *run) afterTools(next string) (outcome, bool) {
	if shutDown(r.ctx) || r.h.draining.Load() {
		return outcome{err: ErrClosed}, true
	}
	if r.stopped() {
		status, reason, timeout := doneStatus(r.ctx)
		return outcome{status: status, reason: reason, timeout: timeout}, true
	}
	if r.hooks != nil && r.hooks.afterTools != nil {
		if stop, status, reason := r.hooks.afterTools(); stop {
			return outcome{status: status, reason: reason}, true
		}
	}
	if next == "" {
		return outcome{status: ledger.RunFailed, reason: fmt.Sprintf("the run reached its bound of %d model passes while the model still called tools", r.agent.MaxSteps)}, true
	}
	r.advance(next)
	return outcome{}, false
}

// streamTries tells how a pass's attempts went.
type streamTries struct {
	attempts  int   // model calls made
	retried   int   // the last attempt a retry was recorded for
	ledgerErr error // a retry could not be recorded
}

// stream runs one model pass with retries of transient failures, recording
// each retry in the ledger and telling clients to reset the item.
func (r *run) stream(req model.Request) (model.Result, streamTries, error) {
	var t streamTries
	r.checkBound()
	res, err := model.WithRetries(r.ctx, r.h.retry, func(ctx context.Context, attempt int) (model.Result, error) {
		t.attempts = attempt
		sink := &deltaSink{r: r, open: true}
		defer sink.close()
		ctx, watch := watchChunks(ctx, r.agent.Timeouts)
		onDelta := sink.add
		if watch != nil {
			onDelta = func(d model.Delta) {
				watch.kick()
				sink.add(d)
			}
		}
		chain := r.h.hooks.Load()
		ctx = chain.withCallInfo(ctx, CallInfo{SessionID: r.sessionID, RunID: r.id, Agent: r.agent.Name, Purpose: PurposePass, Attempt: attempt})
		res, err := r.modelCall(ctx, req, attempt, func(ctx context.Context) (model.Result, error) {
			res, err := chain.stream(ctx, req, onDelta)
			return res, watch.stop(err)
		})
		if te, ok := errors.AsType[*TimeoutError](err); ok && watch != nil {
			r.emit(Event{Type: EventTimeout, Timeout: te.Kind, Reason: te.Error()})
		}
		return res, err
	}, func(ri model.RetryInfo) error {
		t.retried = ri.Attempt
		r.retryClass = string(ri.Class.Kind)
		r.h.tel.countRetry(ri.Class.Kind)
		// The failed attempt's text is dropped: the retry streams into
		// the same item from its start, and the progress event tells
		// clients to reset it.
		reason := fmt.Sprintf("%s: %v", ri.Class.Reason, ri.Err)
		e := r.newEvent(ledger.KindRetry)
		e.Retry = &ledger.Retry{ResponseID: r.responseID, Attempt: ri.Attempt, Reason: truncate(reason, 2000), DelayMS: ri.Delay.Milliseconds()}
		if err := r.append(e); err != nil {
			t.ledgerErr = err
			return err
		}
		r.resetLive(r.responseID)
		r.publish(Progress{Type: ProgressRetry, Retry: &RetryInfo{Reason: ri.Class.Reason + ": " + truncate(ri.Err.Error(), 500),
			Attempt: ri.Attempt, DelayMS: ri.Delay.Milliseconds(), Reset: true}})
		return nil
	})
	return res, t, err
}

// runHooks let a caller of the loop steer a run (tasks use them). Both are
// called from the run's goroutine.
type runHooks struct {
	// afterTools is called once a pass's tool results are durable; stop
	// ends the run with status and reason.
	afterTools func() (stop bool, status ledger.RunStatus, reason string)
	// turnEnd is called when the model ends its turn (a pass without tool
	// calls). A non-empty poke is sent to the model as a user message,
	// and the run goes on; a non-empty fail ends the run failed with that
	// reason; both empty let the run complete.
	turnEnd func() (poke, fail string)
	// task, when set, is recorded in the run's run-start: the run is a
	// task's, and a host resuming it rebuilds these hooks from it.
	task *ledger.TaskRun
	// deliverable returns what a run that completes delivers, recorded in
	// its run-end.
	deliverable func() json.RawMessage
}

// advance moves the run to its next pass, streaming into the item next.
func (r *run) advance(next string) {
	r.step++
	r.responseID = next
	r.folding = nil
	r.resetLive(next)
}

// snapshotTools fixes the tools of the next pass: the agent's own, then
// those its toolsets offer now.
func (r *run) snapshotTools() {
	r.tools = make(map[string]Tool, len(r.agent.Tools))
	r.specs = r.specs[:0]
	add := func(t Tool, fromSet bool) {
		spec := t.Spec()
		if _, dup := r.tools[spec.Name]; dup || !ValidToolName(spec.Name) {
			if fromSet {
				r.h.log.Warn("tool skipped: its name is invalid or taken", "session", r.sessionID, "tool", spec.Name)
			}
			return
		}
		r.tools[spec.Name] = t
		schema := spec.InputSchema
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		r.specs = append(r.specs, model.ToolSpec{Name: spec.Name, Description: spec.Description, Parameters: schema})
	}
	for _, t := range r.agent.Tools {
		add(t, false)
	}
	for _, ts := range r.agent.Toolsets {
		for _, t := range ts.Tools() {
			if t != nil {
				add(t, true)
			}
		}
	}
}

// uniqueCallIDs returns calls with ids unique in the session: a call whose
// id is empty, or was used by an earlier pass of the session or earlier in
// this one, gets a fresh id. Some models number their calls per reply
// ("call_0", "call_1") or send none, while the ledger's replay, approvals
// and resume pair each result with its call by id: a reused id would pair
// a new call with an old result (and its approval). The model is then
// shown the ids as recorded.
func (r *run) uniqueCallIDs(calls []ledger.ToolCall) []ledger.ToolCall {
	if len(calls) == 0 {
		return calls
	}
	if r.callIDs == nil {
		r.callIDs = map[string]bool{}
		for _, e := range r.view() {
			if e.Step != nil {
				for _, c := range e.Step.ToolCalls {
					r.callIDs[c.ID] = true
				}
			}
		}
	}
	out, cloned := calls, false
	for i, c := range calls {
		if c.ID == "" || r.callIDs[c.ID] {
			if !cloned {
				out, cloned = slices.Clone(calls), true // the model's result is not ours to change
			}
			out[i].ID = ledger.NewID("call")
			r.h.log.Debug("a tool call's id was empty or used before: renamed", "session", r.sessionID, "run", r.id, "id", c.ID, "as", out[i].ID)
		}
		r.callIDs[out[i].ID] = true
	}
	return out
}

func (r *run) stepEvent(res model.Result, next string) ledger.Event {
	e := r.newEvent(ledger.KindStep)
	e.Step = &ledger.Step{ResponseID: r.responseID, NextResponseID: next, Index: r.step, Inputs: r.folding, Text: res.Text,
		Reasoning: res.Reasoning, ToolCalls: res.ToolCalls, FinishReason: res.FinishReason, Model: res.Model,
		GenerationID: res.GenerationID, Usage: res.Usage, Raw: res.Raw}
	return e
}

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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
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
		e.RunEnd = &ledger.RunEnd{Status: status, Reason: reason, Timeout: string(o.timeout), Inputs: r.unrecordedFolds()}
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
