package host

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/agentichost/agentic/host/internal/hub"
	"github.com/agentichost/agentic/ledger"
)

// Viewers: a caller that did not start a run — a browser reconnecting, a
// second console — follows a session through an Attachment: a snapshot of
// the session, then the live progress of its run in flight, exactly: the
// snapshot's partial text and the progress after its cursor join without a
// character twice or missing.

// Cursor names a point in a session's live progress: the run whose
// progress was read, and the [Progress.Seq] of the last event read. The
// zero Cursor is the start.
type Cursor struct {
	RunID string `json:"runId,omitempty"`
	Seq   int    `json:"seq"`
}

// Snapshot is a session as it stands: its transcript (with the partial
// text of a run in flight in this host) and its status. The live progress
// that follows it starts after Cursor.
type Snapshot struct {
	Transcript ledger.Transcript `json:"transcript"`
	Status     Status            `json:"status"`
	Cursor     Cursor            `json:"cursor"`
}

// Update is what an [Attachment] reads next: a Snapshot, or one Progress
// event of the session's run in flight.
type Update struct {
	Snapshot *Snapshot
	Progress *Progress
}

// Attachment follows a session for a viewer (see [Session.Attach]). It is
// meant for one goroutine; Close it when done.
type Attachment struct {
	s  *Session
	st *sessionState

	cursor   Cursor
	resume   bool // the first Next may go on after cursor without a snapshot
	snapshot bool // the next Next is a snapshot
	run      *run // the run whose progress sub reads
	sub      *hub.Sub[event]
	seen     int // the ledger's length at the last snapshot
	remote   <-chan struct{}
	pollAt   time.Time // when wait looks at the storage again, without remote
	stop     func()
	closed   bool
}

// attachPoll paces the look for other processes' appends to a session when
// the storage cannot watch sessions (storage.Watcher).
const attachPoll = time.Second

// Attach follows the session: Next returns a Snapshot of it first, then
// the Progress of its run in flight in this host, event by event, then —
// when that run has ended and another starts, or the ledger changes
// otherwise (a run on another host records a step, a decision) — a new
// Snapshot, and so on until ctx passed to Next ends or the host closes.
//
// after resumes an attachment that broke off: when it names the run in
// flight here, Attach subscribes to that run's progress at once, and Next
// goes on with the events after the cursor, without a snapshot — all of
// them, even if the run ends before the first Next — so that a viewer
// that reconnects gets no character twice and misses none; otherwise (the
// run ended before Attach, or runs elsewhere) it starts with a snapshot.
// The zero Cursor starts with a snapshot.
//
// A run another host leads shows as snapshots, one per change to the
// ledger: its live text streams only on the host that runs it.
func (s *Session) Attach(ctx context.Context, after Cursor) (*Attachment, error) {
	if s.private != nil {
		return nil, errors.New("host: a task that is not durable cannot be attached to")
	}
	st, err := s.h.ref(s)
	if err != nil {
		return nil, err
	}
	a := &Attachment{s: s, st: st, cursor: after, resume: after.RunID != "", snapshot: true, stop: func() {}}
	// Resuming in the run in flight subscribes now, not at the first
	// Next: a run that ends in between still streams what it published
	// after the cursor, rather than a snapshot of its end.
	st.mu.Lock()
	if a.resumeLocked(st.cur) {
		a.snapshot = false
	}
	st.mu.Unlock()
	if st.watcher != nil {
		wctx, cancel := context.WithCancel(context.Background())
		if ch, err := st.watcher.Watch(wctx, s.id); err == nil {
			a.remote, a.stop = ch, cancel
		} else {
			cancel()
		}
	}
	return a, nil
}

// Cursor returns the point the attachment has read up to: give it to
// Attach to go on from there.
func (a *Attachment) Cursor() Cursor { return a.cursor }

// SessionID is the id of the session the attachment follows.
func (a *Attachment) SessionID() string { return a.s.ID() }

