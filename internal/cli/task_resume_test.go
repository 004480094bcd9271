package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/file"
)

// TestTaskSIGKILLThenResume kills a real agentic-host task process while
// its model streams the second pass, then runs task --resume: the run goes
// on as the same task (its tools, its schema) and ends submitted; the
// outcome is printed, and printed again by a later --resume.
func TestTaskSIGKILLThenResume(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	long := strings.Repeat("thinking it over ", 200)
	srv, err := fakemodel.Start(fakemodel.Options{Latency: 5 * time.Millisecond, ChunkSize: 1, Script: []fakemodel.Reply{
		{ToolCalls: []fakemodel.ToolCall{{Name: "submit_deliverable", Arguments: `{"title":"a"}`}}},
		{Text: long, ToolCalls: []fakemodel.ToolCall{{Name: "submit_deliverable", Arguments: `{"title":"Never sent"}`}}},
		{ToolCalls: []fakemodel.ToolCall{{Name: "submit_deliverable", Arguments: `{"title":"After the crash"}`}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := t.TempDir()
	common := []string{"task", "--base-url", srv.URL(), "--storage", "file:" + dir, "--session", "tk"}
	cmd := exec.Command(bin, append(common, "--prompt", "Write a title.", "--schema", writeSchema(t, titleSchema))...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it while the second pass streams (the first submission was
	// rejected and recorded).
	deadline := time.Now().Add(30 * time.Second)
	for len(srv.Requests()) < 2 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the task never reached its second pass")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("the task process was not killed: %v", cmd.ProcessState)
	}
	st, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := st.Load(context.Background(), "tk")
	st.Close()
	if err != nil || len(ledger.OpenRuns(evs)) != 1 {
		t.Fatalf("after SIGKILL: %d events, open runs %v, %v", len(evs), ledger.OpenRuns(evs), err)
	}

	for i := range 2 {
		out, err := exec.Command(bin, append(common, "--resume")...).Output()
		var got taskJSON
		if err != nil || json.Unmarshal(out, &got) != nil {
			t.Fatalf("task --resume #%d: %v\n%s", i+1, err, out)
		}
		var value bytes.Buffer
		json.Compact(&value, got.Value)
		if got.Status != "submitted" || value.String() != `{"title":"After the crash"}` || got.SessionID != "tk" {
			t.Fatalf("task --resume #%d printed %+v (value %s)", i+1, got, got.Value)
		}
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("%d model requests, want 3 (the second --resume only reads the ledger)", n)
	}
	// The resumed run offered the task's tools again.
	if tools := srv.Requests()[2].Tools; len(tools) != 2 || tools[0].Name != "submit_deliverable" {
		t.Errorf("the resumed pass offered %+v", tools)
	}
}
