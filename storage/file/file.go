package file

import (
	"bufio"
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// ext is the extension of session files: session id's events are in
// <dir>/<id>.jsonl.
const ext = ".jsonl"

var (
	// ErrCorrupt is matched (errors.Is) by every [*CorruptError].
	ErrCorrupt = errors.New("file: corrupt session file")
)

// CorruptError reports a record that does not decode in the middle of a
// session file: not the torn tail a crash leaves, which Load drops, but
// damage followed by intact records, which Load refuses to skip. See the
// package documentation.
type CorruptError struct {
	// Path is the session file.
	Path string
	// Line is the record's line number, from 1.
	Line int
	// Offset is the byte offset of the line in the file.
	Offset int64
	// Err is why the record does not decode: a *ledger.DecodeError.
	Err error
}

// Error returns "file: <path>:<line>: corrupt record at byte <offset>: "
// followed by the cause.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("file: %s:%d: corrupt record at byte %d: %v", e.Path, e.Line, e.Offset, e.Err)
}

// Unwrap returns the *ledger.DecodeError.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrCorrupt] or [storage.ErrCorrupt].
func (e *CorruptError) Is(target error) bool {
	return target == ErrCorrupt || target == storage.ErrCorrupt
}

// Options configures a [Store]. The zero value is the default.
type Options struct {
	// Fsync makes every Append fsync the session file before it returns
	// (and the directory, once per session and Store), so that appended
	// events survive a power loss, at the price of a disk flush per
	// Append. Without it they survive a crash of the process only; see
	// the package documentation. Default false.
	Fsync bool
	// Logger receives a warning for every torn tail that Load drops or
	// Append truncates, and an error when a failed Append cannot be
	// rolled back. Default slog.Default(), as it is when Open is called.
	Logger *slog.Logger
	// MaxOpenFiles bounds the session files kept open between Appends:
	// beyond it, the files of the sessions appended to least recently are
	// closed, and reopened by their next Append (an open and a stat; what
	// the store knows of the file is kept). A host with many sessions
	// thus never runs out of file descriptors. Default 0, which means
	// [DefaultMaxOpenFiles]; -1 means no bound.
	MaxOpenFiles int
}

// DefaultMaxOpenFiles is the default of Options.MaxOpenFiles.
const DefaultMaxOpenFiles = 256

// Store keeps session ledgers in JSON Lines files in one directory. It is
// safe for concurrent use. The zero value is not usable; call [Open].
type Store struct {
	dir   string
	fsync bool
	log   *slog.Logger

	mu       sync.Mutex // guards closed and the map (not the sessions)
	closed   bool
	sessions map[string]*session

	// open lists the sessions whose file is open, most recently appended
	// first, for closing the least recent beyond maxOpen. openMu guards it
	// and the sessions' elem; it is never held while waiting for a
	// session's mu.
	maxOpen int
	openMu  sync.Mutex
	open    *list.List

	counterMu sync.Mutex // makes each AddWithin's read and write one step

	// blobMu guards blobFences: the marks and holds of the blobs (by
	// their files' paths), which live in this process (see
	// storage/file/blobfence.go).
	blobMu     sync.Mutex
	blobFences map[string]*blobFence
}

// session is the Store's state for one session file. Its fields are
// guarded by mu, which Append holds while it writes.
type session struct {
	mu     sync.Mutex
	closed bool
	// known tells that size was measured: the file was read since the
	// Store was opened, or found missing.
	known bool
	// size is the length of the file's committed records: the file's
	// bytes beyond it are a torn tail or an Append in progress.
	size int64
	// seen is the file's length when size was last measured: a file that
	// grew past it was appended to by another process since.
	seen int64
	// f is the file, opened for appending; nil until the first Append.
	f *os.File
	// dirSynced tells that the directory was fsynced since f was opened.
	dirSynced bool
	// broken, once set, fails every later Append: a failed Append could
	// not be rolled back, and the file's end is unknown.
	broken error
	// elem is the session's place in Store.open while f is open (guarded
	// by Store.openMu).
	elem *list.Element
	// gen counts the changes this Store made to the session's file (see
	// SessionVersion).
	gen uint64
}

