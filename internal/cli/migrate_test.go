package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/storage/redis"
)

// migrateCorpus lists the directories of testdata/migrate that older
// builds of agentic-host wrote (see testdata/migrate/README.md).
func migrateCorpus(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob("testdata/migrate/old-*")
	if err != nil || len(dirs) < 3 {
		t.Fatalf("the corpus of old ledgers is missing: %v %v", dirs, err)
	}
	return dirs
}

// copyDir copies the session files of src into a new temporary directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	files, _ := filepath.Glob(filepath.Join(src, "*.jsonl"))
	if len(files) == 0 {
		t.Fatalf("no session files in %s", src)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// sameFiles fails unless every session file of want is in got, byte for
// byte, and got has no other.
func sameFiles(t *testing.T, got, want string) {
	t.Helper()
	wantFiles, _ := filepath.Glob(filepath.Join(want, "*.jsonl"))
	gotFiles, _ := filepath.Glob(filepath.Join(got, "*.jsonl"))
	if len(gotFiles) != len(wantFiles) {
		t.Errorf("%d session files, want %d", len(gotFiles), len(wantFiles))
	}
	for _, w := range wantFiles {
		a, _ := os.ReadFile(filepath.Join(got, filepath.Base(w)))
		b, _ := os.ReadFile(w)
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s:\n%s\nwant:\n%s", filepath.Base(w), w, a, b)
		}
	}
}

// migrateBin runs the agentic-host binary's migrate.
func migrateBin(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return runBin(t, bin, append([]string{"migrate"}, args...)...)
}

// TestMigrateOldBuilds: the ledgers older builds wrote are read by this
// one, and migrate leaves them byte for byte.
func TestMigrateOldBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	for _, src := range migrateCorpus(t) {
		t.Run(filepath.Base(src), func(t *testing.T) {
			dir := copyDir(t, src)
			code, out, errOut := migrateBin(t, "--storage", "file:"+dir)
			if code != 0 || !strings.Contains(out, "nothing to migrate, every event is schema version 1 in canonical form") || errOut != "" {
				t.Fatalf("migrate: exit %d\n%s%s", code, out, errOut)
			}
			sameFiles(t, dir, src)
			files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
			for _, f := range files {
				if tr := transcriptOf(t, "file:"+dir, strings.TrimSuffix(filepath.Base(f), ".jsonl")); len(tr.Items) == 0 {
					t.Errorf("%s: an empty transcript", f)
				}
			}
		})
	}
}

// TestMigrateEdited: ledgers another JSON tool rewrote (keys reordered,
// white space, escapes, times at an offset; testdata/migrate/edited) come
// back as the build that wrote them had written them. A dry run writes
// nothing; a second run changes nothing.
func TestMigrateEdited(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := copyDir(t, "testdata/migrate/edited")
	code, out, errOut := migrateBin(t, "--storage", "file:"+dir, "--dry-run")
	if code != 0 || !strings.Contains(out, "would rewrite session tools: 6 of 6 events") || !strings.Contains(out, ": would rewrite ") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	sameFiles(t, dir, "testdata/migrate/edited")

	code, out, errOut = migrateBin(t, "--storage", "file:"+dir)
	if code != 0 || !strings.Contains(out, "rewrote session tools: 6 of 6 events") || errOut != "" {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, errOut)
	}
	sameFiles(t, dir, "testdata/migrate/old-6a822d1")

	code, out, _ = migrateBin(t, "--storage", "file:"+dir)
	if code != 0 || !strings.Contains(out, "nothing to migrate") {
		t.Fatalf("second migrate: exit %d\n%s", code, out)
	}
	sameFiles(t, dir, "testdata/migrate/old-6a822d1")
}

// TestMigrateRefuses: a session with an event a newer build wrote is named
// and left as it is, the others are migrated, and the exit code is 1;
// memory: has nothing to migrate.
func TestMigrateRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := copyDir(t, "testdata/migrate/edited")
	path := filepath.Join(dir, "plain.jsonl")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"v":2,"id":"ev-new","kind":"poke","time":"2026-12-02T00:00:00Z","run_id":"r","poke":{"text":"x"}}` + "\n")
	f.Close()
	plain, _ := os.ReadFile(path)

	code, out, errOut := migrateBin(t, "--storage", "file:"+dir)
	if code != 1 || !strings.Contains(errOut, "session plain: file: "+path+":4:") ||
		!strings.Contains(errOut, `event "ev-new" (poke): field "v": unsupported schema version 2, newer than this build's 1: upgrade agentic-host to read it`) ||
		!strings.Contains(errOut, "1 session not migrated") {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, errOut)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, plain) {
		t.Error("the refused session's file changed")
	}
	if !strings.Contains(out, "rewrote session tools: 6 of 6 events") {
		t.Errorf("the other sessions were not migrated:\n%s", out)
	}

	code, _, errOut = migrateBin(t, "--storage", "memory:")
	if code != 2 || !strings.Contains(errOut, "nothing to migrate") {
		t.Errorf("memory: exit %d, %q", code, errOut)
	}
	code, _, errOut = migrateBin(t, "--storage", "file:"+dir, "extra")
	if code != 2 || !strings.Contains(errOut, "takes no arguments") {
		t.Errorf("an argument: exit %d, %q", code, errOut)
	}
}

