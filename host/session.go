package host

import (
	"context"
	"fmt"
	"time"

	"github.com/agentichost/agentic/host/ledger"
	"github.com/agentichost/agentic/storage"
)

// Session is a handle on one session's ledger. It is cheap; any number of
// handles on the same id may be used concurrently.
type Session struct {
	h  *Host
	id string
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
	// waits for it. Default: nil.
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
// answers. It returns once the run has ended.
//
// The error is non-nil only when the message could not be accepted (nothing
// was appended: see [ErrInvalidInput]), or when the outcome of an accepted
// run could not be recorded because storage failed; in that case the
// ledger shows the run as interrupted and it can be resumed. Every other
// outcome, including a model that fails and a cancelled ctx, is reported in
// RunResult.Status with nil error.
func (s *Session) Send(ctx context.Context, text string, opts SendOptions) (RunResult, error) {
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

	st, err := s.h.acquire(ctx, s.id)
	if err != nil {
		return RunResult{}, err
	}
	defer s.h.release(s.id, st, true)

	events, err := s.h.store.Load(ctx, s.id)
	if err != nil {
		return RunResult{}, fmt.Errorf("host: load session %s: %w", s.id, err)
	}
	now := time.Now().UTC()
	input := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now,
		Input: &ledger.Input{MessageID: ledger.NewID("msg"), RequestID: opts.RequestID, Parts: parts}}
	if err := ledger.Validate(input); err != nil {
		return RunResult{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	r := &run{h: s.h, st: st, sessionID: s.id, agent: agent, onProgress: opts.OnProgress,
		events: events, runID: ledger.NewID("run")}
	input.RunID = r.runID
	start := r.startEvent([]string{input.Input.MessageID}, now)
	if err := s.h.store.Append(ctx, s.id, input, start); err != nil {
		return RunResult{}, fmt.Errorf("host: append message: %w", err)
	}
	r.events = append(r.events, input, start)
	if opts.OnAccepted != nil {
		opts.OnAccepted(Accepted{MessageID: input.Input.MessageID, RunID: r.runID})
	}
	ctx, done := r.goLive(ctx)
	defer done()
	res, err := r.loop(ctx)
	res.MessageID = input.Input.MessageID
	return res, err
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
