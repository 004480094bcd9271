package uistream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/internal/nodetest"
	"github.com/agentichost/agentic/ledger"
)

var update = flag.Bool("update", false, "rewrite the golden streams of testdata/")

// goldenStreams are runs as a client sees them, each kept in
// testdata/NAME.sse: what the converter sends must not change unnoticed,
// and the AI SDK's client must read every one (TestAIClientReadsGolden).
var goldenStreams = []struct {
	name    string
	updates []host.Update
	// parts is the assistant message the client ends with, one part a
	// line (type, state, text); err the error it ends with.
	parts, err string
}{
	{
		name: "tool-run",
		updates: []host.Update{
			respStart("r1"), text("r1", 0, "Let me "), text("r1", 7, "look."),
			prog(host.Progress{Type: host.ProgressToolStart, ResponseID: "r1", Tool: &host.ToolInfo{CallID: "c1", Name: "get_account", Input: json.RawMessage(`{"account_id":"42"}`)}}),
			prog(host.Progress{Type: host.ProgressToolEnd, ResponseID: "r1", Tool: &host.ToolInfo{CallID: "c1", Name: "get_account", Output: `{"plan":"team"}`}}),
			prog(host.Progress{Type: host.ProgressToolEnd, ResponseID: "r1", Tool: &host.ToolInfo{CallID: "c2", Name: "nope", Output: `error: there is no tool named "nope"`, IsError: true}}),
			respStart("r2"), text("r2", 0, "The plan is team."),
			runEnd(ledger.RunCompleted, ""),
		},
		parts: lines("step-start", "text done Let me look.", "tool-get_account output-available", "tool-nope output-error", "step-start", "text done The plan is team."),
	},
	{
		name: "reasoning-retry",
		updates: []host.Update{
			respStart("r1"),
			prog(host.Progress{Type: host.ProgressReasoning, ResponseID: "r1", Delta: "Hmm."}),
			text("r1", 0, "Hel"),
			prog(host.Progress{Type: host.ProgressRetry, ResponseID: "r1", Retry: &host.RetryInfo{Reason: "HTTP 503", Attempt: 1, DelayMS: 10, Reset: true}}),
			prog(host.Progress{Type: host.ProgressReasoning, ResponseID: "r1", Delta: "Hmm!"}),
			text("r1", 0, "Hello"),
			runEnd(ledger.RunCompleted, ""),
		},
		parts: lines("step-start", "reasoning done Hmm!", "text done Hello"),
	},
	{
		name: "approval-parked",
		updates: []host.Update{
			respStart("r1"), text("r1", 0, "Let me publish."),
			prog(host.Progress{Type: host.ProgressApprovalRequested, Approval: &host.ApprovalInfo{ApprovalID: "a1", CallID: "c1", Tool: "publish_post",
				Input: json.RawMessage(`{"title":"Hello"}`), Summary: `publish_post {"title":"Hello"}`, Reason: "the tool has an external effect",
				State: ledger.ApprovalPending, ExpiresAt: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}}),
			runEnd(ledger.RunApprovalRequired, "waiting for approval"),
		},
		parts: lines("step-start", "text done Let me publish.", "tool-publish_post approval-requested"),
	},
	{
		// A run's own request (a budget that asks), then the decision on
		// it: one data part, replaced in place by the decision.
		name: "run-approval",
		updates: []host.Update{
			respStart("r1"),
			prog(host.Progress{Type: host.ProgressApprovalRequested, Approval: &host.ApprovalInfo{ApprovalID: "a1", Kind: "budget_exceeded",
				Reason: "budget_exceeded: tenant acme spent $1.2000 of its $1.00 daily budget", Summary: "Approve to let it spend $0.50 more",
				State: ledger.ApprovalPending, ExpiresAt: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}}),
			prog(host.Progress{Type: host.ProgressApprovalDecided, Approval: &host.ApprovalInfo{ApprovalID: "a1", Kind: "budget_exceeded", State: ledger.ApprovalApproved}}),
			respStart("r1"), text("r1", 0, "Done."),
			runEnd(ledger.RunCompleted, ""),
		},
		parts: lines("step-start", "data-approval approved", "text done Done."),
	},
	{
		name: "failed",
		updates: []host.Update{
			respStart("r1"), text("r1", 0, "Hi"),
			runEnd(ledger.RunFailed, "the model endpoint answered HTTP 401"),
		},
		err: "the run failed: the model endpoint answered HTTP 401",
	},
	{
		name:    "cancelled",
		updates: []host.Update{respStart("r1"), text("r1", 0, "Hi"), runEnd(ledger.RunCancelled, "cancelled by the user")},
		parts:   lines("step-start", "text done Hi"),
	},
}

