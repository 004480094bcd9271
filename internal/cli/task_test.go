package cli_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/plugins/plugintest"
)

type taskJSON struct {
	Status string          `json:"status"`
	Value  json.RawMessage `json:"value"`
	Reason string          `json:"reason"`
	Usage  struct {
		TotalTokens int64 `json:"total_tokens"`
	} `json:"usage"`
	Cost      float64 `json:"cost"`
	SessionID string  `json:"session_id"`
	RunID     string  `json:"run_id"`
}

type usageJSON struct {
	Total struct {
		PromptTokens int64 `json:"prompt_tokens"`
		TotalTokens  int64 `json:"total_tokens"`
	} `json:"total"`
	Cost float64 `json:"cost"`
	Runs []struct {
		RunID string  `json:"run_id"`
		Cost  float64 `json:"cost"`
		Steps int     `json:"steps"`
	} `json:"runs"`
}

func writeSchema(t *testing.T, schema string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "schema.json")
	if err := os.WriteFile(p, []byte(schema), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const titleSchema = `{"type":"object","properties":{"title":{"type":"string","minLength":3}},"required":["title"]}`

func TestTaskOffline(t *testing.T) {
	schema := writeSchema(t, titleSchema)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		status string
		value  string
		reason string
	}{
		{name: "submitted", args: []string{"--prompt", "submit_deliverable title=Hello"}, code: 0, status: "submitted", value: `{"title":"Hello"}`},
		{name: "fixed after a rejection", args: []string{"--prompt", "submit_deliverable title=Hi"}, code: 0, status: "submitted", value: `{"title":"example"}`},
		{name: "cancelled", args: []string{"--prompt", "cancel_task reason=impossible"}, code: 3, status: "cancelled", value: "null", reason: "impossible"},
		{name: "failed", args: []string{"--prompt", "hello", "--max-pokes", "-1"}, code: 1, status: "failed", value: "null", reason: "without submitting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := "file:" + t.TempDir()
			args := append([]string{"task", "--offline", "--storage", store, "--schema", schema}, tc.args...)
			code, out, errOut := run(t, "", args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d (stderr %q, stdout %s)", code, tc.code, errOut, out)
			}
			var got taskJSON
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out)
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, got.Value); err != nil {
				t.Fatal(err)
			}
			if got.Status != tc.status || compact.String() != tc.value || !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("outcome = %+v (value %s)", got, got.Value)
			}
			if !strings.HasPrefix(got.SessionID, "task-") || got.RunID == "" || got.Usage.TotalTokens == 0 {
				t.Errorf("outcome lacks session, run or usage: %s", out)
			}
			// The task's session is durable: its transcript and usage read.
			if tr := transcriptOf(t, store, got.SessionID); len(tr.Items) < 2 {
				t.Errorf("transcript = %+v", tr)
			}
		})
	}
}

func TestTaskUsageErrors(t *testing.T) {
	good := writeSchema(t, titleSchema)
	bad := writeSchema(t, `{"type":"nope"}`)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no prompt", []string{"--schema", good}, "--prompt and --schema are required"},
		{"no schema", []string{"--prompt", "x"}, "--prompt and --schema are required"},
		{"missing schema file", []string{"--prompt", "x", "--schema", filepath.Join(t.TempDir(), "nope.json")}, "--schema"},
		{"schema does not compile", []string{"--prompt", "x", "--schema", bad}, "does not compile"},
		{"extra arguments", []string{"--prompt", "x", "--schema", good, "more"}, "unexpected arguments"},
		{"bad flag", []string{"--nope"}, ""},
		{"resume without a session", []string{"--resume"}, "--resume needs --session"},
		{"resume with a prompt", []string{"--resume", "--session", "s", "--prompt", "x"}, "takes no --prompt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"task", "--offline", "--storage", "memory:"}, tc.args...)
			code, out, errOut := run(t, "", args...)
			if code != 2 || !strings.Contains(errOut, tc.want) || out != "" {
				t.Errorf("exit %d, stderr %q, stdout %q; want 2 and %q", code, errOut, out, tc.want)
			}
		})
	}
}

