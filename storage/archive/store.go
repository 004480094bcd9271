package archive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// ExportSession adds the session id of store, and the blobs its events
// refer to (when store keeps blobs), to w. A session with no events is an
// error: there is nothing to export.
func ExportSession(ctx context.Context, store storage.Storage, id string, w *Writer) error {
	events, err := store.Load(ctx, id)
	if err != nil {
		return fmt.Errorf("archive: export session %s: %w", id, err)
	}
	return ExportEvents(ctx, store, id, events, w)
}

// ExportEvents adds the session id whose ledger is events (as loaded from
// store, which the caller holds still), and the blobs they refer to (when
// store keeps blobs), to w. No events is an error: there is nothing to
// export.
func ExportEvents(ctx context.Context, store storage.Storage, id string, events []ledger.Event, w *Writer) error {
	if len(events) == 0 {
		return fmt.Errorf("archive: export session %s: it has no events", id)
	}
	if err := w.AddSession(id, events); err != nil {
		return err
	}
	refs := ledger.BlobRefs(events)
	if len(refs) == 0 {
		return nil
	}
	blobs, ok := store.(storage.Blobs)
	if !ok {
		return nil
	}
	for _, d := range refs {
		data, found, err := blobs.GetBlob(ctx, d)
		if err != nil {
			return fmt.Errorf("archive: export session %s: blob %s: %w", id, d, err)
		}
		if !found {
			continue // referred to, gone: the event keeps its digest
		}
		if err := w.AddBlob(data); err != nil {
			return err
		}
	}
	return nil
}

