package host

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Removing data: the one rule.
//
// Every operation that removes or replaces a session's data (a deletion, an
// import that replaces a session, a retention sweep; a tenant's deletion
// and a sweep of blobs keep the same rule at the storage's level) holds the
// session from its check to its last write, and acts only on what it
// checked:
//
//  1. it takes the session's appendMu, so that no send, run or resume of
//     this host appends meanwhile (they wait, then find the result);
//  2. it takes the session's lease, when the storage has leases, so that
//     no other host leads a run meanwhile (a session another host leads
//     is in use, and refused);
//  3. it reads the session's version (storage.Fencer), then its ledger,
//     and checks them (in use? changed? old enough?);
//  4. it removes or replaces the ledger with Fencer.ReplaceSession, which
//     refuses a session whose version changed since step 3: a message
//     another host queued meanwhile (which a lease does not refuse) keeps
//     the session, and the operation fails with ErrSessionChanged (409 in
//     the API; a sweep skips the session).
//
// So a message answered 202 is either in the ledger the operation checked
// (and removed with it, as asked), or appended after the act (to a new
// ledger), or it makes the operation refuse: never lost. Blobs follow the
// same rule through storage.BlobFence (see SweepBlobs and HoldBlobs).

// fenceLeaseTTL bounds the lease an operation holds while it removes or
// replaces a session.
const fenceLeaseTTL = 30 * time.Second

// held is a session held for an operation that removes or replaces its
// data: its ledger and version as checked.
type held struct {
	s       *Session
	st      *sessionState
	lease   storage.Lease
	owner   string
	version string
	events  []ledger.Event
	corrupt error // the ledger did not load (storage.ErrCorrupt): events is empty
}

// hold takes the session for op (its name, for the lease's owner): see the
// rule above. Unless force, it refuses with an [*InUseError] a session
// whose run is in flight here, parked for approvals, or led by another
// host; with force, a run in flight here is cancelled and waited for
// first, and a lease another host holds is passed over. The caller must
// call release.
func (s *Session) hold(ctx context.Context, op string, force bool) (*held, error) {
	h := s.h
	if !storage.ValidSessionID(s.id) {
		return nil, fmt.Errorf("%w: session id %q", ErrInvalidInput, s.id)
	}
	st, err := h.ref(&Session{h: h, id: s.id})
	if err != nil {
		return nil, err
	}
	if force && h.IsRunning(s.id) && h.Cancel(s.id, "the session is being "+op+"d") {
		if err := st.waitIdle(ctx); err != nil {
			h.unref(st)
			return nil, fmt.Errorf("host: %s session %s: waiting for its run to stop: %w", op, s.id, err)
		}
	}
	st.appendMu.Lock()
	hd := &held{s: s, st: st}
	ok := false
	defer func() {
		if !ok {
			hd.release()
		}
	}()
	if h.leaser != nil {
		hd.owner = op + "-" + randomToken()
		lease, err := h.leaser.AcquireLease(ctx, s.id, hd.owner, fenceLeaseTTL)
		if held, isHeld := errors.AsType[*storage.LeaseHeldError](err); isHeld && !force {
			return nil, &InUseError{SessionID: s.id, State: StateRunning, Holder: held.Holder}
		}
		if err != nil && !errors.Is(err, storage.ErrLeaseHeld) {
			return nil, fmt.Errorf("host: %s session %s: %w", op, s.id, err)
		}
		hd.lease = lease
	}
	if f, isFencer := h.store.(storage.Fencer); isFencer {
		v, err := f.SessionVersion(ctx, s.id)
		if err != nil && !errors.Is(err, errors.ErrUnsupported) {
			return nil, fmt.Errorf("host: %s session %s: %w", op, s.id, err)
		}
		hd.version = v
	}
	hd.events, err = h.store.Load(ctx, s.id)
	if errors.Is(err, storage.ErrCorrupt) {
		hd.events, hd.corrupt = nil, err
	} else if err != nil {
		return nil, fmt.Errorf("host: %s session %s: %w", op, s.id, err)
	}
	if !force {
		st.mu.Lock()
		busy := st.busy
		st.mu.Unlock()
		status, err := s.statusOf(ctx, hd.events, nil)
		if err != nil {
			return nil, err
		}
		switch {
		case busy:
			return nil, &InUseError{SessionID: s.id, State: StateRunning, RunID: status.RunID}
		case status.State == StateApprovalRequired, status.State == StateWaiting:
			return nil, &InUseError{SessionID: s.id, State: status.State, RunID: status.RunID, Approvals: len(status.Approvals), Waits: len(status.Waits)}
		case status.State == StateRunning && status.Holder != hd.owner:
			return nil, &InUseError{SessionID: s.id, State: status.State, RunID: status.RunID, Holder: status.Holder}
		}
	}
	ok = true
	return hd, nil
}

// release gives the session back.
func (hd *held) release() {
	if hd.lease != nil {
		ctx, cancel := context.WithTimeout(context.Background(), hd.s.h.timeouts.LeaseRelease)
		hd.lease.Release(ctx)
		cancel()
	}
	hd.st.appendMu.Unlock()
	hd.s.h.unref(hd.st)
}