// Open returns a Store over the session files in dir, creating dir (mode
// 0700) and its missing parents when it does not exist (with Fsync, their
// creation is made durable too). It reads no file: sessions are read when
// they are first used.
func Open(dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("file: open: empty directory name")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	switch {
	case opts.MaxOpenFiles == 0:
		opts.MaxOpenFiles = DefaultMaxOpenFiles
	case opts.MaxOpenFiles < -1:
		return nil, fmt.Errorf("file: open: MaxOpenFiles %d is below -1", opts.MaxOpenFiles)
	}
	// The directories MkdirAll is about to create, deepest first.
	var created []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("file: open: %w", err)
	}
	if opts.Fsync {
		// Make the new directories' entries durable, as Append does
		// for the files it creates.
		for _, d := range created {
			if err := syncDir(filepath.Dir(d)); err != nil {
				return nil, fmt.Errorf("file: open: %w", err)
			}
		}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("file: open: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("file: open: %s is not a directory", dir)
	}
	removeTornValues(dir, opts.Logger)
	return &Store{
		dir:      dir,
		fsync:    opts.Fsync,
		log:      opts.Logger,
		sessions: make(map[string]*session),
		maxOpen:  opts.MaxOpenFiles,
		open:     list.New(),
	}, nil
}

// path returns the name of the file that holds the session's events.
func (st *Store) path(sessionID string) string {
	return filepath.Join(st.dir, sessionID+ext)
}

// Append writes the events as one record at the end of the session's file.
// An event the codec refuses fails the call with the codec's error, and
// nothing is written. See the package documentation for what a nil error
// guarantees.
func (st *Store) Append(ctx context.Context, sessionID string, events ...ledger.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkID(sessionID); err != nil {
		return err
	}
	if len(events) == 0 {
		if st.isClosed() {
			return storage.ErrClosed
		}
		return nil // nothing to write, and no file to create
	}
	rec, err := encodeRecord(events)
	if err != nil {
		return fmt.Errorf("file: append to session %q: %w", sessionID, err)
	}
	s, err := st.session(sessionID)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return storage.ErrClosed
	case s.broken != nil:
		return s.broken
	}
	if err := ctx.Err(); err != nil { // done while we waited for the session
		return err
	}
	if s.f != nil {
		size, removed, err := fileSize(s.f)
		switch {
		case err != nil:
			return fmt.Errorf("file: append to session %q: %w", sessionID, err)
		case removed:
			// Another Store deleted the session: the next records
			// start a new file.
			st.forget(s)
		default:
			if err := st.catchUp(s, s.f, sessionID, size); err != nil {
				return err
			}
		}
	}
	if s.f == nil {
		if err := st.openForAppend(ctx, s, sessionID); err != nil {
			return err
		}
	}
	if st.fsync && !s.dirSynced {
		if err := syncDir(st.dir); err != nil {
			return fmt.Errorf("file: append to session %q: %w", sessionID, err)
		}
		s.dirSynced = true
	}
	_, err = s.f.Write(rec) // one write(2): os.File splits only writes of 1 GiB or more
	if err == nil && st.fsync {
		err = s.f.Sync()
	}
	if err != nil {
		st.rollback(s, sessionID, err)
		return fmt.Errorf("file: append to session %q: %w", sessionID, err)
	}
	s.size += int64(len(rec))
	s.seen = s.size
	s.gen++
	st.touch(s)
	return nil
}

// touch marks s, whose file is open, as the most recently appended to, and
// closes the files of the least recent sessions beyond maxOpen. s.mu is
// held. A session busy elsewhere (its mu held) is passed over rather than
// waited for: no lock order to get wrong, and its file is closed by a later
// touch.
func (st *Store) touch(s *session) {
	if st.maxOpen < 0 {
		return
	}
	st.openMu.Lock()
	if s.elem == nil {
		s.elem = st.open.PushFront(s)
	} else {
		st.open.MoveToFront(s.elem)
	}
	var victims []*session
	for e := st.open.Back(); e != nil && st.open.Len()-len(victims) > st.maxOpen; e = e.Prev() {
		if v := e.Value.(*session); v != s {
			victims = append(victims, v)
		}
	}
	st.openMu.Unlock()
	st.closeFiles(victims)
}

