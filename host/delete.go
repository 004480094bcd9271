package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// InUseError is why [Session.Delete] refused a session: nothing was
// deleted. It matches [ErrSessionInUse].
type InUseError struct {
	SessionID string
	// State is the session's: StateRunning (a run in flight here, or a
	// host holds the session's lease) or StateApprovalRequired.
	State State
	// RunID is the run concerned, when the ledger names one.
	RunID string
	// Holder is the lease's holder, when a host holds it and the storage
	// tells.
	Holder string
	// Approvals counts the requests a parked run waits on.
	Approvals int
}

// Error says what holds the session.
func (e *InUseError) Error() string {
	switch {
	case e.State == StateApprovalRequired:
		return fmt.Sprintf("host: session %s waits for %d approval decision(s) (run %s): decide or cancel them first, or force the deletion", e.SessionID, e.Approvals, e.RunID)
	case e.Holder != "":
		return fmt.Sprintf("host: the lease of session %s is held by %s (a run in progress on that host): cancel it first, or force the deletion", e.SessionID, e.Holder)
	default:
		return fmt.Sprintf("host: a run of session %s is in progress (run %s): cancel it first, or force the deletion", e.SessionID, e.RunID)
	}
}

// Unwrap returns [ErrSessionInUse].
func (e *InUseError) Unwrap() error { return ErrSessionInUse }

// DeleteOptions tunes [Session.Delete].
type DeleteOptions struct {
	// Force deletes the session even while it is in use: a run in
	// flight in this host is cancelled first, and waited for within
	// ctx; a run parked for approvals goes with the session; a run
	// another host leads loses its lease with the session (so that its
	// next fenced append fails) — on a storage without leases, that
	// host's next append starts a new ledger under the id. Default
	// false: a session in use is refused with an [*InUseError].
	Force bool
	// KeepBlobs leaves the blobs the session referred to in place, for a
	// caller that deletes many sessions and then removes their blobs with
	// one SweepBlobs (finding which no other session refers to reads
	// every session's ledger). Default false: they go with the session.
	KeepBlobs bool
}

// DeleteReport tells what [Session.Delete] removed.
type DeleteReport struct {
	SessionID string `json:"session_id"`
	// Events is how many events the session's ledger held (0 when it
	// held none, or was damaged past loading).
	Events int `json:"events"`
	// Bytes is their size in the ledger's encoding.
	Bytes int64 `json:"bytes"`
	// IndexEntries is how many entries of the host's indexes beside the
	// ledger (the inbox of pending approvals, the approvals' sessions)
	// named the session and were removed.
	IndexEntries int `json:"index_entries"`
	// Blobs is how many blobs the session's events referred to that no
	// other session of the storage refers to, and were removed with it;
	// BlobBytes is their size.
	Blobs     int   `json:"blobs"`
	BlobBytes int64 `json:"blob_bytes"`
}

// deleteLeaseTTL bounds the lease Delete holds while it deletes.
const deleteLeaseTTL = 30 * time.Second

