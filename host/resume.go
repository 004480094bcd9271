package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Crash recovery: re-driving a run whose process died (a run-start without
// a run-end), where the ledger says it stopped.

// ResumeAction is what to do with an interrupted run.
type ResumeAction string

// The resume actions.
const (
	// ActionResume continues the run where the ledger says it stopped.
	ActionResume ResumeAction = "resume"
	// ActionRestart ends the dead run as failed (its passes stay in the
	// transcript, but the model no longer sees them) and runs its inputs
	// again from scratch in a new run.
	ActionRestart ResumeAction = "restart"
	// ActionFail ends the run as failed, without running anything.
	ActionFail ResumeAction = "fail"
	// ActionLeave leaves the run interrupted, recording nothing: the
	// session shows as interrupted until the next message, whose run
	// closes it as interrupted (its turn is not replayed; the new run's
	// model sees the transcript), or until a resume on demand
	// ([Session.Resume]) continues it.
	ActionLeave ResumeAction = "leave"
)

// Interrupted describes an interrupted run to [AutoResume.OnInterrupted].
type Interrupted struct {
	SessionID string
	RunID     string
	// Inputs are the message ids the run answers.
	Inputs []string
	// Attempts counts the resume attempts the ledger records for the run.
	Attempts int
	// StartedAt is when the run started.
	StartedAt time.Time
	// Task is the task the run works on, nil for an ordinary run.
	Task *ledger.TaskRun
}

// ResumeOptions tunes one [Session.Resume]. The zero value is usable.
type ResumeOptions struct {
	// Agent resumes the run instead of the host's Options.Agent. Default:
	// nil.
	Agent *Agent
	// Action is what to do with the interrupted run: ActionResume,
	// ActionRestart or ActionFail (a resume on demand never leaves it).
	// Default: "", which means ActionResume, whatever the agent's
	// Agent.OnInterrupted says.
	Action ResumeAction
	// OnProgress receives the resumed run's live events. Default: nil.
	OnProgress func(Progress)
}

// Resume continues the session's interrupted run, as [Session.Resume] with
// default options does.
func (h *Host) Resume(ctx context.Context, sessionID string) (RunResult, error) {
	return h.Session(sessionID).Resume(ctx, ResumeOptions{})
}

// Resume continues the session's interrupted run: a run whose process died
// (a run-start without a run-end). It returns [ErrNothingToResume] when
// there is none. A manual resume is not bounded by AutoResume.MaxAttempts.
//
// The run continues where the ledger says it stopped. A tool call of its
// last pass that has no result is run again, except a tool with an
// external effect that had started (its tool-start is recorded): that one
// runs again only when it declared itself idempotent (its call id is the
// idempotency key); otherwise the model gets an "outcome unknown" result. A
// run whose cancellation was recorded (a partial pass) but not its end is
// closed as cancelled, never re-driven.
func (s *Session) Resume(ctx context.Context, opts ResumeOptions) (RunResult, error) {
	r, res, err := s.startResume(ctx, opts, ctx)
	if r != nil {
		return r.wait(ctx, opts.OnProgress)
	}
	return res, err
}

// StartResume is [Session.Resume] that returns once the interrupted run is
// under way, with a handle on it, rather than once it ended: the run is
// the host's (ctx bounds StartResume only), and [Run.Wait] and
// [Run.Subscribe] follow it. A run the action closes without running it
// (fail; a cancellation recorded before the crash) gives a handle whose
// Wait returns that end at once. opts.OnProgress is not used. It returns
// [ErrNothingToResume] when the session has no interrupted run.
func (s *Session) StartResume(ctx context.Context, opts ResumeOptions) (*Run, error) {
	r, res, err := s.startResume(ctx, opts, nil)
	if r == nil && err == nil {
		r = &Run{h: s.h, sess: s, msgID: res.MessageID, w: answeredWaiter(res)}
	}
	return r, err
}

// startResume starts the resume opts ask for, the run bound to bind (see
// Session.Send) when set. It returns the handle on the run that goes on,
// or what the resume did when it started none.
func (s *Session) startResume(ctx context.Context, opts ResumeOptions, bind context.Context) (*Run, RunResult, error) {
	agent := s.h.agent
	if a, ok := s.h.boundAgent(s.id); ok {
		agent = a
	}
	if opts.Agent != nil {
		a, err := normalizeAgent(*opts.Agent)
		if err != nil {
			return nil, RunResult{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
		agent = a
	}
	action := opts.Action
	switch action {
	case "":
		action = ActionResume
	case ActionResume, ActionRestart, ActionFail:
	default:
		return nil, RunResult{}, fmt.Errorf("%w: ResumeOptions.Action %q is not resume, restart or fail", ErrInvalidInput, action)
	}
	r, res, err := s.h.resume(ctx, s.id, agent, bind, nil, func(Interrupted) ResumeAction { return action }, nil)
	if r != nil {
		return r, RunResult{}, nil
	}
	switch {
	case errors.Is(err, errReconciled):
		err = nil
	case errors.Is(err, errParked):
		// Waiting for people is not interrupted: nothing to resume.
		err = fmt.Errorf("%w: the run waits for approval", ErrNothingToResume)
	}
	return nil, res, err
}

// resume claims the session and re-drives its interrupted run with the
// action decide picks. When that starts a run, resume returns the caller's
// handle on it (bound to bind, when set: see Session.Send); onLive, when
// set, is called once that run is the session's run in flight. Otherwise it
// returns what it did: a run closed without running again (reconciled as
// cancelled: errReconciled; failed by policy; given up), or a run parked
// for approvals (errParked, with the parked result). prepare, when set,
// sees the ledger under the claim and lease first: it returns events to
// record before anything else (decisions on approvals), or an error that
// stops the resume with nothing recorded.
func (h *Host) resume(ctx context.Context, id string, agent Agent, bind context.Context, onLive func(), decide func(Interrupted) ResumeAction,
	prepare func([]ledger.Event) ([]ledger.Event, error)) (*Run, RunResult, error) {
	if !storage.ValidSessionID(id) {
		return nil, RunResult{}, fmt.Errorf("%w: session id %q", ErrInvalidInput, id)
	}
	sess := h.Session(id)
	st, err := h.ref(sess)
	if err != nil {
		return nil, RunResult{}, err
	}
	defer h.unref(st)
	// A run of the session already working in this host leaves nothing to
	// resume: waiting for its end would hold back a message that the
	// caller means to send right after (it would queue into that run).
	if cur, err := st.claim(ctx, false); err != nil {
		return nil, RunResult{}, err
	} else if cur != nil {
		return nil, RunResult{}, &workingHereError{st: st, run: cur}
	}
	launched := false
	defer func() {
		if !launched {
			st.free()
		}
	}()
	// Another host may lead the session (or be resuming it right now):
	// only the lease holder resumes.
	lease, stopLease, err := h.takeLease(ctx, st)
	if err != nil {
		return nil, RunResult{}, err
	}
	defer func() {
		if !launched {
			stopLease() // the renewals stop, the lease is given back
		}
	}()
	events, snap, err := h.loadView(ctx, st)
	if err != nil {
		return nil, RunResult{}, fmt.Errorf("host: load session %s: %w", id, err)
	}
	if prepare != nil {
		add, err := prepare(events)
		if err != nil {
			return nil, RunResult{}, err
		}
		if len(add) > 0 {
			// A fork's copies of its source's events are no news: only
			// its own events go to the outbox and the observers.
			news := forkOwn(add)
			err = h.stage(ctx, st, news, events, snap)
			if err == nil && lease != nil {
				err = lease.Append(ctx, add...)
			} else if err == nil {
				err = st.store.Append(ctx, id, add...)
			}
			if err != nil {
				return nil, RunResult{}, fmt.Errorf("%w: %w", errNotRecorded, err)
			}
			events = append(events, add...)
			h.announceDecisions(id, news)
			h.observeDecided(id, events, news)
		}
	}
	if runID, parked := parkedRun(events); parked {
		return nil, h.parkedResult(id, events, runID), errParked
	}
	open := ledger.OpenRuns(events)
	if len(open) == 0 && len(ledger.PendingInputs(events)) == 0 {
		return nil, RunResult{}, ErrNothingToResume
	}
	var next *run
	var body func(*run) outcome
	var res RunResult
	var settled error // what settling the open runs came to, when it started no run
	if len(open) > 0 {
		next, body, res, settled = h.resumeOpen(st, agent, decide, events, snap, open, lease)
		if next == nil {
			if settled != nil && !errors.Is(settled, errReconciled) && !errors.Is(settled, ErrNothingToResume) {
				return nil, res, settled
			}
			if events, snap, err = h.loadView(ctx, st); err != nil {
				return nil, res, fmt.Errorf("host: load session %s: %w", id, err)
			}
		}
	}
	// Messages queued before the crash that no run picked up get a run of
	// their own, batched into its first pass.
	if pending := ledger.PendingInputs(events); next == nil && len(pending) > 0 && ledger.OpenRuns(events) == nil {
		next, body = h.newRun(st, ledger.NewID("run"), agent, nil, lease, events, snap), (*run).loop
		if err := next.append(next.startEvent(pending, time.Now().UTC())); err != nil {
			return nil, res, err
		}
	}
	if next == nil {
		return nil, res, settled // errReconciled, ErrNothingToResume (all superseded), or what the action did
	}
	inputs := ledger.RunInputs(next.view(), next.id)
	r := &Run{h: h, sess: sess, agent: agent, msgID: inputs[len(inputs)-1]}
	r.w = next.addWaiter(r.msgID, &r.agent, false)
	if bind != nil {
		next.bindTo(bind, r.msgID)
		r.bound = next
	}
	next.onLive = onLive
	next.stopLease = stopLease
	launched = true
	h.launch(next, body)
	return r, RunResult{}, nil
}

// resumeOpen settles the session's open runs: it closes those a later run
// superseded, and deals with the last as decide says. It returns the run to
// launch and what it runs first, or, when there is none, the result of
// what it did.
func (h *Host) resumeOpen(st *sessionState, agent Agent, decide func(Interrupted) ResumeAction, events []ledger.Event, snap *ledger.Snapshot,
	open []string, lease storage.Lease) (*run, func(*run) outcome, RunResult, error) {
	// Runs never overlap: an open run that a later run followed is the
	// leftover of an earlier crash, superseded since; close it.
	lastStart := ""
	for _, e := range events {
		if e.RunStart != nil {
			lastStart = e.RunID
		}
	}
	if open[len(open)-1] != lastStart {
		open = append(open, "") // every open run is superseded: none to resume
	}
	r := h.newRun(st, open[len(open)-1], agent, nil, lease, events, snap)
	for _, old := range open[:len(open)-1] {
		e := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunEnd, Time: time.Now().UTC(), RunID: old,
			RunEnd: &ledger.RunEnd{Status: ledger.RunInterrupted, Reason: "superseded by a later run"}}
		if err := r.append(e); err != nil {
			return nil, nil, RunResult{}, err
		}
	}
	if r.id == "" {
		return nil, nil, RunResult{}, ErrNothingToResume
	}
	view, _ := ledger.ProjectRun(r.view(), r.id)
	messageID := ""
	if n := len(view.Inputs); n > 0 {
		messageID = view.Inputs[n-1]
	}
	var last *ledger.Step
	if n := len(view.Steps); n > 0 {
		last = &view.Steps[n-1]
	}
	// closeNow records the run's end without running it; a successor that
	// the end started for messages left pending is to run next.
	closeNow := func(o outcome, err error) (*run, func(*run) outcome, RunResult, error) {
		r.responseID = view.ResponseID
		next := r.end(o)
		r.release()
		if next != nil {
			return next, (*run).loop, RunResult{}, nil
		}
		res := r.res
		res.MessageID = messageID
		if r.err != nil {
			err = r.err
		}
		return nil, nil, res, err
	}

	// A cancellation whose end was not recorded stays a cancellation.
	if last != nil && last.Partial {
		r.responseID = last.ResponseID
		return closeNow(outcome{status: ledger.RunCancelled, reason: "cancelled (its end was recorded after a restart)"}, errReconciled)
	}

	ir := Interrupted{SessionID: st.key.id, RunID: r.id, Inputs: view.Inputs, Attempts: view.ResumeAttempts, StartedAt: view.StartedAt,
		Task: view.Task}
	action := decide(ir)
	if view.Task != nil && (action == ActionResume || action == ActionRestart) {
		// A task's run goes on as the task: its tools, hooks and state
		// rebuilt from the ledger, or it fails saying why it cannot.
		t, err := h.resumeTask(context.Background(), view, action == ActionResume)
		if err != nil {
			return closeNow(outcome{status: ledger.RunFailed, reason: err.Error()}, nil)
		}
		r.hooks, r.agent = t.hooks(), t.agentFor(agent)
	}
	switch action {
	case outcomeGaveUp:
		return nil, nil, RunResult{RunID: r.id, MessageID: messageID, Status: ledger.RunInterrupted,
			Reason: fmt.Sprintf("not resumed: %d resume attempts already failed", view.ResumeAttempts)}, nil
	case ActionLeave:
		// Nothing is recorded: the run stays interrupted, its messages
		// (and those queued after it) waiting for the next message or a
		// resume on demand.
		return nil, nil, RunResult{RunID: r.id, MessageID: messageID, Status: ledger.RunInterrupted, Reason: leftReason}, nil
	case ActionFail:
		return closeNow(outcome{status: ledger.RunFailed, reason: "interrupted, and not resumed by policy"}, nil)
	case ActionRestart:
		dead := r.id
		prior := lastAttemptAt(events, dead)
		r.holdFrom = afterRun(events, dead)
		r.id = ledger.NewID("run")
		end := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunEnd, Time: time.Now().UTC(), RunID: dead,
			RunEnd: &ledger.RunEnd{Status: ledger.RunFailed, Reason: "interrupted; restarted from scratch as " + r.id, RestartedBy: r.id}}
		start := r.startEvent(view.Inputs, time.Now().UTC())
		// The restart counts as an attempt of the new run, so that a run
		// that crashes the process on every restart is bounded too.
		attempt := r.newEvent(ledger.KindResumeAttempt)
		attempt.ResumeAttempt = &ledger.ResumeAttempt{Attempt: h.attemptNumber(r.id, view.ResumeAttempts, prior), Host: h.hostID}
		if err := r.append(end, start, attempt); err != nil {
			h.unrecorded.Store(r.id, attempt.ResumeAttempt.Attempt)
			return nil, nil, RunResult{}, err
		}
		h.unrecorded.Delete(r.id)
		h.countResumed()
		return r, (*run).loop, RunResult{}, nil
	}

	// Resume: count the attempt first, so that a resume that crashes the
	// process is counted too — unless the run goes on after people
	// decided on its approvals: that is no crash recovery.
	if !continuesApprovals(r.view(), r.id, last) {
		r.holdFrom = afterRun(events, r.id)
		attempt := r.newEvent(ledger.KindResumeAttempt)
		attempt.ResumeAttempt = &ledger.ResumeAttempt{Attempt: h.attemptNumber(r.id, view.ResumeAttempts, lastAttemptAt(events, r.id)), Host: h.hostID}
		if err := r.append(attempt); err != nil {
			h.unrecorded.Store(r.id, attempt.ResumeAttempt.Attempt)
			return nil, nil, RunResult{}, err
		}
		h.unrecorded.Delete(r.id)
		h.countResumed()
	}
	r.step.Store(int64(len(view.Steps)))
	r.responseID = view.ResponseID
	return r, func(r *run) outcome { return r.continueRun(last, view) }, RunResult{}, nil
}

// leftReason tells why a run stays interrupted (ActionLeave).
const leftReason = "interrupted, and left so by its agent's policy (on_interrupted: leave) until the next message or a resume"

// attemptNumber returns the number of the next resume attempt of run,
// whose ledger records recorded attempts, the last at prior. Attempts are
// counted so that a run that crashes the process on every resume is given
// up on (AutoResume.MaxAttempts); an attempt that crashed nothing is not
// counted again, but tried under its own number:
//
//   - one this host failed to record (the storage failed; the record may
//     have landed all the same, as an append whose reply was lost does);
//   - on a store with leases, one made less than 90% of a lease ttl
//     before now: its host gave the lease back (its run stopped on a
//     storage failure, say), for a host that dies holds it a whole ttl
//     from when it took it, just before the attempt. (The tenth left
//     covers the load between the two, and the hosts' clocks.)
//
// A process that dies still counts one.
func (h *Host) attemptNumber(run string, recorded int, prior time.Time) int {
	if recorded == 0 {
		return 1
	}
	if n, ok := h.unrecorded.Load(run); ok && n.(int) == recorded {
		return recorded
	}
	if h.leaser != nil && !prior.IsZero() && time.Since(prior) < h.leaseTTL*9/10 {
		return recorded
	}
	return recorded + 1
}

// lastAttemptAt returns the time of the run's last resume attempt; zero
// when it has none.
func lastAttemptAt(events []ledger.Event, run string) time.Time {
	var at time.Time
	for _, e := range events {
		if e.ResumeAttempt != nil && e.RunID == run {
			at = e.Time
		}
	}
	return at
}

// continueRun finishes what the run's last pass asked for, then goes on
// with the loop.
func (r *run) continueRun(last *ledger.Step, view ledger.Run) outcome {
	if o, stop := r.afterRunApproval(); stop {
		return o
	}
	if last == nil {
		return r.loop() // died in its first pass
	}
	if len(last.ToolCalls) == 0 {
		// The model ended its turn. The pass recorded what the run
		// decided then: to go on (messages were queued meanwhile, or a
		// task's poke), naming the item the next pass streams into, or
		// to end.
		if last.NextResponseID != "" && last.Index+1 < r.agent.MaxSteps {
			r.step.Store(int64(last.Index))
			r.advance(last.NextResponseID)
			return r.loop()
		}
		if r.taskRecord() == nil {
			// The final pass was recorded; only the end was not.
			return outcome{status: ledger.RunCompleted}
		}
		// A task's model stopped without a terminal tool, and no poke
		// followed: only a failure ends a task so.
		return outcome{status: ledger.RunFailed, reason: "the model stopped without submitting"}
	}
	prior := &priorCalls{answered: map[string]bool{}, started: map[string]*ledger.ToolStart{}}
	for _, res := range view.Results {
		prior.answered[res.CallID] = true
	}
	for _, e := range r.view() {
		if e.ToolStart != nil && e.RunID == r.id {
			prior.started[e.ToolStart.CallID] = e.ToolStart
		}
	}
	r.snapshotTools()
	r.announceDecided()
	waiting, err := r.runTools(last.ToolCalls, prior)
	if err != nil {
		return outcome{err: err}
	}
	if len(waiting) > 0 || r.waits > 0 {
		if r.stopped() && !shutDown(r.ctx) {
			status, reason, timeout := doneStatus(r.ctx)
			if err := r.withdraw(waiting, last.ToolCalls, status, reason); err != nil {
				return outcome{err: err}
			}
			return outcome{status: status, reason: reason, timeout: timeout}
		}
		return r.park(waiting)
	}
	r.step.Store(int64(last.Index))
	if o, stop := r.afterTools(last.NextResponseID); stop {
		return o
	}
	return r.loop()
}

// continuesApprovals reports whether a run goes on after people decided
// on its approval requests: its own request since its last pass was
// decided, or every call of its last pass without a result has a decided
// request, and there is at least one.
func continuesApprovals(events []ledger.Event, runID string, last *ledger.Step) bool {
	if a, ok := ledger.RunApproval(events, runID); ok {
		return a.State != ledger.ApprovalPending
	}
	if last == nil || len(last.ToolCalls) == 0 {
		return false
	}
	answered := map[string]bool{}
	for _, e := range events {
		if e.ToolResult != nil {
			answered[e.ToolResult.CallID] = true
		}
	}
	latest := latestApprovals(events, runID)
	decided := 0
	for _, c := range last.ToolCalls {
		if answered[c.ID] {
			continue
		}
		a, ok := latest[c.ID]
		if !ok || a.State == ledger.ApprovalPending {
			return false
		}
		decided++
	}
	return decided > 0
}

// afterRun returns the position in events just after the last event the
// run runID recorded before its last pass began. A resumed run's first pass holds back the messages queued from
// there on (see queuedFrom): that pass makes again the pass its process
// died in, which never saw them (a pass folds in the messages queued
// before it starts), and leaves them to the pass after it. So the dead
// run's messages get their answer, in the item the run had minted for it,
// and the later ones theirs, after it — rather than one answer to all of
// them, shown after the last. (A message queued while the dead pass
// streamed, before the crash, is held back too: the dead pass did not see
// it either.)
func afterRun(events []ledger.Event, runID string) int {
	last := -1
	for i, e := range events {
		// Resume attempts (of hosts whose resumes went nowhere) and
		// retries (of the pass that died) come after the pass began.
		if e.RunID == runID && e.Kind != ledger.KindResumeAttempt && e.Kind != ledger.KindRetry {
			last = i
		}
	}
	return last + 1
}

// queuedFrom returns the messages queued at position from of events or
// later that no run has picked up yet.
func queuedFrom(events []ledger.Event, from int) []string {
	pending := ledger.PendingInputs(events)
	var later []string
	for _, e := range events[min(from, len(events)):] {
		if e.Input != nil && e.RunID == "" && slices.Contains(pending, e.Input.MessageID) && !slices.Contains(later, e.Input.MessageID) {
			later = append(later, e.Input.MessageID)
		}
	}
	return later
}

// withoutQueued returns events without the queued messages held back (see
// afterRun): events itself when there are none.
func withoutQueued(events []ledger.Event, held []string) []ledger.Event {
	if len(held) == 0 {
		return events
	}
	out := make([]ledger.Event, 0, len(events))
	for _, e := range events {
		if e.Input != nil && e.RunID == "" && slices.Contains(held, e.Input.MessageID) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// workingHereError is resume's answer when a run of the session works in
// this host: nothing to resume ([ErrNothingToResume]). A decision waits for
// that run to leave (see Host.continueParked).
type workingHereError struct {
	st  *sessionState
	run *run
}

func (e *workingHereError) Error() string {
	return fmt.Sprintf("%v: a run of session %s is working in this host", ErrNothingToResume, e.run.sessionID)
}

func (e *workingHereError) Unwrap() error { return ErrNothingToResume }

// waitGone waits until run r is no longer the session's run in flight.
func (st *sessionState) waitGone(ctx context.Context, r *run) error {
	return st.waitUntil(ctx, func() bool { return st.cur != r })
}
