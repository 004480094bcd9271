package archive_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/archive"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/redis"
	"github.com/agentichost/agentic/storage/storagetest"
)

var prefixes atomic.Int64

// fill appends every kind of event, alone and in batches, to a few
// sessions of store, and returns their ids.
func fill(t *testing.T, store storage.Storage) []string {
	t.Helper()
	ids := []string{"s1", "s2:with-colon", strings.Repeat("L", 100)}
	for i, id := range ids {
		events := storagetest.EveryKind(fmt.Sprintf("run_%d", i))
		if err := store.Append(t.Context(), id, events[:3]...); err != nil {
			t.Fatal(err)
		}
		for _, e := range events[3:] {
			if err := store.Append(t.Context(), id, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ids
}

// encoded returns the encodings of a session's events.
func encoded(t *testing.T, store storage.Storage, id string) [][]byte {
	t.Helper()
	events, err := store.Load(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, len(events))
	for i, e := range events {
		if out[i], err = ledger.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func export(t *testing.T, store storage.Storage) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := archive.NewWriter(&buf, "")
	if err := archive.ExportAll(t.Context(), store, w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func importAll(t *testing.T, store storage.Storage, data []byte, opts archive.ImportOptions) archive.ImportReport {
	t.Helper()
	a, err := archive.Read(bytes.NewReader(data), archive.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := archive.Import(t.Context(), store, a, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestRoundTrip: file → archive → Redis (a server, a cluster) → archive →
// file: every event is the same, byte for byte in the ledger's encoding.
func TestRoundTrip(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	targets := map[string]string{"redis": srv.URL()}
	if !testing.Short() {
		c := redistest.StartCluster(t, 3)
		targets["cluster"] = "redis+cluster://" + strings.Join(c.Addrs(), ",")
	}
	for name, url := range targets {
		t.Run(name, func(t *testing.T) {
			src, err := file.Open(t.TempDir(), file.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			ids := fill(t, src)
			image := withBlob(t, src, "pics")
			ids = append(ids, "pics")
			first := export(t, src)

			mid, err := redis.Open(t.Context(), url, redis.Options{Prefix: fmt.Sprintf("rt%d", prefixes.Add(1))})
			if err != nil {
				t.Fatal(err)
			}
			defer mid.Close()
			if rep := importAll(t, mid, first, archive.ImportOptions{}); len(rep.Sessions) != len(ids) || rep.Events == 0 {
				t.Fatalf("import into Redis: %+v", rep)
			}
			second := export(t, mid)

			dst, err := file.Open(t.TempDir(), file.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			importAll(t, dst, second, archive.ImportOptions{})
			for _, id := range ids {
				want := encoded(t, src, id)
				for store, got := range map[string][][]byte{"redis": encoded(t, mid, id), "file again": encoded(t, dst, id)} {
					if len(got) != len(want) {
						t.Errorf("%s: session %.20s: %d events, want %d", store, id, len(got), len(want))
						continue
					}
					for i := range want {
						if !bytes.Equal(got[i], want[i]) {
							t.Errorf("%s: session %.20s event %d:\n got %s\nwant %s", store, id, i+1, got[i], want[i])
						}
					}
				}
			}
			for store, b := range map[string]storage.Storage{"redis": mid, "file again": dst} {
				got, ok, err := b.(storage.Blobs).GetBlob(t.Context(), storage.BlobDigest(image))
				if err != nil || !ok || !bytes.Equal(got, image) {
					t.Errorf("%s: the session's blob: %d bytes, %v, %v", store, len(got), ok, err)
				}
			}
			// A session's own archive carries its blobs too.
			var buf bytes.Buffer
			w := archive.NewWriter(&buf, "")
			if err := archive.ExportSession(t.Context(), dst, "pics", w); err != nil {
				t.Fatal(err)
			}
			w.Close()
			one := memory.New()
			importAll(t, one, buf.Bytes(), archive.ImportOptions{})
			if got, ok, err := one.GetBlob(t.Context(), storage.BlobDigest(image)); err != nil || !ok || !bytes.Equal(got, image) {
				t.Errorf("a session's archive: the blob %d bytes, %v, %v", len(got), ok, err)
			}
		})
	}
}

// withBlob puts an image in store's blobs and appends to session id a
// message that refers to it, and returns the image.
func withBlob(t *testing.T, store storage.Storage, id string) []byte {
	t.Helper()
	image := bytes.Repeat([]byte("a picture of a cat "), 500)
	d, err := store.(storage.Blobs).PutBlob(t.Context(), image)
	if err != nil {
		t.Fatal(err)
	}
	e := storagetest.EveryKind("run_pics")[0]
	e.Input.Parts = append(e.Input.Parts, ledger.Part{Type: ledger.PartImage, MIME: "image/png", Blob: d, Size: int64(len(image))})
	if err := store.Append(t.Context(), id, e); err != nil {
		t.Fatal(err)
	}
	return image
}

// TestImportRefusesExisting: an import that meets a session the store
// holds imports nothing without Replace, and replaces it with.
func TestImportRefusesExisting(t *testing.T) {
	src := memory.New()
	ids := fill(t, src)
	data := export(t, src)
	dst := memory.New()
	other := storagetest.EveryKind("run_other")[:2]
	if err := dst.Append(t.Context(), ids[1], other...); err != nil {
		t.Fatal(err)
	}
	a, err := archive.Read(bytes.NewReader(data), archive.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = archive.Import(t.Context(), dst, a, archive.ImportOptions{})
	var exists *archive.ExistsError
	if !errors.As(err, &exists) || len(exists.Sessions) != 1 || exists.Sessions[0] != ids[1] {
		t.Fatalf("import over an existing session = %v, want an ExistsError naming it", err)
	}
	if all, _ := dst.ListSessions(t.Context()); len(all) != 1 {
		t.Errorf("a refused import imported: %q", all)
	}
	rep := importAll(t, dst, data, archive.ImportOptions{Replace: true})
	if len(rep.Replaced) != 1 || len(rep.Sessions) != len(ids) {
		t.Errorf("report %+v", rep)
	}
	if got := encoded(t, dst, ids[1]); len(got) != len(encoded(t, src, ids[1])) {
		t.Errorf("the replaced session has %d events", len(got))
	}
	// Only one session.
	one := memory.New()
	rep, err = archive.Import(t.Context(), one, a, archive.ImportOptions{Only: ids[0]})
	if err != nil || len(rep.Sessions) != 1 {
		t.Errorf("import of one session: %+v, %v", rep, err)
	}
	if _, err := archive.Import(t.Context(), one, a, archive.ImportOptions{Only: "nope"}); err == nil {
		t.Error("import of a session the archive lacks: no error")
	}
}

// tarGz builds an archive from raw entries.
func tarGz(entries ...[2]string) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		tw.WriteHeader(&tar.Header{Name: e[0], Mode: 0o600, Size: int64(len(e[1])), Typeflag: tar.TypeReg})
		tw.Write([]byte(e[1]))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// validParts returns the entries of a valid archive of one session of one
// event.
func validParts(t testing.TB) (session, manifest string) {
	b, err := ledger.Encode(storagetest.EveryKind("run_1")[0])
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n", `{"format":"agentic-host-archive","version":1,"created":"2026-01-01T00:00:00Z","sessions":[{"id":"s1","events":1}],"blobs":[]}`
}

// TestReadMalformed: every malformed archive is refused with an error
// that matches ErrMalformed (or ErrTooLarge) and says what is wrong.
func TestReadMalformed(t *testing.T) {
	sess, man := validParts(t)
	second, err := ledger.Encode(storagetest.EveryKind("run_1")[1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := archive.Read(bytes.NewReader(tarGz([2]string{"sessions/s1.jsonl", sess}, [2]string{"manifest.json", man})), archive.ReadOptions{}); err != nil {
		t.Fatalf("the valid archive: %v", err)
	}
	blob := "hello blob"
	blobName := strings.TrimPrefix(storage.BlobDigest([]byte(blob)), "sha256:")
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"not gzip", "gzip", []byte("plain text")},
		{"no manifest", "no manifest", tarGz([2]string{"sessions/s1.jsonl", sess})},
		{"truncated session", "no newline", tarGz([2]string{"sessions/s1.jsonl", strings.TrimSuffix(sess, "\n")}, [2]string{"manifest.json", man})},
		{"bad event", "line 1", tarGz([2]string{"sessions/s1.jsonl", "{\"v\":1}\n"}, [2]string{"manifest.json", man})},
		{"count mismatch", "manifest says", tarGz([2]string{"sessions/s1.jsonl", sess + string(second) + "\n"}, [2]string{"manifest.json", man})},
		{"duplicated event", "appears twice", tarGz([2]string{"sessions/s1.jsonl", sess + sess}, [2]string{"manifest.json", strings.Replace(man, `"events":1`, `"events":2`, 1)})},
		{"missing session", "lacks", tarGz([2]string{"manifest.json", man})},
		{"extra session", "names 1", tarGz([2]string{"sessions/s1.jsonl", sess}, [2]string{"sessions/s2.jsonl", sess}, [2]string{"manifest.json", man})},
		{"bad id", "invalid session id", tarGz([2]string{"sessions/.x.jsonl", sess}, [2]string{"manifest.json", man})},
		{"unknown entry", "unknown entry", tarGz([2]string{"etc/passwd", "x"}, [2]string{"manifest.json", man})},
		{"bad blob", "other digest", tarGz([2]string{"sessions/s1.jsonl", sess}, [2]string{"blobs/" + blobName, "tampered"}, [2]string{"manifest.json", man})},
		{"unlisted blob", "blobs", tarGz([2]string{"sessions/s1.jsonl", sess}, [2]string{"blobs/" + blobName, blob}, [2]string{"manifest.json", man})},
		{"other version", "version 2", tarGz([2]string{"sessions/s1.jsonl", sess}, [2]string{"manifest.json", strings.Replace(man, `"version":1`, `"version":2`, 1)})},
		{"unknown manifest field", "unknown field", tarGz([2]string{"sessions/s1.jsonl", sess}, [2]string{"manifest.json", strings.Replace(man, `{`, `{"x":1,`, 1)})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := archive.Read(bytes.NewReader(tc.data), archive.ReadOptions{})
			if !errors.Is(err, archive.ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Read = %v, want ErrMalformed saying %q", err, tc.want)
			}
			_, err = archive.Check(bytes.NewReader(tc.data), archive.ReadOptions{})
			if !errors.Is(err, archive.ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check = %v, want ErrMalformed saying %q", err, tc.want)
			}
		})
	}
	_, err = archive.Read(bytes.NewReader(tarGz([2]string{"sessions/s1.jsonl", sess}, [2]string{"manifest.json", man})), archive.ReadOptions{MaxBytes: 10})
	if !errors.Is(err, archive.ErrTooLarge) {
		t.Errorf("Read past MaxBytes = %v, want ErrTooLarge", err)
	}
}

// FuzzRead: no input makes Read panic, and what it accepts imports into a
// store and exports again to an archive it accepts.
func FuzzRead(f *testing.F) {
	sess, man := validParts(f)
	f.Add(tarGz([2]string{"sessions/s1.jsonl", sess}, [2]string{"manifest.json", man}))
	f.Add(tarGz([2]string{"manifest.json", `{"format":"agentic-host-archive","version":1,"created":"2026-01-01T00:00:00Z","sessions":[],"blobs":[]}`}))
	f.Add(tarGz([2]string{"sessions/s1.jsonl", "{}\n"}, [2]string{"manifest.json", man}))
	f.Add([]byte("\x1f\x8b"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := archive.Read(bytes.NewReader(data), archive.ReadOptions{MaxBytes: 1 << 20})
		if err != nil {
			if !errors.Is(err, archive.ErrMalformed) && !errors.Is(err, archive.ErrTooLarge) {
				t.Fatalf("Read = %v: neither ErrMalformed nor ErrTooLarge", err)
			}
			return
		}
		store := memory.New()
		if _, err := archive.Import(t.Context(), store, a, archive.ImportOptions{}); err != nil {
			t.Fatalf("Import of an accepted archive: %v", err)
		}
		var buf bytes.Buffer
		w := archive.NewWriter(&buf, "")
		if err := archive.ExportAll(t.Context(), store, w); err != nil {
			t.Fatal(err)
		}
		w.Close()
		if _, err := archive.Read(&buf, archive.ReadOptions{}); err != nil {
			t.Fatalf("Read of a re-exported archive: %v", err)
		}
	})
}

// TestCheckBounds is a second round against the streaming reader, with
// inputs the import's tests lack: an event line past MaxEventBytes with no
// newline in sight, more entries than MaxEntries (empty ones), a header
// that declares more than MaxBytes, more events than MaxEvents, and a blob
// past MaxBlobBytes, each a *LimitError matching ErrTooLarge; while an
// event that appears in two sessions (as a fork's copies do) is no
// duplicate.
func TestCheckBounds(t *testing.T) {
	sess, man := validParts(t)
	long := strings.Repeat("x", 3<<20) // one line, no newline
	many := [][2]string{}
	for i := range 50 {
		many = append(many, [2]string{fmt.Sprintf("sessions/e%d.jsonl", i), ""})
	}
	var hdr bytes.Buffer
	{
		gz := gzip.NewWriter(&hdr)
		tw := tar.NewWriter(gz)
		tw.WriteHeader(&tar.Header{Name: "blobs/" + strings.Repeat("a", 64), Mode: 0o600, Size: 1 << 40, Typeflag: tar.TypeReg})
		gz.Close() // the body never comes
	}
	blob := strings.Repeat("b", 5000)
	blobName := strings.TrimPrefix(storage.BlobDigest([]byte(blob)), "sha256:")
	for _, tc := range []struct {
		name  string
		data  []byte
		opts  archive.ReadOptions
		bound string
	}{
		{"long line", tarGz([2]string{"sessions/s1.jsonl", long}, [2]string{"manifest.json", man}), archive.ReadOptions{MaxEventBytes: 1 << 20}, "event bytes"},
		{"many entries", tarGz(append(many, [2]string{"manifest.json", man})...), archive.ReadOptions{MaxEntries: 20}, "entries"},
		{"declared size", hdr.Bytes(), archive.ReadOptions{}, "bytes"},
		{"many events", tarGz([2]string{"sessions/s1.jsonl", sess}, [2]string{"sessions/s2.jsonl", sess}, [2]string{"manifest.json", man}), archive.ReadOptions{MaxEvents: 1}, "events"},
		{"large blob", tarGz([2]string{"blobs/" + blobName, blob}, [2]string{"manifest.json", man}), archive.ReadOptions{MaxBlobBytes: 4096}, "blob bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := archive.Check(bytes.NewReader(tc.data), tc.opts)
			limit, ok := errors.AsType[*archive.LimitError](err)
			if !ok || limit.Bound != tc.bound || !errors.Is(err, archive.ErrTooLarge) {
				t.Errorf("Check = %v, want a *LimitError of %q matching ErrTooLarge", err, tc.bound)
			}
		})
	}
	two := strings.Replace(man, `"sessions":[{"id":"s1","events":1}]`, `"sessions":[{"id":"s1","events":1},{"id":"s2","events":1}]`, 1)
	sum, err := archive.Check(bytes.NewReader(tarGz([2]string{"sessions/s1.jsonl", sess}, [2]string{"sessions/s2.jsonl", sess}, [2]string{"manifest.json", two})), archive.ReadOptions{})
	if err != nil || len(sum.Sessions) != 2 {
		t.Errorf("an event in two sessions: %+v, %v; want both sessions", sum, err)
	}
}
