package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentichost/agentic/host/ledger"
	"github.com/agentichost/agentic/storage"
)

// ErrNothingToResume is returned by Resume for a session whose ledger holds
// no interrupted run.
var ErrNothingToResume = errors.New("host: no interrupted run to resume")

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

// AutoResume configures the host's boot sweep: on [New], the host lists the
// sessions of its storage (which must implement storage.Lister) and
// re-drives every run that was interrupted (a run-start without a run-end).
type AutoResume struct {
	// AgentFor returns the agent that resumes a session. Default: nil,
	// which means Options.Agent.
	AgentFor func(ctx context.Context, sessionID string) (Agent, error)
	// MaxAttempts bounds the resume attempts of one run, counted in the
	// ledger, so that a run that crashes the process on every resume
	// cannot wedge the boot in a loop: past the bound, the sweep leaves
	// the run interrupted (its input kept) for a manual [Host.Resume].
	// Default: 0, which means 3.
	MaxAttempts int
	// MaxConcurrent bounds the resumed runs in flight at once, over every
	// sweep of the host: a sweep waits for a free slot before it resumes
	// another run. Default: 0, which means 4.
	MaxConcurrent int
	// Stagger is the pause between starting two resumes, to spread the
	// load on the provider after a restart. Default: 0, none.
	Stagger time.Duration
	// OnInterrupted chooses what to do with each interrupted run. An
	// error, a panic or an unknown action falls back to ActionResume.
	// Default: nil, which means ActionResume.
	OnInterrupted func(ctx context.Context, run Interrupted) (ResumeAction, error)
	// OnResumed is told how each resumed run ended (res.Status, or err
	// when the ledger could not be written). Default: nil.
	OnResumed func(sessionID string, res RunResult, err error)
	// Interval repeats the sweep while the host lives, so that the runs
	// of a host that died are resumed by the others once its leases
	// lapse. A sweep never waits for the runs it resumed to end, so a
	// long run does not hold back the next sweep. Default: 0, which means Options.LeaseTTL when the storage has
	// leases (several hosts share it), else no repeat; -1 disables it.
	Interval time.Duration
}

// The defaults of [AutoResume].
const (
	DefaultResumeAttempts = 3
	DefaultMaxConcurrent  = 4
)

func (a AutoResume) normalized() (AutoResume, error) {
	var errs []error
	if a.MaxAttempts == 0 {
		a.MaxAttempts = DefaultResumeAttempts
	}
	if a.MaxConcurrent == 0 {
		a.MaxConcurrent = DefaultMaxConcurrent
	}
	if a.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("host: AutoResume.MaxAttempts %d is negative", a.MaxAttempts))
	}
	if a.MaxConcurrent < 0 {
		errs = append(errs, fmt.Errorf("host: AutoResume.MaxConcurrent %d is negative", a.MaxConcurrent))
	}
	if a.Interval < -1 {
		errs = append(errs, fmt.Errorf("host: AutoResume.Interval %s is negative (use -1 to disable)", a.Interval))
	}
	if a.Stagger < 0 {
		errs = append(errs, fmt.Errorf("host: AutoResume.Stagger %s is negative", a.Stagger))
	}
	return a, errors.Join(errs...)
}

// SweepReport tells what a sweep found and did.
type SweepReport struct {
	// Sessions is the number of sessions listed.
	Sessions int
	// Interrupted is the number of sessions found with an interrupted run
	// or queued messages no run picked up.
	Interrupted int
	// Resumed, Restarted and Failed count the runs given each action.
	Resumed, Restarted, Failed int
	// Reconciled counts runs whose cancellation had been recorded but not
	// their end: they were closed as cancelled, never re-driven.
	Reconciled int
	// GaveUp counts runs left interrupted because their resume attempts
	// reached AutoResume.MaxAttempts.
	GaveUp int
	// Skipped counts sessions already running in this host.
	Skipped int
	// Errors counts sessions that could not be loaded or resumed.
	Errors int
}

// SweepDone is closed when the boot sweep of [Options.AutoResume] has
// finished starting and running its resumes (at once when AutoResume is
// off). [Host.LastSweep] then reports what it did.
func (h *Host) SweepDone() <-chan struct{} { return h.sweep }

// LastSweep reports the boot sweep, once [Host.SweepDone] is closed.
func (h *Host) LastSweep() SweepReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sweepRep
}

