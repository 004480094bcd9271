package storagetest

import (
	"slices"
	"testing"
	"time"

	"github.com/agentichost/agentic/storage"
)

// RunShared runs the checks that need two handles on one backend, for
// stores that several hosts share (a Redis, a database): open returns two
// stores, as two hosts would open them, over one fresh backend that holds
// no sessions (for instance two Stores with their own connections to one
// Redis database, prefix and tenant). Like [Run], each check is a subtest
// that calls open once, and open registers the cleanup of both stores.
//
// RunShared checks that:
//
//   - what one handle appends, the other loads (read-your-writes across
//     handles), in order, batches whole; and, for a [storage.Lister], that
//     the other lists it;
//   - [storage.Leaser]: every check of Run's Leaser subtest, with owner A
//     on the first handle and owner B on the second, so that exclusion,
//     expiry and fencing hold across hosts;
//   - [storage.RequestAppender]: every check of Run's RequestAppender
//     subtest, a request appended by one handle refused to the other;
//   - [storage.Watcher]: every check of Run's Watcher subtest, watching on
//     the first handle and appending through the second, so that a host
//     learns of another's appends;
//   - [storage.KV]: every check of Run's KV subtest, setting through the
//     first handle and reading through the second;
//   - [storage.Deleter]: a session one handle deletes is gone for the
//     other (its events, its listing, its lease), and the other's next
//     append starts a new ledger;
//   - [storage.NamespaceLister]: a namespace one handle sets is listed
//     by the other, and gone for it once deleted;
//   - [storage.Blobs]: every check of Run's Blobs subtest, putting through
//     the first handle and reading through the second.
//
// Both handles must implement the same optional interfaces. Stores that
// only one process may open (storage/file) have nothing to check here.
func RunShared(t *testing.T, open func(t *testing.T) (a, b storage.Storage)) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b storage.Storage)
	}{
		{"Visibility", testSharedVisibility},
		{"Leaser", runLeaser},
		{"RequestAppender", runRequestAppender},
		{"Snapshotter", runSnapshotter},
		{"Watcher", runWatcher},
		{"KV", runKV},
		{"Counter", runCounter},
		{"Deleter", testSharedDelete},
		{"NamespaceLister", testSharedNamespaces},
		{"Blobs", runBlobs},
		{"Fencer", runFencer},
		{"BlobFence", runBlobFence},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := open(t)
			if a == nil || b == nil {
				t.Fatal("open returned a nil store")
			}
			tc.fn(t, a, b)
		})
	}
}

func testSharedVisibility(t *testing.T, a, b storage.Storage) {
	ctx := t.Context()
	const id = "shared"
	want := EveryKind("run-shared")
	appendOK(t, a, ctx, id, want[:3]...)
	got, err := b.Load(ctx, id)
	if err != nil {
		t.Fatalf("Load by the other handle: %v", err)
	}
	diffEvents(t, "events appended by one handle, loaded by the other", got, want[:3])

	// Alternate writers (in turn, as hosts passing a session on do).
	for i, e := range want[3:] {
		w := a
		if i%2 == 0 {
			w = b
		}
		appendOK(t, w, ctx, id, e)
	}
	for name, s := range map[string]storage.Storage{"first": a, "second": b} {
		got, err := s.Load(ctx, id)
		if err != nil {
			t.Errorf("Load by the %s handle: %v", name, err)
			continue
		}
		diffEvents(t, "events appended by both handles in turn, loaded by the "+name, got, want)
	}
	if l, ok := b.(storage.Lister); ok {
		appendOK(t, a, ctx, "shared-2", seqEvent("shared-2", 0))
		ids, err := l.ListSessions(ctx)
		if err != nil {
			t.Fatalf("ListSessions: %v", err)
		}
		checkIDs(t, "ListSessions by the other handle", ids, []string{id, "shared-2"})
	}
}

func testSharedDelete(t *testing.T, a, b storage.Storage) {
	da, ok := a.(storage.Deleter)
	if !ok {
		t.Skip("the store does not implement storage.Deleter")
	}
	ctx := t.Context()
	appendOK(t, b, ctx, "shared-del", seqEvents("shared-del", 0, 3)...)
	if l, ok := b.(storage.Leaser); ok {
		if _, err := l.AcquireLease(ctx, "shared-del", "owner-b", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := da.DeleteSession(ctx, "shared-del"); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Load(ctx, "shared-del"); err != nil || len(got) != 0 {
		t.Errorf("the other handle loads %d events, %v, after DeleteSession; want none", len(got), err)
	}
	if l, ok := b.(storage.Lister); ok {
		ids, err := l.ListSessions(ctx)
		if err != nil || slices.Contains(ids, "shared-del") {
			t.Errorf("the other handle lists %q, %v, after DeleteSession", ids, err)
		}
	}
	if l, ok := b.(storage.LeaseInspector); ok {
		if holder, _, err := l.LeaseHolder(ctx, "shared-del"); err != nil || holder != "" {
			t.Errorf("the lease is held by %q (%v) after DeleteSession, want nobody", holder, err)
		}
	}
	appendOK(t, b, ctx, "shared-del", seqEvents("shared-del", 10, 1)...)
	if got, err := a.Load(ctx, "shared-del"); err != nil {
		t.Errorf("Load: %v", err)
	} else {
		diffEvents(t, "a session appended to by the other handle after its deletion", got, seqEvents("shared-del", 10, 1))
	}
}

func testSharedNamespaces(t *testing.T, a, b storage.Storage) {
	na, ok := a.(storage.NamespaceLister)
	if !ok {
		t.Skip("the store does not implement storage.NamespaceLister")
	}
	nb := b.(storage.NamespaceLister)
	ctx := t.Context()
	setOK(t, a.(storage.KV), ctx, "shared:ns", "k", []byte("v"))
	if got, err := nb.Namespaces(ctx, "shared:"); err != nil || !slices.Equal(got, []string{"shared:ns"}) {
		t.Errorf("the other handle lists %q, %v; want the namespace set", got, err)
	}
	if err := na.DeleteNamespace(ctx, "shared:ns"); err != nil {
		t.Fatal(err)
	}
	if n, err := b.(storage.KV).Len(ctx, "shared:ns"); err != nil || n != 0 {
		t.Errorf("the other handle counts %d keys, %v, after DeleteNamespace", n, err)
	}
}
