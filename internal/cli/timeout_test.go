package cli_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/storage/file"
)

// TestChatTimeouts: the --timeout-* flags reach the agent. A reply slower
// than --timeout-total ends the run timed_out: chat exits 124 naming the
// timeout, and the transcript shows the item timed_out with what streamed.
func TestChatTimeouts(t *testing.T) {
	bin := needBinary(t)
	model := slowModel(t)
	dir := "file:" + t.TempDir()
	code, out, errOut := runBin(t, bin, "chat", "--storage", dir, "--base-url", model.URL(), "--session", "s",
		"--timeout-total", "500ms", words("w", 400))
	if code != 124 || !strings.Contains(errOut, "timed out") || !strings.Contains(errOut, "total timeout of 500ms") {
		t.Fatalf("exit %d\nstdout %q\nstderr %q\nwant exit 124 naming the total timeout", code, out, errOut)
	}
	tr := transcriptOf(t, dir, "s")
	last := tr.Items[len(tr.Items)-1]
	if last.Status != "timed_out" || !strings.HasPrefix(last.Text, "You said: w0 w1") {
		t.Errorf("last item %+v, want timed_out with the text that streamed", last)
	}
	code, _, errOut = runBin(t, bin, "chat", "--storage", dir, "--base-url", model.URL(), "--timeout-step", "-1s", "hi")
	if code != 2 || !strings.Contains(errOut, "--timeout-step must not be negative") {
		t.Errorf("a negative timeout: exit %d, %q", code, errOut)
	}
}

// TestChatFlagsReachTheAgent: AGENTIC_MODEL and OPENROUTER_BASE_URL name
// the model and the endpoint; --max-steps bounds the passes; a stalled
// reply is cut by --timeout-first-chunk and --timeout-chunk (and retried,
// each cut a retry in the ledger) and ends the run at --timeout-step;
// --max-blob-bytes refuses an attachment past it, appending nothing.
func TestChatFlagsReachTheAgent(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{Respond: func(req fakemodel.Request) fakemodel.Reply {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case last.Role == "tool" || strings.Contains(last.Text, "loop"):
			return fakemodel.Reply{ToolCalls: []fakemodel.ToolCall{{Name: "no_such_tool", Arguments: "{}"}}}
		case strings.Contains(last.Text, "silent"):
			return fakemodel.Reply{Text: "one two three", Fault: &fakemodel.Fault{Kind: fakemodel.FaultStall, After: -1}}
		case strings.Contains(last.Text, "pause"):
			return fakemodel.Reply{Text: "one two three", Fault: &fakemodel.Fault{Kind: fakemodel.FaultStall, After: 2}}
		}
		return fakemodel.DefaultReply(req)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	vars := map[string]string{"AGENTIC_MODEL": "acme/from-env", "OPENROUTER_BASE_URL": srv.URL()}
	store := "file:" + t.TempDir()
	if code, out, errOut := runEnv(t, vars, "", "chat", "--storage", store, "--session", "env", "hi"); code != 0 || !strings.HasSuffix(out, "You said: hi\n") {
		t.Fatalf("with the environment alone: exit %d\n%s\n%s", code, out, errOut)
	}
	if got := srv.Requests()[0].Model; got != "acme/from-env" {
		t.Errorf("the model asked: %q, want AGENTIC_MODEL's", got)
	}

	// --system is the request's first message.
	if code, _, errOut := runEnv(t, vars, "", "chat", "--storage", store, "--session", "system", "--system", "Answer in haiku.", "hi"); code != 0 {
		t.Fatalf("--system: exit %d\n%s", code, errOut)
	}
	if reqs := srv.Requests(); len(reqs[len(reqs)-1].Messages) == 0 || reqs[len(reqs)-1].Messages[0].Role != "system" || reqs[len(reqs)-1].Messages[0].Text != "Answer in haiku." {
		t.Errorf("--system: the request's messages %+v, want the system prompt first", reqs[len(reqs)-1].Messages)
	}

	code, _, errOut := runEnv(t, vars, "", "chat", "--storage", store, "--session", "loop", "--max-steps", "2", "loop")
	if code != 1 || !strings.Contains(errOut, "the run reached its bound of 2 model passes while the model still called tools") {
		t.Errorf("--max-steps 2: exit %d, %q", code, errOut)
	}

	// A reply that never starts: each attempt is cut at the first-chunk
	// bound and retried, until the step's bound ends the run. A reply that
	// falls silent after two chunks: the same, at the chunk bound.
	// --idle-timeout is the model client's own bound on a silent
	// connection: the same, in the client's words.
	for _, tc := range []struct{ flag, text, retry string }{
		{"--timeout-first-chunk", "silent", "the model sent nothing for 50ms after the request (first-chunk timeout)"},
		{"--timeout-chunk", "pause", "the model stream was silent for 50ms (chunk timeout)"},
		{"--idle-timeout", "pause", "no data for 50ms"},
	} {
		session := strings.TrimPrefix(tc.flag, "--timeout-")
		code, _, errOut := runEnv(t, vars, "", "chat", "--storage", store, "--session", session, tc.flag, "50ms", "--timeout-step", "3s", tc.text)
		if code != 124 || !strings.Contains(errOut, "step 0 ran past its step timeout of 3s") {
			t.Errorf("%s: exit %d, %q, want 124 naming the step timeout", tc.flag, code, errOut)
		}
		retries := 0
		for _, e := range sessionEvents(t, store, session) {
			if e.Retry != nil {
				if !strings.Contains(e.Retry.Reason, tc.retry) {
					t.Errorf("%s: a retry for %q, want %q", tc.flag, e.Retry.Reason, tc.retry)
				}
				retries++
			}
		}
		if retries == 0 {
			t.Errorf("%s: no attempt was cut and retried: %s", tc.flag, hosttest.Kinds(sessionEvents(t, store, session)))
		}
	}

	dir := t.TempDir()
	big := filepath.Join(dir, "big.png")
	if err := os.WriteFile(big, append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 4096)...), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runEnv(t, vars, "", "chat", "--storage", store, "--session", "blob", "--blob-threshold", "16", "--max-blob-bytes", "1000", "--attach", big, "look")
	if code != 1 || !strings.Contains(errOut, "a part of 4104 bytes is larger than the largest blob allowed (1000 bytes)") {
		t.Errorf("--max-blob-bytes: exit %d, %q", code, errOut)
	}
	if evs := sessionEvents(t, store, "blob"); len(evs) != 0 {
		t.Errorf("the refused message left %d events", len(evs))
	}
}

