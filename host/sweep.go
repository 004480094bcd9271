package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Auto-resume: the sweeps that find the interrupted runs of every session
// and re-drive them, at most AutoResume.MaxConcurrent at once.

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
	// Left counts runs left interrupted by policy (ActionLeave): they
	// wait for the next message or a resume on demand.
	Left int
	// Skipped counts sessions already running in this host.
	Skipped int
	// Parked counts sessions whose run waits for approvals (not
	// interrupted: left alone, but for the requests that expired).
	Parked int
	// Unreadable counts sessions whose ledger this host cannot read (an
	// event of a newer build): left to a host that can.
	Unreadable int
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
		// The view of the session's snapshot answers the sweep's
		// questions (open and parked runs, pending messages, the parked
		// runs' approval requests: all carried) as the whole ledger does.
		events, _, err := h.loadView(ctx, &sessionState{key: sessionKey{id, false}, store: h.store})
		if err != nil && unreadable(err) {
			// Never failed for that: a host that reads it takes it.
			h.log.Warn("auto-resume: this host cannot read the session (written by a newer build?); left to a host that can", "session", id, "err", err)
			rep.Unreadable++
			continue
		}
		if err != nil {
			h.log.Error("auto-resume: cannot load session", "session", id, "err", err)
			rep.Errors++
			continue
		}
		if len(ledger.OpenRuns(events)) == 0 && len(ledger.PendingInputs(events)) == 0 {
			continue
		}
		if _, parked := parkedRun(events); parked {
			// Waiting for people is not interrupted: the sweep only
			// keeps the inbox whole, and expires what nobody decided
			// in time (the run then goes on).
			pending := ledger.PendingApprovals(events)
			for _, a := range pending {
				h.indexApproval(h.pendingOf(id, a.RunID, a.RequestedAt, a.Request))
			}
			if !anyExpired(pending, time.Now()) {
				rep.Parked++
				continue
			}
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
		runs.Add(1)
		out, _, ok := h.goResume(ctx, id, nil, func() {
			<-h.resumeSlots
			runs.Done()
		})
		if !ok {
			runs.Done()
			<-h.resumeSlots
			break // closed
		}
		switch out {
		case ActionResume:
			rep.Resumed++
		case ActionRestart:
			rep.Restarted++
		case ActionFail:
			rep.Failed++
		case ActionLeave:
			rep.Left++
		case outcomeReconciled:
			rep.Reconciled++
		case outcomeGaveUp:
			rep.GaveUp++
		case outcomeParked:
			rep.Parked++
		case outcomeSkipped:
			rep.Skipped++
		default:
			rep.Errors++
		}
	}
	return rep, runs.Wait, ctx.Err()
}

// A run that a storage error interrupted (an append failed: a disk full
// for a moment, a process out of file descriptors) on a host whose sweep
// does not repeat (a storage without leases) is resumed by that host once
// the storage takes appends again, rather than left with its message
// unanswered until the next boot or the session's next message. The tries
// wait healFirst, then twice as long each time the resume could not
// start, healTries times at most. Where the sweep repeats (Redis), it
// finds such runs itself.
const (
	healFirst = 100 * time.Millisecond
	healTries = 7 // 100 ms to 6.4 s: 12.7 s in all
)

// healLater resumes session id's interrupted run under the sweep's rules
// (its attempts counted, at most AutoResume.MaxConcurrent resumed runs at
// once) on a goroutine of the host's, after healFirst, and again while the
// resume fails to start. It does nothing without AutoResume, when sweeps
// repeat (a storage with leases: a run whose lease was lost is another
// host's to take over, and the next sweep finds the others), or once the
// host is closed.
func (h *Host) healLater(id string) {
	if h.auto == nil || h.sweepEvery() > 0 || !h.track() {
		return
	}
	go func() {
		defer h.wg.Done()
		wait := healFirst
		for try := 1; ; try++ {
			t := time.NewTimer(wait)
			select {
			case <-h.bg.Done():
				t.Stop()
				return
			case <-t.C:
			}
			select {
			case h.resumeSlots <- struct{}{}:
			case <-h.bg.Done():
				return
			}
			out, err, ok := h.goResume(h.bg, id, nil, func() { <-h.resumeSlots })
			switch {
			case !ok:
				<-h.resumeSlots
				return
			case out != outcomeError:
				// Resumed, or another outcome of the sweep's rules
				// (given up, parked, left, found ended).
				h.log.Info("a run interrupted by a storage error was taken up again", "session", id, "outcome", out, "try", try)
				return
			case try == healTries:
				h.log.Error("a run interrupted by a storage error could not be resumed; it waits for the session's next message or the next sweep",
					"session", id, "tries", try, "err", err)
				return
			}
			wait *= 2
		}
	}()
}

