package file_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentichost/agentic/storage/file"
)

// openFilesIn counts this process's file descriptors open on files in dir.
func openFilesIn(t *testing.T, dir string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot list open files: %v", err)
	}
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			n++
		}
	}
	return n
}

// TestMaxOpenFiles: a host appending to many sessions keeps at most
// MaxOpenFiles of their files open, from one goroutine or many, and loses
// nothing when files are closed and reopened.
func TestMaxOpenFiles(t *testing.T) {
	dir := t.TempDir()
	const limit, sessions, rounds, workers = 4, 40, 5, 8
	st, err := file.Open(dir, file.Options{MaxOpenFiles: limit})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := t.Context()
	for r := range rounds {
		for i := range sessions {
			if err := st.Append(ctx, fmt.Sprint("s", i), poke(r)); err != nil {
				t.Fatal(err)
			}
		}
		if n := openFilesIn(t, dir); n > limit {
			t.Fatalf("round %d: %d session files open, the limit is %d", r, n, limit)
		}
	}
	// Concurrent appends: each worker owns its sessions (one writer per
	// session, as the contract says).
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				for i := w; i < sessions; i += workers {
					if err := st.Append(ctx, fmt.Sprint("s", i), poke(rounds+r)); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	// Sessions busy at the moment of a close are passed over, so a few
	// may stay open beyond the limit until the next append closes them.
	if n := openFilesIn(t, dir); n > limit+workers {
		t.Fatalf("after concurrent appends: %d session files open, the limit is %d (+%d busy)", n, limit, workers)
	}
	for i := range sessions {
		got, err := st.Load(ctx, fmt.Sprint("s", i))
		if err != nil || !equal(got, pokes(0, 2*rounds)) {
			t.Fatalf("session s%d: %d events, %v; want %d in order", i, len(got), err, 2*rounds)
		}
	}
	if _, err := file.Open(dir, file.Options{MaxOpenFiles: -2}); err == nil {
		t.Error("MaxOpenFiles -2 accepted")
	}
}
