package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/retention"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
)

// TestTenantDelete: agentic-host tenant delete refuses a tenant the
// configuration still names, and otherwise deletes the tenant's sessions,
// values and plugins from the configured storage, reporting them, and
// nothing of another tenant.
func TestTenantDelete(t *testing.T) {
	dir := t.TempDir()
	storeDir, pluginsDir := filepath.Join(dir, "store"), filepath.Join(dir, "plugins")
	store, err := file.Open(storeDir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ev := ledger.Event{ID: "evt_1", Kind: ledger.KindPoke, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), RunID: "run_1", Poke: &ledger.Poke{Text: "hello"}}
	for _, tenant := range []string{"acme", "beta"} {
		p, err := storage.Prefix(store, tenant+":")
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Append(ctx, "s1", ev); err != nil {
			t.Fatal(err)
		}
		if err := p.(storage.KV).Set(ctx, "ns", "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(pluginsDir, tenant), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pluginsDir, tenant, "tool.wasm"), []byte("\x00asm"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	store.Close()
	config := func(tenants string) string {
		path := filepath.Join(dir, "agentic.yaml")
		body := "storage: file:" + storeDir + "\nplugins_dir: " + pluginsDir + "\ntenants:\n" + tenants
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	both := config("  acme: {models: [m]}\n  beta: {models: [m]}\n")
	code, _, stderr := run(t, "", "tenant", "delete", "acme", "--config", both)
	if code != 1 || !strings.Contains(stderr, "still in") {
		t.Fatalf("tenant delete of a configured tenant: exit %d, %s; want 1 and why", code, stderr)
	}
	betaOnly := config("  beta: {models: [m]}\n")
	code, stdout, stderr := run(t, "", "tenant", "delete", "acme", "--config", betaOnly)
	if code != 0 || !strings.Contains(stdout, "deleted 1 sessions (1 events)") || !strings.Contains(stdout, "1 plugins") {
		t.Fatalf("tenant delete: exit %d, %s %s", code, stdout, stderr)
	}
	files, _ := filepath.Glob(filepath.Join(storeDir, "*.jsonl"))
	if len(files) != 1 || filepath.Base(files[0]) != "beta:s1.jsonl" {
		t.Errorf("session files left: %q, want beta's", files)
	}
	if _, err := os.Stat(filepath.Join(pluginsDir, "acme")); !os.IsNotExist(err) {
		t.Errorf("acme's plugins directory: %v, want it gone", err)
	}
	if _, err := os.Stat(filepath.Join(pluginsDir, "beta", "tool.wasm")); err != nil {
		t.Errorf("beta's plugin: %v", err)
	}
	code, stdout, _ = run(t, "", "tenant", "delete", "acme", "--config", betaOnly, "--json")
	if code != 0 || !strings.Contains(stdout, `"sessions": 0`) {
		t.Errorf("a second tenant delete: exit %d, %s; want nothing to do", code, stdout)
	}
	if code, _, _ := run(t, "", "tenant", "delete", "acme"); code != 2 {
		t.Errorf("tenant delete without --config: exit %d, want 2", code)
	}
}

// TestDeleteSession: agentic-host delete removes a tenant's session from
// the store, with its retention override, and says when there is none.
func TestDeleteSession(t *testing.T) {
	dir := t.TempDir()
	store, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	acme, _ := storage.Prefix(store, "acme:")
	ev := ledger.Event{ID: "evt_1", Kind: ledger.KindPoke, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), RunID: "run_1", Poke: &ledger.Poke{Text: "hello"}}
	if err := acme.Append(t.Context(), "s1", ev); err != nil {
		t.Fatal(err)
	}
	if err := retention.SetOverride(t.Context(), acme.(storage.KV), "s1", retention.Override{Keep: true}); err != nil {
		t.Fatal(err)
	}
	store.Close()
	code, stdout, stderr := run(t, "", "delete", "--storage", "file:"+dir, "--tenant", "acme", "s1")
	if code != 0 || !strings.Contains(stdout, "session s1 deleted: 1 events") {
		t.Fatalf("delete: exit %d, %s %s", code, stdout, stderr)
	}
	// Its retention override went with it.
	store, err = file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	acme, _ = storage.Prefix(store, "acme:")
	if o, err := retention.GetOverride(t.Context(), acme.(storage.KV), "s1"); err != nil || o != (retention.Override{}) {
		t.Errorf("the deleted session's retention override: %+v, %v; want none", o, err)
	}
	store.Close()
	if _, err := os.Stat(filepath.Join(dir, "acme:s1.jsonl")); !os.IsNotExist(err) {
		t.Errorf("the session file: %v, want it gone", err)
	}
	if code, _, stderr := run(t, "", "delete", "--storage", "file:"+dir, "--tenant", "acme", "s1"); code != 1 || !strings.Contains(stderr, "no session s1") {
		t.Errorf("a second delete: exit %d, %s", code, stderr)
	}
}