// ExportAll adds every session of store (which must implement
// storage.Lister), sorted by id, and every blob of it (when it keeps
// blobs), to w: for a tenant, pass its storage.Prefix view. A session
// whose ledger is damaged (storage.ErrCorrupt) fails it.
func ExportAll(ctx context.Context, store storage.Storage, w *Writer) error {
	l, ok := store.(storage.Lister)
	if !ok {
		return fmt.Errorf("archive: %T cannot list its sessions (storage.Lister)", store)
	}
	ids, err := l.ListSessions(ctx)
	if err != nil {
		return fmt.Errorf("archive: export: %w", err)
	}
	slices.Sort(ids)
	for _, id := range ids {
		events, err := store.Load(ctx, id)
		if err != nil {
			return fmt.Errorf("archive: export session %s: %w", id, err)
		}
		if len(events) == 0 {
			continue // deleted meanwhile
		}
		if err := w.AddSession(id, events); err != nil {
			return err
		}
	}
	if blobs, ok := store.(storage.Blobs); ok {
		infos, err := blobs.ListBlobs(ctx)
		if err != nil {
			return fmt.Errorf("archive: export: blobs: %w", err)
		}
		for _, bi := range infos {
			data, found, err := blobs.GetBlob(ctx, bi.Digest)
			if err != nil {
				return fmt.Errorf("archive: export: blob %s: %w", bi.Digest, err)
			}
			if found {
				if err := w.AddBlob(data); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ErrExists is matched by an [*ExistsError].
var ErrExists = errors.New("archive: sessions exist already")

// ExistsError refuses an import whose sessions the store holds already
// (without ImportOptions.Replace): nothing was imported.
type ExistsError struct {
	// Sessions are the ids the store holds already.
	Sessions []string
}

// Error names the sessions.
func (e *ExistsError) Error() string {
	return fmt.Sprintf("archive: the store holds %d of the archive's sessions already (%s): nothing was imported; replace them to import", len(e.Sessions), strings.Join(e.Sessions, ", "))
}

// Unwrap returns [ErrExists].
func (e *ExistsError) Unwrap() error { return ErrExists }

// ImportOptions tunes [Import].
type ImportOptions struct {
	// Replace deletes a session the store holds already before its
	// events are imported (the store must implement storage.Deleter).
	// Default false: such a session refuses the whole import with an
	// [*ExistsError].
	Replace bool
	// Only, when not empty, imports that session alone. Default "": all.
	Only string
}

// ImportReport tells what [Import] did.
type ImportReport struct {
	// Sessions are the ids imported, in the archive's order.
	Sessions []string `json:"sessions"`
	// Replaced are those of them that replaced a session of the store.
	Replaced []string `json:"replaced"`
	// Events is how many events were appended.
	Events int `json:"events"`
	// Blobs is how many blobs were put (on a store that keeps blobs).
	Blobs int `json:"blobs"`
}

// Import puts an archive's sessions and blobs into store: blobs first
// (so that events never refer to a blob not there), then each session's
// events in one step (storage.Fencer's ReplaceSession, or one Append), so
// that a session is imported whole or not at all. On a store that fences
// (every built-in one), a session is replaced only as it was checked: one
// appended to (or made) since refuses the import there, with an error
// matching storage.ErrSessionChanged. It holds no session otherwise: a
// host's in-use checks are [host.Session.Replace]'s, which serve's import
// uses. Before it writes anything it checks that no session exists
// already (unless opts.Replace): a store's failure midway leaves the
// sessions imported before it, and the report and error say which.
// Importing the same archive twice with Replace changes nothing.
func Import(ctx context.Context, store storage.Storage, a *Archive, opts ImportOptions) (ImportReport, error) {
	rep := ImportReport{Sessions: []string{}, Replaced: []string{}}
	sessions := a.Sessions
	if opts.Only != "" {
		s, ok := a.Session(opts.Only)
		if !ok {
			return rep, fmt.Errorf("archive: the archive holds no session %s", opts.Only)
		}
		sessions = []Session{s}
	}
	var exists []string
	fencer, fenced := store.(storage.Fencer)
	versions := map[string]string{}
	for _, s := range sessions {
		if fenced {
			v, err := fencer.SessionVersion(ctx, s.ID)
			if errors.Is(err, errors.ErrUnsupported) {
				fenced = false
			} else if err != nil {
				return rep, fmt.Errorf("archive: import session %s: %w", s.ID, err)
			}
			versions[s.ID] = v
		}
		events, err := store.Load(ctx, s.ID)
		if err != nil && !errors.Is(err, storage.ErrCorrupt) {
			return rep, fmt.Errorf("archive: import session %s: %w", s.ID, err)
		}
		if len(events) > 0 || err != nil {
			exists = append(exists, s.ID)
		}
	}
	del, canDelete := store.(storage.Deleter)
	switch {
	case len(exists) > 0 && !opts.Replace:
		return rep, &ExistsError{Sessions: exists}
	case len(exists) > 0 && !canDelete:
		return rep, fmt.Errorf("archive: replacing sessions needs a store that deletes them (storage.Deleter); %T does not", store)
	}
	if blobs, ok := store.(storage.Blobs); ok {
		for _, data := range a.Blobs {
			if _, err := blobs.PutBlob(ctx, data); err != nil {
				return rep, fmt.Errorf("archive: import: put a blob: %w (no session was imported)", err)
			}
			rep.Blobs++
		}
	} else if len(a.Blobs) > 0 {
		return rep, fmt.Errorf("archive: the archive holds %d blobs, and %T keeps none (storage.Blobs): nothing was imported", len(a.Blobs), store)
	}
	for _, s := range sessions {
		if fenced {
			// As checked, or not at all: a session appended to (or made)
			// since it was checked refuses.
			err := fencer.ReplaceSession(ctx, s.ID, versions[s.ID], func(yield func(ledger.Event, error) bool) {
				for _, e := range s.Events {
					if !yield(e, nil) {
						return
					}
				}
			})
			if err != nil {
				return rep, fmt.Errorf("archive: import session %s: %w", s.ID, err)
			}
			if slices.Contains(exists, s.ID) {
				rep.Replaced = append(rep.Replaced, s.ID)
			}
			rep.Sessions = append(rep.Sessions, s.ID)
			rep.Events += len(s.Events)
			continue
		}
		if slices.Contains(exists, s.ID) {
			if err := del.DeleteSession(ctx, s.ID); err != nil {
				return rep, fmt.Errorf("archive: import session %s: replacing it: %w", s.ID, err)
			}
			rep.Replaced = append(rep.Replaced, s.ID)
		}
		if err := store.Append(ctx, s.ID, s.Events...); err != nil {
			return rep, fmt.Errorf("archive: import session %s: %w", s.ID, err)
		}
		rep.Sessions = append(rep.Sessions, s.ID)
		rep.Events += len(s.Events)
	}
	return rep, nil
}