// TestMigrateRedis: the edited ledgers, put in Redis streams as another
// writer would have, are migrated in place by the binary: each entry's
// event becomes the canonical line, with its stream id and batch token
// kept; a session another host leads is refused, naming the host; a second
// run changes nothing.
func TestMigrateRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	srv := redistest.Start(t, redistest.Options{})
	raw := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer raw.Close()
	ctx := t.Context()
	edited, _ := filepath.Glob("testdata/migrate/edited/*.jsonl")
	want := map[string][]string{} // session: its canonical events
	for _, f := range edited {
		id := strings.TrimSuffix(filepath.Base(f), ".jsonl")
		putSession(t, ctx, raw, id, f)
		data, _ := os.ReadFile(filepath.Join("testdata/migrate/old-6a822d1", filepath.Base(f)))
		for line := range strings.Lines(string(data)) {
			want[id] = append(want[id], recordEvents(t, strings.TrimSuffix(line, "\n"))...)
		}
	}
	before := streams(t, ctx, raw, want)

	// A host leads "twice".
	st, err := redis.Open(ctx, srv.URL(), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lease, err := st.AcquireLease(ctx, "twice", "host-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := migrateBin(t, "--storage", srv.URL())
	if code != 1 || !strings.Contains(errOut, "session twice:") || !strings.Contains(errOut, "host-a") || !strings.Contains(errOut, "stop the host that leads it") {
		t.Fatalf("migrate with a session led: exit %d\n%s%s", code, out, errOut)
	}
	lease.Release(ctx)
	code, out, errOut = migrateBin(t, "--storage", srv.URL())
	if code != 0 || !strings.Contains(out, "rewrote session twice: 8 of 8 events") {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, errOut)
	}
	after := streams(t, ctx, raw, want)
	for id, msgs := range after {
		if len(msgs) != len(want[id]) {
			t.Fatalf("%s: %d entries, want %d", id, len(msgs), len(want[id]))
		}
		for i, m := range msgs {
			b := before[id][i]
			if m.ID != b.ID || m.Values["e"] != want[id][i] || m.Values["b"] != b.Values["b"] {
				t.Errorf("%s entry %d: %s %v\nwant %s e=%s b=%v", id, i, m.ID, m.Values, b.ID, want[id][i], b.Values["b"])
			}
		}
	}
	code, out, _ = migrateBin(t, "--storage", srv.URL())
	if code != 0 || !strings.Contains(out, "nothing to migrate") || !reflect.DeepEqual(streams(t, ctx, raw, want), after) {
		t.Fatalf("second migrate: exit %d\n%s", code, out)
	}
	for id := range want {
		if tr := transcriptOf(t, srv.URL(), id); len(tr.Items) == 0 {
			t.Errorf("%s: an empty transcript", id)
		}
	}
}

// putSession writes a session file's records into the session's stream
// of the default prefix and tenant as the redis store lays them out: one
// entry per event, the last of each record with a batch token.
func putSession(t *testing.T, ctx context.Context, raw *goredis.Client, id, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	key := "agentic:{default:" + id + "}:events"
	n := 0
	for line := range strings.Lines(string(data)) {
		events := recordEvents(t, strings.TrimSuffix(line, "\n"))
		for i, e := range events {
			values := []any{"e", e}
			if i == len(events)-1 {
				n++
				values = append(values, "b", "token-"+id+"-"+string(rune('a'+n)))
			}
			if err := raw.XAdd(ctx, &goredis.XAddArgs{Stream: key, Values: values}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := raw.ZAdd(ctx, "agentic:{default}:sessions", goredis.Z{Score: 1, Member: id}).Err(); err != nil {
		t.Fatal(err)
	}
}

// recordEvents splits a record of a session file into its events' text,
// byte for byte.
func recordEvents(t *testing.T, rec string) []string {
	t.Helper()
	if !strings.HasPrefix(rec, "[") {
		return []string{rec}
	}
	var raws []json.RawMessage // each holds its element's bytes as written
	if err := json.Unmarshal([]byte(rec), &raws); err != nil {
		t.Fatalf("record %q: %v", rec, err)
	}
	out := make([]string, len(raws))
	for i, r := range raws {
		out[i] = string(r)
	}
	return out
}

// streams reads the sessions' streams.
func streams(t *testing.T, ctx context.Context, raw *goredis.Client, sessions map[string][]string) map[string][]goredis.XMessage {
	t.Helper()
	out := map[string][]goredis.XMessage{}
	for id := range sessions {
		msgs, err := raw.XRange(ctx, "agentic:{default:"+id+"}:events", "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		out[id] = msgs
	}
	return out
}