// closeFiles closes the files of the sessions given, passing over those
// busy elsewhere (their mu held).
func (st *Store) closeFiles(victims []*session) {
	for _, v := range victims {
		if !v.mu.TryLock() {
			continue
		}
		if v.f != nil {
			if err := v.f.Close(); err != nil {
				st.log.Warn("file: closing an idle session file", "path", v.f.Name(), "error", err)
			}
			v.f = nil
		}
		st.openMu.Lock()
		if v.elem != nil {
			st.open.Remove(v.elem)
			v.elem = nil
		}
		st.openMu.Unlock()
		v.mu.Unlock()
	}
}

// fdWait bounds how long openFile waits for a file descriptor.
const fdWait = 5 * time.Second

// openFile is os.OpenFile that outlasts a shortage of file descriptors:
// when the process has none left (EMFILE) or the system (ENFILE), it
// closes the session files the store keeps open between Appends, then
// tries again, waiting from 1 ms up to 100 ms between tries, for at most
// fdWait or until ctx ends; then it returns the shortage's error. Under a
// burst of connections a run's append waits for a descriptor rather than
// failing, which would interrupt the run.
func (st *Store) openFile(ctx context.Context, path string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag, perm)
	if !outOfFiles(err) {
		return f, err
	}
	st.closeIdle()
	deadline := time.Now().Add(fdWait)
	for wait := time.Millisecond; outOfFiles(err) && time.Now().Before(deadline); wait = min(2*wait, 100*time.Millisecond) {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		f, err = os.OpenFile(path, flag, perm)
	}
	if outOfFiles(err) {
		st.log.Warn("file: out of file descriptors", "path", path, "waited", fdWait, "error", err)
	}
	return f, err
}

// outOfFiles tells whether err is a shortage of file descriptors.
func outOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// closeIdle closes every session file the store keeps open between
// Appends (but those in use).
func (st *Store) closeIdle() {
	st.openMu.Lock()
	victims := make([]*session, 0, st.open.Len())
	for e := st.open.Front(); e != nil; e = e.Next() {
		victims = append(victims, e.Value.(*session))
	}
	st.openMu.Unlock()
	st.closeFiles(victims)
}