// sweepEvery is how often the sweep repeats (AutoResume.Interval, by
// default the lease's TTL on a storage with leases); 0 or less: never.
func (h *Host) sweepEvery() time.Duration {
	every := h.auto.Interval
	if every == 0 && h.leaser != nil {
		every = h.leaseTTL
	}
	return every
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

// goResume re-drives the session's interrupted run under the sweep's rules
// (see autoResume) on a goroutine of the host's, and returns what it did
// once the run is under way — or, when it started none, once it is over.
// agent, when set, resumes it unless AutoResume.AgentFor names one (the
// agent of the message that found the run). done, when set, is called when
// that goroutine is over. ok is false (and nothing is done) when the host
// is closed.
func (h *Host) goResume(ctx context.Context, id string, agent *Agent, done func()) (out ResumeAction, err error, ok bool) {
	if !h.track() {
		return "", nil, false
	}
	type outcome struct {
		out ResumeAction
		err error
	}
	started := make(chan outcome, 2)
	go func() {
		defer h.wg.Done()
		if done != nil {
			defer done()
		}
		// The run is the host's, not the sweep's: when the sweep stops
		// (Close), the run goes on; Close decides its fate.
		out, res, err := h.autoResume(context.WithoutCancel(ctx), id, agent, func(a ResumeAction) { started <- outcome{out: a} })
		started <- outcome{out, err}
		if h.rules.OnResumed != nil && (out == ActionResume || out == ActionRestart || out == outcomeReconciled) {
			h.rules.OnResumed(id, res, err)
		}
	}()
	o := <-started
	return o.out, o.err, true
}

// Outcomes of autoResume besides the actions.
const (
	outcomeReconciled ResumeAction = "reconciled"
	outcomeGaveUp     ResumeAction = "gave-up"
	outcomeSkipped    ResumeAction = "skipped"
	outcomeParked     ResumeAction = "parked"
	outcomeError      ResumeAction = "error"
)

// autoResume re-drives one session's interrupted run under the sweep's
// rules (h.rules). It calls started with the action taken once the run it
// re-drives is under way (not when it starts none); it returns when the
// run ended. The run is resumed by the agent bound to the session
// (SessionWith) when agent is nil, else by AutoResume.AgentFor's, else by
// agent when set, else by the host's.
func (h *Host) autoResume(ctx context.Context, id string, agent *Agent, started func(ResumeAction)) (ResumeAction, RunResult, error) {
	resumer := h.agent
	if agent != nil {
		resumer = *agent
	}
	if a, ok := h.boundAgent(id); ok && agent == nil {
		resumer = a
	} else if h.rules.AgentFor != nil {
		a, err := h.rules.AgentFor(ctx, id)
		if err == nil {
			a, err = normalizeAgent(a)
		}
		if err != nil {
			h.log.Error("auto-resume: no agent for session", "session", id, "err", err)
			return outcomeError, RunResult{}, err
		}
		resumer = a
	}
	var out ResumeAction
	onLive := func() {
		if out == "" {
			started(ActionResume) // only queued messages were pending
		} else {
			started(out)
		}
	}
	r, res, err := h.resume(ctx, id, resumer, nil, onLive, func(ir Interrupted) ResumeAction {
		if resumer.OnInterrupted == ActionLeave {
			// Left as the agent says, however many attempts it had.
			out = ActionLeave
			return out
		}
		if ir.Attempts >= h.rules.MaxAttempts {
			h.log.Warn("auto-resume: giving up on a run that failed every resume; resume it by hand",
				"session", id, "run", ir.RunID, "attempts", ir.Attempts)
			out = outcomeGaveUp
			return outcomeGaveUp
		}
		out = h.chooseAction(ctx, ir, resumer)
		return out
	}, expireApprovals)
	if r != nil {
		res, err = r.wait(ctx, nil)
	}
	switch {
	case errors.Is(err, errParked):
		return outcomeParked, res, nil
	case errors.Is(err, ErrNothingToResume), errors.Is(err, ErrLeadElsewhere):
		return outcomeSkipped, res, nil
	case errors.Is(err, errReconciled):
		return outcomeReconciled, res, nil
	case (r == nil || out == "") && err != nil:
		// Nothing was started: the action chosen (if one was) could
		// not be recorded.
		return outcomeError, res, err
	case out == "":
		out = ActionResume // only queued messages were pending: a run answered them
	}
	return out, res, err
}

// chooseAction returns the agent's Agent.OnInterrupted when it names one,
// else asks the OnInterrupted hook, falling back to resume when it errs,
// panics or answers nonsense.
func (h *Host) chooseAction(ctx context.Context, ir Interrupted, agent Agent) (action ResumeAction) {
	if agent.OnInterrupted != "" {
		return agent.OnInterrupted
	}
	if h.rules.OnInterrupted == nil {
		return ActionResume
	}
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("auto-resume: OnInterrupted panicked; resuming", "session", ir.SessionID, "panic", p)
			action = ActionResume
		}
	}()
	a, err := h.rules.OnInterrupted(ctx, ir)
	if err != nil {
		h.log.Error("auto-resume: OnInterrupted failed; resuming", "session", ir.SessionID, "err", err)
		return ActionResume
	}
	switch a {
	case ActionResume, ActionRestart, ActionFail, ActionLeave:
		return a
	}
	h.log.Error("auto-resume: OnInterrupted returned an unknown action; resuming", "session", ir.SessionID, "action", a)
	return ActionResume
}

