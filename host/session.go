package host

import (
	"context"
	"fmt"
	"time"

	"github.com/agentichost/agentic/ledger"
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

// StartOptions tunes one [Session.Start]. The zero value is usable.
type StartOptions struct {
	// Parts is content sent after the text (images, audio, files).
	// Default: none.
	Parts []ledger.Part
	// RequestID is the caller's id for this message, recorded with it: a
	// message started again with the same RequestID is not appended
	// again (see [Session.Send]). Default: none.
	RequestID string
	// Agent runs this message instead of the host's Options.Agent, when
	// it starts a run. Default: nil.
	Agent *Agent
	// Overlap overrides the agent's Overlap for this message (see
	// Agent.Overlap). Default: "", the agent's.
	Overlap Overlap
}

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
	// Overlap overrides the agent's Overlap for this message (see
	// Agent.Overlap): OverlapInterrupt, say, stops the run in flight and
	// answers this message in a run of its own. Default: "", the agent's.
	Overlap Overlap
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
	// OnPart receives the model's raw stream while Send waits: every chunk
	// the provider sent, verbatim, for each pass of the session's runs in
	// this host (the pass answering this message, and others folded into
	// the same run), on the goroutine that reads the stream, before the
	// text it carries is applied. It must return quickly: the stream waits
	// for it. A model with no raw stream (not the OpenAI-compatible
	// provider) sends nothing. Default: nil.
	OnPart func(ModelPart)

	// parent links the message to the delegate call that sent it (see
	// Host.DelegateTool).
	parent *ledger.ParentCall
}

// ModelPart is one chunk of a model pass's raw stream (see
// SendOptions.OnPart).
type ModelPart struct {
	// RunID is the run, ResponseID the response the pass streams, Model
	// the model asked and Attempt the pass's attempt (1, then more when
	// it is retried or falls back: a new attempt starts the text again).
	RunID, ResponseID, Model string
	Attempt                  int
	// Raw is the chunk as the provider sent it: for an OpenAI-compatible
	// endpoint, the JSON of one chat.completion.chunk. The receiver owns
	// it.
	Raw []byte
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
	// Timeout names the agent's timeout that ended a timed_out run
	// (TimeoutTotal, TimeoutStep, TimeoutFirstChunk, TimeoutChunk); empty
	// otherwise, and when the run timed out on its caller's deadline.
	Timeout TimeoutKind
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
	// Approvals are the approval requests a parked run waits on (Status
	// approval_required).
	Approvals []PendingApproval
	// Waits are the waits of a parked run's calls (Status waiting, or
	// approval_required when requests are pending too).
	Waits []Waiting
}

