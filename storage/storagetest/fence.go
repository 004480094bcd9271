package storagetest

import (
	"context"
	"errors"
	"iter"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// events yields the events, then err when it is not nil.
func eventsSeq(events []ledger.Event, err error) iter.Seq2[ledger.Event, error] {
	return func(yield func(ledger.Event, error) bool) {
		for _, e := range events {
			if !yield(e, nil) {
				return
			}
		}
		if err != nil {
			yield(ledger.Event{}, err)
		}
	}
}

// queuedInput returns a queued message (an input without a run id): what
// any host may append to a session another host leases.
func queuedInput(session string, n int) ledger.Event {
	e := seqEvent(session, n)
	e.Kind, e.RunID, e.Poke = ledger.KindInput, "", nil
	e.Input = &ledger.Input{MessageID: e.ID + "-msg", Parts: []ledger.Part{ledger.TextPart("queued")}}
	return e
}

// version returns the session's version, failing the test on error.
func version(t *testing.T, f storage.Fencer, ctx context.Context, id string) string {
	t.Helper()
	v, err := f.SessionVersion(ctx, id)
	if err != nil {
		t.Fatalf("SessionVersion(%.20q): %v", id, err)
	}
	return v
}

// runFencer checks a [storage.Fencer]: a is fenced, and b (the same store
// in Run, another handle on the backend in RunShared) appends.
func runFencer(t *testing.T, a, b storage.Storage) {
	f, ok := a.(storage.Fencer)
	if !ok {
		t.Skip("the store does not implement storage.Fencer")
	}
	ctx := t.Context()
	if v := version(t, f, ctx, "fence-a"); v != "" {
		t.Errorf("SessionVersion of a session with no events = %q, want \"\"", v)
	}
	appendOK(t, b, ctx, "fence-a", seqEvents("fence-a", 0, 3)...)
	v1 := version(t, f, ctx, "fence-a")
	if v1 == "" {
		t.Fatal("SessionVersion of a session with events = \"\"")
	}
	if _, err := a.Load(ctx, "fence-a"); err != nil {
		t.Fatal(err)
	}
	if v := version(t, f, ctx, "fence-a"); v != v1 {
		t.Errorf("SessionVersion changed from %q to %q with a Load: only changes of the ledger change it", v1, v)
	}
	appendOK(t, b, ctx, "fence-a", seqEvent("fence-a", 3))
	v2 := version(t, f, ctx, "fence-a")
	if v2 == v1 {
		t.Errorf("SessionVersion = %q before and after an Append: every Append changes it", v1)
	}

	// A stale version is refused, and nothing changes.
	replacement := seqEvents("fence-new", 0, 2)
	if err := f.ReplaceSession(ctx, "fence-a", v1, eventsSeq(replacement, nil)); !errors.Is(err, storage.ErrSessionChanged) {
		t.Errorf("ReplaceSession with a stale version = %v, want storage.ErrSessionChanged", err)
	}
	if err := f.ReplaceSession(ctx, "fence-a", v1, eventsSeq(nil, nil)); !errors.Is(err, storage.ErrSessionChanged) {
		t.Errorf("ReplaceSession (a deletion) with a stale version = %v, want storage.ErrSessionChanged", err)
	}
	if err := f.ReplaceSession(ctx, "fence-a", "", eventsSeq(replacement, nil)); !errors.Is(err, storage.ErrSessionChanged) {
		t.Errorf("ReplaceSession with version \"\" of a session with events = %v, want storage.ErrSessionChanged", err)
	}
	wantLoad(t, a, ctx, "fence-a", seqEvents("fence-a", 0, 4), "after refused ReplaceSessions")

	// The sequence's error, and an event the codec refuses, change nothing.
	boom := errors.New("the archive is truncated")
	if err := f.ReplaceSession(ctx, "fence-a", v2, eventsSeq(replacement, boom)); !errors.Is(err, boom) {
		t.Errorf("ReplaceSession whose events fail = %v, want their error", err)
	}
	invalid := seqEvent("fence-new", 9)
	invalid.ID = ""
	if err := f.ReplaceSession(ctx, "fence-a", v2, eventsSeq(append(slices.Clone(replacement), invalid), nil)); err == nil {
		t.Error("ReplaceSession with an event the codec refuses: no error")
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := f.ReplaceSession(done, "fence-a", v2, eventsSeq(replacement, nil)); !errors.Is(err, context.Canceled) {
		t.Errorf("ReplaceSession with a done ctx = %v, want context.Canceled", err)
	}
	if _, err := f.SessionVersion(done, "fence-a"); !errors.Is(err, context.Canceled) {
		t.Errorf("SessionVersion with a done ctx = %v, want context.Canceled", err)
	}
	wantLoad(t, a, ctx, "fence-a", seqEvents("fence-a", 0, 4), "after ReplaceSessions that failed")
	if v := version(t, f, ctx, "fence-a"); v != v2 {
		t.Errorf("SessionVersion changed from %q to %q with ReplaceSessions that failed", v2, v)
	}

	// The current version replaces the ledger; appends go on after it.
	if err := f.ReplaceSession(ctx, "fence-a", v2, eventsSeq(replacement, nil)); err != nil {
		t.Fatalf("ReplaceSession with the current version: %v", err)
	}
	wantLoad(t, a, ctx, "fence-a", replacement, "after ReplaceSession")
	v3 := version(t, f, ctx, "fence-a")
	if v3 == "" || v3 == v2 || v3 == v1 {
		t.Errorf("SessionVersion after ReplaceSession = %q (before: %q, %q), want a new one", v3, v1, v2)
	}
	appendOK(t, b, ctx, "fence-a", seqEvent("fence-new", 2))
	wantLoad(t, b, ctx, "fence-a", seqEvents("fence-new", 0, 3), "an Append after ReplaceSession")

	// "" creates a session; many events, more than a page, in order.
	many := seqEvents("fence-many", 0, 1200)
	if err := f.ReplaceSession(ctx, "fence-many", "", eventsSeq(many, nil)); err != nil {
		t.Fatalf("ReplaceSession of a new session: %v", err)
	}
	wantLoad(t, b, ctx, "fence-many", many, "a session made by ReplaceSession")
	if l, ok := b.(storage.Lister); ok {
		ids, err := l.ListSessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		checkIDs(t, "ListSessions after ReplaceSessions", ids, []string{"fence-a", "fence-many"})
	}

	// No events deletes: lease and all.
	if l, ok := a.(storage.Leaser); ok {
		if _, err := l.AcquireLease(ctx, "fence-many", "owner-1", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	vm := version(t, f, ctx, "fence-many")
	if err := f.ReplaceSession(ctx, "fence-many", vm, eventsSeq(nil, nil)); err != nil {
		t.Fatalf("ReplaceSession with no events: %v", err)
	}
	wantLoad(t, b, ctx, "fence-many", nil, "after ReplaceSession with no events")
	if v := version(t, f, ctx, "fence-many"); v != "" {
		t.Errorf("SessionVersion of a deleted session = %q, want \"\"", v)
	}
	if l, ok := b.(storage.Lister); ok {
		ids, err := l.ListSessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		checkIDs(t, "ListSessions after a deletion by ReplaceSession", ids, []string{"fence-a"})
	}
	if l, ok := b.(storage.Leaser); ok {
		lease, err := l.AcquireLease(ctx, "fence-many", "owner-2", time.Minute)
		if err != nil {
			t.Errorf("AcquireLease by another owner after a deletion by ReplaceSession: %v, want the lease gone with its session", err)
		} else {
			lease.Release(ctx)
		}
	}
	if err := f.ReplaceSession(ctx, "fence-never", "", eventsSeq(nil, nil)); err != nil {
		t.Errorf("ReplaceSession with no events of a session with none: %v, want nil", err)
	}

	// A message queued under another owner's lease (which the lease does
	// not refuse) changes the version: that is what the fence is for.
	if l, ok := b.(storage.Leaser); ok {
		lease, err := l.AcquireLease(ctx, "fence-a", "owner-3", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(ctx)
		before := version(t, f, ctx, "fence-a")
		appendOK(t, b, ctx, "fence-a", queuedInput("fence-a", 50))
		if v := version(t, f, ctx, "fence-a"); v == before {
			t.Errorf("SessionVersion = %q before and after a message queued under a lease", v)
		}
		if err := f.ReplaceSession(ctx, "fence-a", before, eventsSeq(nil, nil)); !errors.Is(err, storage.ErrSessionChanged) {
			t.Errorf("ReplaceSession after a queued message = %v, want storage.ErrSessionChanged", err)
		}
		if got, _ := a.Load(ctx, "fence-a"); len(got) != 4 {
			t.Errorf("the session holds %d events after a refused deletion, want 4", len(got))
		}
	}

	// A long id, through a Prefix view.
	if _, ok := a.(storage.KV); ok {
		if _, ok := a.(storage.Lister); ok {
			view, err := storage.Prefix(a, "fence:")
			if err != nil {
				t.Fatal(err)
			}
			vf := view.(storage.Fencer)
			long := strings.Repeat("L", 128)
			if err := vf.ReplaceSession(ctx, long, "", eventsSeq(seqEvents("long", 0, 2), nil)); err != nil {
				t.Fatalf("ReplaceSession of a long id through a view: %v", err)
			}
			ids, err := view.(storage.Lister).ListSessions(ctx)
			if err != nil {
				t.Fatal(err)
			}
			checkIDs(t, "the view's sessions after ReplaceSession of a long id", ids, []string{long})
			if err := vf.ReplaceSession(ctx, long, version(t, vf, ctx, long), eventsSeq(nil, nil)); err != nil {
				t.Fatalf("ReplaceSession deleting a long id through a view: %v", err)
			}
			ids, _ = view.(storage.Lister).ListSessions(ctx)
			checkIDs(t, "the view's sessions after deleting a long id", ids, nil)
		}
	}

	for _, id := range []string{"", "bad/id", strings.Repeat("x", 129)} {
		if _, err := f.SessionVersion(ctx, id); !errors.Is(err, storage.ErrInvalidSessionID) {
			t.Errorf("SessionVersion(%.20q) = %v, want storage.ErrInvalidSessionID", id, err)
		}
		if err := f.ReplaceSession(ctx, id, "", eventsSeq(replacement, nil)); !errors.Is(err, storage.ErrInvalidSessionID) {
			t.Errorf("ReplaceSession(%.20q) = %v, want storage.ErrInvalidSessionID", id, err)
		}
	}
	if c, ok := a.(storage.Closer); ok && a == b {
		c.Close()
		if _, err := f.SessionVersion(ctx, "fence-a"); !errors.Is(err, storage.ErrClosed) {
			t.Errorf("SessionVersion after Close = %v, want storage.ErrClosed", err)
		}
		if err := f.ReplaceSession(ctx, "fence-a", "", eventsSeq(replacement, nil)); !errors.Is(err, storage.ErrClosed) {
			t.Errorf("ReplaceSession after Close = %v, want storage.ErrClosed", err)
		}
	}
}

// wantLoad checks that the session loads as want.
func wantLoad(t *testing.T, s storage.Storage, ctx context.Context, id string, want []ledger.Event, why string) {
	t.Helper()
	got, err := s.Load(ctx, id)
	if err != nil {
		t.Errorf("Load(%q) %s: %v", id, why, err)
		return
	}
	if want == nil {
		want = []ledger.Event{}
	}
	diffEvents(t, why, got, want)
}

// runBlobFence checks a [storage.BlobFence]: a writes and holds, b marks
// and deletes (the same store in Run, two handles in RunShared).
func runBlobFence(t *testing.T, a, b storage.Storage) {
	ba, ok1 := a.(storage.Blobs)
	fa, ok2 := a.(storage.BlobFence)
	if !ok1 || !ok2 {
		t.Skip("the store does not implement storage.BlobFence")
	}
	bb := b.(storage.Blobs)
	fb, ok := b.(storage.BlobFence)
	if !ok {
		t.Fatal("the second handle does not implement storage.BlobFence, the first does")
	}
	ctx := t.Context()
	clearBlobs(t, ba)
	mark := func(d string) string {
		t.Helper()
		m, err := fb.MarkBlob(ctx, d)
		if err != nil || m == "" {
			t.Fatalf("MarkBlob: %q, %v", m, err)
		}
		return m
	}
	deleteMarked := func(d, m string, want bool, why string) {
		t.Helper()
		deleted, err := fb.DeleteMarkedBlob(ctx, d, m)
		if err != nil {
			t.Fatalf("DeleteMarkedBlob %s: %v", why, err)
		}
		if deleted != want {
			t.Errorf("DeleteMarkedBlob %s = %v, want %v", why, deleted, want)
		}
	}
	present := func(d string, want bool, why string) {
		t.Helper()
		_, ok, err := ba.GetBlob(ctx, d)
		if err != nil {
			t.Fatalf("GetBlob: %v", err)
		}
		_, listedNow := listed(t, bb, ctx)[d]
		if ok != want || listedNow != want {
			t.Errorf("%s: stored %v, listed %v; want %v", why, ok, listedNow, want)
		}
	}

	// Marked, then deleted.
	d := putOK(t, ba, ctx, []byte("marked then deleted"))
	deleteMarked(d, mark(d), true, "of a marked blob")
	present(d, false, "a blob deleted by DeleteMarkedBlob")
	deleteMarked(d, mark(d), false, "of a blob deleted already")

	// A put after the mark clears it.
	d = putOK(t, ba, ctx, []byte("put again"))
	m := mark(d)
	putOK(t, ba, ctx, []byte("put again"))
	deleteMarked(d, m, false, "of a blob put again after its mark")
	present(d, true, "a blob put again after its mark")

	// A later mark replaces an earlier one; "" is no mark.
	m1 := mark(d)
	m2 := mark(d)
	deleteMarked(d, m1, false, "with a mark replaced by a later one")
	deleteMarked(d, "", false, "with the empty mark")
	present(d, true, "a blob whose deletions were refused")
	deleteMarked(d, m2, true, "with the latest mark")

	// A hold refuses the deletion; its release clears the mark.
	d = putOK(t, ba, ctx, []byte("held"))
	h, err := fa.HoldBlob(ctx, d, time.Minute)
	if err != nil || h == "" {
		t.Fatalf("HoldBlob: %q, %v", h, err)
	}
	m = mark(d)
	deleteMarked(d, m, false, "of a held blob")
	present(d, true, "a held blob")
	if err := fa.ReleaseBlob(ctx, d, h); err != nil {
		t.Fatalf("ReleaseBlob: %v", err)
	}
	deleteMarked(d, m, false, "with a mark set before the hold's release")
	present(d, true, "a blob marked while held, after the release")
	if err := fa.ReleaseBlob(ctx, d, h); err != nil {
		t.Errorf("ReleaseBlob of a hold released already: %v, want nil", err)
	}
	deleteMarked(d, mark(d), true, "of a blob no longer held")

	// A hold taken before the blob is put; two holds need two releases.
	d = storage.BlobDigest([]byte("held before its put"))
	h1, err := fa.HoldBlob(ctx, d, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := fa.HoldBlob(ctx, d, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	putOK(t, ba, ctx, []byte("held before its put"))
	fa.ReleaseBlob(ctx, d, h1)
	deleteMarked(d, mark(d), false, "of a blob one of two holds still holds")
	fa.ReleaseBlob(ctx, d, h2)
	deleteMarked(d, mark(d), true, "of a blob both holds released")

	// A hold lapses after its ttl.
	d = putOK(t, ba, ctx, []byte("a hold that lapses"))
	if _, err := fa.HoldBlob(ctx, d, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		deleted, err := fb.DeleteMarkedBlob(ctx, d, mark(d))
		if err != nil {
			t.Fatal(err)
		}
		if deleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a hold of 20ms still refuses a deletion 10s later")
		}
		time.Sleep(10 * time.Millisecond) // the hold's ttl is the event waited for
	}

	// Invalid digests, a done ctx.
	for _, bad := range []string{"", "sha256:xyz", "md5:" + strings.Repeat("0", 64)} {
		if _, err := fa.HoldBlob(ctx, bad, time.Minute); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("HoldBlob(%q) = %v, want storage.ErrInvalidKey", bad, err)
		}
		if _, err := fb.MarkBlob(ctx, bad); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("MarkBlob(%q) = %v, want storage.ErrInvalidKey", bad, err)
		}
		if _, err := fb.DeleteMarkedBlob(ctx, bad, "m"); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("DeleteMarkedBlob(%q) = %v, want storage.ErrInvalidKey", bad, err)
		}
		if err := fa.ReleaseBlob(ctx, bad, "h"); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("ReleaseBlob(%q) = %v, want storage.ErrInvalidKey", bad, err)
		}
	}
	d = putOK(t, ba, ctx, []byte("done ctx"))
	m = mark(d)
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := fb.DeleteMarkedBlob(done, d, m); !errors.Is(err, context.Canceled) {
		t.Errorf("DeleteMarkedBlob with a done ctx = %v, want context.Canceled", err)
	}
	if _, err := fa.HoldBlob(done, d, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("HoldBlob with a done ctx = %v, want context.Canceled", err)
	}
	present(d, true, "a blob after calls with a done ctx")

	// Views keep their fences apart, as their blobs.
	if _, ok := a.(storage.BlobScoper); ok {
		va, err1 := storage.Prefix(a, "fa:")
		vb, err2 := storage.Prefix(a, "fb:")
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		data := []byte("the same bytes in two views")
		d := putOK(t, va.(storage.Blobs), ctx, data)
		putOK(t, vb.(storage.Blobs), ctx, data)
		h, err := va.(storage.BlobFence).HoldBlob(ctx, d, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer va.(storage.BlobFence).ReleaseBlob(ctx, d, h)
		m, err := vb.(storage.BlobFence).MarkBlob(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if deleted, err := vb.(storage.BlobFence).DeleteMarkedBlob(ctx, d, m); err != nil || !deleted {
			t.Errorf("DeleteMarkedBlob in one view while another view holds the same bytes = %v, %v; want deleted (fences are per scope)", deleted, err)
		}
		if _, ok, _ := va.(storage.Blobs).GetBlob(ctx, d); !ok {
			t.Error("a view's blob was deleted with another view's")
		}
	}
}
