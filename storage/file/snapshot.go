package file

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// A session's snapshot (see [storage.Snapshotter]) is the file
// <dir>/<id>.snap: a line of JSON, snapHeader, then the snapshot's bytes.
// It is written to a temporary file and renamed over the last one, so a
// crash leaves one snapshot or the other. The header names where the
// snapshot was taken: the byte offset of the record (line) that holds the
// event, the event's place in that record, and the SHA-256 of that line.
// A load checks all three against the session file, and the data's own
// SHA-256; anything else is read as no snapshot, and the whole file is
// loaded. DeleteSession, ReplaceSession and Rewrite remove the snapshot
// before they change the file.
const snapExt = ".snap"

// snapHeader is the first line of a snapshot file.
type snapHeader struct {
	V      int    `json:"v"`
	Event  string `json:"event"`  // the id of the event the snapshot was taken at
	Offset int64  `json:"offset"` // where the record holding it starts
	Index  int    `json:"index"`  // its place in that record
	Record string `json:"record"` // SHA-256 of the record's line, hex
	Data   string `json:"data"`   // SHA-256 of the data, hex
}

// snapMaxHeader bounds a snapshot file's header line.
const snapMaxHeader = 4 << 10

// snapLookBack is how many bytes PutSnapshot reads from the end of the file
// at first, looking for the snapshot's event; it doubles until it finds
// it, passes storage.MaxSnapshotLag events or reaches the start.
const snapLookBack = 256 << 10

func (st *Store) snapPath(sessionID string) string {
	return filepath.Join(st.dir, sessionID+snapExt)
}

// PutSnapshot implements [storage.Snapshotter].
func (st *Store) PutSnapshot(ctx context.Context, sessionID, eventID string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkID(sessionID); err != nil {
		return err
	}
	if len(data) > storage.MaxSnapshotBytes {
		return fmt.Errorf("file: snapshot of session %q: %d bytes, more than %d", sessionID, len(data), storage.MaxSnapshotBytes)
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
	path := st.path(sessionID)
	f, err := st.openFile(ctx, path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("file: snapshot of session %q at %s: %w", sessionID, eventID, storage.ErrSnapshotPoint)
	}
	if err != nil {
		return fmt.Errorf("file: snapshot of session %q: %w", sessionID, err)
	}
	defer f.Close()
	hd, err := findEvent(f, eventID)
	if err != nil {
		return fmt.Errorf("file: snapshot of session %q at %s: %w", sessionID, eventID, err)
	}
	sum := sha256.Sum256(data)
	hd.V, hd.Event, hd.Data = 1, eventID, hex.EncodeToString(sum[:])
	head, err := json.Marshal(hd)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(st.dir, ".snap-*")
	if err != nil {
		return fmt.Errorf("file: snapshot of session %q: %w", sessionID, err)
	}
	fail := func(err error) error {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("file: snapshot of session %q: %w", sessionID, err)
	}
	if _, err := tmp.Write(append(append(head, '\n'), data...)); err != nil {
		return fail(err)
	}
	if st.fsync {
		if err := tmp.Sync(); err != nil {
			return fail(err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), st.snapPath(sessionID)); err != nil {
		return fail(err)
	}
	return nil
}

// findEvent looks for the event eventID among the last
// storage.MaxSnapshotLag events of the session file f, reading back from
// its last complete line; it returns where it is, or ErrSnapshotPoint.
func findEvent(f *os.File, eventID string) (snapHeader, error) {
	fi, err := f.Stat()
	if err != nil {
		return snapHeader{}, err
	}
	size := fi.Size()
	for window := int64(snapLookBack); ; window *= 2 {
		start := max(size-window, 0)
		buf := make([]byte, size-start)
		if _, err := f.ReadAt(buf, start); err != nil && !errors.Is(err, io.EOF) {
			return snapHeader{}, err
		}
		// The lines of buf from the end: the last one without a newline
		// is an append in progress or a torn tail; the first one, unless
		// buf starts the file, may be cut.
		end := bytes.LastIndexByte(buf, '\n')
		seen := 0
		for end >= 0 {
			from := bytes.LastIndexByte(buf[:end], '\n') + 1
			if from == 0 && start > 0 {
				break // cut: read a larger window
			}
			line := buf[from:end]
			events, err := decodeRecord(nil, line)
			if err == nil {
				for i := len(events) - 1; i >= 0; i-- {
					if seen++; seen > storage.MaxSnapshotLag {
						return snapHeader{}, storage.ErrSnapshotPoint
					}
					if events[i].ID == eventID {
						sum := sha256.Sum256(line)
						return snapHeader{Offset: start + int64(from), Index: i, Record: hex.EncodeToString(sum[:])}, nil
					}
				}
			}
			end = from - 1
		}
		if start == 0 {
			return snapHeader{}, storage.ErrSnapshotPoint
		}
	}
}

// LoadSnapshot implements [storage.Snapshotter]: the snapshot's file, then
// the session file from the record that holds the snapshot's event, which
// must be the record it was taken at. The records after it load as Load's
// do (a torn tail dropped with a warning, damage a *CorruptError).
func (st *Store) LoadSnapshot(ctx context.Context, sessionID string) ([]byte, string, []ledger.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", nil, err
	}
	if err := checkID(sessionID); err != nil {
		return nil, "", nil, err
	}
	data, hd, ok := st.readSnapshot(sessionID)
	if ok {
		events, ok, err := st.loadAfter(ctx, sessionID, hd)
		if err != nil {
			return nil, "", nil, err
		}
		if ok {
			return data, hd.Event, events, nil
		}
	}
	events, err := st.Load(ctx, sessionID)
	return nil, "", events, err
}

// readSnapshot reads the session's snapshot file: ok false when there is
// none or it is damaged (logged).
func (st *Store) readSnapshot(sessionID string) (data []byte, hd snapHeader, ok bool) {
	path := st.snapPath(sessionID)
	bad := func(why string) ([]byte, snapHeader, bool) {
		st.log.Warn("file: ignoring a session's snapshot", "session", sessionID, "path", path, "reason", why)
		return nil, hd, false
	}
	// What the file holds when opened, bounded: a snapshot the store
	// wrote is its data and a header line; anything larger (or a device
	// behind a link) is not one, and is not read whole.
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, hd, false
	}
	if err == nil && fi.Size() > storage.MaxSnapshotBytes+snapMaxHeader {
		return bad(fmt.Sprintf("%d bytes, more than a snapshot holds", fi.Size()))
	}
	b, err := readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, hd, false
	}
	if err != nil {
		return bad(err.Error())
	}
	head, data, found := bytes.Cut(b, []byte{'\n'})
	if !found {
		return bad("no header line")
	}
	if err := json.Unmarshal(head, &hd); err != nil || hd.V != 1 || hd.Event == "" || hd.Offset < 0 || hd.Index < 0 {
		return bad(fmt.Sprintf("its header does not read (%v)", err))
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != hd.Data {
		return bad("its data does not match its checksum")
	}
	return data, hd, true
}

