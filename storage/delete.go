package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
// view. It is how a tenant is deleted; it does not look at leases (see
// [Deleter]). store must implement [Lister], [Deleter], [KV] and
// [NamespaceLister], as every built-in store does; prefix is checked as
// [Prefix] checks it. It goes on after a failure and returns what it
// deleted with every error joined: deleting again finishes the work.
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
	var errs []error
	// Blobs first: the view names them, and needs nothing deleted below.
	if b, ok := view.(Blobs); ok {
		infos, err := b.ListBlobs(ctx)
		errs = append(errs, err)
		for _, bi := range infos {
			if err := b.DeleteBlob(ctx, bi.Digest); err != nil {
				errs = append(errs, err)
				continue
			}
			rep.Blobs++
			rep.BlobBytes += bi.Size
		}
	}
	ids, err := lister.ListSessions(ctx)
	errs = append(errs, err)
	for _, id := range ids {
		if !strings.HasPrefix(id, prefix) {
			continue
		}
		events, err := store.Load(ctx, id)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			errs = append(errs, err)
			continue
		}
		if err := deleter.DeleteSession(ctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Sessions++
		rep.Events += len(events)
	}
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
	return rep, errors.Join(errs...)
}

var _ Deleter = (*prefixed)(nil)
