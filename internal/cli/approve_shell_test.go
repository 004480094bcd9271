//go:build unix

package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/cli"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/memory"
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

// TestApprovalAllowedCallRunsFirst: one pass calls get_account (read: the
// policy allows it) and publish_post (external: it waits). The allowed
// call ran before any decision — its result is in the transcript while
// the other waits — and the approval runs only the waiting one.
func TestApprovalAllowedCallRunsFirst(t *testing.T) {
	bin := needBinary(t)
	blog, posts := blogServer(t)
	plugins := approvalPlugins(t, blog)
	if err := os.WriteFile(filepath.Join(plugins[1], "get_account.wasm"), plugintest.GoPlugin(t, "../../examples/plugins/get_account"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	storage := "file:" + dir
	common := append([]string{"--offline", "--storage", storage, "--session", "mixed"}, plugins...)
	code, out, errOut := runBin(t, bin, append(append([]string{"chat"}, common...), `get_account then publish_post title="Hello" body="Mixed"`)...)
	ran := strings.Index(out, `[tool get_account ok: {"account_id"`)
	waits := strings.Index(out, "[tool publish_post waits for approval")
	if code != 3 || ran < 0 || waits < ran {
		t.Fatalf("chat: exit %d, want 3, get_account run, then publish_post waiting\n%s\n%s", code, out, errOut)
	}
	items := itemsOf(t, storage, "mixed")
	last := items[len(items)-1]
	if last.Status != "approval_required" || len(last.ToolCalls) != 2 ||
		last.ToolCalls[0].Name != "get_account" || last.ToolCalls[0].Status != "done" || !strings.Contains(last.ToolCalls[0].Output, `"owner"`) || last.ToolCalls[0].Approval != "" ||
		last.ToolCalls[1].Name != "publish_post" || last.ToolCalls[1].Status != "approval_required" || last.ToolCalls[1].Approval != "pending" {
		t.Fatalf("transcript before the decision: %+v", last)
	}
	if posts.Load() != 0 {
		t.Fatal("published before the decision")
	}

	list := inbox(t, bin, storage)
	if len(list) != 1 || list[0].Tool != "publish_post" {
		t.Fatalf("inbox %+v, want publish_post alone", list)
	}
	if code, out, errOut := runBin(t, bin, append([]string{"approve", "mixed", list[0].ApprovalID}, common...)...); code != 0 ||
		strings.Contains(out, "[tool get_account") || !strings.Contains(out, `[tool publish_post ok:`) {
		t.Fatalf("approve: exit %d, want publish_post alone to run\n%s\n%s", code, out, errOut)
	}
	store, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	results := map[string]int{}
	for _, e := range hosttest.Load(t, store, "mixed") {
		if e.ToolResult != nil {
			results[e.ToolResult.Name]++
		}
	}
	if results["get_account"] != 1 || results["publish_post"] != 1 || posts.Load() != 1 {
		t.Fatalf("tool results %v, %d posts; want each call once", results, posts.Load())
	}
}

// TestApprovalInbox: "approvals" lists what waits in every session of the
// storage, oldest first: a table (session, approval, tool, how long it has
// waited, how long until it expires, the summary), or JSON with the
// summary, tool, input, when it was requested (its age) and when it
// expires, and the token.
func TestApprovalInbox(t *testing.T) {
	bin := needBinary(t)
	blog, _ := blogServer(t)
	storage := "file:" + t.TempDir()
	common := append([]string{"--offline", "--storage", storage}, approvalPlugins(t, blog)...)
	if code, out, _ := runBin(t, bin, "approvals", "--storage", storage); code != 0 || out != "no approval requests waiting\n" {
		t.Fatalf("an empty inbox: exit %d, %q", code, out)
	}
	if code, out, _ := runBin(t, bin, "approvals", "--json", "--storage", storage); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("an empty inbox as JSON: exit %d, %q", code, out)
	}
	started := time.Now()
	for _, s := range []string{"older", "newer"} {
		if code, _, errOut := runBin(t, bin, append([]string{"chat", "--session", s}, append(common, `publish_post title="From `+s+`" body="B"`)...)...); code != 3 {
			t.Fatalf("chat %s: exit %d\n%s", s, code, errOut)
		}
	}
	time.Sleep(1100 * time.Millisecond) // a visible age

	list := inbox(t, bin, storage)
	if len(list) != 2 || list[0].SessionID != "older" || list[1].SessionID != "newer" {
		t.Fatalf("inbox %+v, want older, then newer", list)
	}
	for _, p := range list {
		var input map[string]string
		if err := json.Unmarshal(p.Input, &input); err != nil || input["title"] != "From "+p.SessionID || input["body"] != "B" {
			t.Errorf("%s: input %s (%v)", p.SessionID, p.Input, err)
		}
		if p.Tool != "publish_post" || p.Summary != `publish_post with {"body":"B","title":"From `+p.SessionID+`"}` || p.Reason == "" || p.Token == "" ||
			!strings.HasPrefix(p.ApprovalID, "appr_") || !strings.HasPrefix(p.CallID, "call_") {
			t.Errorf("%s: %+v", p.SessionID, p)
		}
		if age := time.Since(p.RequestedAt); p.RequestedAt.Before(started.Add(-time.Second)) || age < time.Second || age > time.Minute {
			t.Errorf("%s: requested at %s, %s ago", p.SessionID, p.RequestedAt, age)
		}
		if ttl := p.ExpiresAt.Sub(p.RequestedAt); ttl != host.DefaultApprovalTTL {
			t.Errorf("%s: expires %s after the request, want %s", p.SessionID, ttl, host.DefaultApprovalTTL)
		}
	}
	if !list[0].RequestedAt.Before(list[1].RequestedAt) {
		t.Errorf("not oldest first: %s, %s", list[0].RequestedAt, list[1].RequestedAt)
	}

	code, out, errOut := runBin(t, bin, "approvals", "--storage", storage)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("approvals: exit %d, want a header and two rows\n%s\n%s", code, out, errOut)
	}
	if header := strings.Fields(lines[0]); strings.Join(header, " ") != "SESSION APPROVAL TOOL WAITING EXPIRES IN SUMMARY" {
		t.Errorf("header %q", lines[0])
	}
	for i, p := range list {
		row := regexp.MustCompile(`^` + p.SessionID + ` +` + p.ApprovalID + ` +publish_post +(\d+)s +(23h59m0s|24h0m0s) +` +
			regexp.QuoteMeta(p.Summary) + `$`).FindStringSubmatch(lines[i+1])
		if row == nil {
			t.Errorf("row %d: %q, want %s's request", i+1, lines[i+1], p.SessionID)
		} else if row[1] == "0" {
			t.Errorf("row %d: waited %ss", i+1, row[1])
		}
	}
	// The columns line up.
	if col := strings.Index(lines[0], "TOOL"); strings.Index(lines[1], "publish_post") != col || strings.Index(lines[2], "publish_post") != col {
		t.Errorf("the columns do not line up:\n%s", out)
	}
}

