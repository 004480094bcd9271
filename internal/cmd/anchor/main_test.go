package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentichost/agentic/internal/fakemodel"
)

// TestAnchorRuns: the command runs its runs against a server answering as
// the anchor benchmark expects, and reports two steps a run.
func TestAnchorRuns(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{Respond: fakemodel.AnchorReply})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, store := range []string{"file", "memory", "file-in-dir"} {
		r, w, _ := os.Pipe()
		stdout := os.Stdout
		os.Stdout = w
		var err error
		if store == "file-in-dir" {
			err = run(srv.URL(), 3, "file", t.TempDir())
		} else {
			err = run(srv.URL(), 3, store, "")
		}
		w.Close()
		os.Stdout = stdout
		out, _ := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%s: %v", store, err)
		}
		var got struct {
			Runs, Steps int
			CPU         float64 `json:"cpu_us_per_step"`
		}
		if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil || got.Runs != 3 || got.Steps != 6 || got.CPU <= 0 {
			t.Errorf("%s: %s (%v), want 3 runs of 2 steps and a CPU time", store, out, err)
		}
	}
	// -dir is where the file store's directory is made.
	if err := run(srv.URL(), 1, "file", filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a -dir that does not exist: no error")
	}
}
