package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/agentichost/agentic/host/internal/hub"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Queued input: how a message finds the run that answers it. A message sent
// while a run works is appended as a queued input and joins that run,
// which folds it in at its next step boundary; otherwise its sender leads a
// run (when this host holds the session's lease). Every sender waits on a
// waiter; the run's end answers the waiters of the messages it picked up
// and hands the others to the successor run it starts for them. The caller
// that started a run through Send is bound to it (see Session.Send).

// waiter returns the message's place in a run of this host, nil while
// another host leads the session.
func (r *Run) waiter() *waiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w
}

// isUnreadable reports whether the message waits in a session this host
// cannot read (see leaveUnreadable).
func (r *Run) isUnreadable() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unreadable
}

// enter puts the message into the session: into the run in flight in this
// host, or into a run it starts; when another host leads the session, the
// message is queued for that host's run (the outcome is then read from the
// ledger). The message may be durable already (r.msgID set): then enter
// only finds the run that answers it.
func (r *Run) enter(ctx context.Context) error {
	return r.enterSession(ctx, resumeTries)
}

// resumeTries bounds how often a message that finds the session's last run
// interrupted tries to resume it before it gives up (see enterSession).
const resumeTries = 3

// enterSession is enter; it tries up to resumes times to resume the
// session's interrupted run first (see leadLocked).
func (r *Run) enterSession(ctx context.Context, resumes int) error {
	h := r.h
	st, err := h.ref(r.sess)
	if err != nil {
		return err
	}
	defer h.unref(st)
	cur, err := st.claim(ctx, true)
	if err != nil {
		return err
	}
	if cur != nil {
		err := r.joinLocked(ctx, cur)
		st.appendMu.Unlock()
		return err
	}
	err = r.leadLocked(ctx, st, resumes > 0)
	st.appendMu.Unlock()
	if errors.Is(err, storage.ErrLeaseLost) && r.lostLeases < maxLostLeases {
		// The lease lapsed before the run's first append (this
		// host stalled past its ttl) and nothing was appended: another
		// host may lead the session now. Enter again, as a retry would:
		// the message joins that host's run, or this host leads again.
		r.lostLeases++
		h.log.Warn("the session's lease was lost before anything was appended; entering the session again", "session", st.key.id)
		return r.enterSession(ctx, resumes)
	}
	if errors.Is(err, errRequestRaced) {
		// Another host appended the message under its request id after
		// the ledger was loaded: find it its run, as a retry would.
		return r.enterSession(ctx, resumes)
	}
	if errors.Is(err, errResumeFirst) {
		// The sweep's rules decide, as the sweep would have: resumed
		// (or restarted, or failed), the run is in flight (or over)
		// and the message joins it (or follows it); given up on, the
		// message's run supersedes it. A resume that did not happen
		// (the storage failed, another host took the session) is
		// tried again, and then the message is refused: never is a
		// run whose messages were accepted superseded for that.
		out, rerr, ok := h.goResume(ctx, st.key.id, &r.agent, nil)
		if !ok {
			return ErrClosed
		}
		r.resumed = true
		switch out {
		case outcomeGaveUp, ActionLeave:
			// Given up on, or left by policy: the message's run
			// supersedes the interrupted one, which ends interrupted
			// (its turn is not replayed; the new run's model sees
			// the transcript).
			r.supersede, r.left = true, out == ActionLeave
			return r.enterSession(ctx, 0)
		case outcomeError, outcomeSkipped:
			if resumes > 1 {
				return r.enterSession(ctx, resumes-1)
			}
			if rerr == nil {
				rerr = errors.New("another host holds it")
			}
			return fmt.Errorf("%w: session %s: %w", errNotResumed, st.key.id, rerr)
		}
		return r.enterSession(ctx, 0)
	}
	if errors.Is(err, ErrUnreadable) {
		return r.leaveUnreadable(ctx, st, err)
	}
	if !errors.Is(err, ErrLeadElsewhere) {
		return err
	}
	// Another host leads the session's run: queue the message for it to
	// fold in, and learn the outcome from the ledger — unless it was sent
	// before (a retry of a send whose answer was lost on the way).
	if r.msgID == "" && r.requestID != "" {
		events, err := st.store.Load(ctx, st.key.id)
		if err != nil {
			return fmt.Errorf("host: load session %s: %w", st.key.id, err)
		}
		if id, res, done := requestSeen(events, r.requestID); id != "" {
			r.msgID = id
			if done {
				r.w = answeredWaiter(res)
				return nil
			}
		}
	}
	if r.msgID == "" && r.agent.Overlap == OverlapReject {
		events, err := st.store.Load(ctx, st.key.id)
		if err != nil {
			return fmt.Errorf("host: load session %s: %w", st.key.id, err)
		}
		busy := &BusyError{SessionID: st.key.id, State: StateRunning}
		if open := ledger.OpenRuns(events); len(open) > 0 {
			busy.RunID = open[len(open)-1]
		}
		return busy
	}
	if r.msgID == "" {
		input, err := r.newInput("")
		if err != nil {
			return err
		}
		if r.agent.Overlap.interrupts() {
			if err := h.featuresWritable(ledger.FeatureOverlap); err != nil {
				return err
			}
			// The leading host sees it and stops its run (see
			// watchRemote); a run of its own answers it. The flag goes
			// up before the message is appended: the leader's watch
			// wakes on the append, and must find it up then.
			input.Input.Overlap = string(r.agent.Overlap)
			h.flagInterrupt(ctx, st.key.id, input.Input.MessageID)
		}
		if err := h.queueRemote(ctx, st, input); err != nil {
			seen, ok := errors.AsType[*storage.RequestSeenError](err)
			if !ok {
				return err
			}
			r.msgID = seen.MessageID // sent before, and appended since the load
		} else {
			r.msgID, r.accepted, r.acceptedRun = input.Input.MessageID, true, ""
		}
	}
	r.w = nil
	h.follow(r)
	return nil
}