// openForAppend opens the session's file for appending, creating it if
// needed; it measures the committed records if no Load did, and truncates
// a torn tail. s.mu is held.
func (st *Store) openForAppend(ctx context.Context, s *session, id string) error {
	path := st.path(id)
	f, err := st.openFile(ctx, path, os.O_RDWR|os.O_APPEND, 0)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = st.openFile(ctx, path, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		return fmt.Errorf("file: append to session %q: %w", id, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("file: append to session %q: %w", id, err)
	}
	if !s.known {
		data := make([]byte, fi.Size())
		if len(data) > 0 {
			if _, err := f.ReadAt(data, 0); err != nil {
				f.Close()
				return fmt.Errorf("file: append to session %q: %w", id, err)
			}
		}
		_, good, _, err := parse(path, data, false)
		if err != nil {
			f.Close()
			return err
		}
		s.known, s.size, s.seen = true, good, fi.Size()
	}
	if err := st.catchUp(s, f, id, fi.Size()); err != nil {
		f.Close()
		return err
	}
	s.f, s.dirSynced = f, false
	return nil
}

// catchUp reconciles what the store knows of the session's file with the
// file's size, before an append: records another process appended since
// (a host that continued a run this one left waiting, say) are adopted,
// and only a torn tail — an incomplete or undecodable last line — is
// truncated. A file shorter than its known records was changed outside the
// store: an error. s.mu is held.
func (st *Store) catchUp(s *session, f *os.File, id string, size int64) error {
	if size == s.size {
		return nil
	}
	path := st.path(id)
	if size < s.size {
		s.known = false
		return fmt.Errorf("file: append to session %q: %s has %d bytes, fewer than its %d bytes of records: it was changed outside the store",
			id, path, size, s.size)
	}
	data := make([]byte, size-s.size)
	if _, err := f.ReadAt(data, s.size); err != nil {
		return fmt.Errorf("file: append to session %q: %w", id, err)
	}
	_, good, _, err := parse(path, data, false)
	if err != nil {
		return err
	}
	s.size += good
	s.seen = size
	if size == s.size {
		return nil
	}
	st.log.Warn("file: truncating the torn tail of a session file before appending",
		"session", id, "path", path, "offset", s.size, "bytes", size-s.size)
	err = f.Truncate(s.size)
	if err == nil && st.fsync {
		err = f.Sync()
	}
	if err != nil {
		return fmt.Errorf("file: append to session %q: truncating the torn tail: %w", id, err)
	}
	s.seen = s.size
	return nil
}

// rollback removes what a failed Append may have written. s.mu is held.
func (st *Store) rollback(s *session, id string, cause error) {
	err := s.f.Truncate(s.size)
	if err == nil && st.fsync {
		err = s.f.Sync()
	}
	if err != nil {
		s.broken = fmt.Errorf("file: session %q: a failed append (%v) could not be rolled back (%v): the session takes no more appends until the store is reopened",
			id, cause, err)
		st.log.Error("file: a failed append could not be rolled back", "session", id, "path", st.path(id),
			"offset", s.size, "append_error", cause, "error", err)
	}
}

// Fsync reports whether the store fsyncs every Append (Options.Fsync).
func (st *Store) Fsync() bool { return st.fsync }

// Load returns the session's events in append order; an empty slice when
// the session has no file. It drops a torn tail with a warning and fails
// with a [*CorruptError] on damage in the middle of the file.
func (st *Store) Load(ctx context.Context, sessionID string) ([]ledger.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkID(sessionID); err != nil {
		return nil, err
	}
	s, err := st.session(sessionID)
	if err != nil {
		return nil, err
	}
	path := st.path(sessionID)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, storage.ErrClosed
	}
	if s.known {
		// The committed records never change: read them without
		// holding up appends — unless the file grew past them, when
		// another process appended since (see catchUp): then it is
		// parsed again, below.
		size := s.size
		if fi, err := os.Stat(path); err == nil && fi.Size() <= s.seen {
			s.mu.Unlock()
			return st.loadPrefix(ctx, path, size)
		}
	}
	defer s.mu.Unlock()
	data, err := st.readFile(ctx, path)
	if errors.Is(err, fs.ErrNotExist) {
		s.known, s.size, s.seen = true, 0, 0
		return []ledger.Event{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("file: load session %q: %w", sessionID, err)
	}
	s.seen = int64(len(data))
	events, good, torn, err := parse(path, data, false)
	if err != nil {
		return nil, err
	}
	if torn != nil {
		st.log.Warn("file: dropping the torn tail of a session file",
			"session", sessionID, "path", path, "offset", good, "bytes", int64(len(data))-good, "reason", torn)
	}
	s.known, s.size = true, good
	return events, nil
}

// readFile is the package's readFile, its open outlasting a shortage of
// file descriptors (see openFile).
func (st *Store) readFile(ctx context.Context, path string) ([]byte, error) {
	f, err := st.openFile(ctx, path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAll(f)
}

// readFile returns the contents of a file, reading as many bytes as the
// file had when opened (so a device or a file that keeps growing is read
// once, not forever).
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAll(f)
}

// readAll reads the bytes f has now.
func readAll(f *os.File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, err
	}
	return data, nil
}

// loadPrefix decodes the first size bytes of the file, which hold
// committed records only.
func (st *Store) loadPrefix(ctx context.Context, path string, size int64) ([]ledger.Event, error) {
	if size == 0 {
		return []ledger.Event{}, nil
	}
	f, err := st.openFile(ctx, path, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("file: load: %w", err)
	}
	defer f.Close()
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, fmt.Errorf("file: load: %s holds fewer than its %d bytes of records (changed outside the store?): %w", path, size, err)
	}
	events, _, _, err := parse(path, data, true)
	return events, err
}

