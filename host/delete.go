package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// InUseError is why [Session.Delete] refused a session: nothing was
// deleted. It matches [ErrSessionInUse].
type InUseError struct {
	SessionID string
	// State is the session's: StateRunning (a run in flight here, or a
	// host holds the session's lease), StateApprovalRequired or
	// StateWaiting.
	State State
	// RunID is the run concerned, when the ledger names one.
	RunID string
	// Holder is the lease's holder, when a host holds it and the storage
	// tells.
	Holder string
	// Approvals counts the requests a parked run waits on; Waits the
	// waits of its calls.
	Approvals, Waits int
}

// Error says what holds the session.
func (e *InUseError) Error() string {
	switch {
	case e.State == StateApprovalRequired:
		return fmt.Sprintf("host: session %s waits for %d approval decision(s) (run %s): decide or cancel them first, or force the deletion", e.SessionID, e.Approvals, e.RunID)
	case e.State == StateWaiting:
		return fmt.Sprintf("host: a run of session %s waits (run %s, %d call(s) waiting for an event or a time): post the event, or cancel the run first, or force the deletion", e.SessionID, e.RunID, e.Waits)
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
	// Check, when set, is called with the session held (after the checks
	// above, before anything is deleted) and its ledger as it will be
	// deleted: an error it returns refuses the deletion, and Delete
	// returns it as it is. A retention sweep checks its own rules there,
	// and writes the archive of exactly what it deletes. Default: nil.
	Check func(ctx context.Context, events []ledger.Event) error
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

// Delete removes the session from the host's storage: its ledger, its
// lease, and the entries the host keeps about it beside the ledger (the
// inbox of pending approvals). It holds the session as every operation
// that removes data does (see docs/architecture.md, "Removing data"): it
// refuses, with an [*InUseError] and nothing deleted, a session whose run
// is in flight in this host, parked for approvals, or led by another host
// (which holds its lease), unless opts.Force; and, forced or not, it
// deletes only the ledger it checked: a session appended to meanwhile (a
// message another host queued) refuses with [ErrSessionChanged], nothing
// deleted. Deleting a session that has no events removes what is left of
// it and reports 0 events. The blobs its events referred to go with it,
// but for those another session of the storage refers to, or that a
// writer holds (it reads every session's references: [SweepBlobs] with
// Only). The storage must implement storage.Deleter.
func (s *Session) Delete(ctx context.Context, opts DeleteOptions) (DeleteReport, error) {
	h := s.h
	rep := DeleteReport{SessionID: s.id}
	if _, ok := h.store.(storage.Deleter); !ok {
		return rep, fmt.Errorf("host: deleting a session needs a storage that deletes sessions (storage.Deleter); %T does not", h.store)
	}
	hd, err := s.hold(ctx, "delete", opts.Force)
	if err != nil {
		return rep, err
	}
	defer hd.release()
	events := hd.events
	if opts.Check != nil {
		if err := opts.Check(ctx, events); err != nil {
			return rep, err
		}
	}
	if err := hd.replace(ctx, nil); err != nil {
		return rep, fmt.Errorf("host: delete session %s: %w", s.id, err)
	}
	rep.Events = len(events)
	for _, e := range events {
		if b, err := ledger.Encode(e); err == nil {
			rep.Bytes += int64(len(b))
		}
	}
	n, err := h.unindexSession(ctx, s.id, events)
	if w, werr := h.forgetWaits(ctx, s.id); werr != nil || w > 0 {
		n += w
		err = errors.Join(err, werr)
	}
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
