package storagetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/storage"
)

// runDeleter checks a [storage.Deleter].
func runDeleter(t *testing.T, s storage.Storage) {
	d, ok := s.(storage.Deleter)
	if !ok {
		t.Skip("the store does not implement storage.Deleter")
	}
	ctx := t.Context()
	long := strings.Repeat("D", 128)
	for _, id := range []string{"del-a", "del-b", long} {
		appendOK(t, s, ctx, id, seqEvents(id, 0, 3)...)
	}
	kv, hasKV := s.(storage.KV)
	if hasKV {
		setOK(t, kv, ctx, "del-a", "k", []byte("kept"))
	}
	for _, id := range []string{"del-a", long} {
		if err := d.DeleteSession(ctx, id); err != nil {
			t.Fatalf("DeleteSession(%.20q): %v", id, err)
		}
		if got, err := s.Load(ctx, id); err != nil || len(got) != 0 {
			t.Errorf("Load(%.20q) after DeleteSession = %d events, %v; want none", id, len(got), err)
		}
	}
	if got, err := s.Load(ctx, "del-b"); err != nil {
		t.Errorf("Load(del-b): %v", err)
	} else {
		diffEvents(t, "the events of a session beside a deleted one", got, seqEvents("del-b", 0, 3))
	}
	if l, ok := s.(storage.Lister); ok {
		ids, err := l.ListSessions(ctx)
		if err != nil {
			t.Errorf("ListSessions: %v", err)
		}
		checkIDs(t, "ListSessions after DeleteSession", ids, []string{"del-b"})
	}
	if hasKV {
		wantValue(t, kv, ctx, "del-a", "k", []byte("kept"), "a KV namespace named like a deleted session")
	}
	// Deleting again, or a session never appended to, is a no-op.
	for _, id := range []string{"del-a", "del-never"} {
		if err := d.DeleteSession(ctx, id); err != nil {
			t.Errorf("DeleteSession(%q) of a session with no events: %v, want nil", id, err)
		}
	}
	// The id starts a new ledger.
	appendOK(t, s, ctx, "del-a", seqEvents("del-a", 10, 2)...)
	if got, err := s.Load(ctx, "del-a"); err != nil {
		t.Errorf("Load(del-a) after a new Append: %v", err)
	} else {
		diffEvents(t, "a session appended to after its deletion (only the new events)", got, seqEvents("del-a", 10, 2))
	}
	if l, ok := s.(storage.Lister); ok {
		ids, err := l.ListSessions(ctx)
		if err != nil {
			t.Errorf("ListSessions: %v", err)
		}
		checkIDs(t, "ListSessions after a deleted session's id was appended to again", ids, []string{"del-a", "del-b"})
	}
	// Invalid ids and a done ctx.
	for _, id := range []string{"", "bad/id", strings.Repeat("x", 129)} {
		if err := d.DeleteSession(ctx, id); !errors.Is(err, storage.ErrInvalidSessionID) {
			t.Errorf("DeleteSession(%.20q) = %v, want storage.ErrInvalidSessionID", id, err)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := d.DeleteSession(done, "del-b"); !errors.Is(err, context.Canceled) {
		t.Errorf("DeleteSession with a done ctx = %v, want context.Canceled", err)
	}
	if got, _ := s.Load(ctx, "del-b"); len(got) != 3 {
		t.Errorf("DeleteSession with a done ctx deleted the session (%d events left, want 3)", len(got))
	}
	// A lease goes with its session.
	if l, ok := s.(storage.Leaser); ok {
		if _, err := l.AcquireLease(ctx, "del-b", "owner-1", time.Minute); err != nil {
			t.Fatalf("AcquireLease: %v", err)
		}
		if err := d.DeleteSession(ctx, "del-b"); err != nil {
			t.Fatalf("DeleteSession of a leased session: %v", err)
		}
		lease, err := l.AcquireLease(ctx, "del-b", "owner-2", time.Minute)
		if err != nil {
			t.Errorf("AcquireLease by another owner after DeleteSession: %v, want the lease gone with its session", err)
		} else {
			lease.Release(ctx)
		}
	}
	if c, ok := s.(storage.Closer); ok {
		c.Close()
		if err := d.DeleteSession(ctx, "del-b"); !errors.Is(err, storage.ErrClosed) {
			t.Errorf("DeleteSession after Close = %v, want storage.ErrClosed", err)
		}
	}
}

// runNamespaceLister checks a [storage.NamespaceLister].
func runNamespaceLister(t *testing.T, s storage.Storage) {
	nl, ok := s.(storage.NamespaceLister)
	if !ok {
		t.Skip("the store does not implement storage.NamespaceLister")
	}
	kv, ok := s.(storage.KV)
	if !ok {
		t.Fatal("the store implements storage.NamespaceLister but not storage.KV")
	}
	ctx := t.Context()
	list := func(prefix string, want []string, why string) {
		t.Helper()
		got, err := nl.Namespaces(ctx, prefix)
		if err != nil {
			t.Errorf("Namespaces(%q) %s: %v", prefix, why, err)
			return
		}
		if !slices.Equal(got, want) && len(got)+len(want) > 0 {
			t.Errorf("Namespaces(%q) %s = %q, want %q", prefix, why, got, want)
		}
	}
	list("", nil, "of an empty store")
	all := []string{"t1:a", "t1:b*", "t1:\x00bin", "t10:a", "t2:a", "t[1]:?"}
	for i, ns := range all {
		for k := range i + 1 {
			setOK(t, kv, ctx, ns, string(rune('a'+k)), []byte("v"))
		}
	}
	appendOK(t, s, ctx, "t1:session", seqEvent("t1:session", 0))
	sorted := slices.Sorted(slices.Values(all))
	list("", sorted, "(namespaces only, no session)")
	list("t1:", []string{"t1:\x00bin", "t1:a", "t1:b*"}, "(a prefix, not t10:)")
	list("t[1]:", []string{"t[1]:?"}, "(glob characters are not patterns)")
	list("t3:", nil, "(a prefix with none)")

	if err := nl.DeleteNamespace(ctx, "t1:b*"); err != nil {
		t.Fatalf("DeleteNamespace: %v", err)
	}
	if n, err := kv.Len(ctx, "t1:b*"); err != nil || n != 0 {
		t.Errorf("Len of a deleted namespace = %d, %v; want 0", n, err)
	}
	if keys, err := kv.Keys(ctx, "t1:b*"); err != nil || len(keys) != 0 {
		t.Errorf("Keys of a deleted namespace = %q, %v; want none", keys, err)
	}
	wantValue(t, kv, ctx, "t1:a", "a", []byte("v"), "beside a deleted namespace")
	list("t1:", []string{"t1:\x00bin", "t1:a"}, "after DeleteNamespace")
	if err := nl.DeleteNamespace(ctx, "t1:b*"); err != nil {
		t.Errorf("DeleteNamespace of a namespace with no keys: %v, want nil", err)
	}
	// A namespace emptied key by key is not listed.
	if err := kv.Delete(ctx, "t1:a", "a"); err != nil {
		t.Fatal(err)
	}
	list("t1:", []string{"t1:\x00bin"}, "after the last key of t1:a was deleted")
	// The namespace is usable again.
	setOK(t, kv, ctx, "t1:b*", "z", []byte("again"))
	wantValue(t, kv, ctx, "t1:b*", "z", []byte("again"), "set after DeleteNamespace")
	if got, err := s.Load(ctx, "t1:session"); err != nil || len(got) != 1 {
		t.Errorf("a session beside deleted namespaces: %d events, %v; want 1", len(got), err)
	}
	if err := nl.DeleteNamespace(ctx, ""); !errors.Is(err, storage.ErrInvalidKey) {
		t.Errorf("DeleteNamespace(\"\") = %v, want storage.ErrInvalidKey", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := nl.Namespaces(done, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("Namespaces with a done ctx = %v, want context.Canceled", err)
	}
	if err := nl.DeleteNamespace(done, "t2:a"); !errors.Is(err, context.Canceled) {
		t.Errorf("DeleteNamespace with a done ctx = %v, want context.Canceled", err)
	}
	wantValue(t, kv, ctx, "t2:a", "a", []byte("v"), "after a DeleteNamespace with a done ctx")
}
