package file_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
)

// reorder writes an event's encoding with its keys in another order, as
// another JSON tool may: the same event, not in canonical form.
func reorder(t *testing.T, e ledger.Event) string {
	t.Helper()
	b, err := ledger.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	return "{" + strings.TrimPrefix(s[:len(s)-1], `{"v":1,`) + `,"v":1}`
}

func TestRewrite(t *testing.T) {
	dir := t.TempDir()
	path := sessionPath(dir, "s")
	canonical := append(record(t, poke(1)), record(t, pokes(2, 2)...)...)
	old := string(canonical) +
		reorder(t, poke(4)) + "\n" +
		"[" + reorder(t, poke(5)) + ", " + strings.TrimSuffix(string(record(t, poke(6))), "\n") + "]\n" +
		`{"v":1,"id":` // a torn tail
	writeFile(t, path, []byte(old))
	want := string(canonical) + string(record(t, poke(4))) + string(record(t, pokes(5, 2)...)) + `{"v":1,"id":`

	st, _ := openStore(t, dir, false)
	before, err := st.Load(t.Context(), "s")
	if err != nil || len(before) != 6 {
		t.Fatalf("Load = %d events, %v", len(before), err)
	}

	stats, err := st.Rewrite(t.Context(), "s", ledger.Upgrade, true)
	if err != nil || stats != (storage.RewriteStats{Events: 6, Changed: 2}) {
		t.Fatalf("dry run = %+v, %v; want 6 events, 2 changed", stats, err)
	}
	if got := readFile(t, path); string(got) != old {
		t.Fatalf("a dry run changed the file to %q", got)
	}

	stats, err = st.Rewrite(t.Context(), "s", ledger.Upgrade, false)
	if err != nil || stats != (storage.RewriteStats{Events: 6, Changed: 2}) {
		t.Fatalf("Rewrite = %+v, %v; want 6 events, 2 changed", stats, err)
	}
	if got := readFile(t, path); string(got) != want {
		t.Fatalf("rewritten file:\n%s\nwant:\n%s", got, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the rewritten file's mode is %v (%v), want 0600", fi.Mode(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".rewrite-*")); len(left) > 0 {
		t.Errorf("temporary files left: %q", left)
	}
	after, err := st.Load(t.Context(), "s")
	if err != nil || !reflect.DeepEqual(after, before) {
		t.Fatalf("Load after the rewrite = %d events, %v; want the same events", len(after), err)
	}

	// A second pass changes no byte.
	stats, err = st.Rewrite(t.Context(), "s", ledger.Upgrade, false)
	if err != nil || stats != (storage.RewriteStats{Events: 6, Changed: 0}) {
		t.Fatalf("second Rewrite = %+v, %v; want nothing changed", stats, err)
	}
	if got := readFile(t, path); string(got) != want {
		t.Fatalf("a second rewrite changed the file to %q", got)
	}

	// The store appends to the new file (truncating the torn tail first),
	// also from another Store.
	if err := st.Append(t.Context(), "s", poke(7)); err != nil {
		t.Fatal(err)
	}
	if got, want := string(readFile(t, path)), string(canonical)+string(record(t, poke(4)))+string(record(t, pokes(5, 2)...))+string(record(t, poke(7))); got != want {
		t.Fatalf("after an Append:\n%s\nwant:\n%s", got, want)
	}
	st2, _ := openStore(t, dir, false)
	if got, err := st2.Load(t.Context(), "s"); err != nil || !reflect.DeepEqual(got, append(before, poke(7))) {
		t.Fatalf("another Store loads %d events, %v", len(got), err)
	}
}

// TestRewriteAfterAppend: a session whose file the Store holds open for
// appending is rewritten, and the next Append goes to the new file.
func TestRewriteAfterAppend(t *testing.T) {
	dir := t.TempDir()
	path := sessionPath(dir, "s")
	writeFile(t, path, []byte(reorder(t, poke(1))+"\n"))
	st, _ := openStore(t, dir, true)
	if err := st.Append(t.Context(), "s", poke(2)); err != nil {
		t.Fatal(err)
	}
	if stats, err := st.Rewrite(t.Context(), "s", ledger.Upgrade, false); err != nil || stats.Changed != 1 {
		t.Fatalf("Rewrite = %+v, %v", stats, err)
	}
	if err := st.Append(t.Context(), "s", poke(3)); err != nil {
		t.Fatal(err)
	}
	want := bytes.Join([][]byte{record(t, poke(1)), record(t, poke(2)), record(t, poke(3))}, nil)
	if got := readFile(t, path); !bytes.Equal(got, want) {
		t.Fatalf("file = %q", got)
	}
}

// TestRewriteRefuses: what cannot be rewritten fails, naming the line, and
// leaves the file as it was.
func TestRewriteRefuses(t *testing.T) {
	newer := strings.Replace(string(record(t, poke(2))), `"v":1`, `"v":2`, 1)
	for name, c := range map[string]struct {
		data string
		fn   func([]byte) ([]byte, error)
		is   error
		text string
	}{
		"newer version last": {string(record(t, poke(1))) + newer, ledger.Upgrade, ledger.ErrVersion, "newer than this build's 1"},
		"newer version in a batch": {string(record(t, poke(1))) + "[" + strings.TrimSpace(string(record(t, poke(3)))) + "," + strings.TrimSpace(newer) + "]\n",
			ledger.Upgrade, ledger.ErrVersion, "event 2 of the batch"},
		"damage in the middle": {string(record(t, poke(1))) + "garbage\n" + string(record(t, poke(3))), ledger.Upgrade, file.ErrCorrupt, ":2:"},
		"fn fails":             {string(record(t, poke(1))) + string(record(t, poke(3))), func([]byte) ([]byte, error) { return nil, errors.New("no") }, file.ErrCorrupt, ":1:"},
		"fn fails on the last": {string(record(t, poke(1))), func([]byte) ([]byte, error) { return nil, errors.New("no") }, file.ErrCorrupt, ":1:"},
		"fn adds a newline": {string(record(t, poke(1))), func(b []byte) ([]byte, error) { return append(b, '\n'), nil },
			file.ErrCorrupt, "holds a newline"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := sessionPath(dir, "s")
			writeFile(t, path, []byte(c.data))
			st, _ := openStore(t, dir, false)
			_, err := st.Rewrite(t.Context(), "s", c.fn, false)
			if err == nil || !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("Rewrite = %v; want %v saying %q", err, c.is, c.text)
			}
			if got := readFile(t, path); string(got) != c.data {
				t.Fatalf("the file changed to %q", got)
			}
		})
	}
	t.Run("missing session", func(t *testing.T) {
		st, _ := openStore(t, t.TempDir(), false)
		if stats, err := st.Rewrite(t.Context(), "none", ledger.Upgrade, false); err != nil || stats != (storage.RewriteStats{}) {
			t.Fatalf("Rewrite of a missing session = %+v, %v", stats, err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		st, _ := openStore(t, t.TempDir(), false)
		st.Close()
		if _, err := st.Rewrite(t.Context(), "s", ledger.Upgrade, false); !errors.Is(err, storage.ErrClosed) {
			t.Fatalf("Rewrite after Close = %v", err)
		}
	})
}