// loadAfter returns the events of the session file after the snapshot's
// event; ok false when the file does not hold the snapshot's record where
// the snapshot says.
func (st *Store) loadAfter(ctx context.Context, sessionID string, hd snapHeader) ([]ledger.Event, bool, error) {
	s, err := st.session(sessionID)
	if err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false, storage.ErrClosed
	}
	path := st.path(sessionID)
	f, err := st.openFile(ctx, path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("file: load session %q: %w", sessionID, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("file: load session %q: %w", sessionID, err)
	}
	from := max(hd.Offset-1, 0) // the newline before the record, to see that it starts a line
	if fi.Size() <= hd.Offset {
		return nil, false, nil
	}
	data := make([]byte, fi.Size()-from)
	if _, err := f.ReadAt(data, from); err != nil && !errors.Is(err, io.EOF) {
		return nil, false, fmt.Errorf("file: load session %q: %w", sessionID, err)
	}
	if hd.Offset > 0 {
		if data[0] != '\n' {
			return nil, false, nil
		}
		data = data[1:]
	}
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		return nil, false, nil
	}
	if sum := sha256.Sum256(data[:i]); hex.EncodeToString(sum[:]) != hd.Record {
		return nil, false, nil
	}
	first, err := decodeRecord(nil, data[:i])
	if err != nil || hd.Index >= len(first) || first[hd.Index].ID != hd.Event {
		return nil, false, nil
	}
	rest, good, torn, err := parse(path, data[i+1:], false)
	if err != nil {
		return nil, false, err
	}
	base := hd.Offset + int64(i) + 1
	if torn != nil {
		st.log.Warn("file: dropping the torn tail of a session file",
			"session", sessionID, "path", path, "offset", base+good, "bytes", int64(len(data)-i-1)-good, "reason", torn)
	}
	s.known, s.size, s.seen = true, base+good, fi.Size()
	return append(first[hd.Index+1:len(first):len(first)], rest...), true, nil
}

// dropSnapshot removes the session's snapshot, before its file changes
// otherwise than by an append.
func (st *Store) dropSnapshot(sessionID string) error {
	err := os.Remove(st.snapPath(sessionID))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("file: removing the snapshot of session %q: %w", sessionID, err)
	}
	return nil
}

var _ storage.Snapshotter = (*Store)(nil)
