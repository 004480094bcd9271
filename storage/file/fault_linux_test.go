package file_test

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/agentichost/agentic/storage/storagetest"
)

// TestFailedWriteRollsBack makes a write fail half-way (a file size limit:
// the write(2) is short, the next one fails with EFBIG; Go ignores
// SIGXFSZ) and checks that the failed Append leaves nothing in the file,
// and that the session takes appends again once the limit is gone.
//
// The limit holds for the whole process, so the test must not run beside
// tests that write files: it does not call t.Parallel, and parallel tests
// start only once every sequential one has returned.
func TestFailedWriteRollsBack(t *testing.T) {
	dir := t.TempDir()
	path := sessionPath(dir, "s")
	st, rec := openStore(t, dir, false)
	ctx := t.Context()
	if err := st.Append(ctx, "s", poke(1)); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, path)

	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Skip(err)
	}
	limit := old
	limit.Cur = uint64(len(before) + 100)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Skip(err)
	}
	err := st.Append(ctx, "s", storagetest.EveryKind("run-big")...)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatalf("restoring RLIMIT_FSIZE: %v", err)
	}
	if !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("Append over the size limit = %v, want EFBIG", err)
	}
	if got := readFile(t, path); !bytes.Equal(got, before) {
		t.Fatalf("after the failed Append the file is %q, want %q", got, before)
	}
	if got, err := st.Load(ctx, "s"); err != nil || !equal(got, pokes(1, 1)) {
		t.Errorf("Load after the failed Append = %d events, %v; want 1", len(got), err)
	}
	if err := st.Append(ctx, "s", poke(2)); err != nil {
		t.Fatalf("Append after the limit is gone: %v", err)
	}
	st2, _ := openStore(t, dir, false)
	if got, err := st2.Load(ctx, "s"); err != nil || !equal(got, pokes(1, 2)) {
		t.Errorf("reload = %d events, %v; want 2", len(got), err)
	}
	if w := rec.warnings(); len(w) > 0 {
		t.Errorf("unexpected warnings: %q", w)
	}
}

// TestFailedRollback makes both the write and its rollback fail (the
// session file is /dev/full: writes fail with ENOSPC, truncation with
// EINVAL): the session must then refuse appends, and say why.
func TestFailedRollback(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	if err := os.Symlink("/dev/full", sessionPath(dir, "s")); err != nil {
		t.Skip(err)
	}
	st, rec := openStore(t, dir, false)
	ctx := t.Context()
	if err := st.Append(ctx, "s", poke(1)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Append to /dev/full = %v, want ENOSPC", err)
	}
	err := st.Append(ctx, "s", poke(2))
	if err == nil || !strings.Contains(err.Error(), "could not be rolled back") {
		t.Errorf("Append after a failed rollback = %v, want an error saying the rollback failed", err)
	}
	var logged bool
	rec.mu.Lock()
	for _, r := range rec.records {
		logged = logged || r.Level == slog.LevelError
	}
	rec.mu.Unlock()
	if !logged {
		t.Error("the failed rollback was not logged as an error")
	}
	if got, err := st.Load(ctx, "s"); err != nil || len(got) != 0 {
		t.Errorf("Load = %d events, %v; want none, no error", len(got), err)
	}
	if ids, err := st.ListSessions(ctx); err != nil || len(ids) != 0 {
		t.Errorf("ListSessions = %q, %v; want none (not a regular file)", ids, err)
	}
}
