package host

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// The session table and the locks of a session.
//
// The host keeps one sessionState per session in use, in its table
// (Host.sessions, guarded by Host.mu). Lock order, outermost first:
//
//  1. sessionState.appendMu: serialises the session's ledger appends and
//     the decisions that must not interleave with them (queue a message
//     into the run in flight, or lead a run; end the run, or go on to
//     answer a message queued meanwhile). It is the only lock held
//     across storage I/O.
//  2. sessionState.mu: the session's in-memory state (the run in flight,
//     its view of the ledger, its live item, its waiters, whether the
//     session is claimed). Never held across I/O, a model call, a tool
//     call or a callback.
//  3. the run's progress hub (host/internal/hub), and a deltaSink's mu
//     (taken before sessionState.mu, which it takes briefly): leaves.
//
// Host.mu guards the table and the host's closed flag only; it is a leaf:
// nothing else is locked while it is held. A Run handle's mu is held while
// it (re-)enters the session, and so comes before appendMu.

// sessionKey names a session in the host's table: its id, and whether it
// is kept in a private store (a task that is not durable) rather than the
// host's storage.
type sessionKey struct {
	id      string
	private bool
}

// sessionState is the in-process state of one session.
type sessionState struct {
	key   sessionKey
	store storage.Storage // the host's, or a private one
	// leaser and watcher are the store's capabilities when it is shared
	// with other hosts; nil for a private store.
	leaser  storage.Leaser
	watcher storage.Watcher
	stale   atomic.Bool // another host may have appended to the session

	// appendMu serialises the session's appends, and the decisions that
	// must not interleave with them: whether a send queues into the run
	// in flight, whether that run may end. It is taken before mu.
	appendMu sync.Mutex

	refs int // users of the state; guarded by Host.mu

	// mu guards the session's in-memory state: the run in flight and what
	// it holds (its view of the ledger, its live item, its waiters). It is
	// never held across I/O, a model call or a tool call.
	mu sync.Mutex
	// busy is set while a run (or a resume setting one up) owns the
	// session: runs of a session never overlap.
	busy    bool
	cur     *run          // the run in flight, if any
	changed chan struct{} // closed when cur or busy changes; nil when no one waits (see changedLocked)
	// parts are the senders that asked for the model's raw stream
	// (SendOptions.OnPart) while they wait, by a number of their own.
	parts    map[int]func(ModelPart)
	nextPart int
}

// listenParts adds a listener of the raw model stream of the session's
// passes in this host; the returned function removes it.
func (st *sessionState) listenParts(f func(ModelPart)) (stop func()) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.parts == nil {
		st.parts = map[int]func(ModelPart){}
	}
	st.nextPart++
	n := st.nextPart
	st.parts[n] = f
	return func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		delete(st.parts, n)
	}
}

// partListeners returns the listeners of the raw model stream.
func (st *sessionState) partListeners() []func(ModelPart) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.parts) == 0 {
		return nil
	}
	out := make([]func(ModelPart), 0, len(st.parts))
	for _, f := range st.parts {
		out = append(out, f)
	}
	return out
}

// ref returns the state of the session s names, creating it, and counts
// the user.
func (h *Host) ref(s *Session) (*sessionState, error) {
	key := sessionKey{s.id, s.private != nil}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	st := h.sessions[key]
	if st == nil {
		st = &sessionState{key: key, store: h.store, leaser: h.leaser, watcher: h.watcher}
		if s.private != nil {
			st.store, st.leaser, st.watcher = s.private, nil, nil
		}
		h.sessions[key] = st
	} else if s.private != nil && st.store != s.private {
		return nil, fmt.Errorf("%w: session %s is held by another task that is not durable", ErrInvalidInput, s.id)
	}
	st.refs++
	h.wg.Add(1)
	return st, nil
}

// adopt counts one more user of a state already in use, such as a run
// started for it, even once the host is closed.
func (h *Host) adopt(st *sessionState) {
	h.mu.Lock()
	st.refs++
	h.wg.Add(1)
	h.mu.Unlock()
}

// unref forgets the session's state when no one uses it any more.
func (h *Host) unref(st *sessionState) {
	h.mu.Lock()
	st.refs--
	if st.refs == 0 {
		delete(h.sessions, st.key)
	}
	h.mu.Unlock()
	h.wg.Done()
}

// states returns the states of the sessions named id in the table: the one
// in the host's storage and the private one, as far as they exist.
func (h *Host) states(id string) []*sessionState {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*sessionState
	for _, private := range []bool{false, true} {
		if st := h.sessions[sessionKey{id, private}]; st != nil {
			out = append(out, st)
		}
	}
	return out
}

// notifyLocked wakes the goroutines waiting for the session to change.
// st.mu must be held.
func (st *sessionState) notifyLocked() {
	if st.changed != nil {
		close(st.changed)
		st.changed = nil
	}
}

// changedLocked returns a channel closed at the session's next change.
// st.mu must be held.
func (st *sessionState) changedLocked() <-chan struct{} {
	if st.changed == nil {
		st.changed = make(chan struct{})
	}
	return st.changed
}

// waitUntil waits until done, called with st.mu held, reports true; it
// looks again at each change of the session.
func (st *sessionState) waitUntil(ctx context.Context, done func() bool) error {
	for {
		st.mu.Lock()
		if done() {
			st.mu.Unlock()
			return nil
		}
		ch := st.changedLocked()
		st.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// claim takes the session for a caller that means to start a run: it sets
// busy when no run owns the session, or returns the run in flight when one
// works (not ending); otherwise (a run is ending, or a resume sets one up)
// it waits for the session to change and looks again. ctx bounds the
// waiting. With holdAppend, each look is made with appendMu held too, and
// claim returns (without error) with appendMu still held.
func (st *sessionState) claim(ctx context.Context, holdAppend bool) (*run, error) {
	for {
		if holdAppend {
			st.appendMu.Lock()
		}
		st.mu.Lock()
		if cur := st.cur; cur != nil && !cur.ending {
			st.mu.Unlock()
			return cur, nil
		}
		if !st.busy {
			st.busy = true
			st.mu.Unlock()
			return nil, nil
		}
		changed := st.changedLocked()
		st.mu.Unlock()
		if holdAppend {
			st.appendMu.Unlock()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// free gives the session back once no run owns it, and wakes the waiting
// senders.
func (st *sessionState) free() {
	st.mu.Lock()
	st.busy = false
	st.notifyLocked()
	st.mu.Unlock()
}

// snapshotLive returns a consistent copy of the run in flight of a session,
// if any: its events (the view of snap, when not nil: see wholeOf) and the
// pass streaming.
func (h *Host) snapshotLive(id string) ([]ledger.Event, *ledger.Snapshot, ledger.Live, bool) {
	h.mu.Lock()
	st := h.sessions[sessionKey{id, false}]
	h.mu.Unlock()
	if st == nil {
		return nil, nil, ledger.Live{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	r := st.cur
	if r == nil {
		return nil, nil, ledger.Live{}, false
	}
	// The ledger is append-only: the slice up to its length never changes.
	return r.events[:len(r.events):len(r.events)], r.snap,
		ledger.Live{RunID: r.id, ResponseID: r.live.responseID, Text: string(r.live.text), Reasoning: string(r.live.reasoning)}, true
}
