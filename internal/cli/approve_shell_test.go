//go:build unix

package cli_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// approvalItem is a transcript item, with its tool calls.
type approvalItem struct {
	Kind      string `json:"kind"`
	Text      string `json:"text"`
	Status    string `json:"status"`
	Reason    string `json:"reason"`
	RunID     string `json:"run_id"`
	ToolCalls []struct {
		Name       string `json:"name"`
		Status     string `json:"status"`
		Approval   string `json:"approval"`
		ApprovalID string `json:"approval_id"`
		Output     string `json:"output"`
	} `json:"tool_calls"`
}

// itemsOf returns the transcript of a session, with the tool calls.
func itemsOf(t *testing.T, storage, session string) []approvalItem {
	t.Helper()
	code, out, errOut := run(t, "", "transcript", "--storage", storage, session)
	if code != 0 {
		t.Fatalf("transcript: exit %d: %s", code, errOut)
	}
	var tr struct {
		Items []approvalItem `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &tr); err != nil {
		t.Fatalf("transcript: %v\n%s", err, out)
	}
	return tr.Items
}

// chatInteractive runs an interactive chat reading stdin to its end, and
// returns its exit code and output.
func chatInteractive(t *testing.T, bin, stdin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"chat"}, args...)...)
	cmd.Env = environ(env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("chat: %v", err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// TestApprovalPromptAnswers: interactive chat's inline prompt. "N" denies;
// any other answer denies with that answer as the reason, which the model
// is told (its answer repeats the tool result it got); the end of input
// decides nothing: the call waits, in the inbox, and chat exits 3 saying
// how to decide. Nothing is published. ("y" is TestApprovalCLI's.)
func TestApprovalPromptAnswers(t *testing.T) {
	bin := needBinary(t)
	blog, posts := blogServer(t)
	storage := "file:" + t.TempDir()
	common := append([]string{"--offline", "--storage", storage}, approvalPlugins(t, blog)...)
	const ask = "publish_post title=\"Asked\" body=\"Inline\"\n"
	const prompt = `approve publish_post {"body":"Inline","title":"Asked"}? [y/N/reason]`
	for _, tc := range []struct {
		session, answer string
		code            int
		says            string // in stdout: what the model answered
		approval        string // of the call, in the transcript
	}{
		{"no", "N\n", 0, "The publish_post tool returned: error: a person denied this call (bob)\n", "denied"},
		{"reason", "  not on a Friday  \n", 0, "The publish_post tool returned: error: a person denied this call (bob): not on a Friday\n", "denied"},
		{"eof", "", 3, "", "pending"},
	} {
		t.Run(tc.session, func(t *testing.T) {
			code, out, errOut := chatInteractive(t, bin, ask+tc.answer, []string{"USER=bob"}, append([]string{"--session", tc.session}, common...)...)
			if code != tc.code || !strings.Contains(out, prompt) || !strings.Contains(out, tc.says) {
				t.Fatalf("exit %d (want %d), want the prompt and %q\n%s\n%s", code, tc.code, tc.says, out, errOut)
			}
			if posts.Load() != 0 {
				t.Fatalf("the blog got %d posts", posts.Load())
			}
			items := itemsOf(t, storage, tc.session)
			var calls []string
			for _, it := range items {
				for _, c := range it.ToolCalls {
					calls = append(calls, c.Name+":"+c.Approval)
				}
			}
			if len(calls) != 1 || calls[0] != "publish_post:"+tc.approval {
				t.Fatalf("tool calls %v, want publish_post %s", calls, tc.approval)
			}
			list := inbox(t, bin, storage)
			waiting := false
			for _, p := range list {
				waiting = waiting || p.SessionID == tc.session
			}
			if tc.approval == "pending" {
				if !waiting || !strings.Contains(errOut, "agentic-host approve "+tc.session+" appr_") || !strings.Contains(errOut, "waits for approval") {
					t.Fatalf("after the end of input: inbox %+v\n%s", list, errOut)
				}
				if last := items[len(items)-1]; last.Status != "approval_required" {
					t.Fatalf("the run is %s, want it waiting", last.Status)
				}
			} else if waiting {
				t.Fatalf("the inbox still holds the denied call: %+v", list)
			}
		})
	}
}

// TestApprovalCtrlCAtPrompt: Ctrl-C (SIGINT) while interactive chat asks
// about a call cancels the waiting run, durably: chat exits 130; the call
// did not run, its request is denied as cancelled, the run ends cancelled
// and the inbox is empty.
func TestApprovalCtrlCAtPrompt(t *testing.T) {
	bin := needBinary(t)
	blog, posts := blogServer(t)
	storage := "file:" + t.TempDir()
	p := startProc(t, "chat", bin, append([]string{"chat", "--offline", "--storage", storage, "--session", "c"}, approvalPlugins(t, blog)...)...)
	p.send(`publish_post title="Hello" body="Cancelled"`)
	p.waitOut("[y/N/reason]", time.Minute)
	if list := inbox(t, bin, storage); len(list) != 1 {
		t.Fatalf("inbox while the prompt waits: %+v", list)
	}
	p.signal(syscall.SIGINT)
	if code := p.wait(30 * time.Second); code != 130 || !strings.Contains(p.err.String(), "cancelled at the approval prompt (Ctrl-C)") {
		t.Fatalf("exit %d, want 130\n%s", code, p.err.String())
	}
	if posts.Load() != 0 {
		t.Fatalf("the blog got %d posts", posts.Load())
	}
	if list := inbox(t, bin, storage); len(list) != 0 {
		t.Fatalf("the inbox after the cancellation: %+v", list)
	}
	items := itemsOf(t, storage, "c")
	cancelled, denied := false, false
	for _, it := range items {
		cancelled = cancelled || (it.Status == "cancelled" && it.Reason == "cancelled at the approval prompt (Ctrl-C)")
		for _, c := range it.ToolCalls {
			denied = denied || (c.Name == "publish_post" && c.Approval == "denied" && c.Status == "error")
		}
	}
	if !cancelled || !denied {
		t.Fatalf("transcript %+v, want the run cancelled and the call denied", items)
	}
}

// TestApprovalQueuedFromAnotherProcess: while a run waits for approval, a
// one-shot chat in another process sends to the session: its message is
// queued (it says so and exits 3, the run still waiting). The approval,
// from a third process, continues the run, which publishes and then
// answers the queued message, in order, in the same run.
func TestApprovalQueuedFromAnotherProcess(t *testing.T) {
	bin := needBinary(t)
	blog, posts := blogServer(t)
	storage := "file:" + t.TempDir()
	common := append([]string{"--offline", "--storage", storage, "--session", "q"}, approvalPlugins(t, blog)...)
	if code, out, errOut := runBin(t, bin, append(append([]string{"chat"}, common...), `publish_post title="Hello" body="First"`)...); code != 3 {
		t.Fatalf("chat: exit %d, want 3\n%s\n%s", code, out, errOut)
	}
	list := inbox(t, bin, storage)
	if len(list) != 1 {
		t.Fatalf("inbox %+v", list)
	}
	code, out, errOut := runBin(t, bin, append(append([]string{"chat"}, common...), "what comes next")...)
	if code != 3 || !strings.Contains(errOut, "[run "+list[0].RunID+" waits for approval: the message is queued, and answered once the run goes on]") ||
		strings.Contains(out, "You said") || strings.Contains(out, "Let me use") {
		t.Fatalf("the second chat: exit %d, want 3 and the message queued\n%s\n%s", code, out, errOut)
	}
	items := itemsOf(t, storage, "q")
	if len(items) != 3 || items[2].Kind != "user" || items[2].Text != "what comes next" || items[1].Status != "approval_required" {
		t.Fatalf("transcript before the decision: %+v", items)
	}
	if again := inbox(t, bin, storage); len(again) != 1 || again[0].ApprovalID != list[0].ApprovalID {
		t.Fatalf("the queued message changed the inbox: %+v", again)
	}

	code, out, errOut = runBin(t, bin, append([]string{"approve", "q", list[0].ApprovalID}, common...)...)
	published := strings.Index(out, `[tool publish_post ok: {"status":"published"`)
	answered := strings.Index(out, "You said: what comes next")
	if code != 0 || published < 0 || answered < published || posts.Load() != 1 {
		t.Fatalf("approve: exit %d, %d posts; want the post, then the queued message answered\n%s\n%s", code, posts.Load(), out, errOut)
	}
	items = itemsOf(t, storage, "q")
	var got []string
	for _, it := range items {
		got = append(got, it.Kind+":"+it.Status)
		if it.RunID != list[0].RunID {
			t.Errorf("item %q is of run %s, want the continued run %s", it.Text, it.RunID, list[0].RunID)
		}
	}
	if want := "user: response:completed user: response:completed"; strings.Join(got, " ") != want || items[3].Text != "You said: what comes next" {
		t.Fatalf("transcript %q, want %q, the last answering the queued message: %+v", strings.Join(got, " "), want, items)
	}
}