// sse frames chunks as the server sends them: one event each, then
// [DONE] when the message ended.
func sse(t *testing.T, updates []host.Update) []byte {
	t.Helper()
	var b bytes.Buffer
	conv := NewConverter("run1", "run1", func(ch Chunk) error {
		j, err := json.Marshal(ch)
		if err != nil {
			return err
		}
		b.WriteString("data: ")
		b.Write(j)
		b.WriteString("\n\n")
		return nil
	})
	for _, u := range updates {
		if _, err := conv.Update(u); err != nil {
			t.Fatal(err)
		}
	}
	if conv.Ended() {
		b.WriteString("data: [DONE]\n\n")
	}
	return b.Bytes()
}

// TestGoldenStreams: the converter sends exactly the golden streams
// (go test ./protocol/uistream -run TestGoldenStreams -update rewrites
// them, for a change that is meant).
func TestGoldenStreams(t *testing.T) {
	for _, g := range goldenStreams {
		got := sse(t, g.updates)
		path := filepath.Join("testdata", g.name+".sse")
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test -run TestGoldenStreams -update writes it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the converter sends\n%s\nthe golden stream is\n%s", g.name, got, want)
		}
	}
}

// TestAIClientReadsGolden: the AI SDK's own client (npm ai's
// DefaultChatTransport, which validates every chunk against its schema,
// and readUIMessageStream) reads each golden stream into the assistant
// message the run should show.
func TestAIClientReadsGolden(t *testing.T) {
	dir := nodetest.Client(t, filepath.Join("testdata", "ai-client"), "ai", "AI SDK client")
	args := []string{filepath.Join(dir, "read.mjs")}
	for _, g := range goldenStreams {
		args = append(args, filepath.Join("testdata", g.name+".sse"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "node", args...).Output()
	if err != nil {
		t.Fatalf("node read.mjs: %v\n%s", err, stderrOf(err))
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	i := 0
	for ; sc.Scan(); i++ {
		var report struct {
			File  string `json:"file"`
			Error *string
			Parts []struct {
				Type  string `json:"type"`
				State string `json:"state"`
				Text  string `json:"text"`
				Data  struct {
					State string `json:"state"`
				} `json:"data"`
			} `json:"parts"`
		}
		if err := json.Unmarshal(sc.Bytes(), &report); err != nil {
			t.Fatalf("%v: %s", err, sc.Bytes())
		}
		g := goldenStreams[i]
		var got []string
		for _, p := range report.Parts {
			state := p.State
			if state == "" {
				state = p.Data.State // a data part's (data-approval)
			}
			got = append(got, strings.TrimSpace(strings.Join([]string{p.Type, state, p.Text}, " ")))
		}
		gotErr := ""
		if report.Error != nil {
			gotErr = *report.Error
		}
		if gotErr != g.err {
			t.Errorf("%s: the client ends with error %q, want %q", g.name, gotErr, g.err)
		}
		if g.err == "" && strings.Join(got, "\n") != g.parts {
			t.Errorf("%s: the client's message is\n%s\nwant\n%s", g.name, strings.Join(got, "\n"), g.parts)
		}
	}
	if i != len(goldenStreams) {
		t.Fatalf("the client read %d streams of %d:\n%s", i, len(goldenStreams), out)
	}
}

func stderrOf(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}
