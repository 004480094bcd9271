package file

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"os"
	"strconv"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// SessionVersion implements [storage.Fencer]: the count of the changes
// this Store made to the session's file, with the file's size and
// modification time (so that another Store's appends change it too); ""
// when the file is missing or empty.
func (st *Store) SessionVersion(ctx context.Context, sessionID string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := checkID(sessionID); err != nil {
		return "", err
	}
	s, err := st.session(sessionID)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", storage.ErrClosed
	}
	return st.versionLocked(s, sessionID)
}

// versionLocked is SessionVersion with s.mu held.
func (st *Store) versionLocked(s *session, sessionID string) (string, error) {
	fi, err := os.Stat(st.path(sessionID))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("file: version of session %q: %w", sessionID, err)
	}
	if fi.Size() == 0 {
		return "", nil
	}
	return strconv.FormatUint(s.gen, 10) + "." + strconv.FormatInt(fi.Size(), 10) + "." + strconv.FormatInt(fi.ModTime().UnixNano(), 10), nil
}

// ReplaceSession implements [storage.Fencer]: it writes the events to a
// new file in the directory (".replace-*", one record per event,
// fsynced with [Options.Fsync]) without holding the session, then, with
// the session held and its version still version, renames the new file
// over the session's (or, with no events, removes the session's file) and
// fsyncs the directory. The Store's own Appends to the session wait for
// that last step only.
func (st *Store) ReplaceSession(ctx context.Context, sessionID, version string, events iter.Seq2[ledger.Event, error]) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkID(sessionID); err != nil {
		return err
	}
	s, err := st.session(sessionID)
	if err != nil {
		return err
	}
	tmp, n, err := st.writeReplacement(ctx, sessionID, events)
	if err != nil {
		return err
	}
	removeTmp := func() {
		if tmp != "" {
			os.Remove(tmp)
		}
	}
	if err := ctx.Err(); err != nil {
		removeTmp()
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		removeTmp()
		return storage.ErrClosed
	}
	now, err := st.versionLocked(s, sessionID)
	if err != nil {
		removeTmp()
		return err
	}
	if now != version {
		removeTmp()
		return fmt.Errorf("file: replace session %q: %w", sessionID, storage.ErrSessionChanged)
	}
	if err := st.dropSnapshot(sessionID); err != nil {
		removeTmp()
		return err
	}
	st.forget(s)
	s.gen++
	path := st.path(sessionID)
	if n == 0 {
		err = os.Remove(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	} else {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		removeTmp()
		return fmt.Errorf("file: replace session %q: %w", sessionID, err)
	}
	if st.fsync {
		if err := syncDir(st.dir); err != nil {
			return fmt.Errorf("file: replace session %q: the session is replaced, but fsyncing its directory failed: %w", sessionID, err)
		}
	}
	return nil
}

// writeReplacement writes the events to a new temporary file, one record
// each, and returns its path ("" when there were none) and their number.
func (st *Store) writeReplacement(ctx context.Context, sessionID string, events iter.Seq2[ledger.Event, error]) (string, int, error) {
	var (
		f *os.File
		w *bufio.Writer
		n int
	)
	fail := func(err error) (string, int, error) {
		if f != nil {
			f.Close()
			os.Remove(f.Name())
		}
		return "", 0, err
	}
	for e, err := range events {
		if err != nil {
			return fail(err)
		}
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		n++
		rec, err := encodeRecord([]ledger.Event{e})
		if err != nil {
			return fail(fmt.Errorf("file: replace session %q: event %d: %w", sessionID, n, err))
		}
		if f == nil {
			if f, err = os.CreateTemp(st.dir, ".replace-*"); err != nil {
				return fail(fmt.Errorf("file: replace session %q: %w", sessionID, err))
			}
			if err := f.Chmod(0o600); err != nil {
				return fail(fmt.Errorf("file: replace session %q: %w", sessionID, err))
			}
			w = bufio.NewWriterSize(f, 64<<10)
		}
		if _, err := w.Write(rec); err != nil {
			return fail(fmt.Errorf("file: replace session %q: %w", sessionID, err))
		}
	}
	if f == nil {
		return "", 0, nil
	}
	err := w.Flush()
	if err == nil && st.fsync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", 0, fmt.Errorf("file: replace session %q: %w", sessionID, err)
	}
	return f.Name(), n, nil
}

var _ storage.Fencer = (*Store)(nil)
