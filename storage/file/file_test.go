package file_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/storagetest"
)

func TestConformance(t *testing.T) {
	for _, fsync := range []bool{false, true} {
		t.Run(fmt.Sprintf("fsync=%v", fsync), func(t *testing.T) {
			t.Parallel()
			storagetest.Run(t, func(t *testing.T) storage.Storage {
				st, rec := openStore(t, t.TempDir(), fsync)
				t.Cleanup(func() {
					// The suite never damages a file: any warning is a bug.
					for _, w := range rec.warnings() {
						t.Errorf("unexpected log: %s", w)
					}
				})
				return st
			})
		})
	}
}

// TestConformanceOneOpenFile runs the suite with one session file open at
// a time: every Append to another session closes the last one's file.
func TestConformanceOneOpenFile(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Storage {
		st, err := file.Open(t.TempDir(), file.Options{MaxOpenFiles: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	})
}

func TestFraming(t *testing.T) {
	dir := t.TempDir()
	st, _ := openStore(t, dir, false)
	ctx := t.Context()
	one := storagetest.EveryKind("run-1")[:1]
	batch := storagetest.EveryKind("run-2")
	if err := st.Append(ctx, "s", one...); err != nil {
		t.Fatal(err)
	}
	if err := st.Append(ctx, "s", batch...); err != nil {
		t.Fatal(err)
	}
	got := readFile(t, sessionPath(dir, "s"))
	want := append(record(t, one...), record(t, batch...)...)
	if !bytes.Equal(got, want) {
		t.Errorf("file contents:\n%s\nwant:\n%s", got, want)
	}
	if fi, err := os.Stat(sessionPath(dir, "s")); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("session file mode = %v, want 0600", fi.Mode().Perm())
	}
}

