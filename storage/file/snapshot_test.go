package file_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
)

// loadSnapshot is LoadSnapshot, failing the test on an error.
func loadSnapshot(t *testing.T, st *file.Store, id string) ([]byte, string, []ledger.Event) {
	t.Helper()
	data, at, events, err := st.LoadSnapshot(t.Context(), id)
	if err != nil {
		t.Fatalf("LoadSnapshot(%q): %v", id, err)
	}
	return data, at, events
}

// TestSnapshotDamage: a snapshot that does not match the session file —
// its own bytes damaged, its record changed below the store, the file
// shorter than where it was taken, its header unreadable — is no snapshot:
// LoadSnapshot returns the whole ledger (a warning says why when the
// snapshot itself is damaged), as Load does.
func TestSnapshotDamage(t *testing.T) {
	evs := pokes(0, 6)
	setup := func(t *testing.T) (*file.Store, *logRecorder, string) {
		dir := t.TempDir()
		st, rec := openStore(t, dir, false)
		ctx := t.Context()
		for _, b := range [][]ledger.Event{evs[:1], evs[1:4], evs[4:]} {
			if err := st.Append(ctx, "s", b...); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.PutSnapshot(ctx, "s", evs[2].ID, []byte("state")); err != nil {
			t.Fatal(err)
		}
		data, at, tail := loadSnapshot(t, st, "s")
		if string(data) != "state" || at != evs[2].ID || !equal(tail, evs[3:]) {
			t.Fatalf("before the damage: %q at %q, %d events", data, at, len(tail))
		}
		return st, rec, dir
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		warns  string // a warning that says so, "" for none
	}{
		{"data", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "s.snap")
			b := readFile(t, p)
			b[len(b)-1] ^= 1
			writeFile(t, p, b)
		}, "checksum"},
		{"header", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "s.snap")
			writeFile(t, p, append([]byte("{not json\n"), "state"...))
		}, "header"},
		{"no header", func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "s.snap"), []byte("state")) }, "header"},
		{"huge", func(t *testing.T, dir string) {
			// Larger than any snapshot (sparse: no disk spent): not read.
			if err := os.Truncate(filepath.Join(dir, "s.snap"), storage.MaxSnapshotBytes+1<<20); err != nil {
				t.Fatal(err)
			}
		}, "more than a snapshot holds"},
		{"device", func(t *testing.T, dir string) {
			// A link to a device that never ends: read as it was
			// when opened (empty), not forever.
			p := filepath.Join(dir, "s.snap")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/dev/zero", p); err != nil {
				t.Fatal(err)
			}
		}, "header"},
		{"record", func(t *testing.T, dir string) {
			// The batch that holds the snapshot's event, changed below
			// the store with the same length and ids.
			p := sessionPath(dir, "s")
			b := readFile(t, p)
			writeFile(t, p, bytes.Replace(b, []byte("poke 2"), []byte("poke X"), 1))
		}, ""},
		{"shorter", func(t *testing.T, dir string) {
			p := sessionPath(dir, "s")
			writeFile(t, p, record(t, evs[0]))
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, dir := setup(t)
			tc.damage(t, dir)
			// A new Store, as after a restart.
			st, rec := openStore(t, dir, false)
			full, err := st.Load(t.Context(), "s")
			if err != nil {
				t.Fatal(err)
			}
			data, at, events := loadSnapshot(t, st, "s")
			if data != nil || at != "" || !equal(events, full) {
				t.Errorf("after damage to the %s: snapshot %q at %q, %d events; want none and the whole ledger (%d)", tc.name, data, at, len(events), len(full))
			}
			w := strings.Join(rec.warnings(), "\n")
			if tc.warns != "" && !strings.Contains(w, tc.warns) {
				t.Errorf("after damage to the %s, the warnings %q do not say %q", tc.name, w, tc.warns)
			}
		})
	}
}

// TestSnapshotTornTail: records after a snapshot load as Load's do: a torn
// tail is dropped with a warning, and the next Append truncates it first
// (the store measured the file from the snapshot's record alone).
func TestSnapshotTornTail(t *testing.T) {
	dir := t.TempDir()
	st, _ := openStore(t, dir, false)
	ctx := t.Context()
	evs := pokes(0, 4)
	for _, e := range evs[:3] {
		if err := st.Append(ctx, "s", e); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.PutSnapshot(ctx, "s", evs[1].ID, []byte("state")); err != nil {
		t.Fatal(err)
	}
	st.Close()
	p := sessionPath(dir, "s")
	writeFile(t, p, append(readFile(t, p), `{"v":1,"id":"torn`...))
	st, rec := openStore(t, dir, false)
	data, at, events := loadSnapshot(t, st, "s")
	if string(data) != "state" || at != evs[1].ID || !equal(events, evs[2:3]) {
		t.Fatalf("with a torn tail: %q at %q, %d events; want the snapshot and 1 event", data, at, len(events))
	}
	if w := strings.Join(rec.warnings(), "\n"); !strings.Contains(w, "torn tail") {
		t.Errorf("no warning of the torn tail: %q", w)
	}
	if err := st.Append(ctx, "s", evs[3]); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Load(ctx, "s"); err != nil || !equal(got, evs) {
		t.Errorf("after an append past a torn tail: %d events, %v; want %d", len(got), err, len(evs))
	}
	var want []byte
	for _, e := range evs {
		want = append(want, record(t, e)...)
	}
	if got := readFile(t, p); !bytes.Equal(got, want) {
		t.Errorf("the file after an append past a torn tail:\n%s\nwant:\n%s", got, want)
	}
}

// TestSnapshotAnotherStore: a snapshot one Store puts is read by another
// Store on the same directory, with the records that Store appended after
// it; DeleteSession by either removes it.
func TestSnapshotAnotherStore(t *testing.T) {
	dir := t.TempDir()
	a, _ := openStore(t, dir, false)
	b, _ := openStore(t, dir, false)
	ctx := t.Context()
	evs := pokes(0, 5)
	if err := a.Append(ctx, "s", evs[:3]...); err != nil {
		t.Fatal(err)
	}
	if err := a.PutSnapshot(ctx, "s", evs[2].ID, []byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := b.Append(ctx, "s", evs[3:]...); err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]*file.Store{"a": a, "b": b} {
		data, at, events := loadSnapshot(t, st, "s")
		if string(data) != "state" || at != evs[2].ID || !equal(events, evs[3:]) {
			t.Errorf("store %s: %q at %q, %d events; want the snapshot and 2 events", name, data, at, len(events))
		}
	}
	if err := b.DeleteSession(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "s.snap")); !os.IsNotExist(err) {
		t.Errorf("the snapshot's file after DeleteSession: %v", err)
	}
	if data, _, events := loadSnapshot(t, a, "s"); data != nil || len(events) != 0 {
		t.Errorf("after DeleteSession: snapshot %q, %d events", data, len(events))
	}
}