// leaveUnreadable deals with a message for a session whose ledger this host
// cannot read (cause wraps ErrUnreadable): it appends the message, queued,
// for a host that reads the session to answer (a send retried elsewhere
// under its request id is answered once: see ledger.Aliases), and leaves
// the session, following nothing. A message whose agent rejects or stops
// the run in flight is refused instead (nothing is appended): only a host
// that reads the session can tell whether a run is in flight.
func (r *Run) leaveUnreadable(ctx context.Context, st *sessionState, cause error) error {
	if r.msgID == "" {
		if r.agent.Overlap == OverlapReject || r.agent.Overlap.interrupts() {
			return fmt.Errorf("%w (the message was not appended: an agent that rejects or stops the run in flight needs a host that reads the session; send it again there)", cause)
		}
		input, err := r.newInput("")
		if err != nil {
			return err
		}
		if err := r.h.queueRemote(ctx, st, input); err != nil {
			seen, ok := errors.AsType[*storage.RequestSeenError](err)
			if !ok {
				return err
			}
			r.msgID = seen.MessageID // sent before: the store knows it
			r.w, r.unreadable = nil, true
			return nil
		}
		r.msgID, r.accepted, r.acceptedRun = input.Input.MessageID, true, ""
		r.h.log.Warn("this host cannot read the session (written by a newer build?); the message is queued for a host that can", "session", st.key.id,
			"message", r.msgID, "err", cause)
	}
	r.w, r.unreadable = nil, true
	return nil
}

// maxLostLeases bounds how often a message enters its session again after
// the lease was lost before its first append.
const maxLostLeases = 3

// errRequestRaced is leadLocked's answer when the message it was to start
// a run for was appended by another host under its request id since it
// loaded the ledger (r.msgID now names that copy): the caller enters the
// session again.
var errRequestRaced = errors.New("host: the message was appended by another host meanwhile")