// Close ends the attachment. Closing twice does nothing.
func (a *Attachment) Close() {
	if a.closed {
		return
	}
	a.closed = true
	if a.sub != nil {
		a.sub.Close()
	}
	a.stop()
	a.s.h.unref(a.st)
}

// Next returns the next update, waiting for one. It returns ctx.Err() when
// ctx ends, [ErrClosed] when the host closes, and [ErrSlowSubscriber] when
// the viewer fell too far behind the run's progress (attach again with
// Cursor to go on).
func (a *Attachment) Next(ctx context.Context) (Update, error) {
	u, _, err := a.NextOrWake(ctx, nil)
	return u, err
}

// NextOrWake is Next that also returns, with woke true and no update,
// when wake fires while it waits for one — only while it waits: a
// snapshot it is taking is finished and returned, so that no update is
// ever lost to the wake. A relay that must also write heartbeats or paced
// text at set times reads with it, on one goroutine.
//
// A snapshot that fails (the storage, ctx ending in the middle) leaves the
// attachment as it was: the next call takes the snapshot again.
func (a *Attachment) NextOrWake(ctx context.Context, wake <-chan time.Time) (u Update, woke bool, err error) {
	h := a.s.h
	if a.closed {
		return Update{}, false, io.EOF
	}
	if u, ok := a.TryNext(); ok { // no wait: no context to watch
		return u, false, nil
	}
	// The run's progress is waited for with the host's end beside ctx; a
	// snapshot and a wait for a change take a context that ends with
	// either, made when one is needed (once a run, not once an event).
	outer := ctx
	var cancel context.CancelCauseFunc
	defer func() {
		if cancel != nil {
			cancel(nil)
		}
	}()
	for {
		if a.sub != nil {
			e, seq, woke, err := a.sub.NextOrWake(outer, h.bg.Done(), ErrClosed, wake)
			switch {
			case woke:
				return Update{}, true, nil
			case err == nil:
				return a.progressAt(e, seq), false, nil
			case errors.Is(err, io.EOF):
				// The run ended; its run-end was read. Wait for the next
				// change.
				a.sub.Close()
				a.sub, a.run = nil, nil
				a.seen = -1 // whatever comes next is news
			case errors.Is(err, hub.ErrDropped):
				a.sub.Close()
				a.sub, a.run = nil, nil
				return Update{}, false, ErrSlowSubscriber
			default:
				return Update{}, false, err
			}
		}
		if cancel == nil {
			ctx, cancel = context.WithCancelCause(outer)
			stop := context.AfterFunc(h.bg, func() { cancel(ErrClosed) })
			defer stop()
		}
		if a.snapshot {
			snap, err := a.take(ctx)
			if err != nil {
				return Update{}, false, stopped(ctx, err)
			}
			a.snapshot = false
			if snap != nil {
				return Update{Snapshot: snap}, false, nil
			}
			continue // resumed after the cursor, or nothing new
		}
		switch woke, err := a.wait(ctx, wake); {
		case err != nil:
			return Update{}, false, stopped(ctx, err)
		case woke:
			return Update{}, true, nil
		}
		a.snapshot = true
	}
}

// TryNext returns the next progress event of the run in flight when one
// is there to read, without waiting; ok is false when Next would have to
// wait or has something else to tell (a snapshot, the run's end, an
// error). A relay that writes what is ready before it flushes reads with
// Next, then with TryNext until it returns false.
func (a *Attachment) TryNext() (u Update, ok bool) {
	if a.closed || a.sub == nil {
		return Update{}, false
	}
	e, seq, ok := a.sub.TryNext()
	if !ok {
		return Update{}, false
	}
	return a.progressAt(e, seq), true
}

// progressAt is the update of the followed run's event e at seq, the
// cursor moved past it. It is a call of its own so that its copies of the
// event stay out of NextOrWake's frame, which an idle viewer's stack
// holds while it waits (see server's BenchmarkIdleViewers).
//
//go:noinline
func (a *Attachment) progressAt(e event, seq int) Update {
	p := a.run.progress(e, seq)
	a.cursor = Cursor{RunID: a.run.id, Seq: seq}
	return Update{Progress: &p}
}

