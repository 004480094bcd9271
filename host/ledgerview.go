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

// A run's view of its session's ledger: the events appended so far, in one
// slice guarded by the session's mu. writeLocked is the only writer: it
// makes events durable, then adds them to the view that the run, queued
// sends and transcripts read.

// view returns the run's view of the ledger. The ledger is append-only: the
// slice up to its length never changes.
func (r *run) view() []ledger.Event {
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	return r.events[:len(r.events):len(r.events)]
}

// append makes the run's own events durable, detached from every caller,
// bounded by Timeouts.Append: work that finished (a paid-for model pass, a
// tool that ran) is recorded even when a caller has just given up.
func (r *run) append(evs ...ledger.Event) error {
	r.st.appendMu.Lock()
	defer r.st.appendMu.Unlock()
	return r.appendLocked(evs...)
}

// appendLocked is append with the session's appendMu held.
func (r *run) appendLocked(evs ...ledger.Event) error {
	d := r.h.timeouts.Append
	ctx, stop := newAppendCtx(d)
	defer stop()
	err := r.writeLocked(ctx, evs...)
	if err != nil && ctx.Err() != nil {
		err = &TimeoutError{Kind: TimeoutAppend, After: d, Err: err}
	}
	return err
}

// writeLocked makes events durable (through the run's lease, when it holds
// one), then adds them to the run's view of the ledger, which transcripts
// and queued sends read. It is the one place events of a run in flight are
// appended. The session's appendMu is held.
func (r *run) writeLocked(ctx context.Context, evs ...ledger.Event) error {
	return r.writeMessageLocked(ctx, "", evs...)
}

// writeMessageLocked is writeLocked of a batch that holds a new message
// sent under requestID (none when ""): refused with a
// *storage.RequestSeenError, appending nothing, when the store finds a
// message of that request in the session at the write (see
// Host.appendMessage).
func (r *run) writeMessageLocked(ctx context.Context, requestID string, evs ...ledger.Event) error {
	// r.events changes only under appendMu, which is held: read as is,
	// no second lock on every append.
	err := r.h.stage(ctx, r.st, evs, r.events, r.snap)
	if err != nil {
		return err
	}
	if err := r.h.appendMessage(ctx, r.st, r.lease, requestID, evs...); err != nil {
		if _, ok := errors.AsType[*storage.RequestSeenError](err); ok {
			// The store holds a message the run's view does not: the view
			// is stale, whether or not the session's watch has said so
			// yet, and the run's next look at its messages reloads.
			r.st.stale.Store(true)
		}
		return err
	}
	r.st.mu.Lock()
	r.events = append(r.events, evs...)
	r.st.mu.Unlock()
	r.observe(evs)
	return nil
}

// stage hands events about to be appended to the session to the outbox
// (Options.Outbox), before the append: an ephemeral task's private store
// stages nothing. Every append to a session goes through it, and it
// refuses (a *FeatureError) events that use a ledger feature not every
// live host reads, unless prior (the session's ledger, when the caller
// has it, or the view of snap) holds that feature already: no such event
// is written.
func (h *Host) stage(ctx context.Context, st *sessionState, evs, prior []ledger.Event, snap *ledger.Snapshot) error {
	if st.key.private { // (stores are not compared: a store's type need not be comparable)
		return nil
	}
	if err := h.checkWrite(prior, snap, evs...); err != nil {
		return err
	}
	if h.outbox == nil {
		return nil
	}
	if err := h.outbox.Stage(ctx, st.key.id, evs); err != nil {
		return fmt.Errorf("host: outbox: %w", err)
	}
	return nil
}

// sync reloads the run's view of the ledger from storage when another host
// may have queued a message.
func (r *run) sync() {
	r.st.appendMu.Lock()
	defer r.st.appendMu.Unlock()
	if err := r.reloadIfStale(); err != nil {
		r.h.log.Warn("cannot reload the session; going on with what this host saw", "session", r.sessionID, "err", err)
	}
}

// reloadIfStale replaces the run's view of the ledger with storage's when
// another host may have appended to it. The session's appendMu is held.
func (r *run) reloadIfStale() error {
	if !r.st.stale.Swap(false) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.h.timeouts.Append)
	defer cancel()
	events, err := r.reload(ctx)
	if err != nil {
		r.st.stale.Store(true)
		return err
	}
	r.st.mu.Lock()
	if len(events) >= len(r.events) {
		r.events = events
	}
	r.st.mu.Unlock()
	return nil
}

// reload reads the session's ledger anew, as the run sees it: the whole
// ledger, or, for a run on the view of a snapshot, that view — its own
// events up to where the store's snapshot was taken (its own or a later
// one, which another host or this run kept since), then the store's
// events after it. The session's appendMu is held.
func (r *run) reload(ctx context.Context) ([]ledger.Event, error) {
	sn, ok := r.st.store.(storage.Snapshotter)
	if r.snap == nil || !ok {
		return r.st.store.Load(ctx, r.sessionID)
	}
	_, at, tail, err := sn.LoadSnapshot(ctx, r.sessionID)
	if err != nil {
		return nil, err
	}
	switch {
	case at == r.snap.Through:
		return r.snap.View(tail), nil
	case at != "":
		// A later snapshot, taken at an event of the run's view: r.events
		// changes only under appendMu, which is held.
		for i := len(r.events) - 1; i >= len(r.snap.Carry); i-- {
			if r.events[i].ID == at {
				return append(slices.Clip(r.events[:i+1]), tail...), nil
			}
		}
		// One the run does not know (taken before the run's): the
		// run's view of the whole ledger.
		if tail, err = r.st.store.Load(ctx, r.sessionID); err != nil {
			return nil, err
		}
	}
	// tail is the whole ledger.
	for i := len(tail) - 1; i >= 0; i-- {
		if tail[i].ID == r.snap.Through {
			return r.snap.View(tail[i+1:]), nil
		}
	}
	return nil, fmt.Errorf("host: session %s: the ledger no longer holds event %s, which the run's snapshot was taken at", r.sessionID, r.snap.Through)
}

func (r *run) newEvent(kind ledger.Kind) ledger.Event {
	return ledger.Event{ID: ledger.NewID("evt"), Kind: kind, Time: time.Now().UTC(), RunID: r.id}
}