// Sweep finds the interrupted runs of every session in storage and re-drives
// them as Options.AutoResume says, at most MaxConcurrent at once over the
// whole host. It returns once it has started (or otherwise handled) each of
// them, without waiting for the runs to end: they are the host's, and
// AutoResume.OnResumed reports each one's end. A sweep waits only for a
// free slot when MaxConcurrent resumed runs are in flight. The host runs it
// at boot when AutoResume is set (and repeats it, see
// AutoResume.Interval); call it yourself for a sweep on demand (it then
// needs AutoResume too). The storage must implement storage.Lister.
func (h *Host) Sweep(ctx context.Context) (SweepReport, error) {
	rep, _, err := h.sweepOnce(ctx)
	return rep, err
}

// sweepOnce is Sweep; it also returns a function that waits for the runs
// the sweep started to end.
func (h *Host) sweepOnce(ctx context.Context) (SweepReport, func(), error) {
	var rep SweepReport
	var runs sync.WaitGroup
	if h.auto == nil {
		return rep, runs.Wait, errors.New("host: Sweep needs Options.AutoResume")
	}
	lister, ok := h.store.(storage.Lister)
	if !ok {
		return rep, runs.Wait, errors.New("host: auto-resume needs a storage that lists its sessions (storage.Lister)")
	}
	ids, err := lister.ListSessions(ctx)
	if err != nil {
		return rep, runs.Wait, fmt.Errorf("host: list sessions: %w", err)
	}
	rep.Sessions = len(ids)
	first := true
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		events, err := h.store.Load(ctx, id)
		if err != nil {
			h.log.Error("auto-resume: cannot load session", "session", id, "err", err)
			rep.Errors++
			continue
		}
		if len(ledger.OpenRuns(events)) == 0 && len(ledger.PendingInputs(events)) == 0 {
			continue
		}
		rep.Interrupted++
		if h.IsRunning(id) {
			rep.Skipped++
			continue
		}
		select {
		case h.resumeSlots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		if !first && h.auto.Stagger > 0 {
			t := time.NewTimer(h.auto.Stagger)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		first = false
		if !h.track() {
			<-h.resumeSlots
			break // closed
		}
		runs.Add(1)
		// started tells what the resume did, once its run is under way
		// (or, when it started none, once it is over).
		started := make(chan ResumeAction, 2)
		go func() {
			defer h.wg.Done()
			defer runs.Done()
			defer func() { <-h.resumeSlots }()
			// The run is the host's, not the sweep's: when the sweep
			// stops (Close), the run goes on; Close decides its fate.
			out, res, err := h.autoResume(context.WithoutCancel(ctx), id, func(a ResumeAction) { started <- a })
			started <- out
			if h.auto.OnResumed != nil && (out == ActionResume || out == ActionRestart || out == outcomeReconciled) {
				h.auto.OnResumed(id, res, err)
			}
		}()
		switch <-started {
		case ActionResume:
			rep.Resumed++
		case ActionRestart:
			rep.Restarted++
		case ActionFail:
			rep.Failed++
		case outcomeReconciled:
			rep.Reconciled++
		case outcomeGaveUp:
			rep.GaveUp++
		case outcomeSkipped:
			rep.Skipped++
		default:
			rep.Errors++
		}
	}
	return rep, runs.Wait, ctx.Err()
}

// track counts a goroutine of the host's own in Host.wg, unless the host is
// closed.
func (h *Host) track() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.wg.Add(1)
	return true
}

// Outcomes of autoResume besides the actions.
const (
	outcomeReconciled ResumeAction = "reconciled"
	outcomeGaveUp     ResumeAction = "gave-up"
	outcomeSkipped    ResumeAction = "skipped"
	outcomeError      ResumeAction = "error"
)

// autoResume re-drives one session's interrupted run under the sweep's
// rules. It calls started with the action taken once the run it re-drives
// is under way (not when it starts none); it returns when the run ended.
func (h *Host) autoResume(ctx context.Context, id string, started func(ResumeAction)) (ResumeAction, RunResult, error) {
	agent := h.agent
	if h.auto.AgentFor != nil {
		a, err := h.auto.AgentFor(ctx, id)
		if err == nil {
			a, err = normalizeAgent(a)
		}
		if err != nil {
			h.log.Error("auto-resume: no agent for session", "session", id, "err", err)
			return outcomeError, RunResult{}, err
		}
		agent = a
	}
	var out ResumeAction
	onLive := func() {
		if out == "" {
			started(ActionResume) // only queued messages were pending
		} else {
			started(out)
		}
	}
	r, res, err := h.resume(ctx, id, agent, nil, onLive, func(ir Interrupted) ResumeAction {
		if ir.Attempts >= h.auto.MaxAttempts {
			h.log.Warn("auto-resume: giving up on a run that failed every resume; resume it by hand",
				"session", id, "run", ir.RunID, "attempts", ir.Attempts)
			out = outcomeGaveUp
			return outcomeGaveUp
		}
		out = h.chooseAction(ctx, ir)
		return out
	})
	if r != nil {
		res, err = r.wait(ctx, nil)
	}
	switch {
	case errors.Is(err, ErrNothingToResume), errors.Is(err, ErrLeadElsewhere):
		return outcomeSkipped, res, nil
	case errors.Is(err, errReconciled):
		return outcomeReconciled, res, nil
	case out == "" && err != nil:
		return outcomeError, res, err
	case out == "":
		out = ActionResume // only queued messages were pending: a run answered them
	}
	return out, res, err
}

