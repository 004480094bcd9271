// Package archive writes and reads portable archives of session ledgers:
// one session, a tenant's sessions or a whole store, with the blobs their
// events refer to, in a form any store can import (agentic-host export,
// import and transcript --archive, serve's export and import routes, and
// the retention sweep's archives all use it).
//
// # Format
//
// An archive is a gzip-compressed tar file (version 1) holding:
//
//	sessions/<id>.jsonl   a session's events, in order, one per line, each
//	                      in the ledger codec's canonical encoding
//	                      (ledger.Encode), so that an imported event is
//	                      the exported one byte for byte
//	blobs/<hex>           a blob's bytes, named by the hex of its SHA-256
//	                      (its storage.BlobDigest without "sha256:")
//	manifest.json         the format and version, when it was written, the
//	                      tenant it came from (informative), and every
//	                      session (id, events) and blob (digest, size)
//
// The manifest comes last, so that a writer streams sessions without
// holding them; a reader checks that the manifest and the entries agree
// (every session and blob it names is there, with as many events and
// bytes, and nothing else is), that every event decodes and every blob's
// bytes have its digest, and refuses anything else with an error naming
// the entry, before anything is imported. Batches (the events of one
// Append) are not kept: an import appends each session's events in one
// batch.
package archive

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"path"
	"strings"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Format and Version name the archive format in its manifest.
const (
	Format  = "agentic-host-archive"
	Version = 1
)

// DefaultMaxBytes is the default of ReadOptions.MaxBytes.
const DefaultMaxBytes = 1 << 30

var (
	// ErrMalformed is matched (errors.Is) by every error of [Read] about
	// what the archive holds (as opposed to the reader's failures).
	ErrMalformed = errors.New("archive: malformed archive")
	// ErrTooLarge is returned by [Read] for an archive past its
	// ReadOptions.MaxBytes.
	ErrTooLarge = errors.New("archive: archive too large")
)

// Manifest describes an archive's contents.
type Manifest struct {
	Format  string    `json:"format"`
	Version int       `json:"version"`
	Created time.Time `json:"created"`
	// Tenant names the tenant the sessions came from, when one did; it
	// is informative: an import puts them where it is told.
	Tenant   string          `json:"tenant,omitempty"`
	Sessions []SessionInfo   `json:"sessions"`
	Blobs    []BlobInfoEntry `json:"blobs"`
}

// SessionInfo is a session of a [Manifest].
type SessionInfo struct {
	ID     string `json:"id"`
	Events int    `json:"events"`
}

// BlobInfoEntry is a blob of a [Manifest].
type BlobInfoEntry struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// Session is a session of an archive, with its events.
type Session struct {
	ID     string
	Events []ledger.Event
}

// Archive is a read archive: its manifest, its sessions in the manifest's
// order, and its blobs by digest.
type Archive struct {
	Manifest Manifest
	Sessions []Session
	Blobs    map[string][]byte
}

// Session returns the archive's session id, and whether it holds it.
func (a *Archive) Session(id string) (Session, bool) {
	for _, s := range a.Sessions {
		if s.ID == id {
			return s, true
		}
	}
	return Session{}, false
}

// Writer writes an archive. Call AddSession and AddBlob as often as
// needed, then Close, which writes the manifest: an archive whose Close
// did not return nil is incomplete, and Read refuses it.
type Writer struct {
	gz       *gzip.Writer
	tw       *tar.Writer
	now      time.Time
	manifest Manifest
	sessions map[string]bool
	blobs    map[string]bool
	err      error
}

// NewWriter returns a Writer onto w; tenant, when not "", is recorded in
// the manifest.
func NewWriter(w io.Writer, tenant string) *Writer {
	gz := gzip.NewWriter(w)
	now := time.Now().UTC()
	return &Writer{gz: gz, tw: tar.NewWriter(gz), now: now, sessions: map[string]bool{}, blobs: map[string]bool{},
		manifest: Manifest{Format: Format, Version: Version, Created: now, Tenant: tenant, Sessions: []SessionInfo{}, Blobs: []BlobInfoEntry{}}}
}

