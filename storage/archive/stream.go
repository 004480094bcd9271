package archive

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"iter"
	"path"
	"strings"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// Reading an archive with bounded memory: a streaming import reads the
// archive three times (from a file it was spooled to) — [Check] first,
// which checks it whole and keeps only what it must (the manifest, each
// entry's name and size), then [EachBlob] and [EachSession], which hand
// over one blob, or one session's events one at a time. None of them holds
// more than one event, or one blob, of the archive in memory (and, while
// it checks a session, a 64-bit hash of each of its events' ids).

// The defaults of the bounds of ReadOptions that streaming readers add.
const (
	// DefaultMaxEvents is ReadOptions.MaxEvents when it is 0.
	DefaultMaxEvents = 1_000_000
	// DefaultMaxEventBytes is ReadOptions.MaxEventBytes when it is 0.
	DefaultMaxEventBytes = 4 << 20
	// DefaultMaxBlobBytes is ReadOptions.MaxBlobBytes when it is 0.
	DefaultMaxBlobBytes = 64 << 20
	// DefaultMaxEntries is ReadOptions.MaxEntries when it is 0.
	DefaultMaxEntries = 100_000
	// maxManifestBytes bounds the manifest's entry.
	maxManifestBytes = 16 << 20
)

// LimitError is the error of a reader for an archive past one of its
// ReadOptions' bounds: nothing of it is imported. It matches ErrTooLarge.
type LimitError struct {
	// Bound names the bound: "bytes" (MaxBytes), "events" (MaxEvents),
	// "event bytes" (MaxEventBytes), "blob bytes" (MaxBlobBytes),
	// "entries" (MaxEntries) or "manifest bytes".
	Bound string
	// Max is the bound.
	Max int64
	// Entry names the entry past it, when one is.
	Entry string
}

// Error says which bound the archive passes.
func (e *LimitError) Error() string {
	where := ""
	if e.Entry != "" {
		where = fmt.Sprintf(" (entry %.100q)", e.Entry)
	}
	switch e.Bound {
	case "bytes":
		return fmt.Sprintf("archive: more than %d bytes uncompressed%s", e.Max, where)
	case "events":
		return fmt.Sprintf("archive: more than %d events%s", e.Max, where)
	case "event bytes":
		return fmt.Sprintf("archive: an event of more than %d bytes%s", e.Max, where)
	case "blob bytes":
		return fmt.Sprintf("archive: a blob of more than %d bytes%s", e.Max, where)
	case "entries":
		return fmt.Sprintf("archive: more than %d entries", e.Max)
	}
	return fmt.Sprintf("archive: a %s past %d%s", e.Bound, e.Max, where)
}

// Is makes a *LimitError match ErrTooLarge.
func (e *LimitError) Is(target error) bool { return target == ErrTooLarge }

