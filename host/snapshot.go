package host

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Snapshots: a long session is answered and resumed from a view of its
// ledger (a storage.Snapshotter's snapshot, a ledger.Snapshot, and the
// events after it), not from the whole ledger. A run whose events are such
// a view holds its snapshot (run.snap); what reads the whole session
// (transcripts, usage, attachments, forks) rebuilds it from storage
// (wholeOf). Requests, messages and tool call ids the view does not hold
// but the snapshot may are looked for in the whole ledger. The host writes
// a snapshot when a compaction leaves a cut (ledger.SnapshotCut) past the
// last snapshot's, and when it had to load a whole ledger that has a cut
// (no snapshot yet, or one the store or the host passed over: damaged,
// stale, of another version) — under the session's lease, but for the
// boot sweep's look: a snapshot needs no fence, since it stands for events
// of the ledger, whose appends are fenced, and every load checks it
// against the ledger.

// loadView loads the session's ledger for answering or resuming: the view
// of its snapshot when the store keeps one this host can use, else the
// whole ledger (snap nil). A snapshot that does not decode, uses features
// this host does not read, or whose view may hold a second copy of a
// message before it (ledger.Snapshot.Suffices) is passed over for the
// whole ledger. Whenever the whole ledger was read for want of a usable
// snapshot, a new one is kept from it, when it has a cut.
func (h *Host) loadView(ctx context.Context, st *sessionState) ([]ledger.Event, *ledger.Snapshot, error) {
	sn, ok := st.store.(storage.Snapshotter)
	if !ok || h.noSnapshots {
		events, err := st.store.Load(ctx, st.key.id)
		return events, nil, err
	}
	data, at, tail, err := sn.LoadSnapshot(ctx, st.key.id)
	if errors.Is(err, errors.ErrUnsupported) {
		events, err := st.store.Load(ctx, st.key.id)
		return events, nil, err
	}
	if err != nil {
		return nil, nil, err
	}
	if data == nil {
		// No snapshot (or none the store could use).
		h.snapshotFrom(ctx, st, tail, nil)
		return tail, nil, nil
	}
	snap, err := ledger.DecodeSnapshot(data)
	rebuild := true
	switch {
	case err != nil:
		h.log.Warn("a session's snapshot does not decode; loading the whole ledger, and keeping a new one", "session", st.key.id, "err", err)
	case snap.Through != at:
		h.log.Warn("a session's snapshot names another event than the store's; loading the whole ledger, and keeping a new one", "session", st.key.id,
			"snapshot", snap.Through, "store", at)
	case slices.ContainsFunc(snap.Features(), func(f ledger.Feature) bool { return !slices.Contains(h.reads, f) }):
		// (The snapshot's features are those of every event it stands
		// for, its carried ones among them.)
		// The whole ledger says what this host cannot read; a host that
		// can keeps the snapshots.
		rebuild = false
	default:
		view := snap.View(tail)
		if snap.Suffices(view) {
			return view, snap, nil
		}
		// A message the view shows pending may be a second copy of one
		// before the snapshot: the whole ledger tells.
		rebuild = false
	}
	events, err := st.store.Load(ctx, st.key.id)
	if err == nil && rebuild {
		h.snapshotFrom(ctx, st, events, nil)
	}
	return events, nil, err
}

// wholeOf returns the whole ledger of which events is the view of snap
// (nil: events is whole), up to the view's last event: as the ledger was
// when the view was read, whatever was appended since.
func (h *Host) wholeOf(ctx context.Context, id string, events []ledger.Event, snap *ledger.Snapshot) ([]ledger.Event, error) {
	if snap == nil {
		return events, nil
	}
	all, err := h.store.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	last := snap.Through
	if n := len(events); n > len(snap.Carry) {
		last = events[n-1].ID
	}
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].ID == last {
			return all[: i+1 : i+1], nil
		}
	}
	return nil, fmt.Errorf("host: session %s: the ledger no longer holds event %s of the run's view (replaced under the run?)", id, last)
}

// requestSeenIn is requestSeen over events, the view of snap (nil: the
// whole ledger): a request id the snapshot may hold is looked for in the
// whole ledger (a copy before the snapshot answers for the view's).
func (h *Host) requestSeenIn(ctx context.Context, id string, events []ledger.Event, snap *ledger.Snapshot, requestID string) (string, RunResult, bool, error) {
	if snap != nil && requestID != "" && snap.MayHoldRequest(requestID) {
		all, err := h.wholeOf(ctx, id, events, snap)
		if err != nil {
			return "", RunResult{}, false, err
		}
		events = all
	}
	msgID, res, done := requestSeen(events, requestID)
	return msgID, res, done, nil
}

// resultForIn is resultFor over events, the view of snap: a message the
// view does not hold, or whose request id the snapshot may hold, is looked
// for in the whole ledger.
func (h *Host) resultForIn(ctx context.Context, id string, events []ledger.Event, snap *ledger.Snapshot, msgID string) (RunResult, bool, error) {
	if snap != nil {
		i := slices.IndexFunc(events, func(e ledger.Event) bool { return e.Input != nil && e.Input.MessageID == msgID })
		if i < 0 || (events[i].Input.RequestID != "" && snap.MayHoldRequest(events[i].Input.RequestID)) {
			all, err := h.wholeOf(ctx, id, events, snap)
			if err != nil {
				return RunResult{}, false, err
			}
			events = all
		}
	}
	res, ok := resultFor(events, msgID)
	return res, ok, nil
}

// snapshotFrom keeps a new snapshot of the session, whose events (the view
// of snap, or the whole ledger when snap is nil) the caller read under the
// session's lease, when they leave a cut past snap's. A failure is
// logged: the next load reads more, nothing else.
func (h *Host) snapshotFrom(ctx context.Context, st *sessionState, events []ledger.Event, snap *ledger.Snapshot) {
	sn, ok := st.store.(storage.Snapshotter)
	if !ok || h.noSnapshots || st.key.private {
		return
	}
	base := 0
	if snap != nil {
		base = len(snap.Carry)
	}
	cut := ledger.SnapshotCut(events)
	if cut <= base {
		return
	}
	next, err := ledger.NewSnapshot(snap, events, base, cut)
	if err == nil {
		var data []byte
		if data, err = ledger.EncodeSnapshot(next); err == nil {
			err = sn.PutSnapshot(ctx, st.key.id, next.Through, data)
		}
	}
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return
	case errors.Is(err, storage.ErrSnapshotPoint):
		// The last compaction is further back than the store looks (a
		// session of many small events since): the next compaction's
		// cut is near the end.
		h.log.Debug("no snapshot of the session: its cut is too far back", "session", st.key.id, "err", err)
		return
	case err != nil:
		h.log.Warn("cannot keep a snapshot of the session; its loads read more", "session", st.key.id, "err", err)
		return
	}
	h.log.Debug("kept a snapshot of the session", "session", st.key.id, "through", next.Through, "events", next.Events, "carried", len(next.Carry))
}
