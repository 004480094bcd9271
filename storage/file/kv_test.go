package file_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/storage/file"
)

// TestKVSurvivesReopen: values set by one Store are read by the next one
// opened over the directory, beside the sessions, which they do not
// disturb.
func TestKVSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	for _, fsync := range []bool{false, true} {
		st, err := file.Open(dir, file.Options{Fsync: fsync})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Set(ctx, "acme", "post:call-1", []byte(`{"post_id":"p-1"}`)); err != nil {
			t.Fatal(err)
		}
		if err := st.Set(ctx, "acme", "gone", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := st.Delete(ctx, "acme", "gone"); err != nil {
			t.Fatal(err)
		}
		if err := st.Append(ctx, "s1", poke(0)); err != nil {
			t.Fatal(err)
		}
		st.Close()

		st, err = file.Open(dir, file.Options{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok, err := st.Get(ctx, "acme", "post:call-1")
		if err != nil || !ok || string(v) != `{"post_id":"p-1"}` {
			t.Errorf("fsync=%v: after reopening: %q, %v, %v", fsync, v, ok, err)
		}
		if _, ok, err := st.Get(ctx, "acme", "gone"); ok || err != nil {
			t.Errorf("fsync=%v: a deleted key after reopening: found %v, %v", fsync, ok, err)
		}
		ids, err := st.ListSessions(ctx)
		if err != nil || len(ids) != 1 || ids[0] != "s1" {
			t.Errorf("fsync=%v: sessions beside the values: %q, %v", fsync, ids, err)
		}
		st.Close()
	}
}

// TestKVCorruptValue: a value file that is cut short, damaged, or holds
// another key's value is refused with ErrCorruptValue, never returned; a
// leftover temporary file (a Set that crashed before its rename) is
// ignored, and removed by the next Open.
func TestKVCorruptValue(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	st, _ := openStore(t, dir, false)
	for _, k := range []string{"a", "b"} {
		if err := st.Set(ctx, "ns", k, []byte("value of "+k)); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "kv", "*", "*"))
	if len(files) != 2 {
		t.Fatalf("value files: %q", files)
	}
	torn := filepath.Join(filepath.Dir(files[0]), ".set-123")
	if err := os.WriteFile(torn, []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A young temporary file may be another process's Set in progress: an
	// Open leaves it.
	young := filepath.Join(filepath.Dir(files[0]), ".set-456")
	if err := os.WriteFile(young, []byte("in progress"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(torn, old, old); err != nil {
		t.Fatal(err)
	}
	whichA := func() (a, b string) {
		for _, f := range files {
			data, _ := os.ReadFile(f)
			if strings.Contains(string(data), "value of a") {
				a = f
			} else {
				b = f
			}
		}
		return a, b
	}
	fa, fb := whichA()
	good := readFile(t, fa)
	flipped := append([]byte{}, good...)
	flipped[len(flipped)-6] ^= 1

	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "no header"},
		{"cut short", good[:len(good)-3], "checksum"},
		{"a flipped bit", flipped, "checksum"},
		{"another key's value", readFile(t, fb), "another namespace or key"},
	} {
		writeFile(t, fa, c.data)
		v, ok, err := st.Get(ctx, "ns", "a")
		if !errors.Is(err, file.ErrCorruptValue) || !strings.Contains(err.Error(), c.want) || ok || v != nil {
			t.Errorf("%s: Get = %q, %v, %v; want ErrCorruptValue saying %q", c.name, v, ok, err, c.want)
		}
	}
	// The next Open removes the leftover of the interrupted Set, and
	// leaves the young one.
	st.Close()
	st2, _ := openStore(t, dir, false)
	if left, _ := filepath.Glob(filepath.Join(dir, "kv", "*", ".set-*")); len(left) != 1 || left[0] != young {
		t.Errorf("temporary files after reopening: %q, want only %q", left, young)
	}
	st = st2
	// A Set replaces the damaged file.
	if err := st.Set(ctx, "ns", "a", []byte("again")); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := st.Get(ctx, "ns", "a"); err != nil || !ok || string(v) != "again" {
		t.Errorf("after a new Set: %q, %v, %v", v, ok, err)
	}
}