// joinLocked queues the message into cur, the run in flight, when it is not
// durable yet, and waits for cur's answer. st.appendMu is held.
func (r *Run) joinLocked(ctx context.Context, cur *run) error {
	if r.msgID != "" {
		// Durable already (sent through another host): an ended run may
		// have answered it.
		res, ok, err := r.h.resultForIn(ctx, cur.sessionID, cur.view(), cur.snap, r.msgID)
		if err != nil {
			return fmt.Errorf("host: load session %s: %w", cur.sessionID, err)
		}
		if ok {
			r.w = answeredWaiter(res)
			return nil
		}
	} else {
		id, res, done, err := r.h.requestSeenIn(ctx, cur.sessionID, cur.view(), cur.snap, r.requestID)
		if err != nil {
			return fmt.Errorf("host: load session %s: %w", cur.sessionID, err)
		}
		if id != "" {
			r.msgID = id
			if done {
				r.w = answeredWaiter(res)
				return nil
			}
		} else {
			if r.agent.Overlap == OverlapReject {
				return &BusyError{SessionID: cur.sessionID, RunID: cur.id, State: StateRunning}
			}
			input, err := r.newInput("")
			if err != nil {
				return err
			}
			if r.agent.Overlap.interrupts() {
				input.Input.Overlap = string(r.agent.Overlap)
			}
			err = cur.writeMessageLocked(ctx, r.requestID, input)
			if seen, ok := errors.AsType[*storage.RequestSeenError](err); ok {
				// Another host queued it since the run's view was
				// loaded: the run folds that copy in (writeMessageLocked
				// marked its view stale).
				r.msgID = seen.MessageID
			} else if err != nil {
				return fmt.Errorf("host: append message: %w", err)
			} else {
				r.msgID, r.accepted, r.acceptedRun = input.Input.MessageID, true, cur.id
			}
			if r.accepted && r.agent.Overlap.interrupts() {
				// The run in flight stops; its end starts a run for this
				// message, which it never folds in.
				r.acceptedRun = ""
				cur.interrupt(r.msgID, r.agent.Overlap)
			}
		}
	}
	// A run this message resumed answers the dead run's messages first:
	// its sender follows it from its start.
	r.w = cur.addWaiter(r.msgID, &r.agent, r.resumed)
	return nil
}

