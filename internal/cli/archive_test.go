package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/redis"
)

// TestExportImport: export a tenant's session and a whole tenant from a
// file store, import them into a Redis store (another tenant), print a
// transcript from the archive; an import over existing sessions refuses
// unless --replace, and a damaged archive imports nothing.
func TestExportImport(t *testing.T) {
	dir := t.TempDir()
	storeDir := filepath.Join(dir, "store")
	st, err := file.Open(storeDir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	acme, _ := storage.Prefix(st, "acme:")
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, id := range []string{"s1", "s2"} {
		in := ledger.Event{ID: "evt_in_" + id, Kind: ledger.KindInput, Time: at, Input: &ledger.Input{MessageID: "msg_" + id,
			Parts: []ledger.Part{ledger.TextPart("hello from " + id)}}}
		if err := acme.Append(context.Background(), id, in); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	fileURL := "file:" + storeDir
	one, all := filepath.Join(dir, "one.tar.gz"), filepath.Join(dir, "all.tar.gz")
	if code, _, stderr := run(t, "", "export", "--storage", fileURL, "--tenant", "acme", "--session", "s1", "-o", one); code != 0 || !strings.Contains(stderr, "exported 1 sessions (1 events)") {
		t.Fatalf("export of a session: exit %d, %s", code, stderr)
	}
	if code, _, stderr := run(t, "", "export", "--storage", fileURL, "--tenant", "acme", "-o", all); code != 0 || !strings.Contains(stderr, "exported 2 sessions") {
		t.Fatalf("export of a tenant: exit %d, %s", code, stderr)
	}
	code, stdout, stderr := run(t, "", "transcript", "--archive", one)
	if code != 0 || !strings.Contains(stdout, "hello from s1") {
		t.Fatalf("transcript --archive: exit %d, %s %s", code, stdout, stderr)
	}
	if code, _, stderr := run(t, "", "transcript", "--archive", all); code != 2 || !strings.Contains(stderr, "name one") {
		t.Errorf("transcript --archive of two sessions without SESSION: exit %d, %s", code, stderr)
	}
	if code, stdout, _ := run(t, "", "transcript", "--archive", all, "s2"); code != 0 || !strings.Contains(stdout, "hello from s2") {
		t.Errorf("transcript --archive FILE s2: exit %d, %s", code, stdout)
	}

	srv := redistest.Start(t, redistest.Options{})
	code, stdout, stderr = run(t, "", "import", "--storage", srv.URL(), "--tenant", "beta", all)
	if code != 0 || !strings.Contains(stdout, "imported 2 sessions (2 events, 0 replaced)") {
		t.Fatalf("import: exit %d, %s %s", code, stdout, stderr)
	}
	code, _, stderr = run(t, "", "import", "--storage", srv.URL(), "--tenant", "beta", one)
	if code != 1 || !strings.Contains(stderr, "s1") || !strings.Contains(stderr, "nothing was imported") {
		t.Errorf("import over an existing session: exit %d, %s", code, stderr)
	}
	if code, stdout, _ := run(t, "", "import", "--storage", srv.URL(), "--tenant", "beta", "--replace", one); code != 0 || !strings.Contains(stdout, "1 replaced") {
		t.Errorf("import --replace: exit %d, %s", code, stdout)
	}
	rs, err := redis.Open(t.Context(), srv.URL(), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	beta, _ := storage.Prefix(rs, "beta:")
	if events, err := beta.Load(t.Context(), "s2"); err != nil || len(events) != 1 || events[0].Input.Parts[0].Text != "hello from s2" {
		t.Errorf("the imported session: %+v, %v", events, err)
	}

	// A damaged archive imports nothing.
	data, _ := os.ReadFile(all)
	bad := filepath.Join(dir, "bad.tar.gz")
	os.WriteFile(bad, data[:len(data)/2], 0o600)
	code, _, stderr = run(t, "", "import", "--storage", srv.URL(), "--tenant", "gamma", bad)
	if code != 1 || !strings.Contains(stderr, "malformed") {
		t.Errorf("import of a damaged archive: exit %d, %s", code, stderr)
	}
	gamma, _ := storage.Prefix(rs, "gamma:")
	if ids, _ := gamma.(storage.Lister).ListSessions(t.Context()); len(ids) != 0 {
		t.Errorf("a damaged archive imported %q", ids)
	}
	if code, _, _ := run(t, "", "export", "--storage", fileURL, "-o", one); code != 2 {
		t.Errorf("export without --session or --tenant: exit %d, want 2", code)
	}
}
