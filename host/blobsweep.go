package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// DefaultBlobGrace is BlobSweepOptions.Grace when it is 0.
const DefaultBlobGrace = time.Hour

// BlobSweepOptions tunes [SweepBlobs]. The zero value is usable.
type BlobSweepOptions struct {
	// Grace spares the blobs stored (last put) less than this long ago,
	// referred to or not: a message or a tool result whose blob was put
	// but whose event is not appended yet must keep it. Default: 0, which
	// means an hour ([DefaultBlobGrace]); -1 spares only those put since
	// the sweep began.
	Grace time.Duration
	// Only, when not empty, limits the sweep to these digests (the blobs
	// of a session just deleted): the other blobs are neither deleted nor
	// counted. Default: none, every blob of the store.
	Only []string
	// DryRun counts what the sweep would delete and deletes nothing.
	// Default: false.
	DryRun bool
}

// BlobSweep is what a [SweepBlobs] found and did.
type BlobSweep struct {
	// Sessions is how many sessions' ledgers were read for references.
	Sessions int
	// Referenced counts the blobs some event refers to, and their bytes:
	// kept.
	Referenced      int
	ReferencedBytes int64
	// Recent counts the blobs no event refers to that were stored within
	// the grace, or (on a store with fences) put again or held by a
	// writer while the sweep ran, and their bytes: kept.
	Recent      int
	RecentBytes int64
	// Deleted counts the blobs no event refers to, stored before the
	// grace, and their bytes: deleted (with DryRun, those it would
	// delete).
	Deleted      int
	DeletedBytes int64
}

// SweepBlobs deletes the blobs of store that no event of its sessions
// refers to ([ledger.BlobRefs]) and that were stored before the grace
// (opts.Grace), and reports what it found. A referenced blob is never
// deleted, however old.
//
// store must implement storage.Lister and storage.Blobs. Its sessions and
// its blobs are one scope: sweep a tenant's [storage.Prefix] view for the
// tenant's blobs (the view lists the tenant's sessions and blobs only). A
// session that cannot be loaded fails the sweep before anything is
// deleted (its references are unknown). It may run on any host, beside
// running ones.
//
// On a store with fences (storage.BlobFence, every built-in one), the
// sweep lists the blobs, marks those it may delete, then reads every
// session's references, and deletes each unreferenced one only if its
// mark is still there and no writer holds it: a blob put again, or held by
// a message or a tool result on its way into a ledger, since it was
// marked is spared (counted Recent), so no event appended by a host ever
// refers to a blob the sweep deleted. On a store without fences it reads
// the references first, then lists the blobs, sparing those put since it
// began: a writer that put its blob before the sweep began and appends
// its event after the sweep read that session may lose it.
func SweepBlobs(ctx context.Context, store storage.Storage, opts BlobSweepOptions) (BlobSweep, error) {
	var out BlobSweep
	lister, ok1 := store.(storage.Lister)
	blobs, ok2 := store.(storage.Blobs)
	if !ok1 || !ok2 {
		return out, fmt.Errorf("host: sweep blobs: the storage must list sessions and keep blobs (storage.Lister and storage.Blobs); %T does not", store)
	}
	grace := opts.Grace
	switch {
	case grace == 0:
		grace = DefaultBlobGrace
	case grace == -1:
		grace = 0
	case grace < 0:
		return out, fmt.Errorf("host: sweep blobs: Grace %s is negative (use -1 for none)", grace)
	}
	// A blob put once the sweep began may belong to an event not yet
	// appended: the grace counts from the start, never from now.
	start := time.Now()
	cutoff := start.Add(-grace)
	var only map[string]bool
	if len(opts.Only) > 0 {
		only = map[string]bool{}
		for _, d := range opts.Only {
			only[d] = true
		}
	}
	fence, fenced := store.(storage.BlobFence)
	var infos []storage.BlobInfo
	marks := map[string]string{}
	if fenced {
		var err error
		if infos, err = blobs.ListBlobs(ctx); err != nil {
			return out, fmt.Errorf("host: sweep blobs: list blobs: %w", err)
		}
		for _, in := range infos {
			if (only != nil && !only[in.Digest]) || in.Stored.After(cutoff) || opts.DryRun {
				continue
			}
			m, err := fence.MarkBlob(ctx, in.Digest)
			if errors.Is(err, errors.ErrUnsupported) {
				fenced = false
				break
			}
			if err != nil {
				return out, fmt.Errorf("host: sweep blobs: mark %s: %w", in.Digest, err)
			}
			marks[in.Digest] = m
		}
	}
	ids, err := lister.ListSessions(ctx)
	if err != nil {
		return out, fmt.Errorf("host: sweep blobs: list sessions: %w", err)
	}
	referenced := map[string]bool{}
	for _, id := range ids {
		events, err := store.Load(ctx, id)
		if err != nil {
			return out, fmt.Errorf("host: sweep blobs: load session %s (its references are unknown, nothing was deleted): %w", id, err)
		}
		for _, d := range ledger.BlobRefs(events) {
			referenced[d] = true
		}
		out.Sessions++
	}
	if !fenced {
		if infos, err = blobs.ListBlobs(ctx); err != nil {
			return out, fmt.Errorf("host: sweep blobs: list blobs: %w", err)
		}
	}
	var errs []error
	for _, in := range infos {
		switch {
		case only != nil && !only[in.Digest]:
			continue
		case referenced[in.Digest]:
			out.Referenced++
			out.ReferencedBytes += in.Size
			if m := marks[in.Digest]; m != "" {
				fence.ReleaseBlob(ctx, in.Digest, "") // clears the mark
			}
		case in.Stored.After(cutoff):
			out.Recent++
			out.RecentBytes += in.Size
		case opts.DryRun:
			out.Deleted++
			out.DeletedBytes += in.Size
		case fenced:
			deleted, err := fence.DeleteMarkedBlob(ctx, in.Digest, marks[in.Digest])
			if err != nil {
				errs = append(errs, fmt.Errorf("host: sweep blobs: delete %s: %w", in.Digest, err))
				continue
			}
			if !deleted { // put again, or held, since it was marked
				out.Recent++
				out.RecentBytes += in.Size
				continue
			}
			out.Deleted++
			out.DeletedBytes += in.Size
		default:
			if err := blobs.DeleteBlob(ctx, in.Digest); err != nil {
				errs = append(errs, fmt.Errorf("host: sweep blobs: delete %s: %w", in.Digest, err))
				continue
			}
			out.Deleted++
			out.DeletedBytes += in.Size
		}
	}
	return out, errors.Join(errs...)
}