// ListSessions returns the ids of the sessions whose file holds at least
// one record, and of those whose file cannot be read or is corrupt (so that
// Load reports why).
func (st *Store) ListSessions(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if st.isClosed() {
		return nil, storage.ErrClosed
	}
	entries, err := os.ReadDir(st.dir)
	if err != nil {
		return nil, fmt.Errorf("file: list sessions: %w", err)
	}
	var ids []string
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ext)
		if !ok || !storage.ValidSessionID(id) {
			continue
		}
		if e.Type()&fs.ModeSymlink != 0 { // follow it
			if fi, err := os.Stat(st.path(id)); err == nil && fi.Mode().IsRegular() {
				e = fs.FileInfoToDirEntry(fi)
			}
		}
		if !e.Type().IsRegular() {
			continue
		}
		if hasEvents(st.path(id)) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// hasEvents tells whether a session file holds an event, or cannot be
// read, or is corrupt. It reads the first line only, unless that line is
// bad.
func hasEvents(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	defer f.Close()
	first, err := bufio.NewReaderSize(f, 4<<10).ReadBytes('\n')
	switch {
	case err == io.EOF:
		return false // empty, or a torn first record
	case err != nil:
		return true
	}
	if _, err := decodeRecord(nil, first[:len(first)-1]); err == nil {
		return true
	}
	data, err := readFile(path)
	if err != nil {
		return true
	}
	events, _, _, err := parse(path, data, false)
	return len(events) > 0 || err != nil
}

// Close closes the session files, waiting for Appends in progress. After
// it every method returns [storage.ErrClosed]; Close itself may be called
// again and then returns nil.
func (st *Store) Close() error {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil
	}
	st.closed = true
	sessions := st.sessions
	st.sessions = nil
	st.mu.Unlock()

	var errs []error
	for _, s := range sessions {
		s.mu.Lock()
		s.closed = true
		if s.f != nil {
			if err := s.f.Close(); err != nil {
				errs = append(errs, fmt.Errorf("file: close: %w", err))
			}
			s.f = nil
		}
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

func (st *Store) isClosed() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.closed
}

// session returns the state of the session named id, creating it.
func (st *Store) session(id string) (*session, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return nil, storage.ErrClosed
	}
	s := st.sessions[id]
	if s == nil {
		s = &session{}
		st.sessions[id] = s
	}
	return s, nil
}

func checkID(id string) error {
	if !storage.ValidSessionID(id) {
		return fmt.Errorf("file: session %q: %w", id, storage.ErrInvalidSessionID)
	}
	return nil
}

// syncDir fsyncs a directory, making the creation of its entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// encodeRecord returns the record, newline included, that holds a batch:
// the event's encoding for one event, an array of encodings for several.
func encodeRecord(events []ledger.Event) ([]byte, error) {
	if len(events) == 1 {
		b, err := encodeEvent(events[0])
		if err != nil {
			return nil, err
		}
		return append(b, '\n'), nil // Encode's buffer mostly has room for it
	}
	var rec []byte
	for i, e := range events {
		b, err := encodeEvent(e)
		if err != nil {
			return nil, fmt.Errorf("event %d of %d: %w", i+1, len(events), err)
		}
		if i == 0 {
			rec = make([]byte, 0, len(events)*(len(b)+1)+2)
			rec = append(rec, '[')
		} else {
			rec = append(rec, ',')
		}
		rec = append(rec, b...)
	}
	return append(rec, ']', '\n'), nil
}

// encodeEvent encodes one event, and checks that it is one line.
func encodeEvent(e ledger.Event) ([]byte, error) {
	b, err := ledger.Encode(e)
	if err != nil {
		return nil, err
	}
	if bytes.IndexByte(b, '\n') >= 0 {
		return nil, fmt.Errorf("file: the ledger codec encoded event %q with a newline inside", e.ID)
	}
	return b, nil
}

// decodeRecord appends the events of one record (its line without the
// newline) to events. On error, events is returned unchanged.
func decodeRecord(events []ledger.Event, rec []byte) ([]ledger.Event, error) {
	if len(rec) == 0 || rec[0] != '[' {
		e, err := ledger.Decode(rec)
		if err != nil {
			return events, err
		}
		return append(events, e), nil
	}
	n := len(events)
	elems, err := splitBatch(rec)
	if err != nil {
		return events, err
	}
	for _, raw := range elems {
		e, err := ledger.Decode(raw)
		if err != nil {
			return events[:n], err
		}
		events = append(events, e)
	}
	return events, nil
}

