package host

import (
	"context"
	"fmt"
	"time"

	"github.com/agentichost/agentic/ledger"
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
	err := r.h.stage(ctx, r.st, evs, r.events)
	if err != nil {
		return err
	}
	if err := r.h.appendMessage(ctx, r.st, r.lease, requestID, evs...); err != nil {
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
// has it) holds that feature already: no such event is written.
func (h *Host) stage(ctx context.Context, st *sessionState, evs, prior []ledger.Event) error {
	if st.key.private { // (stores are not compared: a store's type need not be comparable)
		return nil
	}
	if err := h.checkWrite(prior, evs...); err != nil {
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
	events, err := r.st.store.Load(ctx, r.sessionID)
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

func (r *run) newEvent(kind ledger.Kind) ledger.Event {
	return ledger.Event{ID: ledger.NewID("evt"), Kind: kind, Time: time.Now().UTC(), RunID: r.id}
}