func TestTaskFatalModelError(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{Script: []fakemodel.Reply{{Fault: &fakemodel.Fault{Kind: fakemodel.FaultNoCredits}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	code, out, errOut := run(t, "", "task", "--base-url", srv.URL(), "--storage", "memory:", "--session", "paid",
		"--prompt", "x", "--schema", writeSchema(t, titleSchema))
	var got taskJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if code != 1 || got.Status != "failed" || !strings.Contains(got.Reason, "402") || got.SessionID != "paid" {
		t.Errorf("exit %d, outcome %+v (stderr %q)", code, got, errOut)
	}
}

func TestTranscriptUsage(t *testing.T) {
	byok := &fakemodel.Usage{PromptTokens: 100, CompletionTokens: 10, Cost: 0.001, IsBYOK: fakemodel.Bool(true), UpstreamCost: 0.02}
	legacy := &fakemodel.Usage{PromptTokens: 50, CompletionTokens: 5, Cost: 0.95, UpstreamCost: 19}
	srv, err := fakemodel.Start(fakemodel.Options{Script: []fakemodel.Reply{
		{ToolCalls: []fakemodel.ToolCall{{Name: "submit_deliverable", Arguments: `{"title":"no"}`}}, Usage: byok},
		{ToolCalls: []fakemodel.ToolCall{{Name: "submit_deliverable", Arguments: `{"title":"yes!"}`}}, Usage: legacy},
		{Text: "hi", Usage: byok},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	store := "file:" + t.TempDir()
	code, out, errOut := run(t, "", "task", "--base-url", srv.URL(), "--storage", store, "--session", "billed",
		"--prompt", "Title?", "--schema", writeSchema(t, titleSchema))
	if code != 0 {
		t.Fatalf("task: exit %d: %s %s", code, errOut, out)
	}
	var task taskJSON
	if err := json.Unmarshal([]byte(out), &task); err != nil || math.Abs(task.Cost-(0.021+0.95)) > 1e-9 {
		t.Fatalf("task outcome %+v (%v)", task, err)
	}
	if code, _, errOut := run(t, "", "chat", "--base-url", srv.URL(), "--storage", store, "--session", "billed", "thanks"); code != 0 {
		t.Fatalf("chat: exit %d: %s", code, errOut)
	}

	code, out, errOut = run(t, "", "transcript", "--usage", "--storage", store, "billed")
	if code != 0 {
		t.Fatalf("transcript --usage: exit %d: %s", code, errOut)
	}
	var u usageJSON
	if err := json.Unmarshal([]byte(out), &u); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(u.Runs) != 2 || u.Runs[0].RunID != task.RunID || u.Runs[0].Steps != 2 || math.Abs(u.Runs[0].Cost-0.971) > 1e-9 ||
		u.Runs[1].Steps != 1 || math.Abs(u.Runs[1].Cost-0.021) > 1e-9 {
		t.Errorf("runs = %+v", u.Runs)
	}
	if math.Abs(u.Cost-0.992) > 1e-9 || u.Total.PromptTokens != 250 || u.Total.TotalTokens != 275 {
		t.Errorf("usage = %+v", u)
	}
	if code, _, errOut := run(t, "", "transcript", "--usage", "--storage", store, "empty"); code != 1 || !strings.Contains(errOut, "no session empty") {
		t.Errorf("usage of a session that does not exist: exit %d, %s", code, errOut)
	}
}

// TestTaskWithPluginValidator: --validator checks the deliverable with a
// Wasm validator (the C release_notes example, built from source); its
// problems reach the model as the submission's error result.
func TestTaskWithPluginValidator(t *testing.T) {
	kit, _ := filepath.Abs("../../pdk/c")
	wasm := plugintest.CPlugin(t, "../../examples/plugins/release_notes",
		[]string{"release_notes.c", kit + "/agentic.c"}, []string{kit}, nil)
	dir := t.TempDir()
	plugin := filepath.Join(dir, "release_notes.wasm")
	if err := os.WriteFile(plugin, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	schema := filepath.Join(dir, "notes.json")
	os.WriteFile(schema, []byte(`{"type":"object","properties":{"version":{"type":"string"},"title":{"type":"string"},"changes":{"type":"array","items":{"type":"string"}}},"required":["version","title","changes"]}`), 0o644)
	store := "file:" + filepath.Join(dir, "ledger")
	code, out, errOut := run(t, "", "task", "--offline", "--storage", store, "--session", "rn", "--max-pokes", "1",
		"--validator", plugin, "--schema", schema, "--prompt", "submit_deliverable version=banana title=Faster")
	if code == 0 {
		t.Fatalf("a deliverable without changes was accepted:\n%s", out)
	}
	evs, err := os.ReadFile(filepath.Join(dir, "ledger", "rn.jsonl"))
	if err != nil {
		t.Fatalf("%v (exit %d, %s)", err, code, errOut)
	}
	// The --schema has no minItems: this problem can only come from the
	// plugin's own checks.
	if !strings.Contains(string(evs), `/changes: minItems`) {
		t.Errorf("the validator's problems did not reach the model; ledger:\n%s", evs)
	}
	if code, _, errOut := run(t, "", "task", "--offline", "--storage", "memory:", "--validator", filepath.Join(dir, "nope.wasm"),
		"--schema", schema, "--prompt", "x"); code != 2 || !strings.Contains(errOut, "--validator") {
		t.Errorf("missing plugin: exit %d, %q", code, errOut)
	}
}
