package storage

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/agentichost/agentic/ledger"
)

// Fences: how an operation that removes or replaces data refuses to remove
// what it did not check.
//
// Every such operation (a deletion, an import that replaces a session, a
// retention sweep, a tenant's deletion, a sweep of blobs) checks something
// first (the session is idle, its last event is old, no event refers to the
// blob) and acts after. What others write between the check and the act —
// a message queued by another host, which a lease does not refuse; a
// message that names a blob — must not be removed with it. The store gives
// the two fences below, checked in the same atomic step as the act; the
// host holds the session (its in-process lock and its lease) around them.

// Fencer is implemented by stores that can remove or replace a session
// only as it was checked: the caller reads the session's version, loads
// and checks the session, and then replaces (or deletes) it through
// ReplaceSession, which refuses, with [ErrSessionChanged], a session
// appended to since the version was read. Without it, a caller can only
// check again and act after, leaving a window in which an append is lost.
type Fencer interface {
	// SessionVersion returns a token that names the session's ledger as
	// it stands: every Append that adds events (fenced or not, from any
	// handle on the backend), every deletion and every replacement
	// changes it, so that the same token never names two states of a
	// session. It is "" for a session with no events. Tokens are opaque,
	// compared for equality only, and mean nothing to another session.
	SessionVersion(ctx context.Context, sessionID string) (string, error)
	// ReplaceSession puts events in place of the session's ledger, in one
	// atomic step, provided that the session's version is still version
	// ("" for a session with no events); otherwise it fails with
	// [ErrSessionChanged] and changes nothing. No events (a sequence that
	// yields none) deletes the session, as [Deleter.DeleteSession] does,
	// lease included; otherwise the session's lease, if any, is left as
	// it is. events is read once, in order, before the session changes,
	// and the store keeps no more of it in memory than a page at a time:
	// a session of any size is replaced with bounded memory. An error the
	// sequence yields fails the call with that error, and so does an
	// event the codec refuses: nothing is changed. A crash leaves the old
	// ledger or the new one, never a mix. The invalid-id and ctx rules of
	// [Storage] apply.
	ReplaceSession(ctx context.Context, sessionID, version string, events iter.Seq2[ledger.Event, error]) error
}

// BlobFence is implemented by [Blobs] stores whose deletions of blobs are
// fenced against concurrent writers, so that a blob an event is about to
// refer to is never deleted under it:
//
//   - A writer holds a blob (HoldBlob) before it puts it or names it, and
//     releases it (ReleaseBlob) once the event that refers to it is
//     appended (or will not be).
//   - A deleter marks the blobs it means to delete (MarkBlob), then reads
//     the references of every session, then deletes each blob no event
//     refers to with DeleteMarkedBlob, which deletes it only if its mark
//     is still there and no hold is on it.
//   - PutBlob, HoldBlob and ReleaseBlob clear the blob's mark.
//
// A blob the deleter marked after a writer released it was referred to
// when the deleter read the references; one marked before, or while it
// was held, has lost its mark or is held when the deleter acts. So no
// event appended by a writer that holds its blobs ever refers to a blob
// deleted under it.
//
// Holds and marks are the store's, kept beside the blobs (in the backend,
// for a store several hosts share); they name a digest whether or not a
// blob is stored under it. A hold lapses after its ttl, so that a writer
// that died holds nothing for ever.
type BlobFence interface {
	// HoldBlob holds the blob under digest until ReleaseBlob or ttl, and
	// clears its mark. It returns the hold's token.
	HoldBlob(ctx context.Context, digest string, ttl time.Duration) (hold string, err error)
	// ReleaseBlob ends the hold and clears the blob's mark. Releasing a
	// hold that lapsed, or was released already, is a no-op.
	ReleaseBlob(ctx context.Context, digest, hold string) error
	// MarkBlob marks the blob for deletion, replacing any earlier mark,
	// and returns the mark's token.
	MarkBlob(ctx context.Context, digest string) (mark string, err error)
	// DeleteMarkedBlob deletes the blob (as [Blobs.DeleteBlob] does) only
	// if its mark is still mark and no hold on it is in force, checked in
	// the same atomic step; it reports whether it deleted it. Refused, it
	// changes nothing.
	DeleteMarkedBlob(ctx context.Context, digest, mark string) (deleted bool, err error)
}

