package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/agentichost/agentic/host/internal/hub"
	"github.com/agentichost/agentic/host/ledger"
	"github.com/agentichost/agentic/storage"
)

// Session is a handle on one session's ledger. It is cheap; any number of
// handles on the same id may be used concurrently.
type Session struct {
	h  *Host
	id string
	// private, when set, keeps the session in this store instead of the
	// host's storage (a task that is not durable).
	private storage.Storage
}

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// SendOptions tunes one [Session.Send]. The zero value is usable.
type SendOptions struct {
	// Parts is content sent after the text (images, audio, files).
	// Default: none.
	Parts []ledger.Part
	// RequestID is the caller's id for this send, recorded with the
	// message. Default: none.
	RequestID string
	// Agent runs this send instead of the host's Options.Agent. Default:
	// nil.
	Agent *Agent
	// OnAccepted is called once the message is durable, before the first
	// progress event. Default: nil.
	OnAccepted func(Accepted)
	// OnProgress receives the run's live events, in order and without
	// loss, from the goroutine that called Send, before Send returns. The
	// run never waits for it. A send that joins a run in flight (its
	// message is queued, and folded in at the run's next step boundary)
	// receives that run's events from the moment the message is queued —
	// the live transcript holds what streamed before. Default: nil.
	OnProgress func(Progress)
}

// Accepted tells a sender that its message is durable.
type Accepted struct {
	// MessageID is the durable id of the user message.
	MessageID string
	// RunID is the run that answers it.
	RunID string
}

// RunResult is the outcome of a run.
type RunResult struct {
	// Status is how the run ended.
	Status ledger.RunStatus
	// Reason explains a status other than completed.
	Reason string
	// Text is the run's answer: the text of its last model pass (the
	// partial text, when the run was cancelled mid-pass).
	Text string
	// MessageID is the id of the user message the run answered.
	MessageID string
	// RunID is the run's id.
	RunID string
	// ResponseID is the id of the run's last response item.
	ResponseID string
	// Usage sums the provider-reported usage of the run's passes.
	Usage ledger.Usage
	// Cost sums the billed cost of the run's passes, in USD.
	Cost float64
}

// Send appends a user message to the session and runs the agent until it
// answers. It returns once the run that answered the message has ended.
//
// The run is the host's: Send starts it (or joins the one in flight) and
// waits for it. When ctx ends, the run is cancelled — unless other callers'
// messages wait in it (queued into it, or folded in already): then Send
// alone stops waiting, returning ctx.Err(), and the run goes on to answer
// them.
//
// When a run of the session is already working (in this host, or in
// another host sharing the storage), the message is appended as a queued
// message and that run folds it in at its next step boundary; Send then
// returns that run's result. A message sent with the RequestID of an
// earlier one is not appended again: Send returns the earlier message's
// id and run.
//
// The error is non-nil only when the message could not be accepted (nothing
// was appended: see [ErrInvalidInput]); when the outcome of an accepted
// run could not be recorded because storage failed (the ledger then shows
// the run as interrupted, and it can be resumed); when the host closed
// before the run ended ([ErrClosed]; the run stays resumable); or when
// ctx ended while the message waited queued, or while other callers'
// messages waited in the run (the message stays in the run, and will be
// answered). Every other outcome, including a model that fails and a
// cancelled ctx during the run, is reported in RunResult.Status with nil
// error.
func (s *Session) Send(ctx context.Context, text string, opts SendOptions) (RunResult, error) {
	return s.send(ctx, text, opts, nil)
}

// send is Send with hooks that steer the run the message starts (when it
// starts one; a message queued into a run in flight joins that run as it
// is).
func (s *Session) send(ctx context.Context, text string, opts SendOptions, hooks *runHooks) (RunResult, error) {
	r, err := s.start(ctx, text, opts, hooks, true)
	if err != nil {
		res := RunResult{}
		if r != nil {
			res.MessageID = r.msgID
		}
		return res, err
	}
	if r.accepted && opts.OnAccepted != nil {
		opts.OnAccepted(Accepted{MessageID: r.msgID, RunID: r.acceptedRun})
	}
	return r.wait(ctx, opts.OnProgress)
}

