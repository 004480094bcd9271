package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// ForkOptions says which session to fork, where, and how the fork runs.
type ForkOptions struct {
	// Source is the session to fork. It is never changed. Required.
	Source string
	// At is the fork point: a user message's id, a step's response id
	// (the ids a transcript shows its items by), or the id of the input
	// or step event. Required.
	At string
	// SessionID is the new session's id; it must have no events.
	// Default: "", which means a new id, "fork_" and a ULID.
	SessionID string
	// Text replaces the user message's text when At is a user message
	// (its other parts are kept). Refused at a step. Default: "", the
	// message as it was.
	Text string
	// Agent runs the fork instead of the host's Options.Agent; its Name
	// and Model are recorded in the fork's first event. Default: nil.
	Agent *Agent
}

// Fork makes a new session from the ledger of opts.Source up to the fork
// point, and runs it; the source is untouched. It returns once the fork is
// durable and its run under way, with a handle on that run ([Run.Wait],
// [Run.Subscribe]; [Run.SessionID] names the fork). The run is the host's:
// ctx bounds Fork only.
//
// The fork's ledger starts with a [ledger.Fork] event naming the source,
// the fork point and the chosen agent and model, then copies of the
// source's events up to the fork point (see [ledger.ForkEvents]), with
// their ids, so that a message or a response keeps its id in the fork.
// Made at a user message, the fork answers that message anew (with
// opts.Text, when set) in a new run. Made at a step, the fork goes on
// with the step's run after the step's recorded tool results: no tool
// call that had completed before the fork point runs again, whatever its
// effect; the model's next pass sees the recorded results. A step without
// tool calls that ended its turn ends the fork's run at once, completed:
// the fork is then ready for its next message. The copied events' usage
// and cost stay the source's (ledger.UsageOf does not count them again).
//
// Errors: [ErrInvalidInput] (bad options; nothing recorded),
// [ErrSessionNotFound] for a source with no events,
// [ledger.ErrForkPointNotFound] and [ledger.ErrForkPointUnfinished] (a
// point inside an unfinished step, a step of a task's run), and
// [ErrSessionExists] for a SessionID that has events.
func (h *Host) Fork(ctx context.Context, opts ForkOptions) (*Run, error) {
	if !storage.ValidSessionID(opts.Source) {
		return nil, fmt.Errorf("%w: source session id %q", ErrInvalidInput, opts.Source)
	}
	if opts.At == "" {
		return nil, fmt.Errorf("%w: no fork point", ErrInvalidInput)
	}
	id := opts.SessionID
	if id == "" {
		id = ledger.NewID("fork")
	}
	if !storage.ValidSessionID(id) || id == opts.Source {
		return nil, fmt.Errorf("%w: fork session id %q", ErrInvalidInput, id)
	}
	agent := h.agent
	if opts.Agent != nil {
		a, err := normalizeAgent(*opts.Agent)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
		agent = a
	}
	if err := h.featuresWritable(ledger.FeatureFork); err != nil {
		return nil, err
	}
	events, _, err := h.Session(opts.Source).view(ctx)
	if err != nil {
		return nil, fmt.Errorf("host: load session %s: %w", opts.Source, err)
	}
	if len(events) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrSessionNotFound, opts.Source)
	}
	prefix, point, err := ledger.ForkEvents(events, opts.At)
	if err != nil {
		return nil, fmt.Errorf("host: fork %s: %w", opts.Source, err)
	}
	if point.Task != nil {
		return nil, fmt.Errorf("host: fork %s: %w: step %s belongs to a task's run; fork at its user message instead",
			opts.Source, ledger.ErrForkPointUnfinished, point.Item)
	}
	if opts.Text != "" && point.Message == nil {
		return nil, fmt.Errorf("%w: replacement text for a fork at a step (only a user message's text can be replaced)", ErrInvalidInput)
	}
	now := time.Now().UTC()
	record := ledger.Fork{Source: opts.Source, At: point.EventID, Item: point.Item, Copied: len(prefix)}
	if opts.Agent != nil {
		record.Agent, record.Model = agent.Name, agent.Model
	}
	add := make([]ledger.Event, 0, len(prefix)+2)
	add = append(add, ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindFork, Time: now, Fork: &record})
	add = append(add, prefix...)
	if m := point.Message; m != nil {
		parts := m.Parts
		if opts.Text != "" {
			parts = []ledger.Part{ledger.TextPart(opts.Text)}
			for _, p := range m.Parts {
				if p.Type != ledger.PartText {
					parts = append(parts, p)
				}
			}
		}
		// Queued: the run the resume below starts picks it up.
		in := ledger.Event{ID: ledger.NewID("evt"), Kind: ledger.KindInput, Time: now,
			Input: &ledger.Input{MessageID: ledger.NewID("msg"), Parts: parts}}
		if err := ledger.Validate(in); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
		add = append(add, in)
	}
	// The blobs the copies refer to are held until the fork is written
	// (a sweep deletes no blob a writer holds), and must still be there
	// once held: a sweep that deleted one after the source was read (its
	// session deleted meanwhile) would leave the fork referring to
	// nothing. Then the fork is refused, as of a source that changed.
	unhold, err := HoldBlobs(ctx, h.store, ledger.BlobRefs(add))
	if err != nil {
		return nil, fmt.Errorf("host: fork %s: %w", opts.Source, err)
	}
	defer unhold()
	if blobs, ok := h.store.(storage.Blobs); ok {
		for _, d := range ledger.BlobRefs(add) {
			if _, found, err := blobs.GetBlob(ctx, d); err != nil {
				return nil, fmt.Errorf("host: fork %s: blob %s: %w", opts.Source, d, err)
			} else if !found {
				return nil, fmt.Errorf("host: fork %s: %w: its blob %s is gone (the source was deleted meanwhile)", opts.Source, ErrSessionChanged, d)
			}
		}
	}
	prepare := func(have []ledger.Event) ([]ledger.Event, error) {
		if len(have) > 0 {
			return nil, fmt.Errorf("%w: %s", ErrSessionExists, id)
		}
		return add, nil
	}
	r, _, err := h.resume(ctx, id, agent, nil, nil, func(Interrupted) ResumeAction { return ActionResume }, prepare)
	if errors.Is(err, errNotRecorded) {
		return nil, fmt.Errorf("host: fork %s into %s: could not record the fork: %w", opts.Source, id, err)
	}
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, errors.New("host: fork " + opts.Source + ": the fork started no run")
	}
	// The source lists its forks through an index beside the ledgers; the
	// fork's own first event is the truth, the index a convenience.
	if kv, ok := h.store.(storage.KV); ok {
		if err := kv.Set(context.WithoutCancel(ctx), forksNamespace(h.tenant, opts.Source), id, []byte(point.Item)); err != nil {
			h.log.Warn("cannot index the fork beside its source; the fork stands, the source will not list it", "source", opts.Source, "fork", id, "err", err)
		}
	}
	return r, nil
}

