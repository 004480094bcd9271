package file_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestOutOfFileDescriptors takes the process's file descriptors away
// (RLIMIT_NOFILE lowered, the rest filled with /dev/null) and checks that
// the store outlasts it: an Append first closes the files the store keeps
// open between Appends; with none of its own to close, an Append and a
// Load wait for a descriptor to come free rather than fail, and give up
// with EMFILE when their context ends, or after 5 s when it does not. Like TestFailedWriteRollsBack, it
// changes a limit of the whole process and so does not run in parallel.
func TestOutOfFileDescriptors(t *testing.T) {
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	st, _ := openStore(t, dir, false)
	ctx := t.Context()
	for i := range 8 { // eight session files kept open
		if err := st.Append(ctx, fmt.Sprintf("kept%d", i), poke(1)); err != nil {
			t.Fatal(err)
		}
	}
	freshDir := t.TempDir()
	fresh, _ := openStore(t, freshDir, false)  // keeps none open
	reader, _ := openStore(t, freshDir, false) // nor will it

	// Room for a few more descriptors, then fill them.
	n, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	limit := old
	limit.Cur = uint64(len(n) + 8)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		t.Skip(err)
	}
	var filler []*os.File
	fill := func() {
		for {
			f, err := os.Open(os.DevNull)
			if err != nil {
				if !errors.Is(err, syscall.EMFILE) {
					t.Errorf("filling the descriptors: %v", err)
				}
				return
			}
			filler = append(filler, f)
		}
	}
	free := func(k int) {
		for ; k > 0 && len(filler) > 0; k-- {
			filler[len(filler)-1].Close()
			filler = filler[:len(filler)-1]
		}
	}
	defer func() {
		free(len(filler))
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
			t.Errorf("restoring RLIMIT_NOFILE: %v", err)
		}
	}()

	fill()
	if err := st.Append(ctx, "new", poke(1)); err != nil {
		t.Fatalf("Append with every descriptor taken but the store's own: %v", err)
	}

	fill()
	quick, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err = fresh.Append(quick, "a", poke(1))
	cancel()
	if !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("Append out of descriptors until its context ended = %v, want EMFILE", err)
	}
	quick, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = fresh.Load(quick, "b")
	cancel()
	if !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("Load out of descriptors until its context ended = %v, want EMFILE", err)
	}
	// A context without end: the wait is bounded all the same (fdWait,
	// 5 s), then the shortage's error.
	if err := fresh.Append(context.WithoutCancel(ctx), "c", poke(1)); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("Append out of descriptors with a context that never ends = %v, want EMFILE once its wait is over", err)
	}

	// A descriptor comes free while they wait: they go on (the Load
	// through another Store, which has no file of its own to close).
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"Append", func() error { return fresh.Append(ctx, "a", poke(1)) }},
		{"Load", func() error {
			evs, err := reader.Load(ctx, "a")
			if err == nil && !equal(evs, pokes(1, 1)) {
				err = fmt.Errorf("%d events, want 1", len(evs))
			}
			return err
		}},
	} {
		fill()
		done := make(chan error, 1)
		go func() { done <- op.do() }()
		select {
		case err := <-done:
			t.Fatalf("%s with no descriptor free returned at once: %v", op.name, err)
		case <-time.After(100 * time.Millisecond):
		}
		free(1)
		if err := <-done; err != nil {
			t.Fatalf("%s once a descriptor came free: %v", op.name, err)
		}
	}

	free(len(filler))
	for i := range 8 { // the files closed for room reopen
		if err := st.Append(ctx, fmt.Sprintf("kept%d", i), poke(2)); err != nil {
			t.Fatal(err)
		}
		if got, err := st.Load(ctx, fmt.Sprintf("kept%d", i)); err != nil || !equal(got, pokes(1, 2)) {
			t.Fatalf("kept%d: %d events, %v; want 2", i, len(got), err)
		}
	}
}