// leadLocked starts a run for the message and every message still pending,
// with the session claimed (busy) and st.appendMu held; it hands the claim
// to the run, or gives it back when it starts none. It returns
// ErrLeadElsewhere when another host holds the session's lease, and, when
// mayResume, errResumeFirst for a session whose last run was interrupted
// (its process died, and nothing resumed it yet), so that the message
// joins that run once resumed (as the sweep's rules say: see
// Options.AutoResume) rather than superseding it: the dead run's messages
// were accepted, and are answered first.
func (r *Run) leadLocked(ctx context.Context, st *sessionState, mayResume bool) (err error) {
	h := r.h
	launched := false
	defer func() {
		if !launched {
			st.free()
		}
	}()
	// With several hosts on the store, lead the session only under its
	// lease; the ledger loaded after taking it is the whole truth.
	lease, stopLease, err := h.takeLease(ctx, st)
	if err != nil {
		return err
	}
	defer func() {
		if !launched {
			stopLease() // the renewals stop, the lease is given back
		}
	}()
	events, snap, err := h.loadView(ctx, st)
	if err != nil && unreadable(err) {
		return fmt.Errorf("%w: session %s: %w", ErrUnreadable, st.key.id, err)
	}
	if err != nil {
		return fmt.Errorf("host: load session %s: %w", st.key.id, err)
	}
	if r.msgID == "" {
		id, res, done, err := h.requestSeenIn(ctx, st.key.id, events, snap, r.requestID)
		if err != nil {
			return fmt.Errorf("host: load session %s: %w", st.key.id, err)
		}
		if id != "" {
			r.msgID = id
			if done {
				r.w = answeredWaiter(res)
				return nil
			}
		}
	}
	if runID, parked := parkedRun(events); parked && r.msgID == "" && r.agent.Overlap.interrupts() {
		// The message stops the parked run (as a cancel does: its
		// requests denied, its waiting calls answered), then starts a
		// run of its own below.
		how := "interrupted"
		if r.agent.Overlap == OverlapRollback {
			how = "rolled back"
		}
		out := parkedCancelEvents(events, runID, how+" by a new message", r.agent.Overlap == OverlapRollback)
		err := h.stage(ctx, st, out, events, snap)
		if err == nil && lease != nil {
			err = lease.Append(ctx, out...)
		} else if err == nil {
			err = st.store.Append(ctx, st.key.id, out...)
		}
		if err != nil {
			return fmt.Errorf("host: interrupt the parked run: %w", err)
		}
		events = append(events, out...)
		h.announceDecisions(st.key.id, out)
	}
	if runID, parked := parkedRun(events); parked {
		// The session's run waits for approvals: the message waits with
		// it, queued, and the run folds it in when it continues —
		// unless its agent rejects overlapping turns.
		if r.msgID == "" && r.agent.Overlap == OverlapReject {
			state := StateApprovalRequired
			if h.parkedResult(st.key.id, events, runID).Status == ledger.RunWaiting {
				state = StateWaiting
			}
			return &BusyError{SessionID: st.key.id, RunID: runID, State: state}
		}
		if r.msgID == "" {
			input, err := r.newInput("")
			if err != nil {
				return err
			}
			err = h.stage(ctx, st, []ledger.Event{input}, events, snap)
			if err == nil {
				err = h.appendMessage(ctx, st, lease, r.requestID, input)
			}
			if seen, ok := errors.AsType[*storage.RequestSeenError](err); ok {
				r.msgID = seen.MessageID // another host queued it since the load
			} else if err != nil {
				return fmt.Errorf("host: append message: %w", err)
			} else {
				events = append(events, input)
				r.msgID, r.accepted, r.acceptedRun = input.Input.MessageID, true, runID
				h.emitFor(st.key.id, runID, "", time.Time{}, Event{Type: EventQueuedMessage, MessageID: r.msgID})
			}
		}
		res := h.parkedResult(st.key.id, events, runID)
		res.MessageID = r.msgID
		r.w = answeredWaiter(res)
		return nil
	}
	if r.hooks == nil && !st.key.private && len(ledger.OpenRuns(events)) > 0 {
		switch {
		case mayResume:
			return errResumeFirst
		case !r.supersede:
			return fmt.Errorf("%w: session %s: it is interrupted again", errNotResumed, st.key.id)
		}
		r.supersede = false // for the run given up on, not for a later one
	}
	nr := h.newRun(st, ledger.NewID("run"), r.agent, r.hooks, lease, events, snap)
	inputs := ledger.PendingInputs(events)
	// A run left open by a process that died (and not resumed yet) is
	// superseded: the new run's model sees its passes, and no resume will
	// re-run it after this one.
	opens := ledger.OpenRuns(events)
	batch := make([]ledger.Event, 0, len(opens)+2) // the run-ends, the message, the run-start
	reason := "superseded by run " + nr.id
	if r.left {
		reason = "left interrupted by its agent's policy (on_interrupted: leave); the next message's run " + nr.id + " follows it"
		r.left = false
	}
	for _, open := range opens {
		batch = append(batch, ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunEnd, Time: time.Now().UTC(),
			RunID: open, RunEnd: &ledger.RunEnd{Status: ledger.RunInterrupted, Reason: reason}})
	}
	fresh := r.msgID == ""
	if fresh {
		input, err := r.newInput(nr.id)
		if err != nil {
			return err
		}
		batch = append(batch, input)
		inputs = append(inputs, input.Input.MessageID)
		r.msgID = input.Input.MessageID
	} else if !slices.Contains(inputs, r.msgID) {
		// Another run answered the message meanwhile.
		res, ok, err := h.resultForIn(ctx, st.key.id, events, snap, r.msgID)
		if err != nil {
			return fmt.Errorf("host: load session %s: %w", st.key.id, err)
		}
		if ok {
			r.w = answeredWaiter(res)
			return nil
		}
		return fmt.Errorf("host: message %s is neither pending nor answered", r.msgID)
	}
	batch = append(batch, nr.startEvent(inputs, time.Now().UTC()))
	requestID := ""
	if fresh {
		requestID = r.requestID
	}
	if err := nr.writeMessageLocked(ctx, requestID, batch...); err != nil {
		if seen, ok := errors.AsType[*storage.RequestSeenError](err); ok {
			// Another host queued the message since the load: nothing
			// was appended; the caller enters again to find its run.
			r.msgID = seen.MessageID
			return errRequestRaced
		}
		if fresh {
			r.msgID = ""
		}
		return fmt.Errorf("host: append message: %w", err)
	}
	if fresh {
		r.accepted, r.acceptedRun = true, nr.id
	}
	r.w = nr.addWaiter(r.msgID, &r.agent, false)
	if r.bind != nil {
		nr.bindTo(r.bind, r.msgID)
		r.bound = nr
	}
	nr.stopLease = stopLease
	launched = true
	h.launch(nr, (*run).loop)
	return nil
}