// Delete removes the session from the host's storage: its ledger, its
// lease, and the entries the host keeps about it beside the ledger (the
// inbox of pending approvals). It refuses, with an [*InUseError] and
// nothing deleted, a session whose run is in flight in this host, parked
// for approvals, or led by another host (which holds its lease), unless
// opts.Force. On a storage shared by several hosts it takes the session's
// lease while it deletes, so that no host starts a run meanwhile.
// Deleting a session that has no events removes what is left of it and
// reports 0 events. The blobs its events referred to go with it, but for
// those another session of the storage refers to, or that were put again
// while Delete looked for such sessions (it reads every session's
// references: [SweepBlobs] with Only). The storage must implement
// storage.Deleter.
func (s *Session) Delete(ctx context.Context, opts DeleteOptions) (DeleteReport, error) {
	h := s.h
	rep := DeleteReport{SessionID: s.id}
	del, ok := h.store.(storage.Deleter)
	if !ok {
		return rep, fmt.Errorf("host: deleting a session needs a storage that deletes sessions (storage.Deleter); %T does not", h.store)
	}
	if !storage.ValidSessionID(s.id) {
		return rep, fmt.Errorf("%w: session id %q", ErrInvalidInput, s.id)
	}
	st, err := h.ref(&Session{h: h, id: s.id})
	if err != nil {
		return rep, err
	}
	defer h.unref(st)
	if opts.Force && h.IsRunning(s.id) && h.Cancel(s.id, "the session is being deleted") {
		if err := st.waitIdle(ctx); err != nil {
			return rep, fmt.Errorf("host: delete session %s: waiting for its run to stop: %w", s.id, err)
		}
	}
	st.appendMu.Lock()
	defer st.appendMu.Unlock()
	st.mu.Lock()
	busy := st.busy
	st.mu.Unlock()
	events, err := h.store.Load(ctx, s.id)
	if err != nil && !errors.Is(err, storage.ErrCorrupt) {
		return rep, fmt.Errorf("host: delete session %s: %w", s.id, err)
	}
	if !opts.Force {
		status, err := s.statusOf(ctx, events, nil)
		if err != nil {
			return rep, err
		}
		switch {
		case busy:
			return rep, &InUseError{SessionID: s.id, State: StateRunning, RunID: status.RunID}
		case status.State == StateApprovalRequired:
			return rep, &InUseError{SessionID: s.id, State: status.State, RunID: status.RunID, Approvals: len(status.Approvals)}
		case status.State == StateRunning:
			return rep, &InUseError{SessionID: s.id, State: status.State, RunID: status.RunID, Holder: status.Holder}
		}
	}
	if h.leaser != nil {
		_, err := h.leaser.AcquireLease(ctx, s.id, "delete-"+randomToken(), deleteLeaseTTL)
		if held, ok := errors.AsType[*storage.LeaseHeldError](err); ok && !opts.Force {
			return rep, &InUseError{SessionID: s.id, State: StateRunning, Holder: held.Holder}
		}
		if err != nil && !errors.Is(err, storage.ErrLeaseHeld) {
			return rep, fmt.Errorf("host: delete session %s: %w", s.id, err)
		}
		// The lease goes with the session.
	}
	if err := del.DeleteSession(ctx, s.id); err != nil {
		return rep, fmt.Errorf("host: delete session %s: %w", s.id, err)
	}
	rep.Events = len(events)
	for _, e := range events {
		if b, err := ledger.Encode(e); err == nil {
			rep.Bytes += int64(len(b))
		}
	}
	n, err := h.unindexSession(ctx, s.id, events)
	rep.IndexEntries = n
	if err != nil {
		return rep, fmt.Errorf("host: session %s is deleted, but not every index entry of it: %w (deleting it again removes them)", s.id, err)
	}
	if refs := ledger.BlobRefs(events); len(refs) > 0 && !opts.KeepBlobs {
		if _, ok := h.store.(storage.Blobs); ok {
			swept, err := SweepBlobs(ctx, h.store, BlobSweepOptions{Grace: -1, Only: refs})
			rep.Blobs, rep.BlobBytes = swept.Deleted, swept.DeletedBytes
			if err != nil {
				return rep, fmt.Errorf("host: session %s is deleted, but not every blob it referred to: %w (a sweep of unreferenced blobs removes them)", s.id, err)
			}
		}
	}
	return rep, nil
}

// waitIdle waits until no run owns the session.
func (st *sessionState) waitIdle(ctx context.Context) error {
	return st.waitUntil(ctx, func() bool { return !st.busy })
}

// unindexSession removes the session's entries from the inbox and the
// approvals' sessions, and returns how many there were.
func (h *Host) unindexSession(ctx context.Context, id string, events []ledger.Event) (int, error) {
	if h.approvalKV == nil {
		return 0, nil
	}
	n := 0
	var errs []error
	keys, err := h.approvalKV.Keys(ctx, h.approvalIndex())
	errs = append(errs, err)
	for _, k := range keys {
		if strings.HasPrefix(k, id+"/") {
			if err := h.approvalKV.Delete(ctx, h.approvalIndex(), k); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	for _, e := range events {
		if e.ApprovalRequest == nil {
			continue
		}
		aid := e.ApprovalRequest.ApprovalID
		v, ok, err := h.approvalKV.Get(ctx, approvalSessions, aid)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok && string(v) == id {
			if err := h.approvalKV.Delete(ctx, approvalSessions, aid); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}

// randomToken returns 16 random hex digits.
func randomToken() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
