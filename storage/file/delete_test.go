package file_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestDeleteByAnotherStore: a Store that keeps a session's file open
// notices that another Store on the directory deleted the session, and its
// next Append starts a new file instead of writing to the deleted one.
func TestDeleteByAnotherStore(t *testing.T) {
	dir := t.TempDir()
	a, _ := openStore(t, dir, false)
	b, _ := openStore(t, dir, false)
	ctx := t.Context()
	if err := a.Append(ctx, "s", pokes(0, 2)...); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteSession(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sessionPath(dir, "s")); !os.IsNotExist(err) {
		t.Fatalf("the session file after DeleteSession: %v, want it gone", err)
	}
	if err := a.Append(ctx, "s", poke(7)); err != nil {
		t.Fatal(err)
	}
	got, err := b.Load(ctx, "s")
	if err != nil || !equal(got, pokes(7, 1)) {
		t.Errorf("Load by the deleting Store = %v, %v; want the one event appended after the deletion", got, err)
	}
	got, err = a.Load(ctx, "s")
	if err != nil || !equal(got, pokes(7, 1)) {
		t.Errorf("Load by the appending Store = %v, %v; want the one event appended after the deletion", got, err)
	}
	if data := readFile(t, sessionPath(dir, "s")); !bytes.Equal(data, record(t, poke(7))) {
		t.Errorf("the new file holds %q, want only the new record", data)
	}
}

// TestDeleteNamespaceRemovesDirectory: nothing of a deleted namespace, or
// of one whose last key was deleted, is left on disk, not even its
// (hashed) directory.
func TestDeleteNamespaceRemovesDirectory(t *testing.T) {
	dir := t.TempDir()
	st, _ := openStore(t, dir, true)
	ctx := t.Context()
	if err := st.Set(ctx, "tenant:ns", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteNamespace(ctx, "tenant:ns"); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "kv"))
	if err != nil || len(entries) != 0 {
		t.Errorf("kv/ after DeleteNamespace: %v, %v; want empty", entries, err)
	}
	// Nor of one whose last key was deleted.
	for _, k := range []string{"a", "b"} {
		if err := st.Set(ctx, "tenant:other", k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"a", "b"} {
		if err := st.Delete(ctx, "tenant:other", k); err != nil {
			t.Fatal(err)
		}
	}
	entries, err = os.ReadDir(filepath.Join(dir, "kv"))
	if err != nil || len(entries) != 0 {
		t.Errorf("kv/ after the last key was deleted: %v, %v; want empty", entries, err)
	}
	// The namespace takes values again.
	if err := st.Set(ctx, "tenant:other", "c", []byte("v")); err != nil {
		t.Fatal(err)
	}
}
