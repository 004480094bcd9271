package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/cli"
	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/storage/file"
)

// run runs the command in process and returns its exit code and output.
func run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runEnv(t, nil, stdin, args...)
}

// runEnv is run with the environment variables vars.
func runEnv(t *testing.T, vars map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := cli.Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut,
		Getenv: func(k string) string {
			if k == "AGENTIC_WASM_CACHE" {
				// The tests' compilation cache: a module compiled once
				// (in a compiler process of this race-instrumented
				// binary, seconds for a Go plugin) is not compiled again
				// by every command that loads it.
				return filepath.Join(plugintest.CacheDir(), "wazero")
			}
			return vars[k]
		}}
	code = cli.Main(context.Background(), args, env)
	return code, out.String(), errOut.String()
}

type wireTranscript struct {
	SessionID string     `json:"session_id"`
	Items     []wireItem `json:"items"`
}

// wireItem is an item of a wireTranscript.
type wireItem struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"`
	Text   string `json:"text"`
	Status string `json:"status"`
	RunID  string `json:"run_id"`
	Raw    any    `json:"raw"`
}

func transcriptOf(t *testing.T, storageURL, session string) wireTranscript {
	t.Helper()
	code, out, errOut := run(t, "", "transcript", "--storage", storageURL, session)
	if code != 0 {
		t.Fatalf("transcript exit %d: %s", code, errOut)
	}
	var tr wireTranscript
	if err := json.Unmarshal([]byte(out), &tr); err != nil {
		t.Fatalf("transcript is not JSON: %v\n%s", err, out)
	}
	return tr
}

func TestChatOfflineUsesTool(t *testing.T) {
	store := "file:" + t.TempDir()
	code, out, errOut := run(t, "", "chat", "--offline", "--storage", store, "--session", "demo",
		"get_account account_id=7 please")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{`[tool get_account {"account_id":"7"}]`, "[tool get_account ok:", "The get_account tool returned"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	tr := transcriptOf(t, store, "demo")
	if tr.SessionID != "demo" || len(tr.Items) != 3 {
		t.Fatalf("transcript = %+v", tr)
	}
	for _, it := range tr.Items {
		if it.ID == "" || it.RunID == "" || it.Raw != nil {
			t.Errorf("item %+v: want id and run_id, no raw payload", it)
		}
		if it.Kind == "response" && it.Status != "completed" {
			t.Errorf("item %+v not completed", it)
		}
	}
}

func TestChatExitCodes(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{Script: []fakemodel.Reply{
		{Fault: &fakemodel.Fault{Kind: fakemodel.FaultNoCredits}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	code, _, errOut := run(t, "", "chat", "--base-url", srv.URL(), "--storage", "memory:", "hi")
	if code != 1 || !strings.Contains(errOut, "failed") || !strings.Contains(errOut, "402") {
		t.Errorf("402: exit %d, stderr %q; want 1 and the reason", code, errOut)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"unknown command", []string{"nope"}, 2},
		{"bad flag", []string{"chat", "--nope"}, 2},
		{"bad storage", []string{"chat", "--storage", "ftp://x", "hi"}, 2},
		{"transcript without session", []string{"transcript"}, 2},
		{"bad compaction limit", []string{"chat", "--storage", "memory:", "--compaction-limit", "1.5", "hi"}, 2},
		{"bad idle timeout", []string{"chat", "--storage", "memory:", "--idle-timeout", "0s", "hi"}, 2},
		{"transcript bad session", []string{"transcript", "--storage", "memory:", "../x"}, 2},
		{"help", []string{"help"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, _, errOut := run(t, "", tc.args...); code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, errOut)
			}
		})
	}
}

func TestChatInteractive(t *testing.T) {
	store := "file:" + t.TempDir()
	code, out, errOut := run(t, "first\n\nsecond\n/quit\nnot sent\n", "chat", "--offline", "--storage", store)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "You said: first") || !strings.Contains(out, "You said: second") || strings.Contains(out, "not sent") {
		t.Errorf("output:\n%s", out)
	}
	if tr := transcriptOf(t, store, "cli"); len(tr.Items) != 4 {
		t.Errorf("transcript has %d items, want 4", len(tr.Items))
	}
}

// buildBinary compiles agentic-host once per test binary.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "agentic-host-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "agentic-host")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/agentichost/agentic/cmd/agentic-host").CombinedOutput()
	if err != nil {
		return "", &exec.ExitError{Stderr: out}
	}
	return bin, nil
})

