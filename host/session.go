package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
	// OnProgress receives the run's live events, in order, from the
	// goroutine that called Send. It must not block for long: the run
	// waits for it. A send that joins a run in flight (its message is
	// queued, and folded in at the run's next step boundary) receives that
	// run's events from the moment the message is queued — the live
	// transcript holds what streamed before — and the run does not wait
	// for it. Default: nil.
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
// the run as interrupted, and it can be resumed); or when ctx ended while
// the message waited queued (it stays queued, and will be answered). Every
// other outcome, including a model that fails and a cancelled ctx during
// the run, is reported in RunResult.Status with nil error.
func (s *Session) Send(ctx context.Context, text string, opts SendOptions) (RunResult, error) {
	return s.send(ctx, text, opts, nil)
}

// send is Send with hooks that steer the run the message starts (when it
// starts one; a message queued into a run in flight joins that run as it
// is).
func (s *Session) send(ctx context.Context, text string, opts SendOptions, hooks *runHooks) (RunResult, error) {
	if !storage.ValidSessionID(s.id) {
		return RunResult{}, fmt.Errorf("%w: session id %q", ErrInvalidInput, s.id)
	}
	parts := make([]ledger.Part, 0, 1+len(opts.Parts))
	if text != "" {
		parts = append(parts, ledger.TextPart(text))
	}
	parts = append(parts, opts.Parts...)
	if len(parts) == 0 {
		return RunResult{}, fmt.Errorf("%w: empty message", ErrInvalidInput)
	}
	agent := s.h.agent
	if opts.Agent != nil {
		a, err := normalizeAgent(*opts.Agent)
		if err != nil {
			return RunResult{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
		agent = a
	}

	h := s.h
	st, err := h.ref(s)
	if err != nil {
		return RunResult{}, err
	}
	defer h.unref(st)

	newInput := func(runID string) (ledger.Event, error) {
		e := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: time.Now().UTC(), RunID: runID,
			Input: &ledger.Input{MessageID: ledger.NewID("msg"), RequestID: opts.RequestID, Parts: parts}}
		if err := ledger.Validate(e); err != nil {
			return e, fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
		return e, nil
	}
	accepted := func(msgID, runID string) {
		if opts.OnAccepted != nil {
			opts.OnAccepted(Accepted{MessageID: msgID, RunID: runID})
		}
	}

	msgID := ""     // set once the message is durable
	queued := false // the message was just queued: tell OnAccepted
	for {
		st.appendMu.Lock()
		st.mu.Lock()
		l := st.live
		queue := l != nil && !l.ending
		var events []ledger.Event
		if queue {
			events = l.events
		}
		st.mu.Unlock()

		if queue {
			// A run is in flight: the message joins it at its next step
			// boundary.
			if msgID == "" {
				if id, res, done := requestSeen(events, opts.RequestID); id != "" {
					if done {
						st.appendMu.Unlock()
						return res, nil
					}
					msgID = id
				} else {
					input, err := newInput("")
					if err != nil {
						st.appendMu.Unlock()
						return RunResult{}, err
					}
					if err := st.store.Append(ctx, s.id, input); err != nil {
						st.appendMu.Unlock()
						return RunResult{}, fmt.Errorf("host: append message: %w", err)
					}
					st.mu.Lock()
					l.events = append(l.events, input)
					st.mu.Unlock()
					msgID = input.Input.MessageID
					queued = true
				}
			}
			w := &waiter{messageID: msgID, ch: make(chan waitResult, 1)}
			var progress *progressQueue
			st.mu.Lock()
			l.waiters = append(l.waiters, w)
			if opts.OnProgress != nil {
				// The run's progress from now on, delivered here.
				progress = newProgressQueue()
				l.join(progress)
			}
			st.mu.Unlock()
			st.appendMu.Unlock()
			if queued {
				queued = false
				accepted(msgID, l.runID)
			}
			wr, err := h.awaitJoined(ctx, st, l, w, progress, opts.OnProgress)
			if err != nil {
				return RunResult{MessageID: msgID}, err
			}
			if wr.again {
				continue // the run ended without it: a successor answers
			}
			return wr.res, wr.err
		}

		if !st.tryLock() {
			// A run is ending, or a resume is setting one up: wait for
			// the session to change, then look again.
			ch := h.changedCh(st)
			st.appendMu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return RunResult{MessageID: msgID}, ctx.Err()
			}
		}

		// This send owns the session: it starts a run for its message and
		// for every message still pending.
		res, err := s.startRun(ctx, st, agent, opts, &msgID, newInput, hooks)
		if !errors.Is(err, ErrLeadElsewhere) {
			return res, err
		}
		// Another host leads the session's run: queue the message for it
		// to fold in, and learn the outcome from the ledger.
		if msgID == "" {
			input, err := newInput("")
			if err != nil {
				return RunResult{}, err
			}
			if err := h.queueRemote(ctx, st, input); err != nil {
				return RunResult{}, err
			}
			msgID = input.Input.MessageID
			accepted(msgID, "")
		}
		if err := h.waitRemote(ctx, st); err != nil {
			return RunResult{MessageID: msgID}, err
		}
	}
}

// startRun runs with the session's token held and appendMu locked (it
// unlocks it): it appends the message (unless *msgID names one already
// durable) and a run-start for every pending message, then runs the loop.
func (s *Session) startRun(ctx context.Context, st *sessionState, agent Agent, opts SendOptions, msgID *string,
	newInput func(runID string) (ledger.Event, error), hooks *runHooks) (RunResult, error) {
	h := s.h
	defer h.release(st)
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			st.appendMu.Unlock()
		}
	}
	defer unlock()
	// With several hosts on the store, lead the session only under its
	// lease; the ledger loaded after taking it is the whole truth.
	lease, err := h.takeLease(ctx, st)
	if err != nil {
		return RunResult{}, err
	}
	leased := lease != nil
	defer func() {
		if leased { // not handed to a run
			lease.Release(context.WithoutCancel(ctx))
		}
	}()
	events, err := st.store.Load(ctx, s.id)
	if err != nil {
		return RunResult{}, fmt.Errorf("host: load session %s: %w", s.id, err)
	}
	if *msgID == "" {
		if id, res, done := requestSeen(events, opts.RequestID); id != "" {
			if done {
				return res, nil
			}
			*msgID = id
		}
	}
	r := &run{h: h, st: st, sessionID: s.id, agent: agent, onProgress: opts.OnProgress, events: events,
		runID: ledger.NewID("run"), hooks: hooks, lease: lease}
	inputs := ledger.PendingInputs(events)
	var batch []ledger.Event
	// A run left open by a process that died (and not resumed yet) is
	// superseded: the new run's model sees its passes, and no resume will
	// re-run it after this one.
	for _, open := range ledger.OpenRuns(events) {
		batch = append(batch, ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindRunEnd, Time: time.Now().UTC(),
			RunID: open, RunEnd: &ledger.RunEnd{Status: ledger.RunInterrupted, Reason: "superseded by run " + r.runID}})
	}
	fresh := *msgID == ""
	if fresh {
		input, err := newInput(r.runID)
		if err != nil {
			return RunResult{}, err
		}
		batch = append(batch, input)
		inputs = append(inputs, input.Input.MessageID)
		*msgID = input.Input.MessageID
	} else if !slices.Contains(inputs, *msgID) {
		// Another run answered the message meanwhile.
		if res, ok := resultFor(events, *msgID); ok {
			return res, nil
		}
		return RunResult{MessageID: *msgID}, fmt.Errorf("host: message %s is neither pending nor answered", *msgID)
	}
	start := r.startEvent(inputs, time.Now().UTC())
	batch = append(batch, start)
	var aerr error
	if lease != nil {
		aerr = lease.Append(ctx, batch...)
	} else {
		aerr = st.store.Append(ctx, s.id, batch...)
	}
	if err := aerr; err != nil {
		if fresh {
			*msgID = ""
		}
		return RunResult{}, fmt.Errorf("host: append message: %w", err)
	}
	r.events = append(r.events, batch...)
	leased = false // the run holds, renews and releases it now
	ctx, done := r.goLive(ctx)
	defer done()
	unlock()
	if fresh && opts.OnAccepted != nil {
		opts.OnAccepted(Accepted{MessageID: *msgID, RunID: r.runID})
	}
	res, err := r.loop(ctx)
	res.MessageID = *msgID
	return res, err
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
	if events, l, ok := s.h.snapshotLive(s.id); ok {
		return ledger.ProjectSession(s.id, events, l), nil
	}
	events, err := s.h.store.Load(ctx, s.id)
	if err != nil {
		return ledger.Transcript{}, err
	}
	return ledger.ProjectSession(s.id, events), nil
}

// awaitJoined waits for the end of the run l that a send joined, handing
// the run's progress to onProgress meanwhile (in this goroutine); every
// event the run emitted before its end is delivered before it returns.
func (h *Host) awaitJoined(ctx context.Context, st *sessionState, l *liveRun, w *waiter, q *progressQueue, onProgress func(Progress)) (waitResult, error) {
	var ready chan struct{}
	if q != nil {
		ready = q.ready
		defer func() {
			st.mu.Lock()
			l.leave(q)
			st.mu.Unlock()
		}()
	}
	for {
		select {
		case wr := <-w.ch:
			if q != nil {
				q.drain(onProgress)
			}
			return wr, nil
		case <-ready:
			q.drain(onProgress)
		case <-ctx.Done():
			return waitResult{}, ctx.Err()
		}
	}
}
