package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentichost/agentic/storage"
)

// DeleteSession implements [storage.Deleter]: it removes the session's
// file (and, with [Options.Fsync], fsyncs the directory). The Store's own
// Appends and Loads of the session wait for it; another Store on the
// directory that kept the file open notices on its next Append (the file
// has no name any more) and starts a new one, so that no event goes to a
// deleted file.
func (st *Store) DeleteSession(ctx context.Context, sessionID string) error {
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return storage.ErrClosed
	}
	if err := st.dropSnapshot(sessionID); err != nil {
		return err
	}
	st.forget(s)
	s.gen++
	err = os.Remove(st.path(sessionID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil && st.fsync {
		err = syncDir(st.dir)
	}
	if err != nil {
		return fmt.Errorf("file: delete session %q: %w", sessionID, err)
	}
	return nil
}

// forget closes the session's file, if open, and drops what the Store
// knows of it, so that its next use reads the file afresh. s.mu is held.
func (st *Store) forget(s *session) {
	if s.f != nil {
		if err := s.f.Close(); err != nil {
			st.log.Warn("file: closing a session file", "path", s.f.Name(), "error", err)
		}
		s.f = nil
	}
	st.openMu.Lock()
	if s.elem != nil {
		st.open.Remove(s.elem)
		s.elem = nil
	}
	st.openMu.Unlock()
	s.known, s.size, s.seen, s.dirSynced, s.broken = false, 0, 0, false, nil
}

// Namespaces implements [storage.NamespaceLister]: it reads the namespace
// out of a value file of each namespace's directory (whose name is a hash).
// A directory whose files do not decode fails it with [ErrCorruptValue].
func (st *Store) Namespaces(ctx context.Context, prefix string) ([]string, error) {
	if err := st.kvReady(ctx, nil); err != nil {
		return nil, err
	}
	root := filepath.Join(st.dir, kvDir)
	dirs, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("file: namespaces: %w", err)
	}
	var out []string
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		ns, ok, err := namespaceOf(filepath.Join(root, d.Name()))
		if err != nil {
			return nil, err
		}
		if ok && strings.HasPrefix(ns, prefix) {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out, nil
}

// namespaceOf returns the namespace of a namespace's directory, read from
// its first value file; ok is false when it holds none.
func namespaceOf(dir string) (ns string, ok bool, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("file: namespaces: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted meanwhile
		}
		if err != nil {
			return "", false, fmt.Errorf("file: namespaces: %w", err)
		}
		ns, _, _, err := decodeEntry(data)
		if err != nil {
			return "", false, fmt.Errorf("file: namespaces: %s: %w", filepath.Join(dir, e.Name()), err)
		}
		return ns, true, nil
	}
	return "", false, nil
}

// DeleteNamespace implements [storage.NamespaceLister]: it removes the
// namespace's directory (and, with [Options.Fsync], fsyncs its parent).
func (st *Store) DeleteNamespace(ctx context.Context, namespace string) error {
	if err := st.kvReady(ctx, storage.CheckNamespace(namespace)); err != nil {
		return err
	}
	dir, _ := st.kvPath(namespace, "-")
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("file: delete namespace: %w", err)
	}
	if st.fsync {
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return fmt.Errorf("file: delete namespace: %w", err)
		}
	}
	return nil
}

var (
	_ storage.Deleter         = (*Store)(nil)
	_ storage.NamespaceLister = (*Store)(nil)
)