// Run is a caller's handle on the run that answers its message.
type Run struct {
	h    *Host
	sess *Session

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

// start makes the message durable and starts a run for it, or queues it into
// the run in flight; bind says whether ctx's end is to cancel the run it
// starts (see Send).
func (s *Session) start(ctx context.Context, text string, opts SendOptions, hooks *runHooks, bind bool) (*Run, error) {
	if !storage.ValidSessionID(s.id) {
		return nil, fmt.Errorf("%w: session id %q", ErrInvalidInput, s.id)
	}
	parts := make([]ledger.Part, 0, 1+len(opts.Parts))
	if text != "" {
		parts = append(parts, ledger.TextPart(text))
	}
	parts = append(parts, opts.Parts...)
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: empty message", ErrInvalidInput)
	}
	agent := s.h.agent
	if opts.Agent != nil {
		a, err := normalizeAgent(*opts.Agent)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
		agent = a
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &Run{h: s.h, sess: s, agent: agent, requestID: opts.RequestID, hooks: hooks,
		newInput: func(runID string) (ledger.Event, error) {
			e := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: time.Now().UTC(), RunID: runID,
				Input: &ledger.Input{MessageID: ledger.NewID("msg"), RequestID: opts.RequestID, Parts: parts}}
			if err := ledger.Validate(e); err != nil {
				return e, fmt.Errorf("%w: %w", ErrInvalidInput, err)
			}
			return e, nil
		}}
	if bind {
		r.bind = ctx
	}
	return r, r.enter(ctx)
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
		if r.w == nil {
			// Another host leads the session: wait for the ledger to
			// change, then look again (its run may have ended without
			// the message, or this host may lead now).
			st, err := r.h.ref(r.sess)
			if err != nil {
				return RunResult{MessageID: r.msgID}, err
			}
			err = r.h.waitRemote(ctx, st)
			r.h.unref(st)
			if err == nil {
				err = r.enter(ctx)
			}
			if err != nil {
				return RunResult{MessageID: r.msgID}, err
			}
			continue
		}
		res, err, again := r.await(ctx, onProgress)
		if !again {
			return res, err
		}
		// The run ended without the message, and no successor took it:
		// find it a run.
		r.w, r.bound = nil, nil
		if err := r.enter(ctx); err != nil {
			return RunResult{MessageID: r.msgID}, err
		}
	}
}

// await waits for the waiter's answer, relaying progress.
func (r *Run) await(ctx context.Context, onProgress func(Progress)) (RunResult, error, bool) {
	w := r.w
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

// requestSeen looks for a message sent before with the same request id:
// its id, and, when a run that answered it has ended, that run's result.
func requestSeen(events []ledger.Event, requestID string) (msgID string, res RunResult, done bool) {
	if requestID == "" {
		return "", RunResult{}, false
	}
	for _, e := range events {
		if e.Input != nil && e.Input.RequestID == requestID {
			msgID = e.Input.MessageID
			break
		}
	}
	if msgID == "" {
		return "", RunResult{}, false
	}
	res, done = resultFor(events, msgID)
	return msgID, res, done
}

// resultFor returns the result of the ended run that answered msgID.
func resultFor(events []ledger.Event, msgID string) (RunResult, bool) {
	runID := ""
	for _, e := range events {
		switch {
		case e.RunStart != nil && slices.Contains(e.RunStart.Inputs, msgID):
			runID = e.RunID
		case e.Step != nil && slices.Contains(e.Step.Inputs, msgID):
			runID = e.RunID
		case e.RunEnd != nil && slices.Contains(e.RunEnd.Inputs, msgID):
			runID = e.RunID
		}
	}
	if runID == "" {
		return RunResult{}, false
	}
	v, ok := ledger.ProjectRun(events, runID)
	if !ok || !v.Ended {
		return RunResult{}, false
	}
	return RunResult{Status: v.Status, Reason: v.Reason, Text: v.Text, MessageID: msgID, RunID: runID,
		ResponseID: v.ResponseID, Usage: v.Usage, Cost: v.Cost}, true
}

// Events returns the session's ledger.
func (s *Session) Events(ctx context.Context) ([]ledger.Event, error) {
	return s.h.store.Load(ctx, s.id)
}

// Transcript returns what a user sees of the session: its items in display
// order, including the partial text of a run in flight in this host.
func (s *Session) Transcript(ctx context.Context) (ledger.Transcript, error) {
	events, live, err := s.view(ctx)
	if err != nil {
		return ledger.Transcript{}, err
	}
	return ledger.ProjectSession(s.id, events, live...), nil
}

// view returns the session's events: those of the run in flight in this
// host, with its live view, else the ledger loaded from storage.
func (s *Session) view(ctx context.Context) ([]ledger.Event, []ledger.Live, error) {
	if events, l, ok := s.h.snapshotLive(s.id); ok {
		return events, []ledger.Live{l}, nil
	}
	events, err := s.h.store.Load(ctx, s.id)
	return events, nil, err
}