// SessionVersion implements [Fencer] when the view's store does; otherwise
// it fails with an error matching errors.ErrUnsupported.
func (p *prefixed) SessionVersion(ctx context.Context, sessionID string) (string, error) {
	f, ok := p.store.(Fencer)
	if !ok {
		return "", fmt.Errorf("storage: %T cannot fence sessions (storage.Fencer): %w", p.store, errors.ErrUnsupported)
	}
	id, err := p.id(sessionID)
	if err != nil {
		return "", err
	}
	return f.SessionVersion(ctx, id)
}

// ReplaceSession implements [Fencer] when the view's store does; otherwise
// it fails with an error matching errors.ErrUnsupported. A session whose
// id is too long to prefix keeps its way back while it has events.
func (p *prefixed) ReplaceSession(ctx context.Context, sessionID, version string, events iter.Seq2[ledger.Event, error]) error {
	f, ok := p.store.(Fencer)
	if !ok {
		return fmt.Errorf("storage: %T cannot fence sessions (storage.Fencer): %w", p.store, errors.ErrUnsupported)
	}
	id, err := p.id(sessionID)
	if err != nil {
		return err
	}
	long := id != p.prefix+sessionID
	some := false
	counted := func(yield func(ledger.Event, error) bool) {
		for e, err := range events {
			if err == nil && !some && long {
				// Keep the way back before the session has events.
				some = true
				if _, seen := p.named.Load(id); !seen {
					if err = p.kv.Set(ctx, p.ns(longIDs), id, []byte(sessionID)); err == nil {
						p.named.Store(id, true)
					}
				}
			}
			some = some || err == nil
			if !yield(e, err) || err != nil {
				return
			}
		}
	}
	if err := f.ReplaceSession(ctx, id, version, counted); err != nil {
		return err
	}
	if long && !some {
		p.named.Delete(id)
		return p.kv.Delete(ctx, p.ns(longIDs), id)
	}
	return nil
}

// prefixFence is the [BlobFence] of a view's blobs, when the store's scope
// has one; otherwise each method fails with an error matching
// errors.ErrUnsupported.
func (b *prefixBlobs) fence() (BlobFence, error) {
	f, ok := b.Blobs.(BlobFence)
	if !ok {
		return nil, fmt.Errorf("storage: %T does not fence its blobs (storage.BlobFence): %w", b.Blobs, errors.ErrUnsupported)
	}
	return f, nil
}

// HoldBlob implements [BlobFence] (see fence).
func (b *prefixBlobs) HoldBlob(ctx context.Context, digest string, ttl time.Duration) (string, error) {
	f, err := b.fence()
	if err != nil {
		return "", err
	}
	return f.HoldBlob(ctx, digest, ttl)
}

// ReleaseBlob implements [BlobFence] (see fence).
func (b *prefixBlobs) ReleaseBlob(ctx context.Context, digest, hold string) error {
	f, err := b.fence()
	if err != nil {
		return err
	}
	return f.ReleaseBlob(ctx, digest, hold)
}

// MarkBlob implements [BlobFence] (see fence).
func (b *prefixBlobs) MarkBlob(ctx context.Context, digest string) (string, error) {
	f, err := b.fence()
	if err != nil {
		return "", err
	}
	return f.MarkBlob(ctx, digest)
}

// DeleteMarkedBlob implements [BlobFence] (see fence).
func (b *prefixBlobs) DeleteMarkedBlob(ctx context.Context, digest, mark string) (bool, error) {
	f, err := b.fence()
	if err != nil {
		return false, err
	}
	return f.DeleteMarkedBlob(ctx, digest, mark)
}

var (
	_ Fencer    = (*prefixed)(nil)
	_ Fencer    = (*blobCountingSharedPrefixed)(nil)
	_ BlobFence = (*blobCountingSharedPrefixed)(nil)
	_ BlobFence = (*blobPrefixed)(nil)
)
