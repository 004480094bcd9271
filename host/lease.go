package host

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Several hosts on one store.
//
// When the storage implements storage.Leaser, a host leads a session's run
// only while it holds the session's lease: it takes the lease before the
// run's first append, renews it every third of Options.LeaseTTL while the
// run lives, appends through it (the store refuses, atomically, an append
// from a host whose lease has lapsed), and gives it back when the run ends.
// A host that dies releases nothing: its lease lapses, and another host's
// sweep resumes the run. A host that loses its lease (it was paused past
// the ttl) stops the run at once, writing nothing more.
//
// A send that reaches a host while another host leads the session's run is
// appended as a queued message (stores let anyone add those under a lease)
// and waits: the leader folds it into its run, woken through
// storage.Watcher; the sender learns the outcome from the ledger. The host
// that queued it follows it (see follow) whether or not its sender waits:
// should the leader die before answering it, that host takes the session
// over once the lease lapses.

// takeLease acquires the session's lease for a run, when the store has
// leases, and renews it from then on (see holdLease): the load and the
// checks before the run's first append — a long session's load may take
// longer than the ttl — cannot let it lapse. stop ends the renewals and
// gives the lease back; a run launched under the lease takes stop over
// (run.stopLease). It returns ErrLeadElsewhere when another host holds the
// lease; without leases, a nil lease and a stop that does nothing.
func (h *Host) takeLease(ctx context.Context, st *sessionState) (lease storage.Lease, stop func(), err error) {
	if st.leaser == nil {
		return nil, func() {}, nil
	}
	id := st.key.id
	l, err := st.leaser.AcquireLease(ctx, id, h.leaseOwner, h.leaseTTL)
	if errors.Is(err, storage.ErrLeaseHeld) {
		return nil, nil, fmt.Errorf("%w: %w", ErrLeadElsewhere, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("host: take the lease of session %s: %w", id, err)
	}
	return l, h.holdLease(st, l), nil
}

// holdLease renews the lease (when there is one) until the returned
// function is called, which releases it; when a renewal finds the lease
// lost, it cancels the session's run in flight at once.
func (h *Host) holdLease(st *sessionState, lease storage.Lease) (stop func()) {
	if lease == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(h.leaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), h.leaseTTL/3)
			err := lease.Renew(ctx)
			cancel()
			if errors.Is(err, storage.ErrLeaseLost) {
				st.mu.Lock()
				r := st.cur
				st.mu.Unlock()
				if r == nil {
					// Taken for a run not started yet (see takeLease): its
					// first append is refused, and the message enters the
					// session again (see enterSession).
					h.log.Warn("lease lost before the run started: another host may lead the session", "session", st.key.id)
					return
				}
				h.log.Error("lease lost: another host may lead the session; stopping the run", "session", st.key.id)
				r.cancel(&CancelledError{Reason: "the session's lease was lost to another host"})
				return
			}
			if err != nil {
				h.log.Warn("lease renewal failed; retrying", "session", st.key.id, "err", err)
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		d := h.timeouts.LeaseRelease
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		if err := lease.Release(ctx); err != nil {
			if ctx.Err() != nil {
				err = &TimeoutError{Kind: TimeoutLeaseRelease, After: d, Err: err}
			}
			h.log.Warn("lease release failed; it will lapse", "session", st.key.id, "err", err)
		}
	}
}

// watchRemote marks the session stale whenever it receives appends (from
// any host), until the returned function is called.
func (h *Host) watchRemote(st *sessionState) (stop func()) {
	if st.watcher == nil || st.leaser == nil {
		return func() {} // one host: every append goes through this process
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := st.watcher.Watch(ctx, st.key.id)
	if err != nil {
		h.log.Warn("cannot watch the session; messages sent to other hosts wait for the run's end",
			"session", st.key.id, "err", err)
		return cancel
	}
	go func() {
		for range ch {
			st.stale.Store(true)
			h.noticeInterrupts(ctx, st)
		}
	}()
	return cancel
}

// interruptsNS is the key-value namespace where a host that queued a
// message sent to stop another host's run (Input.Overlap) flags its
// session: the leader's watch reads the flag on every append it sees, and
// the ledger only when the flag is up.
const interruptsNS = "interrupts"

// flagInterrupt flags the session for its leader (see interruptsNS). A
// flag that cannot be written only delays the stop to the run's next
// step, whose pass looks at the ledger anyway.
func (h *Host) flagInterrupt(ctx context.Context, sessionID, msgID string) {
	if kv, ok := h.store.(storage.KV); ok {
		if err := kv.Set(ctx, interruptsNS, sessionID, []byte(msgID)); err != nil {
			h.log.Warn("cannot flag the interrupt for the leading host; it stops its run at its next step", "session", sessionID, "err", err)
		}
	}
}

// noticeInterrupts stops the session's run in flight here when another
// host queued a message sent to stop it (Input.Overlap): at once, not at
// the run's next step boundary, which may be a long reply away. It costs
// a read of the flag (see interruptsNS), and of the ledger when the flag
// is up.
func (h *Host) noticeInterrupts(ctx context.Context, st *sessionState) {
	kv, ok := h.store.(storage.KV)
	if !ok {
		return
	}
	st.mu.Lock()
	cur := st.cur
	st.mu.Unlock()
	if cur == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeouts.Append)
	defer cancel()
	flag, up, err := kv.Get(ctx, interruptsNS, st.key.id)
	if err != nil || !up {
		return
	}
	events, err := st.store.Load(ctx, st.key.id)
	if err != nil {
		return // the run's next pass looks again
	}
	stops := interrupting(events, ledger.PendingInputs(events))
	for _, id := range slices.Sorted(maps.Keys(stops)) {
		cur.interrupt(id, stops[id])
	}
	// The flag goes down once its message is in the ledger (handled now,
	// or answered already); before, its append is on its way, and the
	// watch wakes again when it lands.
	if slices.ContainsFunc(events, func(e ledger.Event) bool { return e.Input != nil && e.Input.MessageID == string(flag) }) {
		kv.Delete(ctx, interruptsNS, st.key.id)
	}
}