// Start appends a user message to the session and returns once it is
// durable, with a handle on the run that answers it: a run Start starts
// for it (and for every message still pending), or the run in flight (in
// this host, or in another sharing the storage), which folds it in at its
// next step boundary. A message started with the RequestID of an earlier
// one is not appended again: the handle is on the earlier message.
//
// The run is the host's. ctx bounds Start only (the append, and waiting
// for a run that is ending): never the run, which only [Run.Cancel] (or
// [Host.Cancel]), the host's shutdown, a lost lease or its own end stop.
// Follow it with [Run.Subscribe] and [Run.Wait]; [Session.Send] is Start
// then Wait, with its context bound to the run.
//
// The error is non-nil only when the message could not be accepted:
// nothing was appended (see [ErrInvalidInput], and [ErrBusy] for an agent
// that rejects overlapping turns: Agent.Overlap). A message to a session
// whose ledger this host cannot read is accepted, queued for a host that
// can ([ErrUnreadable]): the handle's Wait then returns that error.
func (s *Session) Start(ctx context.Context, text string, opts StartOptions) (*Run, error) {
	return s.start(ctx, text, SendOptions{Parts: opts.Parts, RequestID: opts.RequestID, Agent: opts.Agent, Overlap: opts.Overlap}, nil, false)
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
// returns that run's result — unless the agent rejects overlapping turns
// (Agent.Overlap): then nothing is appended, and Send returns a
// [*BusyError] naming the run. A message sent with the RequestID of an
// earlier one is not appended again: Send returns the earlier message's
// id and run.
//
// The error is non-nil only when the message could not be accepted (nothing
// was appended: see [ErrInvalidInput], and [ErrBusy], a [*BusyError],
// when a run of the session works and the agent rejects overlapping turns:
// Agent.Overlap); when this host cannot read the session's ledger
// ([ErrUnreadable]: the message is queued, RunResult.MessageID names it,
// for a host that reads the session to answer); when the outcome of an accepted
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
	if opts.OnPart != nil {
		// Listening before the message is sent: its run's first pass
		// may start at once.
		st, err := s.h.ref(s)
		if err != nil {
			return RunResult{}, err
		}
		defer s.h.unref(st)
		defer st.listenParts(opts.OnPart)()
	}
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
	if a, ok := s.h.boundAgent(s.id); ok && s.private == nil {
		agent = a
	}
	if opts.Agent != nil {
		a, err := normalizeAgent(*opts.Agent)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
		agent = a
	}
	if opts.Overlap != "" {
		if err := validOverlap(opts.Overlap); err != nil {
			return nil, fmt.Errorf("%w: SendOptions: %w", ErrInvalidInput, err)
		}
		agent.Overlap = opts.Overlap
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	parts, release, err := s.h.externalParts(ctx, s.store(), parts)
	if err != nil {
		return nil, err
	}
	defer release() // once the message is durable, or refused
	r := &Run{h: s.h, sess: s, agent: agent, requestID: opts.RequestID, hooks: hooks, parts: parts, parent: opts.parent}
	if bind {
		r.bind = ctx
	}
	return r, r.enter(ctx)
}

// newInput mints the event of the message the handle was started with (see
// Session.Start), in the run runID ("" for a message queued into a run in
// flight).
func (r *Run) newInput(runID string) (ledger.Event, error) {
	e := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: time.Now().UTC(), RunID: runID,
		Input: &ledger.Input{MessageID: ledger.NewID("msg"), RequestID: r.requestID, Parts: r.parts, Parent: r.parent}}
	if err := ledger.Validate(e); err != nil {
		return e, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	return e, nil
}

// Events returns the session's ledger, as stored: parts and tool outputs
// kept by reference to a blob (see Options.BlobThreshold) keep their
// references; [Session.ResolvedEvents] reads them back.
func (s *Session) Events(ctx context.Context) ([]ledger.Event, error) {
	return s.h.store.Load(ctx, s.id)
}

// Messages returns the session's conversation as the model sees it (see
// ledger.ReplayMessages) — what its next pass is sent before a new
// message, unless that run compacts first (the last pass crossed the
// compaction limit): the last compaction's summary standing for
// what it summarised, the turns of runs rolled back or restarted left out,
// every tool call answered, parts kept by reference read back. The system
// prompt, configuration rather than history, is not among them. It reads
// what is durable: a pass streaming now is not in it.
func (s *Session) Messages(ctx context.Context) ([]ledger.Message, error) {
	events, err := s.ResolvedEvents(ctx)
	if err != nil {
		return nil, err
	}
	return ledger.ReplayMessages(events), nil
}

// ResolvedEvents returns the session's ledger with every blob its events
// refer to read back into them (parts' Data, tool results' whole Output),
// the references cleared: the events as they would have been with the
// bytes inline. A blob the storage cannot give leaves its reference in
// place.
func (s *Session) ResolvedEvents(ctx context.Context) ([]ledger.Event, error) {
	events, err := s.h.store.Load(ctx, s.id)
	if err != nil {
		return nil, err
	}
	return ResolveBlobs(ctx, s.h.store, events)
}

// store returns the storage that keeps the session.
func (s *Session) store() storage.Storage {
	if s.private != nil {
		return s.private
	}
	return s.h.store
}

// Transcript returns what a user sees of the session: its items in display
// order, including the partial text of a run in flight in this host.
func (s *Session) Transcript(ctx context.Context) (ledger.Transcript, error) {
	events, live, err := s.view(ctx)
	if err != nil {
		return ledger.Transcript{}, err
	}
	if events, err = ResolveBlobs(ctx, s.store(), events); err != nil {
		return ledger.Transcript{}, err
	}
	return ledger.ProjectSession(s.id, events, live...), nil
}

// Usage returns the session's usage and billed cost, per run and in total,
// computed from its ledger (including the events a run in flight in this
// host has appended so far). A session with no events has a zero usage.
func (s *Session) Usage(ctx context.Context) (ledger.SessionUsage, error) {
	events, _, err := s.view(ctx)
	if err != nil {
		return ledger.SessionUsage{}, err
	}
	return ledger.UsageOf(events), nil
}

// Overview is what a list of sessions shows of one: its status, what its
// model calls consumed, and when its ledger last changed.
type Overview struct {
	Status Status
	Usage  ledger.SessionUsage
	// LastActivity is the time of the session's last event; zero when it
	// has none.
	LastActivity time.Time
	// ForkedFrom is the session's lineage when it is a fork (see
	// [Host.Fork]): its source and fork point; nil otherwise.
	ForkedFrom *ledger.Fork
}

// Overview returns the session's Status, Usage and last activity, read
// from one view of its ledger.
func (s *Session) Overview(ctx context.Context) (Overview, error) {
	events, live, err := s.view(ctx)
	if err != nil {
		return Overview{}, fmt.Errorf("host: overview of session %s: %w", s.id, err)
	}
	st, err := s.statusOf(ctx, events, live)
	if err != nil {
		return Overview{}, err
	}
	o := Overview{Status: st, Usage: ledger.UsageOf(events)}
	if n := len(events); n > 0 {
		o.LastActivity = events[n-1].Time
		if f := events[0].Fork; f != nil {
			c := *f
			o.ForkedFrom = &c
		}
	}
	return o, nil
}

// view returns the session's events: those of the run in flight in this
// host, with its live view, else the ledger loaded from storage.
func (s *Session) view(ctx context.Context) ([]ledger.Event, []ledger.Live, error) {
	if events, snap, l, ok := s.h.snapshotLive(s.id); ok {
		events, err := s.h.wholeOf(ctx, s.id, events, snap)
		if err != nil {
			return nil, nil, err
		}
		return events, []ledger.Live{l}, nil
	}
	events, err := s.h.store.Load(ctx, s.id)
	return events, nil, err
}

// requestSeen looks for a message sent before with the same request id:
// its id, and, when a run that answered it has ended, that run's result.
func requestSeen(events []ledger.Event, requestID string) (msgID string, res RunResult, done bool) {
	msgID = ledger.MessageOfRequest(events, requestID)
	if msgID == "" {
		return "", RunResult{}, false
	}
	res, done = resultFor(events, msgID)
	return msgID, res, done
}

// resultFor returns the result of the ended run that answered msgID.
func resultFor(events []ledger.Event, msgID string) (RunResult, bool) {
	if canonical, ok := ledger.Aliases(events)[msgID]; ok {
		msgID = canonical // appended twice: one message, one answer
	}
	runID := ledger.RunOfMessage(events, msgID)
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