// TestSIGKILLMidStream kills a real agentic-host chat process while the
// reply streams: the ledger loads and the killed response shows as
// interrupted. Chatting again in the session resumes it into the same item,
// then answers the new message; nothing is duplicated.
func TestSIGKILLMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	long := strings.TrimSpace(strings.Repeat("lorem ipsum dolor sit amet ", 100))
	srv, err := fakemodel.Start(fakemodel.Options{Latency: 10 * time.Millisecond, ChunkSize: 1,
		Script: []fakemodel.Reply{{Text: long}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := t.TempDir()
	store := "file:" + dir
	common := []string{"chat", "--base-url", srv.URL(), "--storage", store, "--session", "k"}

	cmd := exec.Command(bin, append(common, "tell me a long story")...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the reply is visibly streaming, then kill without warning.
	r := bufio.NewReader(stdout)
	seen := make([]byte, 0, 64)
	for len(seen) < 40 {
		b, err := r.ReadByte()
		if err != nil {
			t.Fatalf("read the child's output: %v (got %q)", err, seen)
		}
		seen = append(seen, b)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child was not killed by SIGKILL: %v", err)
	}
	if !strings.HasPrefix(long, string(seen)) {
		t.Fatalf("streamed %q, not a prefix of the reply", seen)
	}

	// The ledger loads, with the run open.
	fs, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := fs.Load(context.Background(), "k")
	fs.Close()
	if err != nil {
		t.Fatalf("the ledger does not load after SIGKILL: %v", err)
	}
	if open := ledger.OpenRuns(evs); len(open) != 1 {
		t.Fatalf("open runs after SIGKILL = %v, want 1", open)
	}

	// The transcript shows the killed response as interrupted, under the
	// id minted before it streamed.
	tr := transcriptOf(t, store, "k")
	if len(tr.Items) != 2 || tr.Items[1].Status != "interrupted" || tr.Items[1].ID == "" {
		t.Fatalf("transcript after SIGKILL = %+v", tr.Items)
	}
	killedID := tr.Items[1].ID

	// Chat again in the session: the interrupted run is resumed first
	// (into the same item), then the new message is answered.
	out, err := exec.Command(bin, append(common, "are you there?")...).CombinedOutput()
	if err != nil {
		t.Fatalf("second chat: %v\n%s", err, out)
	}
	for _, want := range []string{"[resuming an interrupted run]", "You said: tell me a long story", "You said: are you there?"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("second chat output lacks %q:\n%s", want, out)
		}
	}

	tr = transcriptOf(t, store, "k")
	var got []string
	ids := map[string]bool{}
	for _, it := range tr.Items {
		got = append(got, it.Kind+":"+it.Status)
		if ids[it.ID] {
			t.Errorf("item id %s appears twice", it.ID)
		}
		ids[it.ID] = true
	}
	if want := "user: response:completed user: response:completed"; strings.Join(got, " ") != want {
		t.Fatalf("transcript = %q, want %q", strings.Join(got, " "), want)
	}
	if tr.Items[0].Text != "tell me a long story" || tr.Items[2].Text != "are you there?" {
		t.Errorf("user turns = %q, %q", tr.Items[0].Text, tr.Items[2].Text)
	}
	if tr.Items[1].ID != killedID || tr.Items[1].Text != "You said: tell me a long story" {
		t.Errorf("resumed item = %+v, want id %s with the resumed answer", tr.Items[1], killedID)
	}
	if tr.Items[3].Text != "You said: are you there?" {
		t.Errorf("second answer = %q", tr.Items[3].Text)
	}
}

func TestChatShowsRetries(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{Script: []fakemodel.Reply{
		{Text: "finally", Fault: &fakemodel.Fault{Kind: fakemodel.FaultBadGateway}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	code, out, errOut := run(t, "", "chat", "--base-url", srv.URL(), "--storage", "memory:", "hi")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "[retrying in ") || !strings.Contains(out, "HTTP 502") || !strings.HasSuffix(out, "finally\n") {
		t.Errorf("output:\n%s", out)
	}
	if code, _, errOut := run(t, "", "fake-provider", "--faults", "rate=2"); code != 2 || !strings.Contains(errOut, "--faults") {
		t.Errorf("bad --faults: exit %d, %q", code, errOut)
	}
}

// TestChatFallback: chat --fallback asks the next model when the first is
// not served, says so, and records the model that answered; a fallback
// naming the model again is refused.
func TestChatFallback(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{Models: map[string]int{"acme/b": 100000}, StrictModels: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	store := "file:" + t.TempDir()
	code, out, errOut := run(t, "", "chat", "--base-url", srv.URL(), "--storage", store, "--session", "fb", "--model", "acme/gone", "--fallback", "acme/b", "hi")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "[falling back from acme/gone to acme/b after attempt 1 failed: HTTP 400, the model is not served: ") ||
		!strings.HasSuffix(out, "You said: hi\n") {
		t.Errorf("output:\n%s", out)
	}
	code, out, errOut = run(t, "", "transcript", "--storage", store, "fb")
	if code != 0 || !strings.Contains(out, `"model": "acme/b"`) {
		t.Errorf("transcript: exit %d %s %s", code, out, errOut)
	}
	code, _, errOut = run(t, "", "chat", "--base-url", srv.URL(), "--storage", "memory:", "--model", "acme/b", "--fallback", "acme/b", "hi")
	if code != 2 || !strings.Contains(errOut, `Agent.Fallback[0]: model "acme/b" is named twice`) {
		t.Errorf("a fallback naming the model: exit %d, %q", code, errOut)
	}
}

// TestChatExtraBody: --extra-body puts its fields in each model request:
// OpenRouter's "models" routes a request for a model not served to the
// next inside the request, and the transcript names the model that
// answered; a value that is no JSON object, or sets a field the host
// writes, is refused.
func TestChatExtraBody(t *testing.T) {
	srv, err := fakemodel.Start(fakemodel.Options{Models: map[string]int{"acme/b": 100000}, StrictModels: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	store := "file:" + t.TempDir()
	code, out, errOut := run(t, "", "chat", "--base-url", srv.URL(), "--storage", store, "--session", "xb", "--model", "acme/gone",
		"--extra-body", `{"models":["acme/b"],"provider":{"order":["p1"]}}`, "hi")
	if code != 0 || !strings.HasSuffix(out, "You said: hi\n") || strings.Contains(out, "falling back") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if req := srv.Requests()[0]; req.Model != "acme/gone" || !slices.Equal(req.Models, []string{"acme/b"}) || !strings.Contains(string(req.Raw), `"provider":{"order":["p1"]}`) {
		t.Errorf("the request: %s", req.Raw)
	}
	if code, out, errOut := run(t, "", "transcript", "--storage", store, "xb"); code != 0 || !strings.Contains(out, `"model": "acme/b"`) {
		t.Errorf("transcript: exit %d %s %s", code, out, errOut)
	}
	for _, tc := range []struct{ flag, want string }{
		{"[1]", "--extra-body: want a JSON object: json: cannot unmarshal array"},
		{"null", "--extra-body: want a JSON object: got null"},
		{`{"model":"x"}`, `Agent.ExtraBody["model"]: the host writes that field itself`},
	} {
		if code, _, errOut := run(t, "", "chat", "--base-url", srv.URL(), "--storage", "memory:", "--extra-body", tc.flag, "hi"); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("--extra-body %s: exit %d, %q", tc.flag, code, errOut)
		}
	}
}

func TestChatOnRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	store := srv.URL()
	code, out, errOut := run(t, "", "chat", "--offline", "--storage", store, "--session", "r1", "get_account account_id=9")
	if code != 0 || !strings.Contains(out, "The get_account tool returned") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	tr := transcriptOf(t, store, "r1")
	if len(tr.Items) != 3 || tr.Items[2].Status != "completed" {
		t.Errorf("transcript = %+v", tr.Items)
	}
}

// TestCtrlCCancelsDurably sends SIGINT to a real chat process while its
// reply streams: it exits 130, and the ledger records the run as cancelled
// with the text that had streamed.
func TestCtrlCCancelsDurably(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	long := strings.TrimSpace(strings.Repeat("slowly streaming words ", 100))
	srv, err := fakemodel.Start(fakemodel.Options{Latency: 10 * time.Millisecond, ChunkSize: 1, Script: []fakemodel.Reply{{Text: long}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	store := "file:" + t.TempDir()
	cmd := exec.Command(bin, "chat", "--base-url", srv.URL(), "--storage", store, "--session", "c", "go on")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	for n := 0; n < 30; n++ {
		if _, err := r.ReadByte(); err != nil {
			t.Fatalf("read: %v", err)
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, r)
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d (%v), want 130\n%s", code, err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "Ctrl-C") {
		t.Errorf("stderr = %q", stderr.String())
	}
	tr := transcriptOf(t, store, "c")
	if len(tr.Items) != 2 || tr.Items[1].Status != "cancelled" || tr.Items[1].Text == "" || !strings.HasPrefix(long, tr.Items[1].Text) {
		t.Errorf("transcript = %+v", tr.Items)
	}
}

// TestChatWithPluginDir: --plugins offers the tools of the Wasm modules in
// a directory (the get_account example, built from source); the result
// names the module's hash. (Reloading under load: plugins' own tests.)
func TestChatWithPluginDir(t *testing.T) {
	wasm := plugintest.GoPlugin(t, "../../examples/plugins/get_account")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "get_account.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	store := "file:" + t.TempDir()
	code, out, errOut := run(t, "", "chat", "--offline", "--plugins", dir, "--storage", store, "--session", "p", "get_account account_id=42")
	if code != 0 || !strings.Contains(out, `[tool get_account {"account_id":"42"}]`) || !strings.Contains(out, "The get_account tool returned") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	evs, err := os.ReadFile(filepath.Join(strings.TrimPrefix(store, "file:"), "p.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(evs), `"source":"sha256:`) {
		t.Error("the tool result does not name the module's hash: the Go demo tool answered, not the plugin")
	}
	if code, _, errOut := run(t, "", "chat", "--plugins", filepath.Join(dir, "missing"), "--storage", "memory:", "hi"); code != 2 || !strings.Contains(errOut, "--plugins") {
		t.Errorf("missing dir: exit %d, %q", code, errOut)
	}
}
