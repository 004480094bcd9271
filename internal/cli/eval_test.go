package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
)

// evalReport is what the eval test reads of agentic-host eval --json.
type evalReport struct {
	Model    string `json:"model"`
	Sessions []struct {
		SessionID  string `json:"session_id"`
		Error      string `json:"error"`
		Diverged   bool   `json:"diverged"`
		DivergedAt int    `json:"diverged_at"`
		Unmatched  int    `json:"unmatched"`
		Candidate  struct {
			Status string `json:"status"`
			Steps  int    `json:"steps"`
		} `json:"candidate"`
		Turns []struct {
			CandidateText  string   `json:"candidate_text"`
			CandidateCalls []string `json:"candidate_calls"`
		} `json:"turns"`
	} `json:"sessions"`
	Total struct {
		Sessions, Diverged, Unmatched, Completed int
	} `json:"total"`
}

// TestEvalCommand: agentic-host eval replays a recorded session against a
// candidate that behaves alike (no divergence, every call answered from the
// recording) and against one scripted to call the tool with other
// arguments (the call gets "no recorded result": the tool did not run; the
// first turn diverged); --all lists the store's sessions; a session that
// does not exist fails the command. On files and Redis.
func TestEvalCommand(t *testing.T) {
	for name, storageURL := range map[string]func(t *testing.T) string{
		"file":  func(t *testing.T) string { return "file:" + t.TempDir() },
		"redis": func(t *testing.T) string { return redistest.Start(t, redistest.Options{}).URL() },
	} {
		t.Run(name, func(t *testing.T) {
			store := storageURL(t)
			for _, msg := range []string{"get_account account_id=7 please", "thanks"} {
				if code, _, errOut := run(t, "", "chat", "--offline", "--storage", store, "--session", "rec", msg); code != 0 {
					t.Fatalf("chat: exit %d: %s", code, errOut)
				}
			}
			code, out, errOut := run(t, "", "eval", "--offline", "--storage", store, "--sessions", "rec", "--json")
			if code != 0 {
				t.Fatalf("eval: exit %d: %s", code, errOut)
			}
			var rep evalReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			s := rep.Sessions[0]
			if len(rep.Sessions) != 1 || s.Diverged || s.DivergedAt != -1 || s.Unmatched != 0 || len(s.Turns) != 2 ||
				s.Candidate.Status != "completed" || s.Candidate.Steps != 3 || len(s.Turns[0].CandidateCalls) != 1 {
				t.Fatalf("a candidate alike: %s", out)
			}

			scripted, err := fakemodel.Start(fakemodel.Options{Script: []fakemodel.Reply{
				{ToolCalls: []fakemodel.ToolCall{{Name: "get_account", Arguments: `{"account_id":"8"}`}}},
				{Text: "no luck"},
				{Text: "You said: thanks"},
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer scripted.Close()
			code, out, errOut = run(t, "", "eval", "--base-url", scripted.URL(), "--model", "cand/model", "--storage", store, "--all")
			if code != 0 {
				t.Fatalf("eval --all: exit %d: %s", code, errOut)
			}
			for _, want := range []string{"candidate cand/model", "rec", "turn 0: tool calls differ", "1 diverged, 1 unmatched calls", "candidate: 1 completed, 0 failed"} {
				if !strings.Contains(out, want) {
					t.Errorf("the table lacks %q:\n%s", want, out)
				}
			}
			reqs := scripted.Requests()
			if len(reqs) < 2 || !strings.Contains(reqs[1].Messages[len(reqs[1].Messages)-1].Text, "no recorded result") {
				t.Fatalf("the candidate was not told that the call had no recorded result: %+v", reqs)
			}

			if code, _, errOut := run(t, "", "eval", "--offline", "--storage", store, "--sessions", "rec,nope"); code != 1 || !strings.Contains(errOut, "could not be replayed") {
				t.Errorf("a missing session: exit %d, %s", code, errOut)
			}
			if code, _, _ := run(t, "", "eval", "--offline", "--storage", store); code != 2 {
				t.Errorf("no sessions named: exit %d, want 2", code)
			}
		})
	}
}
