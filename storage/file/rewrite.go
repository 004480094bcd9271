package file

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/agentichost/agentic/storage"
)

// Rewrite implements [storage.Rewriter]: it passes each event's encoding
// in the session's file to fn and, when fn changed any, writes the new
// records to a new file in the directory (".rewrite-*", fsynced) and
// renames it over the old one, then fsyncs the directory: a crash leaves
// the old file or the new one. Each record keeps its events (a batch stays
// one line). A torn tail (see the package documentation) is kept as it
// is, after the rewritten records: Load drops it and the next Append
// truncates it, as before.
//
// An event fn fails on makes Rewrite fail with a [*CorruptError] naming
// the line; so does damage in the middle of the file. The Store's own
// Appends to the session wait for Rewrite; another process appending to
// the file meanwhile makes it fail with [storage.ErrRewriteRaced] when
// the file grew before the rename (a Store assumes it is the only writer:
// rewrite with the hosts stopped).
func (st *Store) Rewrite(ctx context.Context, sessionID string, fn func(event []byte) ([]byte, error), dryRun bool) (storage.RewriteStats, error) {
	var stats storage.RewriteStats
	if err := ctx.Err(); err != nil {
		return stats, err
	}
	if err := checkID(sessionID); err != nil {
		return stats, err
	}
	s, err := st.session(sessionID)
	if err != nil {
		return stats, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return stats, storage.ErrClosed
	case s.broken != nil:
		return stats, s.broken
	}
	path := st.path(sessionID)
	data, err := st.readFile(ctx, path)
	if errors.Is(err, fs.ErrNotExist) {
		return stats, nil
	}
	if err != nil {
		return stats, fmt.Errorf("file: rewrite session %q: %w", sessionID, err)
	}
	out, stats, err := rewriteRecords(path, data, fn)
	if err != nil || bytes.Equal(out, data) || dryRun {
		return stats, err
	}
	if err := ctx.Err(); err != nil {
		return stats, err
	}
	tmp, err := os.CreateTemp(st.dir, ".rewrite-*")
	if err != nil {
		return stats, fmt.Errorf("file: rewrite session %q: %w", sessionID, err)
	}
	fail := func(err error) (storage.RewriteStats, error) {
		tmp.Close()
		os.Remove(tmp.Name())
		return stats, fmt.Errorf("file: rewrite session %q: %w", sessionID, err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		return fail(err)
	}
	if _, err := tmp.Write(out); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if fi, err := os.Stat(path); err != nil {
		return fail(err)
	} else if fi.Size() != int64(len(data)) {
		return fail(storage.ErrRewriteRaced)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := st.dropSnapshot(sessionID); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fail(err)
	}
	// The open file, if any, is the old one: the next Append opens the
	// new one and measures its records.
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	s.known, s.size, s.seen, s.dirSynced = false, 0, 0, false
	s.gen++
	if err := syncDir(st.dir); err != nil {
		return stats, fmt.Errorf("file: rewrite session %q: the file is rewritten, but fsyncing its directory failed: %w", sessionID, err)
	}
	return stats, nil
}

// rewriteRecords returns the file's records with each event replaced by
// what fn returns for it, and the torn tail, if any, as it was.
func rewriteRecords(path string, data []byte, fn func([]byte) ([]byte, error)) ([]byte, storage.RewriteStats, error) {
	var stats storage.RewriteStats
	out := make([]byte, 0, len(data)+len(data)/8)
	line := 0
	for off := 0; off < len(data); {
		line++
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 { // a torn last record
			return append(out, data[off:]...), stats, nil
		}
		rec, n, changed, err := rewriteRecord(data[off:off+i], fn)
		if err != nil {
			// A record that does not decode may be a torn tail, kept.
			if _, derr := decodeRecord(nil, data[off:off+i]); derr != nil && tornLine(derr, data[off+i+1:]) {
				return append(out, data[off:]...), stats, nil
			}
			return nil, stats, &CorruptError{Path: path, Line: line, Offset: int64(off), Err: err}
		}
		stats.Events += n
		stats.Changed += changed
		out = append(append(out, rec...), '\n')
		off += i + 1
	}
	return out, stats, nil
}

// rewriteRecord rewrites the events of one record (a line without its
// newline): it returns the new record, how many events it holds, and how
// many of them fn changed.
func rewriteRecord(rec []byte, fn func([]byte) ([]byte, error)) ([]byte, int, int, error) {
	one := func(raw []byte) ([]byte, bool, error) {
		b, err := fn(bytes.Clone(raw))
		if err != nil {
			return nil, false, err
		}
		if bytes.IndexByte(b, '\n') >= 0 {
			return nil, false, errors.New("file: the rewritten event holds a newline")
		}
		return b, !bytes.Equal(b, raw), nil
	}
	if len(rec) == 0 || rec[0] != '[' {
		b, changed, err := one(rec)
		if err != nil {
			return nil, 0, 0, err
		}
		return b, 1, btoi(changed), nil
	}
	elems, err := splitBatch(rec)
	if err != nil {
		return nil, 0, 0, err
	}
	out := make([]byte, 0, len(rec))
	out = append(out, '[')
	changed := 0
	for j, raw := range elems {
		b, c, err := one(bytes.TrimSpace(raw))
		if err != nil {
			return nil, 0, 0, fmt.Errorf("event %d of the batch: %w", j+1, err)
		}
		if j > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
		changed += btoi(c)
	}
	return append(out, ']'), len(elems), changed, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

var _ storage.Rewriter = (*Store)(nil)
