package file_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/file"
)

// logRecorder is a slog.Handler that keeps what it is given.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}

// warnings returns the records at level Warn and above, each as its message
// followed by its attributes, and forgets them.
func (r *logRecorder) warnings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.records {
		if rec.Level < slog.LevelWarn {
			continue
		}
		var b strings.Builder
		b.WriteString(rec.Message)
		rec.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
			return true
		})
		out = append(out, b.String())
	}
	r.records = nil
	return out
}

// openStore opens a Store over dir that logs into the returned recorder, and
// closes it when the test ends.
func openStore(t testing.TB, dir string, fsync bool) (*file.Store, *logRecorder) {
	t.Helper()
	rec := &logRecorder{}
	st, err := file.Open(dir, file.Options{Fsync: fsync, Logger: slog.New(rec)})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return st, rec
}

// sessionPath is where the file store keeps a session, per its
// documentation.
func sessionPath(dir, id string) string { return filepath.Join(dir, id+".jsonl") }

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// poke returns a small valid event numbered n.
func poke(n int) ledger.Event {
	return ledger.Event{
		ID:    fmt.Sprintf("evt-%04d", n),
		Kind:  ledger.KindPoke,
		Time:  time.Date(2025, 6, 1, 12, 0, 0, n, time.UTC),
		RunID: "run-1",
		Poke:  &ledger.Poke{Text: fmt.Sprintf("poke %d", n)},
	}
}

func pokes(from, n int) []ledger.Event {
	evs := make([]ledger.Event, n)
	for i := range evs {
		evs[i] = poke(from + i)
	}
	return evs
}

// record returns what the file store writes for one Append of events, per
// its documented framing.
func record(t testing.TB, events ...ledger.Event) []byte {
	t.Helper()
	var lines []string
	for _, e := range events {
		b, err := ledger.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(b))
	}
	if len(lines) == 1 {
		return []byte(lines[0] + "\n")
	}
	return []byte("[" + strings.Join(lines, ",") + "]\n")
}

// concat returns the concatenation of slices of events.
func concat(batches ...[]ledger.Event) []ledger.Event {
	var out []ledger.Event
	for _, b := range batches {
		out = append(out, b...)
	}
	return out
}

// equal tells whether two event lists are equal, event by event with
// reflect.DeepEqual (a nil and an empty list are equal).
func equal(a, b []ledger.Event) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}
