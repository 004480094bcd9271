package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/agentichost/agentic/host/internal/hub"
	"github.com/agentichost/agentic/host/ledger"
)

// Run is a caller's handle on the run that answers its message (see
// [Session.Start]). Its methods are safe for concurrent use.
type Run struct {
	h    *Host
	sess *Session
	mu   sync.Mutex // held while the handle looks for the message's run (enter)

	msgID       string
	accepted    bool   // this call made the message durable
	acceptedRun string // the run named when it was accepted ("" when another host leads)

	// w is the message's place in a run of this host; nil while another
	// host leads the session (the outcome is then read from the ledger).
	w *waiter
	// bound is the run this caller started and whose fate its context
	// decides (see Session.Send); nil when it joined a run or only waits.
	bound *run

	// What (re-)entering the session needs.
	agent     Agent
	requestID string
	hooks     *runHooks
	newInput  func(runID string) (ledger.Event, error)
	bind      context.Context // the context bound to a run this caller starts; nil: none
}

// MessageID returns the durable id of the message.
func (r *Run) MessageID() string { return r.msgID }

// ID returns the id of the run that answers the message: the run that Start
// started, or queued the message into. A message that run ended without
// answering (it was cancelled, or reached its bound of passes, before it
// folded the message in) is answered by a successor run, which ID then
// names. ID is "" while another host leads the session's run: the outcome
// is then read from the ledger.
func (r *Run) ID() string {
	if w := r.waiter(); w != nil {
		return w.runID()
	}
	return ""
}

// Wait waits for the run that answers the message to end and returns its
// result (see [Session.Send] for the errors). ctx bounds the waiting only:
// when it ends, Wait returns ctx.Err() and the run goes on.
func (r *Run) Wait(ctx context.Context) (RunResult, error) {
	return r.wait(ctx, nil)
}

// Cancel asks the run that answers the message to stop, with reason, as
// [Host.Cancel] does. It returns true only when this call newly requested
// the cancellation.
func (r *Run) Cancel(reason string) bool {
	w := r.waiter()
	if w == nil {
		return false
	}
	cur, _ := w.position()
	return cur != nil && cur.requestCancel(reason)
}

// Subscribe returns the progress of the run that answers the message (the
// run ID names now) after the event whose [Progress.Seq] is after (0: from
// the first): the events published already, then each one as it comes,
// until the run's end. Subscribers never hold the run up: one that falls
// too far behind is dropped ([ErrSlowSubscriber]) and may subscribe again
// after the last Seq it read, losing nothing.
//
// The subscription follows that one run: when the message moves on to a
// successor run (see ID), Next returns io.EOF at the first run's end, and a
// new subscription follows the successor. A message another host answers
// has no progress here: Next returns io.EOF at once.
func (r *Run) Subscribe(after int) *Subscription {
	w := r.waiter()
	if w == nil {
		return &Subscription{}
	}
	cur, _ := w.position()
	if cur == nil {
		return &Subscription{}
	}
	return &Subscription{run: cur, sub: cur.hub.Subscribe(after)}
}

// Subscription reads a run's progress (see [Run.Subscribe]). It is meant for
// one goroutine.
type Subscription struct {
	run *run
	sub *hub.Sub[event]
}

// RunID returns the id of the run whose progress the subscription reads;
// "" when it reads none.
func (s *Subscription) RunID() string {
	if s.run == nil {
		return ""
	}
	return s.run.id
}

// Next returns the next progress event, waiting for it. It returns io.EOF
// once the run's end (its run-end event) was read, [ErrSlowSubscriber] when
// the subscriber fell too far behind and was dropped, and ctx.Err() when
// ctx ends first.
func (s *Subscription) Next(ctx context.Context) (Progress, error) {
	if s.sub == nil {
		return Progress{}, io.EOF
	}
	e, off, err := s.sub.Next(ctx)
	if errors.Is(err, hub.ErrDropped) {
		return Progress{}, ErrSlowSubscriber
	}
	if err != nil {
		return Progress{}, err
	}
	return s.run.progress(e, off), nil
}

// Close ends the subscription.
func (s *Subscription) Close() {
	if s.sub != nil {
		s.sub.Close()
	}
}

// waiter returns the message's place in a run of this host, nil while
// another host leads the session.
func (r *Run) waiter() *waiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w
}

