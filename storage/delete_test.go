package storage_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/storagetest"
)

// TestDeletePrefix: everything under one prefix goes, long ids and hashed
// namespaces included, and nothing of another prefix, even one that
// starts with the same letters.
func TestDeletePrefix(t *testing.T) {
	ctx := context.Background()
	base := memory.New()
	a, ab := mustPrefix(t, base, "a:"), mustPrefix(t, base, "ab:")
	long := strings.Repeat("L", 127)
	ev := storagetest.EveryKind("run_1")
	for _, v := range []storage.Storage{a, ab} {
		for _, id := range []string{"s1", long} {
			if err := v.Append(ctx, id, ev...); err != nil {
				t.Fatal(err)
			}
		}
		kv := v.(storage.KV)
		for _, ns := range []string{"ns", "~hashed", strings.Repeat("n", 250)} {
			if err := kv.Set(ctx, ns, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
	}
	rep, err := storage.DeletePrefix(ctx, base, "a:")
	if err != nil {
		t.Fatal(err)
	}
	// 2 sessions; 3 namespaces and the way back of the long id.
	want := storage.PrefixDeletion{Sessions: 2, Events: 2 * len(ev), Namespaces: 4, Keys: 4}
	if rep != want {
		t.Errorf("report = %+v, want %+v", rep, want)
	}
	all, _ := base.ListSessions(ctx)
	for _, id := range all {
		if strings.HasPrefix(id, "a:") {
			t.Errorf("session %q is left", id)
		}
	}
	if ns, _ := base.Namespaces(ctx, "a:"); len(ns) != 0 {
		t.Errorf("namespaces left: %q", ns)
	}
	for _, id := range []string{"s1", long} {
		if got, err := ab.Load(ctx, id); err != nil || len(got) != len(ev) {
			t.Errorf("ab:%.10s: %d events, %v; want %d", id, len(got), err, len(ev))
		}
	}
	if ids, _ := ab.(storage.Lister).ListSessions(ctx); len(ids) != 2 {
		t.Errorf("ab's sessions: %q", ids)
	}
	if n, _ := ab.(storage.KV).Len(ctx, strings.Repeat("n", 250)); n != 1 {
		t.Errorf("ab's hashed namespace has %d keys, want 1", n)
	}
	again, err := storage.DeletePrefix(ctx, base, "a:")
	if err != nil || again != (storage.PrefixDeletion{}) {
		t.Errorf("a second DeletePrefix = %+v, %v; want nothing to do", again, err)
	}
	if _, err := storage.DeletePrefix(ctx, base, "no-colon"); err == nil {
		t.Error("DeletePrefix with an invalid prefix: no error")
	}
}
