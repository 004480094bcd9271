package storagetest

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// snapshotter returns s's Snapshotter, skipping the test when it has none
// or the store under a view has none (errors.ErrUnsupported).
func snapshotter(t *testing.T, s storage.Storage) storage.Snapshotter {
	t.Helper()
	sn, ok := s.(storage.Snapshotter)
	if !ok {
		t.Skip("the store does not implement storage.Snapshotter")
	}
	if _, _, _, err := sn.LoadSnapshot(t.Context(), "snapshot-probe"); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("the store under the view does not implement storage.Snapshotter")
	} else if err != nil {
		t.Fatalf("LoadSnapshot of a session with no events: %v", err)
	}
	return sn
}

// wantSnapshot checks what LoadSnapshot returns: data taken at the event
// at, and the events after it (data nil and at "": no snapshot, the
// whole ledger).
func wantSnapshot(t *testing.T, sn storage.Snapshotter, ctx context.Context, id string, data []byte, at string, tail []ledger.Event, why string) {
	t.Helper()
	got, gotAt, events, err := sn.LoadSnapshot(ctx, id)
	switch {
	case err != nil:
		t.Errorf("%s: LoadSnapshot(%q): %v", why, id, err)
	case !bytes.Equal(got, data) || (got == nil) != (data == nil) || gotAt != at:
		t.Errorf("%s: LoadSnapshot(%q) = snapshot %q taken at %q, want %q at %q", why, id, got, gotAt, data, at)
	case len(events) != len(tail) || (len(tail) > 0 && !reflect.DeepEqual(events, tail)):
		t.Errorf("%s: LoadSnapshot(%q) = %d events after the snapshot, want %d", why, id, len(events), len(tail))
	case events == nil:
		t.Errorf("%s: LoadSnapshot(%q) = nil events, want an empty slice", why, id)
	}
}