// normalized fills the defaults of the bounds.
func (o ReadOptions) normalized() ReadOptions {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxEvents <= 0 {
		o.MaxEvents = DefaultMaxEvents
	}
	if o.MaxEventBytes <= 0 {
		o.MaxEventBytes = DefaultMaxEventBytes
	}
	if o.MaxBlobBytes <= 0 {
		o.MaxBlobBytes = DefaultMaxBlobBytes
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	return o
}

// Summary is what [Check] found in an archive: its manifest, and what each
// of its sessions would start once imported.
type Summary struct {
	Manifest Manifest
	// Sessions are the manifest's sessions, in its order.
	Sessions []SessionSummary
}

// SessionSummary is a session of a [Summary].
type SessionSummary struct {
	ID     string
	Events int
	// Active tells that the session has a run without its end, or a
	// message no run picked up: a host would start (or resume) a run for
	// it.
	Active bool
}

// entryKind is what an archive's entry holds.
type entryKind int

const (
	entrySession entryKind = iota
	entryBlob
	entryManifest
)

// walk reads the archive's entries in order, checking what every reader
// checks (the archive's size, each entry's type and name), and calls fn
// with each regular entry: its kind, its session id or blob digest, its
// header and its body.
func walk(r io.Reader, opts ReadOptions, fn func(kind entryKind, name string, hdr *tar.Header, body io.Reader) error) error {
	gz, err := gzip.NewReader(bufio.NewReader(r))
	if err != nil {
		return malformed("not a gzip-compressed archive: %v", err)
	}
	tr := tar.NewReader(gz)
	var total, entries int64
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return malformed("%v", err)
		}
		if hdr.Size < 0 || total+hdr.Size > opts.MaxBytes {
			return &LimitError{Bound: "bytes", Max: opts.MaxBytes, Entry: hdr.Name}
		}
		total += hdr.Size
		if entries++; entries > int64(opts.MaxEntries) {
			return &LimitError{Bound: "entries", Max: int64(opts.MaxEntries)}
		}
		if hdr.Typeflag == tar.TypeDir {
			continue
		}
		if hdr.Typeflag != tar.TypeReg {
			return malformed("entry %.100q is not a regular file", hdr.Name)
		}
		dir, name := path.Split(hdr.Name)
		body := io.LimitReader(tr, hdr.Size)
		switch {
		case hdr.Name == "manifest.json":
			if hdr.Size > maxManifestBytes {
				return &LimitError{Bound: "manifest bytes", Max: maxManifestBytes, Entry: hdr.Name}
			}
			err = fn(entryManifest, "", hdr, body)
		case dir == "sessions/" && strings.HasSuffix(name, ".jsonl"):
			id := strings.TrimSuffix(name, ".jsonl")
			if !storage.ValidSessionID(id) {
				return malformed("entry %.100q: invalid session id", hdr.Name)
			}
			err = fn(entrySession, id, hdr, body)
		case dir == "blobs/":
			digest := "sha256:" + name
			if storage.CheckBlobDigest(digest) != nil {
				return malformed("entry %.100q: not a blob's name (64 lower-case hex digits)", hdr.Name)
			}
			if hdr.Size > opts.MaxBlobBytes {
				return &LimitError{Bound: "blob bytes", Max: opts.MaxBlobBytes, Entry: hdr.Name}
			}
			err = fn(entryBlob, digest, hdr, body)
		default:
			return malformed("unknown entry %.100q", hdr.Name)
		}
		if err != nil {
			return err
		}
	}
}

// eventLines calls fn with each line of a session's entry (without its
// newline), bounded by opts.MaxEventBytes; the line is fn's only for the
// call.
func eventLines(id string, body io.Reader, opts ReadOptions, fn func(line []byte) error) error {
	br := bufio.NewReaderSize(body, 64<<10)
	var long []byte
	n := 0
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if int64(len(long)+len(chunk)) > opts.MaxEventBytes {
				return &LimitError{Bound: "event bytes", Max: opts.MaxEventBytes, Entry: "sessions/" + id + ".jsonl"}
			}
			long = append(long, chunk...)
			continue
		}
		if err == io.EOF {
			if len(long)+len(chunk) > 0 {
				return malformed("session %s: line %d has no newline (a truncated archive?)", id, n+1)
			}
			return nil
		}
		if err != nil {
			return malformed("session %s: %v", id, err)
		}
		line := chunk[:len(chunk)-1]
		if long != nil {
			if int64(len(long)+len(line)) > opts.MaxEventBytes {
				return &LimitError{Bound: "event bytes", Max: opts.MaxEventBytes, Entry: "sessions/" + id + ".jsonl"}
			}
			line = append(long, line...)
			long = nil
		} else if int64(len(line)) > opts.MaxEventBytes {
			return &LimitError{Bound: "event bytes", Max: opts.MaxEventBytes, Entry: "sessions/" + id + ".jsonl"}
		}
		n++
		if err := fn(line); err != nil {
			return err
		}
	}
}

// decodeLine decodes and validates the line-th event of a session.
func decodeLine(id string, line int, b []byte) (ledger.Event, error) {
	e, err := ledger.Decode(b)
	if err != nil {
		return e, malformed("session %s: line %d: %v", id, line, err)
	}
	if err := ledger.Validate(e); err != nil {
		return e, malformed("session %s: line %d: %v", id, line, err)
	}
	return e, nil
}