// wait waits for the run that answers the message to end, handing its
// progress to onProgress (when set) in this goroutine meanwhile: every
// event up to the run's end is delivered before it returns. When ctx ends,
// a run this caller started is cancelled unless other callers' messages
// wait in it (see Session.Send); otherwise wait returns ctx.Err().
func (r *Run) wait(ctx context.Context, onProgress func(Progress)) (RunResult, error) {
	for {
		w := r.waiter()
		if w != nil {
			res, err, again := r.await(ctx, w, onProgress)
			if !again {
				return res, err
			}
		} else if r.isUnreadable() {
			return RunResult{MessageID: r.msgID}, fmt.Errorf("%w: message %s is queued in session %s", ErrUnreadable, r.msgID, r.sess.id)
		}
		// Another host leads the session, or the run ended without the
		// message and no successor took it: wait for the ledger to change
		// (another host's run may end without the message, or this host
		// may lead now), then find the message its run.
		if err := r.reenter(ctx, w); err != nil {
			return RunResult{MessageID: r.msgID}, err
		}
	}
}

// reenter finds the message its run again — after a change to the session
// when another host leads it (w is nil) — unless another waiter of the
// handle, or the host's follower (see Host.follow), did so since it saw w.
func (r *Run) reenter(ctx context.Context, w *waiter) error {
	if w == nil {
		st, err := r.h.ref(r.sess)
		if err != nil {
			return err
		}
		err = r.h.waitRemote(ctx, st)
		r.h.unref(st)
		if err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != w {
		return nil
	}
	r.w, r.bound = nil, nil
	return r.enter(ctx)
}

// await waits for the waiter's answer, relaying progress.
func (r *Run) await(ctx context.Context, w *waiter, onProgress func(Progress)) (RunResult, error, bool) {
	if onProgress == nil {
		select {
		case <-w.done:
			return w.result()
		case <-ctx.Done():
			if !r.abandon() {
				return RunResult{MessageID: r.msgID, RunID: w.runID()}, ctx.Err(), false
			}
			<-w.done
			return w.result()
		}
	}
	cur, after := w.position()
	if cur == nil { // answered already
		<-w.done
		return w.result()
	}
	sub := cur.hub.Subscribe(after)
	defer func() { sub.Close() }()
	waitCtx := ctx
	for {
		e, off, err := sub.Next(waitCtx)
		switch {
		case err == nil:
			onProgress(cur.progress(e, off))
		case errors.Is(err, hub.ErrDropped):
			sub = cur.hub.Subscribe(sub.Offset()) // pick up where it left
		case errors.Is(err, io.EOF):
			// The run's progress is over: the message was answered, or
			// moved on to the successor run that answers it.
			next, after := w.position()
			if next == nil || next == cur {
				<-w.done
				return w.result()
			}
			cur = next
			sub = cur.hub.Subscribe(after)
		default: // ctx ended
			if !r.abandon() {
				return RunResult{MessageID: r.msgID, RunID: w.runID()}, ctx.Err(), false
			}
			// The run was cancelled for this caller: relay its end.
			waitCtx = context.WithoutCancel(ctx)
		}
	}
}

// abandon decides, for a caller whose context ended, whether the run it
// started is cancelled (true) or goes on without it (false).
func (r *Run) abandon() bool {
	r.mu.Lock()
	b := r.bound
	r.mu.Unlock()
	return b != nil && b.checkBound()
}

// waiter is a message waiting for the run that answers it.
type waiter struct {
	msgID string
	agent *Agent // the agent its sender asked for (its handle's): a successor started for it runs it
	st    *sessionState
	done  chan struct{} // closed once res, err and again are set

	// res is the result of the run that answered the message (the run's
	// own, shared by its waiters: see result), nil when again is set.
	res   *RunResult
	err   error
	again bool // the run ended without the message, and no successor took it

	// Guarded by st.mu:
	run   *run // the run meant to answer it
	after int  // the progress offset it came in at
}

// answeredWaiter returns a waiter whose message was answered already.
func answeredWaiter(res RunResult) *waiter {
	w := &waiter{msgID: res.MessageID, res: &res, done: make(chan struct{})}
	close(w.done)
	return w
}

// result returns the waiter's answer, once done is closed: the result of
// the run that answered the message, and the error that kept it from
// being recorded; again when the message is still to be answered.
func (w *waiter) result() (RunResult, error, bool) {
	if w.res == nil {
		return RunResult{}, w.err, w.again
	}
	res := *w.res
	res.MessageID = w.msgID
	return res, w.err, w.again
}

// position returns the run meant to answer the message, and the progress
// offset the waiter came in at; nil for a message answered before.
func (w *waiter) position() (*run, int) {
	if w.st == nil {
		return nil, 0
	}
	w.st.mu.Lock()
	defer w.st.mu.Unlock()
	return w.run, w.after
}

// runID returns the id of the run meant to answer the message.
func (w *waiter) runID() string {
	if r, _ := w.position(); r != nil {
		return r.id
	}
	if w.res == nil {
		return ""
	}
	return w.res.RunID
}

// addWaiter registers a wait for the run's answer to msgID, from the
// progress published so far on (from its first event, fromStart).
func (r *run) addWaiter(msgID string, agent *Agent, fromStart bool) *waiter {
	w := &waiter{msgID: msgID, agent: agent, st: r.st, done: make(chan struct{}), run: r}
	r.st.mu.Lock()
	if !fromStart {
		w.after = r.hub.Len()
	}
	r.waiters = append(r.waiters, w)
	r.st.mu.Unlock()
	return w
}

// binding ties a run to the context of the caller that started it (see
// Session.Send).
type binding struct {
	ctx       context.Context
	msgID     string
	decided   bool // the caller's context ended and its fate was decided
	cancelled bool // … and it cancelled the run
	stop      func() bool
}

// bindTo binds the run to ctx, the context of the caller that started it
// for its message msgID.
func (r *run) bindTo(ctx context.Context, msgID string) {
	if ctx.Done() == nil {
		return // a context that never ends binds nothing
	}
	b := &binding{ctx: ctx, msgID: msgID}
	r.bound = b
	b.stop = context.AfterFunc(ctx, func() { r.checkBound() })
}

// checkBound decides, once the bound caller's context has ended, whether
// the run is cancelled (true) or goes on without that caller (false):
// cancelled unless the run holds another caller's message — queued into it,
// pending, or folded in already.
func (r *run) checkBound() bool {
	b := r.bound // set before the run went live, never changed since
	if b == nil || b.ctx.Err() == nil {
		return false
	}
	r.st.mu.Lock()
	if !b.decided {
		b.decided = true
		b.cancelled = !r.othersLocked(b.msgID)
	}
	cancelled := b.cancelled
	r.st.mu.Unlock()
	if cancelled {
		r.cancel(&callerGone{err: b.ctx.Err(), cause: context.Cause(b.ctx)})
	}
	return cancelled
}

// othersLocked reports whether the run holds a message other than own:
// one it answers, or one pending in the session. The session's mu is held.
func (r *run) othersLocked(own string) bool {
	for _, ids := range [][]string{ledger.RunInputs(r.events, r.id), ledger.PendingInputs(r.events)} {
		for _, id := range ids {
			if id != own {
				return true
			}
		}
	}
	return false
}

// successorLocked starts the run that answers the messages still pending
// after this run's end, if any: its run-start lists them all. The session's
// appendMu is held.
func (r *run) successorLocked() *run {
	events := r.view()
	pending := ledger.PendingInputs(events)
	if len(pending) == 0 || r.h.stopping.Load() || r.h.draining.Load() {
		return nil
	}
	// The agent the first waiting sender asked for; the host's for
	// messages no sender here waits on.
	agent := r.h.agent
	r.st.mu.Lock()
	for _, w := range r.waiters {
		if slices.Contains(pending, w.msgID) {
			agent = *w.agent
			break
		}
	}
	r.st.mu.Unlock()
	next := r.h.newRun(r.st, ledger.NewID("run"), agent, nil, r.lease, events, r.snap)
	if err := next.appendLocked(next.startEvent(pending, time.Now().UTC())); err != nil {
		r.h.log.Error("cannot start a run for the messages left pending; a resume will answer them",
			"session", r.sessionID, "err", err)
		return nil
	}
	return next
}