// waitRemote waits for a change to the session that another host makes:
// through the store's watch, or by polling.
func (h *Host) waitRemote(ctx context.Context, st *sessionState) error {
	wctx, cancel := context.WithTimeout(ctx, h.leaseTTL)
	defer cancel()
	if st.watcher != nil {
		ch, err := st.watcher.Watch(wctx, st.key.id)
		if err == nil {
			select {
			case <-ch:
				return nil
			case <-wctx.Done():
				return ctx.Err() // a timeout just means: look again
			}
		}
	}
	t := time.NewTimer(h.timeouts.Poll)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// queueRemote appends a message to a session another host leads, as a
// queued message that the leader folds in.
func (h *Host) queueRemote(ctx context.Context, st *sessionState, input ledger.Event) error {
	input.RunID = ""
	if err := h.stage(ctx, st, []ledger.Event{input}, nil, nil); err != nil {
		return fmt.Errorf("host: append message: %w", err)
	}
	if err := h.appendMessage(ctx, st, nil, input.Input.RequestID, input); err != nil {
		return fmt.Errorf("host: append message: %w", err)
	}
	h.emitFor(st.key.id, "", "", time.Time{}, Event{Type: EventQueuedMessage, MessageID: input.Input.MessageID})
	return nil
}

// appendMessage appends events (staged already) to the session: through
// lease when it is not nil (fenced), else unfenced. When they hold a new
// message sent under requestID (not ""), and the store checks request ids
// in the same atomic step as the write (storage.RequestAppender, through
// storage.LeaseRequestAppender for a lease), a message another host (or
// an earlier try whose outcome was in doubt) appended under requestID
// since the caller looked in the ledger is not appended again: the error
// is a *storage.RequestSeenError naming it. Without that check, the
// caller's look and the append are two steps, and a message appended
// twice is read as one (ledger.Aliases).
func (h *Host) appendMessage(ctx context.Context, st *sessionState, lease storage.Lease, requestID string, evs ...ledger.Event) error {
	if requestID != "" {
		var err error = errors.ErrUnsupported
		if lease != nil {
			if la, ok := lease.(storage.LeaseRequestAppender); ok {
				err = la.AppendRequest(ctx, requestID, evs...)
			}
		} else if ra, ok := st.store.(storage.RequestAppender); ok {
			err = ra.AppendRequest(ctx, st.key.id, requestID, evs...)
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
	}
	if lease != nil {
		return lease.Append(ctx, evs...) // fenced: refused if the lease lapsed
	}
	return st.store.Append(ctx, st.key.id, evs...)
}

// follow sees to a message queued for another host's run (r, whose waiter
// is nil) on a goroutine of the host's, until it finds the message a run
// here or the host closes: each time the leader's lease may have lapsed, it
// enters the session again, as a sender that waits would (see Run.wait). A
// leader that lives answers the message and releases its lease at its
// run's end: entering then finds the answer. A leader that died leaves its
// lease to lapse: entering then takes the session over — its dead run
// first, as the sweep's rules say, then the message. So a message accepted
// here is answered though nobody waits for it and no sweep runs.
func (h *Host) follow(r *Run) {
	if !r.following.CompareAndSwap(false, true) || !h.track() {
		return
	}
	go func() {
		defer h.wg.Done()
		defer r.following.Store(false)
		for h.untilLeaseFree(r.sess.id) {
			r.mu.Lock()
			if r.w != nil { // a sender's wait found it a place meanwhile
				r.mu.Unlock()
				return
			}
			err := r.enter(h.bg)
			found, left := r.w != nil, r.unreadable
			r.mu.Unlock()
			if found || left || errors.Is(err, ErrClosed) {
				return
			}
			if err != nil && h.bg.Err() == nil {
				h.log.Warn("cannot take over a session another host led; trying again", "session", r.sess.id, "message", r.msgID, "err", err)
			}
		}
	}()
}

// untilLeaseFree waits until the session's lease may be free: for the time
// its holder has left (storage.LeaseInspector), else a third of the ttl;
// false once the host closes.
func (h *Host) untilLeaseFree(id string) bool {
	d := h.leaseTTL / 3
	if in, ok := h.store.(storage.LeaseInspector); ok {
		ctx, cancel := context.WithTimeout(h.bg, h.leaseTTL)
		holder, left, err := in.LeaseHolder(ctx, id)
		cancel()
		if err == nil {
			// Past the holder's expiry by a little, for the store's clock.
			d = left + min(h.leaseTTL/20, 50*time.Millisecond)
			if holder == "" {
				d = 0
			}
		}
	}
	if d <= 0 {
		return h.bg.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-h.bg.Done():
		return false
	}
}