// TestTornLastBatch cuts the file at every byte of its last record, a
// multi-event batch, as a crash during its write would: Load must return
// the records before it, drop the torn batch whole with a warning, and a
// later Append must not be glued to the torn bytes.
func TestTornLastBatch(t *testing.T) {
	t.Parallel()
	prior := [][]ledger.Event{pokes(0, 1), pokes(1, 3)}
	// A batch of three events, one of them a step with every field set
	// (about 1 KiB, so that every cut stays fast under -race).
	last := []ledger.Event{poke(10), storagetest.EveryKind("run-torn")[2], poke(11)}
	next := pokes(100, 2)

	var good []byte
	for _, b := range prior {
		good = append(good, record(t, b...)...)
	}
	full := append(slices.Clone(good), record(t, last...)...)
	wantPrior := concat(prior...)

	dir := t.TempDir()
	path := sessionPath(dir, "torn")
	for cut := len(good); cut < len(full); cut++ {
		writeFile(t, path, full[:cut])
		st, rec := openStore(t, dir, false)
		got, err := st.Load(t.Context(), "torn")
		if err != nil {
			t.Fatalf("cut at %d of %d: Load: %v", cut, len(full), err)
		}
		if !reflect.DeepEqual(got, wantPrior) {
			t.Fatalf("cut at %d of %d: Load returned %d events, want the %d before the torn batch", cut, len(full), len(got), len(wantPrior))
		}
		warnings := rec.warnings()
		if torn := cut > len(good); torn != (len(warnings) == 1) {
			t.Errorf("cut at %d of %d (%d torn bytes): warnings %q, want one when bytes are torn, else none", cut, len(full), cut-len(good), warnings)
		} else if torn && !strings.Contains(warnings[0], fmt.Sprintf("offset=%d", len(good))) {
			t.Errorf("cut at %d: warning %q does not name the offset %d", cut, warnings[0], len(good))
		}
		// Appending after the torn tail: every offset near the ends of
		// the record and of its events, a sample elsewhere (fast tests).
		if cut-len(good) < 40 || len(full)-cut < 40 || cut%37 == 0 {
			if err := st.Append(t.Context(), "torn", next...); err != nil {
				t.Fatalf("cut at %d: Append after the torn tail: %v", cut, err)
			}
			if data, want := readFile(t, path), append(slices.Clone(good), record(t, next...)...); !bytes.Equal(data, want) {
				t.Fatalf("cut at %d: file after Append:\n%q\nwant:\n%q", cut, data, want)
			}
			st2, rec2 := openStore(t, dir, false)
			got, err := st2.Load(t.Context(), "torn")
			if err != nil {
				t.Fatalf("cut at %d: reload: %v", cut, err)
			}
			if want := concat(wantPrior, next); !reflect.DeepEqual(got, want) {
				t.Fatalf("cut at %d: reload returned %d events, want %d", cut, len(got), len(want))
			}
			if w := rec2.warnings(); len(w) > 0 {
				t.Errorf("cut at %d: reload after Append logged %q", cut, w)
			}
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTornTails damages the end of a file in the ways a crash can, and
// appends without loading first: the first Append truncates the tail.
func TestTornTails(t *testing.T) {
	prior := pokes(0, 3)
	good := append(record(t, prior[0]), record(t, prior[1:]...)...)
	valid := record(t, poke(50))
	for _, tc := range []struct{ name, tail string }{
		{"no newline", string(valid[:len(valid)-1])},
		{"half an event", string(valid[:len(valid)/2])},
		{"half a batch", string(record(t, pokes(60, 3)...)[:200])},
		{"zeroes", "\x00\x00\x00\x00\x00\x00\x00\x00"},
		{"zeroes and newline", "\x00\x00\x00\x00\n"},
		{"empty line", "\n"},
		{"empty lines", "\n\n\n"},
		{"garbage lines", "garbage\n{\"v\":1\n[{]\n\x00"},
		{"empty batch", "[]\n"},
		{"invalid event", `{"v":1,"id":"x","kind":"poke","time":"2025-01-01T00:00:00Z"}` + "\n"},
		{"batch with an invalid event", "[" + strings.TrimSuffix(string(valid), "\n") + `,{"v":1,"id":"x"}]` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := sessionPath(dir, "s")
			writeFile(t, path, append(slices.Clone(good), tc.tail...))

			// A Store that appends first.
			st, rec := openStore(t, dir, true)
			if err := st.Append(t.Context(), "s", poke(99)); err != nil {
				t.Fatalf("Append: %v", err)
			}
			if w := rec.warnings(); len(w) != 1 || !strings.Contains(w[0], "truncat") {
				t.Errorf("Append over a torn tail logged %q, want one warning about truncating", w)
			}
			if got, want := readFile(t, path), append(slices.Clone(good), record(t, poke(99))...); !bytes.Equal(got, want) {
				t.Errorf("file after Append:\n%q\nwant:\n%q", got, want)
			}
			got, err := st.Load(t.Context(), "s")
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if want := append(slices.Clone(prior), poke(99)); !reflect.DeepEqual(got, want) {
				t.Errorf("Load returned %d events, want %d", len(got), len(want))
			}
		})
	}
}

// TestOtherVersionLast: a whole last line of another schema version (a
// newer build wrote it) is not a torn tail: Load and Append refuse the
// session, naming the line, and the file keeps it.
func TestOtherVersionLast(t *testing.T) {
	dir := t.TempDir()
	path := sessionPath(dir, "s")
	data := append(record(t, poke(1)), strings.Replace(string(record(t, poke(2))), `"v":1`, `"v":2`, 1)...)
	writeFile(t, path, data)
	st, _ := openStore(t, dir, false)
	_, err := st.Load(t.Context(), "s")
	checkCorrupt(t, "Load", err, path, ledger.ErrVersion)
	err = st.Append(t.Context(), "s", poke(3))
	checkCorrupt(t, "Append", err, path, ledger.ErrVersion)
	if !strings.Contains(err.Error(), "version 2, newer than this build's 1") {
		t.Errorf("the error %q does not say that a newer build wrote the line", err)
	}
	if got := readFile(t, path); !bytes.Equal(got, data) {
		t.Errorf("the file changed to %q", got)
	}
}

func TestLoadDoesNotRepair(t *testing.T) {
	dir := t.TempDir()
	path := sessionPath(dir, "s")
	data := append(record(t, poke(1)), `{"v":1,"id":`...)
	writeFile(t, path, data)
	for range 2 {
		st, rec := openStore(t, dir, false)
		for range 2 {
			got, err := st.Load(t.Context(), "s")
			if err != nil || len(got) != 1 {
				t.Fatalf("Load = %d events, %v; want 1, no error", len(got), err)
			}
		}
		if w := rec.warnings(); len(w) != 1 {
			t.Errorf("two Loads by one Store logged %q, want one warning", w)
		}
		if got := readFile(t, path); !bytes.Equal(got, data) {
			t.Errorf("Load changed the file to %q", got)
		}
	}
}

func TestCorruptMiddle(t *testing.T) {
	bad := func(line string) string { return line }
	for _, tc := range []struct {
		name  string
		line  string // replaces line 2
		cause error  // errors.Is the DecodeError, if not nil
	}{
		{"garbage", bad("not json at all"), nil},
		{"torn record", string(record(t, poke(7))[:30]), nil},
		{"empty line", "", nil},
		{"invalid event", `{"v":1,"id":"x","kind":"poke","time":"2025-01-01T00:00:00Z","run_id":"r"}`, ledger.ErrInvalid},
		{"other schema version", `{"v":9,"id":"x"}`, ledger.ErrVersion},
		{"invalid event in a batch", "[" + strings.TrimSpace(string(record(t, poke(8)))) + `,{"v":1,"id":"y","kind":"nope","time":"2025-01-01T00:00:00Z"}]`, ledger.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := sessionPath(dir, "c")
			var data []byte
			data = append(data, record(t, poke(1))...)
			data = append(data, tc.line+"\n"...)
			data = append(data, record(t, pokes(2, 2)...)...)
			data = append(data, `{"torn`...) // a torn tail as well
			writeFile(t, path, data)

			st, _ := openStore(t, dir, false)
			_, err := st.Load(t.Context(), "c")
			checkCorrupt(t, "Load", err, path, tc.cause)
			err = st.Append(t.Context(), "c", poke(9))
			checkCorrupt(t, "Append", err, path, tc.cause)
			if got := readFile(t, path); !bytes.Equal(got, data) {
				t.Errorf("the file changed to %q", got)
			}
			ids, err := st.ListSessions(t.Context())
			if err != nil || !slices.Equal(ids, []string{"c"}) {
				t.Errorf("ListSessions = %q, %v; want the corrupt session listed", ids, err)
			}
		})
	}
}

func checkCorrupt(t *testing.T, op string, err error, path string, cause error) {
	t.Helper()
	var ce *file.CorruptError
	if !errors.As(err, &ce) {
		t.Errorf("%s: error %v, want a *file.CorruptError", op, err)
		return
	}
	if ce.Path != path || ce.Line != 2 {
		t.Errorf("%s: CorruptError{Path: %q, Line: %d}, want %q, line 2", op, ce.Path, ce.Line, path)
	}
	if !strings.Contains(err.Error(), path+":2:") {
		t.Errorf("%s: message %q does not name %s:2", op, err, path)
	}
	if !errors.Is(err, file.ErrCorrupt) || !errors.Is(err, storage.ErrCorrupt) {
		t.Errorf("%s: error does not match file.ErrCorrupt", op)
	}
	var de *ledger.DecodeError
	if !errors.As(err, &de) {
		t.Errorf("%s: error %v does not wrap a *ledger.DecodeError", op, err)
	}
	if cause != nil && !errors.Is(err, cause) {
		t.Errorf("%s: error %v does not match %v", op, err, cause)
	}
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	want := map[string][]ledger.Event{"a": pokes(0, 1), "b": pokes(10, 3), "c": storagetest.EveryKind("run-c")}
	st, _ := openStore(t, dir, false)
	for id, evs := range want {
		if err := st.Append(ctx, id, evs...); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st, rec := openStore(t, dir, false)
	ids, err := st.ListSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"a", "b", "c"}) {
		t.Errorf("ListSessions after reopening = %q, want a, b, c", ids)
	}
	// Append before and after a Load: both paths measure the file.
	if err := st.Append(ctx, "a", poke(1)); err != nil {
		t.Fatal(err)
	}
	want["a"] = append(want["a"], poke(1))
	for id, evs := range want {
		got, err := st.Load(ctx, id)
		if err != nil {
			t.Fatalf("Load(%s): %v", id, err)
		}
		if !reflect.DeepEqual(got, evs) {
			t.Errorf("Load(%s) after reopening: %d events, want %d", id, len(got), len(evs))
		}
	}
	if err := st.Append(ctx, "b", poke(13)); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Load(ctx, "b"); err != nil || !reflect.DeepEqual(got, concat(want["b"], pokes(13, 1))) {
		t.Errorf("Load(b) after Load and Append = %d events, %v", len(got), err)
	}
	if w := rec.warnings(); len(w) > 0 {
		t.Errorf("unexpected warnings: %q", w)
	}
}