// TestApprovalSecretAcrossProcesses: the approval secret is the same in
// every process on one storage: from AGENTIC_APPROVAL_SECRET, or, without
// it, the one the first process kept in the storage. So a token "approvals
// --json" printed in one process is the one every other process mints,
// and it decides the request in another process (this test's, with the
// secret as the command finds it — no command takes a token); with
// another secret, the token differs and is refused, changing nothing.
func TestApprovalSecretAcrossProcesses(t *testing.T) {
	bin := needBinary(t)
	blog, _ := blogServer(t)
	dir := t.TempDir()
	storage := "file:" + dir
	common := append([]string{"--offline", "--storage", storage}, approvalPlugins(t, blog)...)
	envA := "AGENTIC_APPROVAL_SECRET=" + strings.Repeat("a", 32)
	envB := "AGENTIC_APPROVAL_SECRET=" + strings.Repeat("b", 64) // hex
	kept := "AGENTIC_APPROVAL_SECRET="                           // unset: the kept one
	for _, s := range []string{"kept", "env"} {
		if code, _, errOut := runBinEnv(t, bin, []string{kept}, append([]string{"chat", "--session", s}, append(common, `publish_post title="T" body="B"`)...)...); code != 3 {
			t.Fatalf("chat %s: exit %d\n%s", s, code, errOut)
		}
	}
	tokens := func(env string) map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, p := range inbox(t, bin, storage, env) {
			out[p.SessionID] = p.Token
		}
		if len(out) != 2 {
			t.Fatalf("inbox %v", out)
		}
		return out
	}
	keptTok, keptAgain := tokens(kept), tokens(kept)
	aTok, aAgain, bTok := tokens(envA), tokens(envA), tokens(envB)
	if keptTok["kept"] != keptAgain["kept"] || aTok["env"] != aAgain["env"] {
		t.Fatalf("two processes with one secret minted different tokens: %v %v, %v %v", keptTok, keptAgain, aTok, aAgain)
	}
	if aTok["env"] == keptTok["env"] || aTok["env"] == bTok["env"] || keptTok["env"] == bTok["env"] {
		t.Fatalf("different secrets minted the same token: kept %v, A %v, B %v", keptTok, aTok, bTok)
	}

	// Another process — this one — on the same storage.
	store, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() }) // after the hosts'
	hostWith := func(env string) *hosttest.Harness {
		t.Helper()
		k, v, _ := strings.Cut(env, "=")
		secret, err := cli.ApprovalSecret(cli.Env{Getenv: func(name string) string {
			if name == k {
				return v
			}
			return ""
		}}, store)
		if err != nil || len(secret) < 32 {
			t.Fatalf("secret %x, %v", secret, err)
		}
		// The tool as the binary's host has it, minus the effect: a denial
		// must not call it.
		publish := host.NewTool(host.ToolSpec{Name: "publish_post", Effect: host.EffectExternal}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
			t.Error("a denied call ran")
			return host.ToolResult{}, errors.New("denied")
		})
		return hosttest.New(t, host.Options{Storage: store, ApprovalSecret: secret, Agent: host.Agent{Tools: []host.Tool{publish}}})
	}
	kh, ah, bh := hostWith(kept), hostWith(envA), hostWith(envB)
	ctx := context.Background()
	ledgerOf := func(session string) string {
		t.Helper()
		var b strings.Builder
		for _, e := range hosttest.Load(t, store, session) {
			line, _ := ledger.Encode(e)
			b.Write(line)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name    string
		h       *hosttest.Harness
		session string
		token   string
	}{
		{"the kept secret's token, under secret A", ah, "kept", keptTok["kept"]},
		{"the kept secret's token, under secret B", bh, "kept", keptTok["kept"]},
		{"secret A's token, under the kept secret", kh, "env", aTok["env"]},
		{"secret A's token, under secret B", bh, "env", aTok["env"]},
	} {
		before := ledgerOf(tc.session)
		if _, err := tc.h.Host.Session(tc.session).DecideWithToken(ctx, tc.token, host.ApprovalDecision{By: "link"}); !errors.Is(err, host.ErrApprovalTokenInvalid) {
			t.Errorf("%s: %v, want ErrApprovalTokenInvalid", tc.name, err)
		}
		if ledgerOf(tc.session) != before {
			t.Errorf("%s: the refused token changed the ledger", tc.name)
		}
	}
	// Accepted where the secret is the same: a denial, so that no tool
	// needs to run here.
	for _, tc := range []struct {
		h              *hosttest.Harness
		session, token string
	}{{kh, "kept", keptTok["kept"]}, {ah, "env", aTok["env"]}} {
		run, err := tc.h.Host.Session(tc.session).DecideWithToken(ctx, tc.token, host.ApprovalDecision{Reason: "by token", By: "link"})
		if err != nil {
			t.Fatalf("session %s: %v", tc.session, err)
		}
		if res, err := run.Wait(ctx); err != nil || res.Status != ledger.RunCompleted || !strings.Contains(res.Text, "a person denied this call (link): by token") {
			t.Fatalf("session %s: %+v, %v", tc.session, res, err)
		}
	}
	if list := inbox(t, bin, storage, kept); len(list) != 0 {
		t.Fatalf("inbox after the decisions: %+v", list)
	}
}

// TestApprovalSecretTooShort: an AGENTIC_APPROVAL_SECRET of fewer than 32
// bytes (as text, or as hex) is refused, naming the variable; 32 bytes of
// text or 64 hex digits are taken.
func TestApprovalSecretTooShort(t *testing.T) {
	secret := func(v string) ([]byte, error) {
		return cli.ApprovalSecret(cli.Env{Getenv: func(name string) string {
			if name == "AGENTIC_APPROVAL_SECRET" {
				return v
			}
			return ""
		}}, memory.New())
	}
	for _, short := range []string{"hunter2", strings.Repeat("ab", 15), strings.Repeat("x", 31)} {
		if _, err := secret(short); err == nil || !strings.Contains(err.Error(), "AGENTIC_APPROVAL_SECRET") {
			t.Errorf("%q: %v, want a refusal naming the variable", short, err)
		}
	}
	if b, err := secret(strings.Repeat("x", 32)); err != nil || string(b) != strings.Repeat("x", 32) {
		t.Errorf("32 bytes of text: %q %v", b, err)
	}
	if b, err := secret(strings.Repeat("ab", 32)); err != nil || len(b) != 32 || b[0] != 0xab {
		t.Errorf("64 hex digits: %x %v", b, err)
	}
}