// sessionCheck follows a session's events as they are read: it refuses an
// event whose id came before in the session, and tells whether the
// session is active (see SessionSummary).
type sessionCheck struct {
	id      string
	seed    maphash.Seed
	ids     map[uint64]struct{} // hashes of the events' ids
	started map[string]bool     // runs started and not ended
	queued  map[string]bool     // messages queued, not picked up
	picked  map[string]bool
}

func newSessionCheck(id string, seed maphash.Seed) *sessionCheck {
	return &sessionCheck{id: id, seed: seed, ids: map[uint64]struct{}{}, started: map[string]bool{},
		queued: map[string]bool{}, picked: map[string]bool{}}
}

func (c *sessionCheck) add(line int, e ledger.Event) error {
	h := maphash.String(c.seed, e.ID)
	if _, dup := c.ids[h]; dup {
		return malformed("session %s: line %d: event %s appears twice", c.id, line, e.ID)
	}
	c.ids[h] = struct{}{}
	pick := func(ids []string) {
		for _, id := range ids {
			c.picked[id] = true
			delete(c.queued, id)
		}
	}
	switch {
	case e.RunStart != nil:
		c.started[e.RunID] = true
		pick(e.RunStart.Inputs)
	case e.RunEnd != nil:
		delete(c.started, e.RunID)
		pick(e.RunEnd.Inputs)
	case e.Step != nil:
		pick(e.Step.Inputs)
	case e.Input != nil && e.RunID == "" && !c.picked[e.Input.MessageID]:
		c.queued[e.Input.MessageID] = true
	}
	return nil
}

func (c *sessionCheck) active() bool { return len(c.started) > 0 || len(c.queued) > 0 }