func TestListSessionsSkipsOtherFiles(t *testing.T) {
	dir := t.TempDir()
	ok := record(t, poke(1))
	for name, data := range map[string]string{
		"ok.jsonl":         string(ok),
		"two.jsonl":        string(ok) + string(ok),
		"corrupt.jsonl":    "junk\n" + string(ok),
		"torn.jsonl":       string(ok[:20]),
		"torn-lines.jsonl": "junk\n\x00\x00",
		"empty.jsonl":      "",
		"README.md":        "hello",
		"ok.jsonl.tmp":     string(ok),
		".hidden.jsonl":    string(ok),
		"sp ace.jsonl":     string(ok),
		"ok.json":          string(ok),
		"big-first.jsonl":  string(record(t, storagetest.EveryKind("r")...)),
		"no-newline.jsonl": strings.TrimSuffix(string(ok), "\n"),
		"first-bad.jsonl":  "junk\n",
	} {
		writeFile(t, filepath.Join(dir, name), []byte(data))
	}
	if err := os.Mkdir(filepath.Join(dir, "dir.jsonl"), 0o700); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"link.jsonl":     "ok.jsonl", // a session file elsewhere: listed
		"dirlink.jsonl":  "dir.jsonl",
		"dangling.jsonl": "nowhere.jsonl",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := openStore(t, dir, false)
	ids, err := st.ListSessions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if want := []string{"big-first", "corrupt", "link", "ok", "two"}; !slices.Equal(ids, want) {
		t.Errorf("ListSessions = %q, want %q", ids, want)
	}
}