// enter puts the message into the session: into the run in flight in this
// host, or into a run it starts; when another host leads the session, the
// message is queued for that host's run (the outcome is then read from the
// ledger). The message may be durable already (r.msgID set): then enter
// only finds the run that answers it.
func (r *Run) enter(ctx context.Context) error {
	h := r.h
	st, err := h.ref(r.sess)
	if err != nil {
		return err
	}
	defer h.unref(st)
	for {
		st.appendMu.Lock()
		st.mu.Lock()
		cur := st.cur
		join := cur != nil && !cur.ending
		lead := !join && !st.busy
		var changed <-chan struct{}
		if lead {
			st.busy = true
		} else if !join {
			changed = st.changedLocked()
		}
		st.mu.Unlock()

		switch {
		case join:
			err := r.joinLocked(ctx, cur)
			st.appendMu.Unlock()
			return err
		case !lead:
			// A run is ending, or a resume is setting one up: wait for
			// the session to change, then look again.
			st.appendMu.Unlock()
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := r.leadLocked(ctx, st)
		st.appendMu.Unlock()
		if !errors.Is(err, ErrLeadElsewhere) {
			return err
		}
		// Another host leads the session's run: queue the message for it
		// to fold in, and learn the outcome from the ledger.
		if r.msgID == "" {
			input, err := r.newInput("")
			if err != nil {
				return err
			}
			if err := h.queueRemote(ctx, st, input); err != nil {
				return err
			}
			r.msgID, r.accepted, r.acceptedRun = input.Input.MessageID, true, ""
		}
		r.w = nil
		return nil
	}
}

// joinLocked queues the message into cur, the run in flight, when it is not
// durable yet, and waits for cur's answer. st.appendMu is held.
func (r *Run) joinLocked(ctx context.Context, cur *run) error {
	if r.msgID == "" {
		if id, res, done := requestSeen(cur.view(), r.requestID); id != "" {
			r.msgID = id
			if done {
				r.w = answeredWaiter(res)
				return nil
			}
		} else {
			input, err := r.newInput("")
			if err != nil {
				return err
			}
			if err := cur.writeLocked(ctx, input); err != nil {
				return fmt.Errorf("host: append message: %w", err)
			}
			r.msgID, r.accepted, r.acceptedRun = input.Input.MessageID, true, cur.id
		}
	}
	r.w = cur.addWaiter(r.msgID, r.agent)
	return nil
}

// leadLocked starts a run for the message and every message still pending,
// with the session claimed (busy) and st.appendMu held; it hands the claim
// to the run, or gives it back when it starts none. It returns
// ErrLeadElsewhere when another host holds the session's lease.
func (r *Run) leadLocked(ctx context.Context, st *sessionState) (err error) {
	h := r.h
	launched := false
	defer func() {
		if !launched {
			st.free()
		}
	}()
	// With several hosts on the store, lead the session only under its
	// lease; the ledger loaded after taking it is the whole truth.
	lease, err := h.takeLease(ctx, st)
	if err != nil {
		return err
	}
	defer func() {
		if lease != nil && !launched {
			lease.Release(context.WithoutCancel(ctx))
		}
	}()
	events, err := st.store.Load(ctx, st.key.id)
	if err != nil {
		return fmt.Errorf("host: load session %s: %w", st.key.id, err)
	}
	if r.msgID == "" {
		if id, res, done := requestSeen(events, r.requestID); id != "" {
			r.msgID = id
			if done {
				r.w = answeredWaiter(res)
				return nil
			}
		}
	}
	nr := h.newRun(st, ledger.NewID("run"), r.agent, r.hooks, lease, events)
	inputs := ledger.PendingInputs(events)
	var batch []ledger.Event
	// A run left open by a process that died (and not resumed yet) is
	// superseded: the new run's model sees its passes, and no resume will
	// re-run it after this one.
	for _, open := range ledger.OpenRuns(events) {
		batch = append(batch, ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunEnd, Time: time.Now().UTC(),
			RunID: open, RunEnd: &ledger.RunEnd{Status: ledger.RunInterrupted, Reason: "superseded by run " + nr.id}})
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
		if res, ok := resultFor(events, r.msgID); ok {
			r.w = answeredWaiter(res)
			return nil
		}
		return fmt.Errorf("host: message %s is neither pending nor answered", r.msgID)
	}
	batch = append(batch, nr.startEvent(inputs, time.Now().UTC()))
	if err := nr.writeLocked(ctx, batch...); err != nil {
		if fresh {
			r.msgID = ""
		}
		return fmt.Errorf("host: append message: %w", err)
	}
	if fresh {
		r.accepted, r.acceptedRun = true, nr.id
	}
	r.w = nr.addWaiter(r.msgID, r.agent)
	if r.bind != nil {
		nr.bindTo(r.bind, r.msgID)
		r.bound = nr
	}
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

// reenter finds the message its run again, unless another waiter of the
// handle did so since it saw w.
func (r *Run) reenter(ctx context.Context, w *waiter) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != w {
		return nil
	}
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
	r.w, r.bound = nil, nil
	return r.enter(ctx)
}

// await waits for the waiter's answer, relaying progress.
func (r *Run) await(ctx context.Context, w *waiter, onProgress func(Progress)) (RunResult, error, bool) {
	if onProgress == nil {
		select {
		case <-w.done:
			return w.res, w.err, w.again
		case <-ctx.Done():
			if !r.abandon() {
				return RunResult{MessageID: r.msgID, RunID: w.runID()}, ctx.Err(), false
			}
			<-w.done
			return w.res, w.err, w.again
		}
	}
	cur, after := w.position()
	if cur == nil { // answered already
		<-w.done
		return w.res, w.err, w.again
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
				return w.res, w.err, w.again
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
	return r.bound != nil && r.bound.checkBound()
}