func (w *Writer) file(name string, data []byte) error {
	if w.err != nil {
		return w.err
	}
	hdr := &tar.Header{Name: name, Mode: 0o600, Size: int64(len(data)), ModTime: w.now, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := w.tw.WriteHeader(hdr); err != nil {
		w.err = fmt.Errorf("archive: write %s: %w", name, err)
		return w.err
	}
	if _, err := w.tw.Write(data); err != nil {
		w.err = fmt.Errorf("archive: write %s: %w", name, err)
		return w.err
	}
	return nil
}

// AddSession writes a session's events. A session may be added once.
func (w *Writer) AddSession(id string, events []ledger.Event) error {
	if !storage.ValidSessionID(id) {
		return fmt.Errorf("archive: session %q: %w", id, storage.ErrInvalidSessionID)
	}
	if w.sessions[id] {
		return fmt.Errorf("archive: session %s added twice", id)
	}
	var buf bytes.Buffer
	for i, e := range events {
		b, err := ledger.Encode(e)
		if err != nil {
			return fmt.Errorf("archive: session %s: event %d: %w", id, i+1, err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	if err := w.file("sessions/"+id+".jsonl", buf.Bytes()); err != nil {
		return err
	}
	w.sessions[id] = true
	w.manifest.Sessions = append(w.manifest.Sessions, SessionInfo{ID: id, Events: len(events)})
	return nil
}

// AddBlob writes a blob's bytes; adding one already added does nothing.
func (w *Writer) AddBlob(data []byte) error {
	digest := storage.BlobDigest(data)
	if w.blobs[digest] {
		return nil
	}
	if err := w.file("blobs/"+strings.TrimPrefix(digest, "sha256:"), data); err != nil {
		return err
	}
	w.blobs[digest] = true
	w.manifest.Blobs = append(w.manifest.Blobs, BlobInfoEntry{Digest: digest, Size: int64(len(data))})
	return nil
}

// Manifest returns what the archive holds so far.
func (w *Writer) Manifest() Manifest { return w.manifest }

// Close writes the manifest and closes the archive (not the io.Writer
// underneath).
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	b, _ := json.MarshalIndent(w.manifest, "", "  ")
	if err := w.file("manifest.json", append(b, '\n')); err != nil {
		return err
	}
	if err := w.tw.Close(); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	if err := w.gz.Close(); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	w.err = errors.New("archive: the writer is closed")
	return nil
}

// ReadOptions bounds [Read] and the streaming readers ([Check],
// [EachBlob], [EachSession]).
type ReadOptions struct {
	// MaxBytes bounds the archive's uncompressed contents (its entries'
	// sizes together). Default 0, which means [DefaultMaxBytes].
	MaxBytes int64
	// MaxEvents bounds the events of all the archive's sessions together
	// (the streaming readers). Default 0, which means [DefaultMaxEvents].
	MaxEvents int64
	// MaxEventBytes bounds one event's encoding (the streaming readers).
	// Default 0, which means [DefaultMaxEventBytes].
	MaxEventBytes int64
	// MaxBlobBytes bounds one blob (the streaming readers). Default 0,
	// which means [DefaultMaxBlobBytes].
	MaxBlobBytes int64
	// MaxEntries bounds the archive's entries (the streaming readers).
	// Default 0, which means [DefaultMaxEntries].
	MaxEntries int
}

// malformed returns an error matching ErrMalformed.
func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Read reads and checks a whole archive (see the package documentation):
// it returns it, or an error matching [ErrMalformed] or [ErrTooLarge]
// that names what is wrong.
func Read(r io.Reader, opts ReadOptions) (*Archive, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	gz, err := gzip.NewReader(bufio.NewReader(r))
	if err != nil {
		return nil, malformed("not a gzip-compressed archive: %v", err)
	}
	tr := tar.NewReader(gz)
	a := &Archive{Blobs: map[string][]byte{}}
	events := map[string][]ledger.Event{}
	var manifest []byte
	var total int64
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, malformed("%v", err)
		}
		if hdr.Size < 0 || total+hdr.Size > opts.MaxBytes {
			return nil, fmt.Errorf("%w: more than %d bytes uncompressed", ErrTooLarge, opts.MaxBytes)
		}
		total += hdr.Size
		if hdr.Typeflag == tar.TypeDir {
			continue
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil, malformed("entry %.100q is not a regular file", hdr.Name)
		}
		data, err := io.ReadAll(io.LimitReader(tr, hdr.Size))
		if err != nil {
			return nil, malformed("entry %.100q: %v", hdr.Name, err)
		}
		dir, name := path.Split(hdr.Name)
		switch {
		case hdr.Name == "manifest.json":
			if manifest != nil {
				return nil, malformed("two manifests")
			}
			manifest = data
		case dir == "sessions/" && strings.HasSuffix(name, ".jsonl"):
			id := strings.TrimSuffix(name, ".jsonl")
			if !storage.ValidSessionID(id) {
				return nil, malformed("entry %.100q: invalid session id", hdr.Name)
			}
			if _, dup := events[id]; dup {
				return nil, malformed("session %s twice", id)
			}
			evs, err := decodeSession(id, data)
			if err != nil {
				return nil, err
			}
			events[id] = evs
		case dir == "blobs/":
			digest := "sha256:" + name
			if storage.CheckBlobDigest(digest) != nil {
				return nil, malformed("entry %.100q: not a blob's name (64 lower-case hex digits)", hdr.Name)
			}
			if _, dup := a.Blobs[digest]; dup {
				return nil, malformed("blob %s twice", digest)
			}
			if storage.BlobDigest(data) != digest {
				return nil, malformed("blob %s: its bytes have another digest", digest)
			}
			a.Blobs[digest] = data
		default:
			return nil, malformed("unknown entry %.100q", hdr.Name)
		}
	}
	if manifest == nil {
		return nil, malformed("no manifest.json (an archive whose writing did not finish?)")
	}
	dec := json.NewDecoder(bytes.NewReader(manifest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a.Manifest); err != nil {
		return nil, malformed("manifest.json: %v", err)
	}
	m := a.Manifest
	if m.Format != Format || m.Version != Version {
		return nil, malformed("manifest.json: format %q version %d, want %q version %d", m.Format, m.Version, Format, Version)
	}
	seen := map[string]bool{}
	for _, s := range m.Sessions {
		evs, ok := events[s.ID]
		switch {
		case seen[s.ID]:
			return nil, malformed("manifest.json names session %s twice", s.ID)
		case !ok:
			return nil, malformed("manifest.json names session %.130q, which the archive lacks", s.ID)
		case len(evs) != s.Events:
			return nil, malformed("session %s has %d events, the manifest says %d", s.ID, len(evs), s.Events)
		}
		seen[s.ID] = true
		a.Sessions = append(a.Sessions, Session{ID: s.ID, Events: evs})
	}
	if len(seen) != len(events) {
		return nil, malformed("the archive holds %d sessions, the manifest names %d", len(events), len(seen))
	}
	blobs := map[string]bool{}
	for _, b := range m.Blobs {
		data, ok := a.Blobs[b.Digest]
		switch {
		case blobs[b.Digest]:
			return nil, malformed("manifest.json names blob %s twice", b.Digest)
		case !ok:
			return nil, malformed("manifest.json names blob %.80q, which the archive lacks", b.Digest)
		case int64(len(data)) != b.Size:
			return nil, malformed("blob %s has %d bytes, the manifest says %d", b.Digest, len(data), b.Size)
		}
		blobs[b.Digest] = true
	}
	if len(blobs) != len(a.Blobs) {
		return nil, malformed("the archive holds %d blobs, the manifest names %d", len(a.Blobs), len(blobs))
	}
	return a, nil
}

// decodeSession decodes a session's JSONL.
func decodeSession(id string, data []byte) ([]ledger.Event, error) {
	events := []ledger.Event{}
	check := newSessionCheck(id, maphash.MakeSeed())
	line := 0
	for len(data) > 0 {
		line++
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return nil, malformed("session %s: line %d has no newline (a truncated archive?)", id, line)
		}
		e, err := ledger.Decode(data[:i])
		if err != nil {
			return nil, malformed("session %s: line %d: %v", id, line, err)
		}
		if err := ledger.Validate(e); err != nil {
			return nil, malformed("session %s: line %d: %v", id, line, err)
		}
		if err := check.add(line, e); err != nil {
			return nil, err
		}
		events = append(events, e)
		data = data[i+1:]
	}
	return events, nil
}