// chooseAction asks the OnInterrupted hook, falling back to resume when it
// errs, panics or answers nonsense.
func (h *Host) chooseAction(ctx context.Context, ir Interrupted) (action ResumeAction) {
	if h.auto == nil || h.auto.OnInterrupted == nil {
		return ActionResume
	}
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("auto-resume: OnInterrupted panicked; resuming", "session", ir.SessionID, "panic", p)
			action = ActionResume
		}
	}()
	a, err := h.auto.OnInterrupted(ctx, ir)
	if err != nil {
		h.log.Error("auto-resume: OnInterrupted failed; resuming", "session", ir.SessionID, "err", err)
		return ActionResume
	}
	switch a {
	case ActionResume, ActionRestart, ActionFail:
		return a
	}
	h.log.Error("auto-resume: OnInterrupted returned an unknown action; resuming", "session", ir.SessionID, "action", a)
	return ActionResume
}

// ResumeOptions tunes one [Session.Resume]. The zero value is usable.
type ResumeOptions struct {
	// Agent resumes the run instead of the host's Options.Agent. Default:
	// nil.
	Agent *Agent
	// Action is what to do with the interrupted run. Default: "", which
	// means ActionResume.
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
	agent := s.h.agent
	if opts.Agent != nil {
		a, err := normalizeAgent(*opts.Agent)
		if err != nil {
			return RunResult{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
		agent = a
	}
	action := opts.Action
	if action == "" {
		action = ActionResume
	}
	r, res, err := s.h.resume(ctx, s.id, agent, ctx, nil, func(Interrupted) ResumeAction { return action })
	if r != nil {
		return r.wait(ctx, opts.OnProgress)
	}
	if errors.Is(err, errReconciled) {
		err = nil
	}
	return res, err
}

// errReconciled tells that the run had been cancelled before the crash and
// was closed as such.
var errReconciled = errors.New("host: interrupted run reconciled as cancelled")

// resume claims the session and re-drives its interrupted run with the
// action decide picks. When that starts a run, resume returns the caller's
// handle on it (bound to bind, when set: see Session.Send); onLive, when
// set, is called once that run is the session's run in flight. Otherwise it
// returns what it did: a run closed without running again (reconciled as
// cancelled: errReconciled; failed by policy; given up).
func (h *Host) resume(ctx context.Context, id string, agent Agent, bind context.Context, onLive func(), decide func(Interrupted) ResumeAction) (*Run, RunResult, error) {
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
	for {
		st.mu.Lock()
		live := st.cur != nil && !st.cur.ending
		claimed := !live && !st.busy
		var changed <-chan struct{}
		if claimed {
			st.busy = true
		} else if !live {
			changed = st.changedLocked()
		}
		st.mu.Unlock()
		if live {
			return nil, RunResult{}, fmt.Errorf("%w: a run of session %s is working in this host", ErrNothingToResume, id)
		}
		if claimed {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, RunResult{}, ctx.Err()
		}
	}
	launched := false
	defer func() {
		if !launched {
			st.free()
		}
	}()
	// Another host may lead the session (or be resuming it right now):
	// only the lease holder resumes.
	lease, err := h.takeLease(ctx, st)
	if err != nil {
		return nil, RunResult{}, err
	}
	defer func() {
		if lease != nil && !launched {
			lease.Release(context.WithoutCancel(ctx))
		}
	}()
	events, err := st.store.Load(ctx, id)
	if err != nil {
		return nil, RunResult{}, fmt.Errorf("host: load session %s: %w", id, err)
	}
	open := ledger.OpenRuns(events)
	if len(open) == 0 && len(ledger.PendingInputs(events)) == 0 {
		return nil, RunResult{}, ErrNothingToResume
	}
	var next *run
	var body func(*run) outcome
	var res RunResult
	if len(open) > 0 {
		next, body, res, err = h.resumeOpen(st, agent, decide, events, open, lease)
		if next == nil {
			if err != nil && !errors.Is(err, errReconciled) && !errors.Is(err, ErrNothingToResume) {
				return nil, res, err
			}
			if events, err = st.store.Load(ctx, id); err != nil {
				return nil, res, fmt.Errorf("host: load session %s: %w", id, err)
			}
		}
	}
	// Messages queued before the crash that no run picked up get a run of
	// their own, batched into its first pass.
	if pending := ledger.PendingInputs(events); next == nil && len(pending) > 0 && ledger.OpenRuns(events) == nil {
		next, body = h.newRun(st, ledger.NewID("run"), agent, nil, lease, events), (*run).loop
		if err := next.append(next.startEvent(pending, time.Now().UTC())); err != nil {
			return nil, res, err
		}
	}
	if next == nil {
		return nil, res, err // errReconciled, ErrNothingToResume (all superseded), or what the action did
	}
	inputs := runInputs(next.view(), next.id)
	r := &Run{h: h, sess: sess, agent: agent, msgID: inputs[len(inputs)-1]}
	r.w = next.addWaiter(r.msgID, agent)
	if bind != nil {
		next.bindTo(bind, r.msgID)
		r.bound = next
	}
	next.onLive = onLive
	launched = true
	h.launch(next, body)
	return r, RunResult{}, nil
}

// resumeOpen settles the session's open runs: it closes those a later run
// superseded, and deals with the last as decide says. It returns the run to
// launch and what it runs first, or, when there is none, the result of
// what it did.
func (h *Host) resumeOpen(st *sessionState, agent Agent, decide func(Interrupted) ResumeAction, events []ledger.Event,
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
	r := h.newRun(st, open[len(open)-1], agent, nil, lease, events)
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
		if next := r.end(o); next != nil {
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
	case ActionFail:
		return closeNow(outcome{status: ledger.RunFailed, reason: "interrupted, and not resumed by policy"}, nil)
	case ActionRestart:
		dead := r.id
		r.id = ledger.NewID("run")
		end := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunEnd, Time: time.Now().UTC(), RunID: dead,
			RunEnd: &ledger.RunEnd{Status: ledger.RunFailed, Reason: "interrupted; restarted from scratch as " + r.id, RestartedBy: r.id}}
		start := r.startEvent(view.Inputs, time.Now().UTC())
		// The restart counts as an attempt of the new run, so that a run
		// that crashes the process on every restart is bounded too.
		attempt := r.newEvent(ledger.KindResumeAttempt)
		attempt.ResumeAttempt = &ledger.ResumeAttempt{Attempt: view.ResumeAttempts + 1, Host: h.hostID}
		if err := r.append(end, start, attempt); err != nil {
			return nil, nil, RunResult{}, err
		}
		return r, (*run).loop, RunResult{}, nil
	}

	// Resume: count the attempt first, so that a resume that crashes the
	// process is counted too.
	attempt := r.newEvent(ledger.KindResumeAttempt)
	attempt.ResumeAttempt = &ledger.ResumeAttempt{Attempt: view.ResumeAttempts + 1, Host: h.hostID}
	if err := r.append(attempt); err != nil {
		return nil, nil, RunResult{}, err
	}
	r.step = len(view.Steps)
	r.responseID = view.ResponseID
	return r, func(r *run) outcome { return r.continueRun(last, view) }, RunResult{}, nil
}

// continueRun finishes what the run's last pass asked for, then goes on
// with the loop.
func (r *run) continueRun(last *ledger.Step, view ledger.Run) outcome {
	if last == nil {
		return r.loop() // died in its first pass
	}
	if len(last.ToolCalls) == 0 {
		if r.taskRecord() == nil {
			// The final pass was recorded; only the end was not.
			return outcome{status: ledger.RunCompleted}
		}
		// A task's model stopped without a terminal tool. Its pass
		// recorded what the task decided: a poke (the run goes on) or
		// the end, which only a failure can be.
		if last.NextResponseID != "" && last.Index+1 < r.agent.MaxSteps {
			r.step = last.Index
			r.advance(last.NextResponseID)
			return r.loop()
		}
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
	if err := r.runTools(last.ToolCalls, prior); err != nil {
		return outcome{err: err}
	}
	r.step = last.Index
	if o, stop := r.afterTools(last.NextResponseID); stop {
		return o
	}
	return r.loop()
}