// startSweeps starts the boot sweep and the sweeps that repeat it, when
// AutoResume is set; SweepDone closes once the boot sweep's runs ended.
func (h *Host) startSweeps() {
	if h.auto == nil {
		close(h.sweep)
		return
	}
	h.resumeSlots = make(chan struct{}, h.auto.MaxConcurrent)
	h.wg.Add(2)
	boot := make(chan func(), 1)
	go func() {
		// SweepDone waits for the boot sweep's runs to end; the
		// sweeps that follow do not.
		defer h.wg.Done()
		wait := <-boot
		wait()
		close(h.sweep)
	}()
	go func() {
		defer h.wg.Done()
		rep, wait, err := h.sweepOnce(h.bg)
		if err != nil && h.bg.Err() == nil {
			h.log.Error("auto-resume: the boot sweep failed", "err", err)
		}
		h.mu.Lock()
		h.sweepRep = rep
		h.mu.Unlock()
		boot <- wait
		every := h.sweepEvery()
		if every <= 0 {
			return
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-h.bg.Done():
				return
			case <-t.C:
			}
			if _, err := h.Sweep(h.bg); err != nil && h.bg.Err() == nil {
				h.log.Error("auto-resume: a sweep failed", "err", err)
			}
		}
	}()
}

// anyExpired reports whether one of the requests lapsed by now.
func anyExpired(pending []ledger.Approval, now time.Time) bool {
	for _, a := range pending {
		if exp := a.Request.ExpiresAt; !exp.IsZero() && now.After(exp) {
			return true
		}
	}
	return false
}

// expireApprovals decides, as expired, the session's requests that nobody
// decided in time.
func expireApprovals(events []ledger.Event) ([]ledger.Event, error) {
	now := time.Now().UTC()
	var out []ledger.Event
	for _, a := range ledger.PendingApprovals(events) {
		if exp := a.Request.ExpiresAt; !exp.IsZero() && now.After(exp) {
			out = append(out, ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindApprovalDecision, Time: now, RunID: a.RunID,
				ApprovalDecision: &ledger.ApprovalDecision{ApprovalID: a.Request.ApprovalID, Decision: ledger.DecisionExpire,
					Reason: "nobody decided before " + exp.Format(time.RFC3339)}})
		}
	}
	return out, nil
}