// Check reads and checks a whole archive, as [Read] does, without holding
// it: it returns what it found, or an error matching [ErrMalformed] or
// [ErrTooLarge] (a [*LimitError]) that names what is wrong. It refuses,
// besides what Read refuses, an event that appears twice in a session, and
// an archive past any bound of opts.
func Check(r io.Reader, opts ReadOptions) (*Summary, error) {
	opts = opts.normalized()
	seed := maphash.MakeSeed()
	sessions := map[string]SessionSummary{}
	blobs := map[string]int64{}
	var manifest []byte
	var events int64
	err := walk(r, opts, func(kind entryKind, name string, hdr *tar.Header, body io.Reader) error {
		switch kind {
		case entryManifest:
			if manifest != nil {
				return malformed("two manifests")
			}
			b, err := io.ReadAll(body)
			if err != nil {
				return malformed("manifest.json: %v", err)
			}
			manifest = b
		case entrySession:
			if _, dup := sessions[name]; dup {
				return malformed("session %s twice", name)
			}
			c := newSessionCheck(name, seed)
			n := 0
			err := eventLines(name, body, opts, func(b []byte) error {
				n++
				if events++; events > opts.MaxEvents {
					return &LimitError{Bound: "events", Max: opts.MaxEvents, Entry: hdr.Name}
				}
				e, err := decodeLine(name, n, b)
				if err != nil {
					return err
				}
				return c.add(n, e)
			})
			if err != nil {
				return err
			}
			sessions[name] = SessionSummary{ID: name, Events: n, Active: c.active()}
		case entryBlob:
			if _, dup := blobs[name]; dup {
				return malformed("blob %s twice", name)
			}
			d, n, err := digestOf(body)
			if err != nil {
				return malformed("entry %.100q: %v", hdr.Name, err)
			}
			if d != name {
				return malformed("blob %s: its bytes have another digest", name)
			}
			blobs[name] = n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	m, err := checkManifest(manifest, func(s SessionInfo) (int, bool) {
		x, ok := sessions[s.ID]
		return x.Events, ok
	}, len(sessions), func(b BlobInfoEntry) (int64, bool) {
		n, ok := blobs[b.Digest]
		return n, ok
	}, len(blobs))
	if err != nil {
		return nil, err
	}
	sum := &Summary{Manifest: m}
	for _, s := range m.Sessions {
		sum.Sessions = append(sum.Sessions, sessions[s.ID])
	}
	return sum, nil
}

// digestOf returns the digest of what r holds (as storage.BlobDigest
// makes it), and its length.
func digestOf(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", n, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, nil
}

// checkManifest decodes a manifest and checks it against the entries read:
// session returns an entry's events, blob a blob's size.
func checkManifest(manifest []byte, session func(SessionInfo) (int, bool), nSessions int, blob func(BlobInfoEntry) (int64, bool), nBlobs int) (Manifest, error) {
	var m Manifest
	if manifest == nil {
		return m, malformed("no manifest.json (an archive whose writing did not finish?)")
	}
	dec := json.NewDecoder(bytes.NewReader(manifest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, malformed("manifest.json: %v", err)
	}
	if m.Format != Format || m.Version != Version {
		return m, malformed("manifest.json: format %q version %d, want %q version %d", m.Format, m.Version, Format, Version)
	}
	seen := map[string]bool{}
	for _, s := range m.Sessions {
		n, ok := session(s)
		switch {
		case seen[s.ID]:
			return m, malformed("manifest.json names session %s twice", s.ID)
		case !ok:
			return m, malformed("manifest.json names session %.130q, which the archive lacks", s.ID)
		case n != s.Events:
			return m, malformed("session %s has %d events, the manifest says %d", s.ID, n, s.Events)
		}
		seen[s.ID] = true
	}
	if len(seen) != nSessions {
		return m, malformed("the archive holds %d sessions, the manifest names %d", nSessions, len(seen))
	}
	blobs := map[string]bool{}
	for _, b := range m.Blobs {
		n, ok := blob(b)
		switch {
		case blobs[b.Digest]:
			return m, malformed("manifest.json names blob %s twice", b.Digest)
		case !ok:
			return m, malformed("manifest.json names blob %.80q, which the archive lacks", b.Digest)
		case n != b.Size:
			return m, malformed("blob %s has %d bytes, the manifest says %d", b.Digest, n, b.Size)
		}
		blobs[b.Digest] = true
	}
	if len(blobs) != nBlobs {
		return m, malformed("the archive holds %d blobs, the manifest names %d", nBlobs, len(blobs))
	}
	return m, nil
}

// EachBlob reads an archive [Check] accepted (the same bytes again) and
// calls fn with each of its blobs, one at a time: the bytes are fn's.
func EachBlob(r io.Reader, opts ReadOptions, fn func(digest string, data []byte) error) error {
	opts = opts.normalized()
	return walk(r, opts, func(kind entryKind, name string, hdr *tar.Header, body io.Reader) error {
		if kind != entryBlob {
			return nil
		}
		data := make([]byte, 0, min(hdr.Size, 1<<20))
		buf := bytes.NewBuffer(data)
		if _, err := buf.ReadFrom(body); err != nil {
			return malformed("entry %.100q: %v", hdr.Name, err)
		}
		if storage.BlobDigest(buf.Bytes()) != name {
			return malformed("blob %s changed since the archive was checked", name)
		}
		return fn(name, buf.Bytes())
	})
}

// EachSession reads an archive [Check] accepted (the same bytes again) and
// calls fn with each session's id and its events, which fn may range over
// once, during the call: one event is read at a time. An event that fails
// to decode (the archive changed since it was checked) is yielded as an
// error.
func EachSession(r io.Reader, opts ReadOptions, fn func(id string, events iter.Seq2[ledger.Event, error]) error) error {
	opts = opts.normalized()
	return walk(r, opts, func(kind entryKind, name string, hdr *tar.Header, body io.Reader) error {
		if kind != entrySession {
			return nil
		}
		used := false
		events := func(yield func(ledger.Event, error) bool) {
			if used {
				yield(ledger.Event{}, errors.New("archive: a session's events are read once"))
				return
			}
			used = true
			stop := errors.New("stop")
			n := 0
			err := eventLines(name, body, opts, func(b []byte) error {
				n++
				e, err := decodeLine(name, n, b)
				if err != nil {
					return err
				}
				if !yield(e, nil) {
					return stop
				}
				return nil
			})
			if err != nil && err != stop {
				yield(ledger.Event{}, err)
			}
		}
		if err := fn(name, events); err != nil {
			return err
		}
		_, err := io.Copy(io.Discard, body) // what fn left of the entry
		return err
	})
}