// runSnapshotter runs the checks of storage.Snapshotter with store a and,
// for what another host would see, store b (the same store, or another
// handle on one backend).
func runSnapshotter(t *testing.T, a, b storage.Storage) {
	sa, sb := snapshotter(t, a), snapshotter(t, b)
	t.Run("Tail", func(t *testing.T) {
		ctx := t.Context()
		const id = "snap-tail"
		evs := seqEvents(id, 0, 7)
		appendOK(t, a, ctx, id, evs[0])
		appendOK(t, a, ctx, id, evs[1:4]...) // a batch
		appendOK(t, a, ctx, id, evs[4])
		wantSnapshot(t, sb, ctx, id, nil, "", evs[:5], "no snapshot yet")
		// Taken in the middle of a batch, read by the other handle.
		data := []byte("state at #2")
		if err := sa.PutSnapshot(ctx, id, evs[2].ID, data); err != nil {
			t.Fatalf("PutSnapshot at an event in a batch: %v", err)
		}
		data[0] = 'X' // the store keeps its own copy
		wantSnapshot(t, sb, ctx, id, []byte("state at #2"), evs[2].ID, evs[3:5], "a snapshot in a batch")
		appendOK(t, b, ctx, id, evs[5:7]...)
		wantSnapshot(t, sa, ctx, id, []byte("state at #2"), evs[2].ID, evs[3:7], "appends after the snapshot")
		wantLoad(t, a, ctx, id, evs, "Load beside a snapshot")
		// At the last event: nothing after it.
		if err := sb.PutSnapshot(ctx, id, evs[6].ID, []byte("state at #6")); err != nil {
			t.Fatalf("PutSnapshot at the last event: %v", err)
		}
		wantSnapshot(t, sa, ctx, id, []byte("state at #6"), evs[6].ID, nil, "a snapshot at the last event")
		// A later snapshot may be taken at an earlier event (a host
		// behind): the last one put is the one.
		if err := sa.PutSnapshot(ctx, id, evs[0].ID, []byte("state at #0")); err != nil {
			t.Fatalf("PutSnapshot at the first event: %v", err)
		}
		wantSnapshot(t, sb, ctx, id, []byte("state at #0"), evs[0].ID, evs[1:], "a snapshot at an earlier event")
		// An event the session does not hold: refused, the last kept.
		if err := sb.PutSnapshot(ctx, id, "no-such-event", []byte("x")); !errors.Is(err, storage.ErrSnapshotPoint) {
			t.Errorf("PutSnapshot at an unknown event = %v, want storage.ErrSnapshotPoint", err)
		}
		if err := sb.PutSnapshot(ctx, id+"-none", evs[0].ID, []byte("x")); !errors.Is(err, storage.ErrSnapshotPoint) {
			t.Errorf("PutSnapshot of a session with no events = %v, want storage.ErrSnapshotPoint", err)
		}
		if err := sb.PutSnapshot(ctx, id, evs[1].ID, make([]byte, storage.MaxSnapshotBytes+1)); err == nil {
			t.Error("PutSnapshot of more than MaxSnapshotBytes succeeded")
		}
		wantSnapshot(t, sa, ctx, id, []byte("state at #0"), evs[0].ID, evs[1:], "after refused snapshots")
		// Sessions are apart.
		other := seqEvents(id+"-other", 0, 2)
		appendOK(t, a, ctx, id+"-other", other...)
		wantSnapshot(t, sb, ctx, id+"-other", nil, "", other, "another session")
		// An empty snapshot is a snapshot.
		if err := sa.PutSnapshot(ctx, id+"-other", other[1].ID, []byte{}); err != nil {
			t.Fatalf("PutSnapshot of empty data: %v", err)
		}
		wantSnapshot(t, sb, ctx, id+"-other", []byte{}, other[1].ID, nil, "an empty snapshot")
	})
	t.Run("Lag", func(t *testing.T) {
		ctx := t.Context()
		const id = "snap-lag"
		evs := seqEvents(id, 0, storage.MaxSnapshotLag+1)
		appendOK(t, a, ctx, id, evs[:10]...)
		appendOK(t, a, ctx, id, evs[10:]...)
		if err := sa.PutSnapshot(ctx, id, evs[0].ID, []byte("too far")); !errors.Is(err, storage.ErrSnapshotPoint) {
			t.Errorf("PutSnapshot %d events back = %v, want storage.ErrSnapshotPoint", len(evs), err)
		}
		if err := sb.PutSnapshot(ctx, id, evs[1].ID, []byte("just")); err != nil {
			t.Errorf("PutSnapshot %d events back: %v", storage.MaxSnapshotLag, err)
		}
		wantSnapshot(t, sa, ctx, id, []byte("just"), evs[1].ID, evs[2:], "a snapshot MaxSnapshotLag events back")
	})
	t.Run("Forgotten", func(t *testing.T) {
		ctx := t.Context()
		// A ledger deleted, replaced or rewritten forgets its snapshot,
		// even when the same events are appended again.
		setup := func(t *testing.T, id string) []ledger.Event {
			t.Helper()
			evs := seqEvents(id, 0, 3)
			appendOK(t, a, ctx, id, evs...)
			if err := sa.PutSnapshot(ctx, id, evs[1].ID, []byte("kept")); err != nil {
				t.Fatalf("PutSnapshot: %v", err)
			}
			return evs
		}
		t.Run("Deleted", func(t *testing.T) {
			del, ok := a.(storage.Deleter)
			if !ok {
				t.Skip("the store does not implement storage.Deleter")
			}
			const id = "snap-deleted"
			evs := setup(t, id)
			if err := del.DeleteSession(ctx, id); err != nil {
				t.Fatal(err)
			}
			wantSnapshot(t, sb, ctx, id, nil, "", nil, "after DeleteSession")
			appendOK(t, b, ctx, id, evs...)
			wantSnapshot(t, sb, ctx, id, nil, "", evs, "the same events appended after DeleteSession")
		})
		t.Run("Replaced", func(t *testing.T) {
			f, ok := a.(storage.Fencer)
			if !ok {
				t.Skip("the store does not implement storage.Fencer")
			}
			const id = "snap-replaced"
			evs := setup(t, id)
			if err := f.ReplaceSession(ctx, id, version(t, f, ctx, id), eventsSeq(evs, nil)); err != nil {
				t.Fatal(err)
			}
			wantSnapshot(t, sb, ctx, id, nil, "", evs, "the same events after ReplaceSession")
		})
		t.Run("Rewritten", func(t *testing.T) {
			rw, ok := a.(storage.Rewriter)
			if !ok {
				t.Skip("the store does not implement storage.Rewriter")
			}
			const id = "snap-rewritten"
			evs := setup(t, id)
			edited := make([]ledger.Event, len(evs))
			if _, err := rw.Rewrite(ctx, id, func(b []byte) ([]byte, error) {
				e, err := ledger.Decode(b)
				if err != nil {
					return nil, err
				}
				e.Poke.Text += " (edited)"
				for i := range evs {
					if evs[i].ID == e.ID {
						edited[i] = e
					}
				}
				return ledger.Encode(e)
			}, false); err != nil {
				t.Fatal(err)
			}
			wantSnapshot(t, sb, ctx, id, nil, "", edited, "after Rewrite")
		})
	})
	t.Run("Invalid", func(t *testing.T) {
		ctx := t.Context()
		if err := sa.PutSnapshot(ctx, "bad id", "e", nil); err == nil {
			t.Error("PutSnapshot of an invalid session id succeeded")
		}
		if _, _, _, err := sa.LoadSnapshot(ctx, "bad id"); err == nil {
			t.Error("LoadSnapshot of an invalid session id succeeded")
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		if err := sa.PutSnapshot(done, "snap-done", "e", nil); !errors.Is(err, context.Canceled) {
			t.Errorf("PutSnapshot with a done ctx = %v, want context.Canceled", err)
		}
		if _, _, _, err := sa.LoadSnapshot(done, "snap-done"); !errors.Is(err, context.Canceled) {
			t.Errorf("LoadSnapshot with a done ctx = %v, want context.Canceled", err)
		}
	})
}
