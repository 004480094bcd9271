package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
)

// TestRetentionSweep: agentic-host retention sweep archives the closed
// sessions past a tenant's keep_last, into archives transcript --archive
// reads, and leaves other tenants alone; a second sweep does nothing.
func TestRetentionSweep(t *testing.T) {
	dir := t.TempDir()
	storeDir, archives := filepath.Join(dir, "store"), filepath.Join(dir, "archives")
	st, err := file.Open(storeDir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tenant := range []string{"acme", "beta"} {
		view, _ := storage.Prefix(st, tenant+":")
		for i, id := range []string{"s1", "s2", "s3"} {
			run := "run_" + id
			evs := []ledger.Event{
				{ID: "e1" + id, Kind: ledger.KindInput, Time: at.Add(time.Duration(i) * time.Hour), Input: &ledger.Input{MessageID: "m" + id, Parts: []ledger.Part{ledger.TextPart("hello " + id)}}},
				{ID: "e2" + id, Kind: ledger.KindRunStart, Time: at.Add(time.Duration(i) * time.Hour), RunID: run, RunStart: &ledger.RunStart{Inputs: []string{"m" + id}, ResponseID: "resp_" + id}},
				{ID: "e3" + id, Kind: ledger.KindRunEnd, Time: at.Add(time.Duration(i) * time.Hour), RunID: run, RunEnd: &ledger.RunEnd{Status: ledger.RunCompleted}},
			}
			if err := view.Append(context.Background(), id, evs...); err != nil {
				t.Fatal(err)
			}
		}
	}
	st.Close()
	config := filepath.Join(dir, "agentic.yaml")
	os.WriteFile(config, []byte("storage: file:"+storeDir+"\ntenants:\n  acme:\n    models: [m]\n    retention: {keep_last: 1, archive_dir: "+archives+"}\n  beta:\n    models: [m]\n"), 0o600)
	code, stdout, stderr := run(t, "", "retention", "sweep", "--config", config)
	if code != 0 || !strings.Contains(stdout, "tenant acme: archived 2, deleted 0, kept 1") {
		t.Fatalf("retention sweep: exit %d, %s %s", code, stdout, stderr)
	}
	if code, stdout, _ := run(t, "", "transcript", "--archive", filepath.Join(archives, "acme", "s1.tar.gz")); code != 0 || !strings.Contains(stdout, "hello s1") {
		t.Errorf("transcript of the archive: exit %d, %s", code, stdout)
	}
	files, _ := filepath.Glob(filepath.Join(storeDir, "*.jsonl"))
	if len(files) != 4 {
		t.Errorf("session files left: %q, want acme's s3 and beta's three", files)
	}
	if code, stdout, _ := run(t, "", "retention", "sweep", "--config", config); code != 0 || !strings.Contains(stdout, "archived 0, deleted 0, kept 1") {
		t.Errorf("a second sweep: exit %d, %s", code, stdout)
	}
	if code, _, stderr := run(t, "", "retention", "sweep", "--config", config, "--tenant", "beta"); code != 1 || !strings.Contains(stderr, "no retention policy") {
		t.Errorf("a sweep of a tenant without a policy: exit %d, %s", code, stderr)
	}
}