// resumeLocked subscribes to the progress of r after the cursor when the
// attachment resumes in it (r, the run in flight, may be nil), and reports
// whether it did. st.mu is held.
func (a *Attachment) resumeLocked(r *run) bool {
	if !a.resume || r == nil || a.cursor.RunID != r.id || a.cursor.Seq > r.hub.Len() {
		return false
	}
	a.resume = false
	a.run, a.sub = r, r.hub.Subscribe(a.cursor.Seq)
	return true
}

// stopped returns ErrClosed when ctx ended because the host closed, else
// err.
func stopped(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), ErrClosed) {
		return ErrClosed
	}
	return err
}

// take takes a snapshot, and subscribes to the progress of the run in
// flight that follows it — both at one instant, under the session's lock,
// so that the snapshot's partial text ends where the progress after its
// cursor begins. It returns nil (and subscribes after the cursor) when the
// attachment resumes in the run in flight, and nil when nothing changed
// since the last snapshot.
func (a *Attachment) take(ctx context.Context) (snap *Snapshot, err error) {
	st := a.st
	var events []ledger.Event
	var view *ledger.Snapshot // the snapshot the run's events are a view of
	var live []ledger.Live
	var cursor Cursor
	st.mu.Lock()
	if r := st.cur; r != nil {
		if a.resumeLocked(r) {
			st.mu.Unlock()
			return nil, nil
		}
		seq := r.hub.Len()
		events, view = r.events[:len(r.events):len(r.events)], r.snap
		live = []ledger.Live{{RunID: r.id, ResponseID: r.live.responseID, Text: string(r.live.text), Reasoning: string(r.live.reasoning)}}
		cursor = Cursor{RunID: r.id, Seq: seq}
		a.run, a.sub = r, r.hub.Subscribe(seq)
	}
	st.mu.Unlock()
	defer func() {
		if err != nil && a.sub != nil {
			// No snapshot: no progress after it either, until the next
			// take subscribes again.
			a.sub.Close()
			a.sub, a.run = nil, nil
		}
	}()
	a.resume = false
	if view != nil {
		// The run's view of a snapshot: the whole ledger up to its end.
		if events, err = a.s.h.wholeOf(ctx, a.s.id, events, view); err != nil {
			return nil, err
		}
	}
	if events == nil {
		if events, err = st.store.Load(ctx, a.s.id); err != nil {
			return nil, err
		}
		if len(events) == a.seen {
			return nil, nil // woken, but the ledger did not change
		}
	}
	status, err := a.s.statusOf(ctx, events, live)
	if err != nil {
		return nil, err
	}
	seen := len(events)
	// The transcript carries the bytes of the parts and tool outputs kept
	// by reference.
	if events, err = ResolveBlobs(ctx, st.store, events); err != nil {
		return nil, err
	}
	a.seen, a.cursor = seen, cursor
	return &Snapshot{Transcript: ledger.ProjectSession(a.s.id, events, live...), Status: status, Cursor: cursor}, nil
}

// wait waits for the session to change: a run goes live in this host, or
// (another host's, or another process's) appends reach the storage; or
// for wake, and then reports woke.
func (a *Attachment) wait(ctx context.Context, wake <-chan time.Time) (woke bool, err error) {
	a.st.mu.Lock()
	if a.st.cur != nil {
		a.st.mu.Unlock()
		return false, nil
	}
	changed := a.st.changedLocked()
	a.st.mu.Unlock()
	var poll <-chan time.Time
	if a.remote == nil {
		// The look is paced from the first wait on, however often a wake
		// cuts the waits short.
		if a.pollAt.IsZero() {
			a.pollAt = time.Now().Add(attachPoll)
		}
		t := time.NewTimer(time.Until(a.pollAt))
		defer t.Stop()
		poll = t.C
	}
	select {
	case <-changed:
	case _, ok := <-a.remote:
		if !ok {
			a.remote = nil
		}
	case <-poll:
		a.pollAt = time.Time{}
	case <-wake:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return false, nil
}
