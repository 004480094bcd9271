package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentichost/agentic/internal/redistest"
)

// TestForkCommand: agentic-host fork makes a session from another's ledger
// at a response with a tool call and goes on after the recorded result
// (the tool does not run again: the fork's transcript shows the source's
// one call and output), at a user message with --text, and refuses bad
// points; the transcripts show the lineage. On files and Redis.
func TestForkCommand(t *testing.T) {
	for name, storageURL := range map[string]func(t *testing.T) string{
		"file":  func(t *testing.T) string { return "file:" + t.TempDir() },
		"redis": func(t *testing.T) string { return redistest.Start(t, redistest.Options{}).URL() },
	} {
		t.Run(name, func(t *testing.T) {
			store := storageURL(t)
			if code, _, errOut := run(t, "", "chat", "--offline", "--storage", store, "--session", "src", "get_account account_id=7 please"); code != 0 {
				t.Fatalf("chat: exit %d: %s", code, errOut)
			}
			src := forkTranscript(t, store, "src")
			if len(src.Items) != 3 || len(src.Items[1].ToolCalls) != 1 {
				t.Fatalf("source: %+v", src)
			}
			step := src.Items[1]

			code, out, errOut := run(t, "", "fork", "--offline", "--storage", store, "--at", step.ID, "--session", "f1", "--model", "fake/other", "src")
			if code != 0 || !strings.Contains(out, "The get_account tool returned") || !strings.Contains(errOut, "into session f1") {
				t.Fatalf("fork at the step: exit %d\nstdout %s\nstderr %s", code, out, errOut)
			}
			if strings.Contains(out, "[tool get_account") {
				t.Fatalf("the fork ran the tool again:\n%s", out)
			}
			f1 := forkTranscript(t, store, "f1")
			if f1.ForkedFrom == nil || f1.ForkedFrom.Source != "src" || f1.ForkedFrom.Item != step.ID || f1.ForkedFrom.Model != "fake/other" {
				t.Fatalf("lineage: %+v", f1.ForkedFrom)
			}
			if len(f1.Items) != 3 || f1.Items[1].ID != step.ID || len(f1.Items[1].ToolCalls) != 1 ||
				f1.Items[1].ToolCalls[0].Output != step.ToolCalls[0].Output || f1.Items[2].Model != "fake/other" {
				t.Fatalf("fork transcript: %+v", f1.Items)
			}

			code, out, errOut = run(t, "", "fork", "--offline", "--storage", store, "--at", src.Items[0].ID, "--text", "just say hi", "src")
			if code != 0 || !strings.Contains(out, "You said: just say hi") {
				t.Fatalf("fork at the message: exit %d\nstdout %s\nstderr %s", code, out, errOut)
			}

			for _, c := range []struct {
				name string
				args []string
				code int
				want string
			}{
				{"no point", []string{"src"}, 2, "--at POINT is required"},
				{"unknown point", []string{"--at", "resp_nope", "src"}, 2, "no such fork point"},
				{"unknown source", []string{"--at", step.ID, "nope"}, 1, "no session nope"},
				{"taken", []string{"--at", step.ID, "--session", "f1", "src"}, 2, "exists already"},
			} {
				args := append([]string{"fork", "--offline", "--storage", store}, c.args...)
				if code, _, errOut := run(t, "", args...); code != c.code || !strings.Contains(errOut, c.want) {
					t.Errorf("%s: exit %d, stderr %q; want %d and %q", c.name, code, errOut, c.code, c.want)
				}
			}
			if again := forkTranscript(t, store, "src"); len(again.Items) != 3 || again.ForkedFrom != nil || len(again.Forks) != 2 || again.Forks[0] != "f1" && again.Forks[1] != "f1" {
				t.Fatalf("the source changed: %+v", again)
			}
		})
	}
}

// forkView is what the fork test reads of a transcript.
type forkView struct {
	Forks      []string `json:"forks"`
	ForkedFrom *struct {
		Source string `json:"source"`
		Item   string `json:"item"`
		Model  string `json:"model"`
	} `json:"forked_from"`
	Items []struct {
		ID        string `json:"id"`
		Model     string `json:"model"`
		ToolCalls []struct {
			Output string `json:"output"`
		} `json:"tool_calls"`
	} `json:"items"`
}

func forkTranscript(t *testing.T, storageURL, session string) forkView {
	t.Helper()
	code, out, errOut := run(t, "", "transcript", "--storage", storageURL, session)
	if code != 0 {
		t.Fatalf("transcript exit %d: %s", code, errOut)
	}
	var v forkView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("transcript is not JSON: %v\n%s", err, out)
	}
	return v
}
