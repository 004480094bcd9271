package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentichost/agentic/ledger"
)

// DeleteSession implements [Deleter] when the view's store does; otherwise
// it fails with an error matching errors.ErrUnsupported. A session whose id
// was too long to prefix loses its way back too.
func (p *prefixed) DeleteSession(ctx context.Context, sessionID string) error {
	d, ok := p.store.(Deleter)
	if !ok {
		return fmt.Errorf("storage: %T cannot delete sessions (storage.Deleter): %w", p.store, errors.ErrUnsupported)
	}
	id, err := p.id(sessionID)
	if err != nil {
		return err
	}
	if err := d.DeleteSession(ctx, id); err != nil {
		return err
	}
	if id != p.prefix+sessionID {
		p.named.Delete(id)
		return p.kv.Delete(ctx, p.ns(longIDs), id)
	}
	return nil
}

// PrefixDeletion tells what [DeletePrefix] removed.
type PrefixDeletion struct {
	// Sessions is how many sessions were deleted.
	Sessions int
	// Events is how many events they held.
	Events int
	// Namespaces is how many key-value namespaces were deleted.
	Namespaces int
	// Keys is how many keys they held.
	Keys int
	// Blobs is how many blobs were deleted ([Blobs] stores only).
	Blobs int
	// BlobBytes is how many bytes those blobs held.
	BlobBytes int64
}

// DeletePrefix deletes everything store keeps under prefix, as [Prefix]
// lays it out: every session whose id starts with prefix (those of the
// view and those of its long ids), every key-value namespace that starts
// with prefix, and, when the view implements [Blobs], every blob of the
// view. It is how a tenant is deleted. store must implement [Lister],
// [Deleter], [KV] and [NamespaceLister], as every built-in store does;
// prefix is checked as [Prefix] checks it. It goes on after a failure and
// returns what it deleted with every error joined: deleting again
// finishes the work.
//
// It keeps the rule of every operation that removes data (see [Fencer]):
// on a store that fences, each session is deleted only as it was loaded,
// and one appended to meanwhile (a host still serving the prefix accepted
// a message) is kept, and named in an error matching [ErrSessionChanged];
// the blobs go last, fenced ([BlobFence]: marked, then the references of
// the sessions left read, then deleted if still marked and unheld), so
// that no blob a kept session refers to, or a writer holds, is deleted.
// It takes no lease: a run in progress on a host that still serves the
// prefix is deleted with its session unless it appends meanwhile.
func DeletePrefix(ctx context.Context, store Storage, prefix string) (PrefixDeletion, error) {
	var rep PrefixDeletion
	view, err := Prefix(store, prefix)
	if err != nil {
		return rep, err
	}
	lister, _ := store.(Lister)
	deleter, ok1 := store.(Deleter)
	kv, _ := store.(KV)
	nsl, ok2 := store.(NamespaceLister)
	if !ok1 || !ok2 {
		return rep, fmt.Errorf("storage: DeletePrefix needs a store that deletes sessions and lists namespaces (storage.Deleter and storage.NamespaceLister); %T does not", store)
	}
	fencer, fenced := store.(Fencer)
	var errs []error
	ids, err := lister.ListSessions(ctx)
	errs = append(errs, err)
	for _, id := range ids {
		if !strings.HasPrefix(id, prefix) {
			continue
		}
		version := ""
		if fenced {
			if version, err = fencer.SessionVersion(ctx, id); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		events, err := store.Load(ctx, id)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			errs = append(errs, err)
			continue
		}
		if fenced {
			err = fencer.ReplaceSession(ctx, id, version, func(func(ledger.Event, error) bool) {})
		} else {
			err = deleter.DeleteSession(ctx, id)
		}
		if errors.Is(err, ErrSessionChanged) {
			errs = append(errs, fmt.Errorf("storage: session %s was appended to while it was deleted (does a host still serve %s?): it is kept, delete again: %w", id, prefix, err))
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Sessions++
		rep.Events += len(events)
	}
	// The long ids' way back is a namespace of the prefix: it goes below,
	// with the others, once the sessions are gone.
	namespaces, err := nsl.Namespaces(ctx, prefix)
	errs = append(errs, err)
	for _, ns := range namespaces {
		n, err := kv.Len(ctx, ns)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := nsl.DeleteNamespace(ctx, ns); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Namespaces++
		rep.Keys += n
	}
	if b, ok := view.(Blobs); ok {
		n, bytes, err := deleteBlobs(ctx, view, b)
		rep.Blobs, rep.BlobBytes = n, bytes
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}

// deleteBlobs deletes the blobs of view (all of them, when its sessions
// are gone): on a store that fences them, each is marked, then the
// references of the view's sessions (those kept) are read, then each
// unreferenced one is deleted if still marked and unheld.
func deleteBlobs(ctx context.Context, view Storage, b Blobs) (int, int64, error) {
	var (
		n     int
		bytes int64
		errs  []error
	)
	infos, err := b.ListBlobs(ctx)
	if err != nil {
		return 0, 0, err
	}
	fence, fenced := b.(BlobFence)
	marks := map[string]string{}
	if fenced {
		for _, bi := range infos {
			m, err := fence.MarkBlob(ctx, bi.Digest)
			if errors.Is(err, errors.ErrUnsupported) {
				fenced = false
				break
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			marks[bi.Digest] = m
		}
	}
	referenced := map[string]bool{}
	if fenced {
		ids, err := view.(Lister).ListSessions(ctx)
		if err != nil {
			return 0, 0, fmt.Errorf("storage: delete blobs: their references are unknown, none was deleted: %w", err)
		}
		for _, id := range ids {
			events, err := view.Load(ctx, id)
			if err != nil {
				return 0, 0, fmt.Errorf("storage: delete blobs: the references of session %s are unknown, no blob was deleted: %w", id, err)
			}
			for _, d := range ledger.BlobRefs(events) {
				referenced[d] = true
			}
		}
	}
	for _, bi := range infos {
		switch {
		case !fenced:
			if err := b.DeleteBlob(ctx, bi.Digest); err != nil {
				errs = append(errs, err)
				continue
			}
		case referenced[bi.Digest]:
			errs = append(errs, fmt.Errorf("storage: blob %s is kept: a session kept refers to it", bi.Digest))
			continue
		default:
			m, ok := marks[bi.Digest]
			if !ok {
				continue
			}
			deleted, err := fence.DeleteMarkedBlob(ctx, bi.Digest, m)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if !deleted {
				errs = append(errs, fmt.Errorf("storage: blob %s is kept: it was put or held while it was deleted (does a host still serve the prefix?)", bi.Digest))
				continue
			}
		}
		n++
		bytes += bi.Size
	}
	return n, bytes, errors.Join(errs...)
}

var _ Deleter = (*prefixed)(nil)