// splitBatch returns the events' encodings in a batch's record, or a
// *ledger.DecodeError saying why the record is no batch.
func splitBatch(rec []byte) ([][]byte, error) {
	elems, err := splitArray(rec)
	if err != nil {
		return nil, &ledger.DecodeError{Err: fmt.Errorf("%w: batch: %v", ledger.ErrInvalid, err)}
	}
	return elems, nil
}

// splitArray returns the elements of a JSON array without decoding them:
// it finds the commas outside strings, objects and arrays. It checks the
// brackets and that there is at least one element; the elements' own
// syntax is left to ledger.Decode, which validates each in full (so that
// an array is accepted only when it is valid JSON). It is several times
// faster than json.Unmarshal into []json.RawMessage, which scans and copies.
func splitArray(data []byte) ([][]byte, error) {
	if len(data) < 2 || data[0] != '[' {
		return nil, errors.New("not an array")
	}
	var (
		elems    [][]byte
		start    = 1
		depth    = 0
		inString = false
	)
	for i := 1; i < len(data); i++ {
		c := data[i]
		if inString {
			// Jump to the string's next quote, unless a backslash comes
			// first: most of a ledger is text, and escapes are rare.
			// (Two IndexByte calls, vectorised, are several times faster
			// than one IndexAny, which builds its set at every call.)
			j := bytes.IndexByte(data[i:], '"')
			if j < 0 {
				break
			}
			if k := bytes.IndexByte(data[i:i+j], '\\'); k >= 0 {
				i += k + 1 // skip the backslash and the byte it escapes
				continue
			}
			i += j
			inString = false
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}':
			depth--
		case ']':
			if depth > 0 {
				depth--
				continue
			}
			if len(bytes.TrimSpace(data[i+1:])) > 0 {
				return nil, errors.New("data after the array")
			}
			elems = append(elems, data[start:i])
			if len(elems) == 1 && len(bytes.TrimSpace(elems[0])) == 0 {
				return nil, errors.New("empty array")
			}
			return elems, nil
		case ',':
			if depth == 0 {
				elems = append(elems, data[start:i])
				start = i + 1
			}
		}
		if depth < 0 {
			return nil, errors.New("unbalanced brackets")
		}
	}
	return nil, errors.New("unterminated array")
}

// parse decodes the records of a session file. A torn tail (see the
// package documentation) is returned as the reason it is torn, with good,
// the length of the records before it; strict makes it a *CorruptError
// too, for data that must hold committed records only.
func parse(path string, data []byte, strict bool) (events []ledger.Event, good int64, torn error, err error) {
	events = make([]ledger.Event, 0, bytes.Count(data, []byte{'\n'}))
	line := 0
	for off := 0; off < len(data); {
		line++
		i := bytes.IndexByte(data[off:], '\n')
		var derr error
		if i < 0 {
			derr = &ledger.DecodeError{Err: fmt.Errorf("%w: the last record has no newline", ledger.ErrInvalid)}
		} else {
			events, derr = decodeRecord(events, data[off:off+i])
		}
		if derr != nil {
			if strict || (i >= 0 && !tornLine(derr, data[off+i+1:])) {
				return nil, 0, nil, &CorruptError{Path: path, Line: line, Offset: int64(off), Err: derr}
			}
			return events, int64(off), derr, nil
		}
		off += i + 1
		good = int64(off)
	}
	return events, good, nil, nil
}

// tornLine tells whether a whole line that failed to decode with derr,
// followed by rest, is a torn tail: nothing after it decodes. A line of
// another schema version is not torn: a newer build wrote it (or an older
// one, before a migrate).
func tornLine(derr error, rest []byte) bool {
	return !errors.Is(derr, ledger.ErrVersion) && !anyRecord(rest)
}

// anyRecord tells whether any complete line of data decodes.
func anyRecord(data []byte) bool {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return false
		}
		if _, err := decodeRecord(nil, data[:i]); err == nil {
			return true
		}
		data = data[i+1:]
	}
	return false
}

var (
	_ storage.Storage = (*Store)(nil)
	_ storage.Lister  = (*Store)(nil)
	_ storage.Closer  = (*Store)(nil)
)