func TestOpen(t *testing.T) {
	if _, err := file.Open("", file.Options{}); err == nil {
		t.Error("Open(\"\"): no error")
	}
	regular := filepath.Join(t.TempDir(), "regular")
	writeFile(t, regular, nil)
	if _, err := file.Open(regular, file.Options{}); err == nil {
		t.Error("Open of a regular file: no error")
	}
	dir := filepath.Join(t.TempDir(), "a", "b")
	st, err := file.Open(dir, file.Options{Fsync: true}) // nil Logger: slog.Default()
	if err != nil {
		t.Fatalf("Open of a missing directory: %v", err)
	}
	defer st.Close()
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("Open did not create %s with mode 0700: %v, %v", dir, fi, err)
	}
	if err := st.Append(t.Context(), "s", poke(1)); err != nil {
		t.Errorf("Append: %v", err)
	}
}

// TestHammerLoadDuringAppends loads a session while it is appended to: every
// Load returns a prefix of the appended events, at least those appended
// before it began, and nothing is ever mistaken for a torn tail.
func TestHammerLoadDuringAppends(t *testing.T) {
	for _, loadFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("loadFirst=%v", loadFirst), func(t *testing.T) {
			dir := t.TempDir()
			st, rec := openStore(t, dir, false)
			ctx := t.Context()
			const n = 300
			all := pokes(0, n)
			var (
				mu       sync.Mutex
				appended int
				wg       sync.WaitGroup
				stop     = make(chan struct{})
			)
			if loadFirst {
				if _, err := st.Load(ctx, "h"); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						mu.Lock()
						before := appended
						mu.Unlock()
						got, err := st.Load(ctx, "h")
						if err != nil {
							t.Errorf("Load: %v", err)
							return
						}
						if len(got) < before || len(got) > n || !reflect.DeepEqual(got, all[:len(got)]) {
							t.Errorf("Load returned %d events, not a prefix of the %d appended (at least %d)", len(got), n, before)
							return
						}
					}
				})
			}
			for i := 0; i < n; {
				size := min(i%3+1, n-i)
				if err := st.Append(ctx, "h", all[i:i+size]...); err != nil {
					t.Fatal(err)
				}
				i += size
				mu.Lock()
				appended = i
				mu.Unlock()
			}
			close(stop)
			wg.Wait()
			if w := rec.warnings(); len(w) > 0 {
				t.Errorf("warnings during concurrent Loads and Appends: %q", w)
			}
		})
	}
}

// TestHandOverBetweenStores: two Stores on one directory — two processes,
// one after the other, as when one host leaves a run waiting for approval
// and another continues it. Each sees the records the other appended, and
// an Append (its file already open, or opened again) keeps them rather
// than truncating them as a torn tail.
func TestHandOverBetweenStores(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	rec := &logRecorder{}
	a, err := file.Open(dir, file.Options{Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := file.Open(dir, file.Options{Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	step := func(st *file.Store, n int, want []ledger.Event) []ledger.Event {
		t.Helper()
		if got, err := st.Load(ctx, "s"); err != nil || !equal(got, want) {
			t.Fatalf("Load before poke %d: %d events, want %d (%v)", n, len(got), len(want), err)
		}
		if err := st.Append(ctx, "s", poke(n)); err != nil {
			t.Fatal(err)
		}
		return append(want, poke(n))
	}
	var want []ledger.Event
	want = step(a, 1, want) // a's file is open from here on
	want = step(b, 2, want)
	want = step(a, 3, want) // a's open file grew under it
	want = step(b, 4, want)
	if err := a.Append(ctx, "s", poke(5)); err != nil { // no Load first
		t.Fatal(err)
	}
	want = append(want, poke(5))
	for name, st := range map[string]*file.Store{"a": a, "b": b} {
		if got, err := st.Load(ctx, "s"); err != nil || !equal(got, want) {
			t.Errorf("store %s: %d events, want %d (%v)", name, len(got), len(want), err)
		}
	}
	if w := rec.warnings(); len(w) > 0 {
		t.Errorf("warnings: %q", w)
	}
}