// replace puts events in place of the session's ledger, or deletes it
// (events nil), provided that the session is still as it was checked;
// otherwise it fails with ErrSessionChanged and changes nothing.
func (hd *held) replace(ctx context.Context, events iter.Seq2[ledger.Event, error]) error {
	h, id := hd.s.h, hd.s.id
	if events == nil {
		events = func(func(ledger.Event, error) bool) {}
	}
	events = h.writable(events)
	if f, ok := h.store.(storage.Fencer); ok {
		err := f.ReplaceSession(ctx, id, hd.version, events)
		switch {
		case errors.Is(err, storage.ErrSessionChanged):
			return fmt.Errorf("%w: session %s was appended to meanwhile (a message another host queued?): nothing was removed", ErrSessionChanged, id)
		case !errors.Is(err, errors.ErrUnsupported):
			return err
		}
	}
	// A storage without fences: check again, then act. A message another
	// host queues between the two is lost; the built-in stores all fence.
	now, err := h.store.Load(ctx, id)
	if err != nil && !errors.Is(err, storage.ErrCorrupt) {
		return err
	}
	if len(now) != len(hd.events) {
		return fmt.Errorf("%w: session %s was appended to meanwhile: nothing was removed", ErrSessionChanged, id)
	}
	del, ok := h.store.(storage.Deleter)
	if !ok {
		return fmt.Errorf("host: removing a session needs a storage that deletes sessions (storage.Deleter); %T does not", h.store)
	}
	var add []ledger.Event
	for e, err := range events {
		if err != nil {
			return err
		}
		add = append(add, e)
	}
	if err := del.DeleteSession(ctx, id); err != nil {
		return err
	}
	if len(add) > 0 {
		return h.store.Append(ctx, id, add...)
	}
	return nil
}

// ReplaceOptions tunes [Session.Replace].
type ReplaceOptions struct {
	// Existing allows replacing a session that has events, unless it is
	// in use. Default false: a session with events refuses with
	// [ErrSessionExists], and nothing changes.
	Existing bool
}

// ReplaceReport tells what [Session.Replace] did.
type ReplaceReport struct {
	// Replaced tells that the session had events, which the new ones
	// replaced.
	Replaced bool
	// Events is how many events the session holds now.
	Events int
}

// Replace puts events in place of the session's ledger, in one atomic step:
// an import. It holds the session as every operation that removes data
// does (see docs/architecture.md, "Removing data"): a session in use (a run
// in flight here, a run parked for approvals, a lease another host holds)
// refuses with an [*InUseError], and one that changed between the check and
// the replacement (a message another host queued) with
// [ErrSessionChanged]; either way nothing changed. events is read once,
// after the check, a page at a time (the storage's ReplaceSession): a
// session of any size is replaced with bounded memory. An error it yields
// fails Replace with nothing changed. The approval-index entries of the
// ledger replaced go with it, as with [Session.Delete]; its blobs are left
// to a sweep (the new ledger may refer to them).
func (s *Session) Replace(ctx context.Context, events iter.Seq2[ledger.Event, error], opts ReplaceOptions) (ReplaceReport, error) {
	var rep ReplaceReport
	hd, err := s.hold(ctx, "replace", false)
	if err != nil {
		return rep, err
	}
	defer hd.release()
	if (len(hd.events) > 0 || hd.corrupt != nil) && !opts.Existing {
		return rep, fmt.Errorf("%w: %s", ErrSessionExists, s.id)
	}
	n := 0
	counted := func(yield func(ledger.Event, error) bool) {
		for e, err := range events {
			if err == nil {
				n++
			}
			if !yield(e, err) {
				return
			}
		}
	}
	if err := hd.replace(ctx, counted); err != nil {
		return rep, err
	}
	rep.Replaced, rep.Events = len(hd.events) > 0 || hd.corrupt != nil, n
	if rep.Replaced {
		if _, err := s.h.unindexSession(ctx, s.id, hd.events); err != nil {
			return rep, fmt.Errorf("host: session %s is replaced, but not every index entry of the old ledger is removed: %w", s.id, err)
		}
	}
	return rep, nil
}

// blobHoldTTL bounds a writer's hold on a blob (see HoldBlobs): a host
// that dies holding one keeps it from a sweep this long.
const blobHoldTTL = DefaultBlobGrace

// HoldBlobs holds the blobs digests name in store (see storage.BlobFence)
// until the returned release is called: none of them is deleted meanwhile,
// whatever a sweep ([SweepBlobs]) decided. Whatever puts blobs and then
// appends events that refer to them holds them from before the put to
// after the append (the host does, for messages and tool results; serve's
// import does, for an archive's). A store without fences holds nothing.
// Each hold lapses after an hour ([DefaultBlobGrace]) if not released.
func HoldBlobs(ctx context.Context, store storage.Storage, digests []string) (release func(), err error) {
	f, ok := store.(storage.BlobFence)
	if !ok || len(digests) == 0 {
		return func() {}, nil
	}
	type hold struct{ digest, token string }
	var holds []hold
	release = func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, h := range holds {
			f.ReleaseBlob(ctx, h.digest, h.token) // a hold not released lapses
		}
	}
	for _, d := range slices.Compact(slices.Sorted(slices.Values(digests))) {
		t, err := f.HoldBlob(ctx, d, blobHoldTTL)
		if errors.Is(err, errors.ErrUnsupported) {
			break
		}
		if err != nil {
			release()
			return nil, fmt.Errorf("host: hold blob %s: %w", d, err)
		}
		holds = append(holds, hold{d, t})
	}
	return release, nil
}

// writable passes events on, failing at the first that uses a ledger
// feature not every live host reads (see Host.checkWrite): an import of
// such a ledger is refused whole.
func (h *Host) writable(events iter.Seq2[ledger.Event, error]) iter.Seq2[ledger.Event, error] {
	return func(yield func(ledger.Event, error) bool) {
		for e, err := range events {
			if err == nil {
				if err = h.checkWrite(nil, nil, e); err != nil {
					yield(ledger.Event{}, err)
					return
				}
			}
			if !yield(e, err) {
				return
			}
		}
	}
}