// forksNamespace is the key-value namespace of the index of source's forks
// (keys: the forks' ids; values: their fork points' item ids).
func forksNamespace(tenant, source string) string {
	return fmt.Sprintf("forks:%d:%s:%s", len(tenant), tenant, source)
}

// Forks returns the ids of the sessions forked from this one ([Host.Fork]),
// sorted, as the storage's key-value store indexes them: none when the
// storage keeps no values (storage.KV). A fork names its source itself, in
// its first event; this is the index the other way.
func (s *Session) Forks(ctx context.Context) ([]string, error) {
	return ForksOf(ctx, s.h.store, s.h.tenant, s.id)
}

// ForksOf is [Session.Forks] for a storage read without a host: tenant is
// the Options.Tenant of the hosts that forked (as they index the forks).
func ForksOf(ctx context.Context, store storage.Storage, tenant, source string) ([]string, error) {
	kv, ok := store.(storage.KV)
	if !ok {
		return nil, nil
	}
	ids, err := kv.Keys(ctx, forksNamespace(tenant, source))
	if err != nil {
		return nil, fmt.Errorf("host: the forks of %s: %w", source, err)
	}
	return ids, nil
}

// SessionID returns the id of the session the run belongs to.
func (r *Run) SessionID() string { return r.sess.id }

// forkOwn returns the events of add that are not a fork's copies of its
// source's: all of them, unless add starts with a fork record.
func forkOwn(add []ledger.Event) []ledger.Event {
	if len(add) == 0 || add[0].Fork == nil {
		return add
	}
	n := min(1+add[0].Fork.Copied, len(add))
	return append(add[:1:1], add[n:]...)
}