// sessionEvents loads a session's ledger from a file store URL.
func sessionEvents(t *testing.T, storeURL, session string) []ledger.Event {
	t.Helper()
	st, err := file.Open(strings.TrimPrefix(storeURL, "file:"), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	evs, err := st.Load(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestChatToolTimeout: --timeout-tool bounds a tool call whose tool sets
// no bound of its own: a plugin's call that spins is cut there, the model
// is told, and the run goes on to complete. A tool's own bound wins: the
// hostile module's sleep, bound to 1s, is cut at 1s.
func TestChatToolTimeout(t *testing.T) {
	kit, _ := filepath.Abs("../../pdk/c")
	for _, tc := range []struct {
		module    string
		wasm      func() []byte
		ask, want string
	}{
		{"bombs", func() []byte {
			return plugintest.CPlugin(t, "../../plugins/testdata/c", []string{"bombs.c", kit + "/agentic.c"}, []string{kit}, nil)
		}, "spin please", "tool spin timed out after 300ms"},
		{"hostile", func() []byte { return plugintest.GoPlugin(t, "../../plugins/testdata/hostile") }, "sleep please", "tool sleep timed out after 1s"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, tc.module+".wasm"), tc.wasm(), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := run(t, "", "chat", "--offline", "--plugins", dir, "--storage", "memory:", "--timeout-tool", "300ms", tc.ask)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d\nstdout %q\nstderr %q\nwant %q and the run completed", tc.ask, code, out, errOut, tc.want)
		}
	}
}

// TestChatCompactionLimit: --compaction-limit reaches the agent: with a
// model of a 2,000-token window, three messages of about 200 tokens each
// compact the session at 0.3 of the window, and not at 1.
func TestChatCompactionLimit(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{Models: map[string]int{"fake/small": 2000}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	store := "file:" + t.TempDir()
	filler := strings.Repeat("lorem ipsum dolor sit amet ", 30)
	compactions := func(limit string) int {
		session := "limit-" + strings.ReplaceAll(limit, ".", "")
		for i := range 3 {
			code, _, errOut := run(t, "", "chat", "--base-url", srv.URL(), "--model", "fake/small", "--storage", store,
				"--session", session, "--compaction-limit", limit, fmt.Sprintf("message %d. %s", i, filler))
			if code != 0 {
				t.Fatalf("--compaction-limit %s, message %d: exit %d\n%s", limit, i, code, errOut)
			}
		}
		return hosttest.CountKind(sessionEvents(t, store, session), ledger.KindCompaction)
	}
	if n := compactions("0.3"); n == 0 {
		t.Errorf("--compaction-limit 0.3: no compaction in three messages")
	}
	if n := compactions("1"); n != 0 {
		t.Errorf("--compaction-limit 1: %d compactions, want none", n)
	}
}
