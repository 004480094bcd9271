package host

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

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
	traceID   string        // its spans' trace (TraceIDOf) when the host makes spans
	blobs     blobCache     // the blobs its passes read back (see Options.BlobThreshold)

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
	step       atomic.Int64    // index of the next pass: read by emit on the goroutines that append to the run (stepNow)
	folding    []string        // queued messages the current pass folded in
	holdFrom   int             // > 0: the next pass holds back the messages queued from this position on (see afterRun)
	callIDs    map[string]bool // the session's tool call ids, once a pass made calls (uniqueCallIDs)
	tools      map[string]Tool
	specs      []model.ToolSpec
	grants     []Grant // the run's own approved requests (runapproval.go)
	waits      int     // the calls of the pass that wait in their journals (wait.go)

	// The child runs its delegate calls started (Options.Delegation), and,
	// for a run that is no delegate's child, its message's whole tree.
	delegateCalls, delegateTree atomic.Int64

	// Guarded by st.mu.
	events []ledger.Event // the whole ledger as this host knows it, or the view of snap
	// snap is the snapshot events is the view of (its first
	// len(snap.Carry) events carried, then the ledger after it); nil when
	// events is the whole ledger. Set at the run's start.
	snap            *ledger.Snapshot
	live            liveView   // the item streaming
	ending          bool       // the run decided to end: sends no longer queue into it
	waiters         []*waiter  // the messages whose senders wait for the run's answer
	firstWaiter     [1]*waiter // room for the first of them, the common case
	cancelRequested bool
	// rollback marks a run a message sent with OverlapRollback cancelled:
	// its run-end says it is rolled back (st.mu guards it).
	rollback bool
	bound    *binding // set before the run goes live; its fields are guarded by st.mu

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
	// parked: the run waits for approvals or for its calls' waits; it
	// does not end (no run-end), and continues once they are decided or
	// complete.
	parked bool
}

// newRun returns a run of the session over events, not started yet.
func (h *Host) newRun(st *sessionState, id string, agent Agent, hooks *runHooks, lease storage.Lease, events []ledger.Event, snap *ledger.Snapshot) *run {
	ctx, cancel := context.WithCancelCause(context.Background())
	// Room for the events of a one-pass run (message, run-start, step,
	// run-end): its view grows once, here, instead of on every append.
	events = slices.Grow(events, 4)
	r := &run{h: h, st: st, sessionID: st.key.id, id: id, agent: agent, hooks: hooks, lease: lease,
		ctx: ctx, base: ctx, cancel: cancel, events: events, snap: snap}
	r.hub.Init(hub.Options{Capacity: 8})
	r.waiters = r.firstWaiter[:0]
	if h.tel.tracing() {
		r.traceID = TraceIDOf(id)
	}
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
	if r.stopLease == nil { // (a run under a lease its launcher took renews it already: takeLease)
		r.stopLease = h.holdLease(st, r.lease)
	}
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
	if r.st.cur == nil {
		r.h.running.Add(1)
	}
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
	ctx, cancel := context.WithTimeoutCause(r.base, d, &TimeoutError{Kind: TimeoutStep, Step: r.stepNow(), After: d})
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

// interrupt cancels the run for the message msgID, sent with overlap o
// (OverlapInterrupt or OverlapRollback), which the run does not fold in: a
// run of its own answers it once this one ended.
func (r *run) interrupt(msgID string, o Overlap) bool {
	r.st.mu.Lock()
	if o == OverlapRollback && !r.cancelRequested {
		r.rollback = true
	}
	r.st.mu.Unlock()
	how := "interrupted"
	if o == OverlapRollback {
		how = "rolled back"
	}
	return r.requestCancel(fmt.Sprintf("%s by message %s", how, msgID))
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
