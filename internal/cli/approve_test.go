//go:build unix

package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// blogServer is the endpoint publish_post posts to; it counts the posts.
func blogServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var posts atomic.Int64
	blog := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := posts.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"post-%d","url":"https://blog.example/p/%d"}`, n, n)
	}))
	t.Cleanup(blog.Close)
	return blog, &posts
}

// approvalPlugins writes the Wasm publish_post (an external tool) and the
// C side_effects policy into a new directory, and returns the flags that
// load them with the policy and let publish_post reach blog.
func approvalPlugins(t *testing.T, blog *httptest.Server) []string {
	t.Helper()
	dir := t.TempDir()
	kit, _ := filepath.Abs("../../pdk/c")
	files := map[string][]byte{
		"publish_post.wasm": plugintest.GoPlugin(t, "../../examples/plugins/publish_post"),
		"side_effects.wasm": plugintest.CPlugin(t, "../../examples/plugins/side_effects", []string{"side_effects.c", kit + "/agentic.c"}, []string{kit}, nil),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	u, _ := url.Parse(blog.URL)
	return []string{"--plugins", dir, "--policy", "side_effects", "--plugin-kv",
		"--plugin-allow-host", u.Host, "--plugin-allow-private", "--plugin-config", "publish_post:endpoint=" + blog.URL + "/api/posts"}
}

// runBin runs the binary to its end and returns its exit code and output.
func runBin(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	return runBinEnv(t, bin, nil, args...)
}

// runBinEnv is runBin with the environment variables env ("KEY=VALUE";
// "KEY=" unsets KEY) in place of the test's own of those names.
func runBinEnv(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = environ(env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("%q: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// environ is the test's environment with env ("KEY=VALUE"; "KEY=" unsets
// KEY) in place of its own variables of those names.
func environ(env ...string) []string {
	out := os.Environ()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		out = slices.DeleteFunc(out, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		if v != "" {
			out = append(out, kv)
		}
	}
	return out
}

// pendingApproval is an entry of "approvals --json".
type pendingApproval struct {
	SessionID   string          `json:"session_id"`
	RunID       string          `json:"run_id"`
	ApprovalID  string          `json:"approval_id"`
	CallID      string          `json:"call_id"`
	Tool        string          `json:"tool"`
	Effect      string          `json:"effect"`
	Input       json.RawMessage `json:"input"`
	Summary     string          `json:"summary"`
	Reason      string          `json:"reason"`
	Policy      string          `json:"policy"`
	RequestedAt time.Time       `json:"requested_at"`
	ExpiresAt   time.Time       `json:"expires_at"`
	Token       string          `json:"token"`
}

func inbox(t *testing.T, bin, storage string, env ...string) []pendingApproval {
	t.Helper()
	code, out, errOut := runBinEnv(t, bin, env, "approvals", "--json", "--storage", storage)
	if code != 0 {
		t.Fatalf("approvals: exit %d: %s", code, errOut)
	}
	var list []pendingApproval
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("approvals --json: %v\n%s", err, out)
	}
	return list
}

// TestApprovalCLI: with the Wasm publish_post and the side_effects policy,
// a one-shot chat parks its run and exits 3 naming the approval; the inbox
// lists it; a new process approves it, and the post is published exactly
// once, the model's answer following in the transcript. Deny is the other
// branch: the model is told why, and answers. Interactive chat asks inline.
func TestApprovalCLI(t *testing.T) {
	bin := needBinary(t)
	blog, posts := blogServer(t)
	plugins := approvalPlugins(t, blog)
	storage := "file:" + t.TempDir()
	common := append([]string{"--offline", "--storage", storage}, plugins...)
	chat := func(session string) string {
		t.Helper()
		before := posts.Load()
		code, out, errOut := runBin(t, bin, append(append([]string{"chat", "--session", session}, common...), `publish_post title="Hello" body="First"`)...)
		if code != 3 || !strings.Contains(errOut, "agentic-host approve "+session+" appr_") || !strings.Contains(out, "waits for approval") {
			t.Fatalf("chat in %s: exit %d, want 3 and the approval to decide\n%s\n%s", session, code, out, errOut)
		}
		if n := posts.Load(); n != before {
			t.Fatalf("the blog got a post before any approval")
		}
		list := inbox(t, bin, storage)
		if len(list) != 1 || list[0].SessionID != session || list[0].Tool != "publish_post" || list[0].Effect != "external" ||
			list[0].Policy != "side_effects" || !strings.Contains(list[0].Summary, "Hello") || list[0].Token == "" {
			t.Fatalf("inbox: %+v", list)
		}
		return list[0].ApprovalID
	}

	id := chat("yes")
	code, out, errOut := runBin(t, bin, append([]string{"approve", "yes", id, "--by", "alice"}, common...)...)
	if code != 0 || !strings.Contains(out, `The publish_post tool returned: {"status":"published"`) {
		t.Fatalf("approve: exit %d\n%s\n%s", code, out, errOut)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("the blog got %d posts, want 1", n)
	}
	if list := inbox(t, bin, storage); len(list) != 0 {
		t.Errorf("the inbox still holds %+v", list)
	}
	code, _, errOut = runBin(t, bin, append([]string{"approve", "yes", id}, common...)...)
	if code != 1 || !strings.Contains(errOut, "decided already") || posts.Load() != 1 {
		t.Errorf("a second approve: exit %d, %q, %d posts", code, errOut, posts.Load())
	}
	code, out, _ = runBin(t, bin, "transcript", "--storage", storage, "yes")
	if code != 0 || !strings.Contains(out, `"approval": "approved"`) || !strings.Contains(out, "The publish_post tool returned") {
		t.Errorf("transcript after approval:\n%s", out)
	}

	id = chat("no")
	code, out, errOut = runBin(t, bin, append([]string{"deny", "no", id, "--reason", "not on a Friday"}, common...)...)
	if code != 0 || !strings.Contains(out, "The publish_post tool returned: error: a person denied this call") || !strings.Contains(out, "not on a Friday") {
		t.Fatalf("deny: exit %d\n%s\n%s", code, out, errOut)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("the blog got %d posts after a denial, want 1", n)
	}
	if _, out, _ = runBin(t, bin, "transcript", "--storage", storage, "no"); !strings.Contains(out, `"approval": "denied"`) {
		t.Errorf("transcript after denial:\n%s", out)
	}

	// The policy's module is replaced between the request and the
	// decision: the approval is void, and the new module asks again.
	id = chat("swap")
	kit, _ := filepath.Abs("../../pdk/c")
	rebuilt := plugintest.CPlugin(t, "../../examples/plugins/side_effects", []string{"side_effects.c", kit + "/agentic.c"}, []string{kit}, []string{"-O1"})
	if err := os.WriteFile(filepath.Join(plugins[1], "side_effects.wasm"), rebuilt, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runBin(t, bin, append([]string{"approve", "swap", id}, common...)...)
	if code != 3 || !strings.Contains(errOut, "agentic-host approve swap appr_") || !strings.Contains(out, id+" of publish_post: void") {
		t.Fatalf("approve after the policy changed: exit %d, want 3 and a new request\n%s\n%s", code, out, errOut)
	}
	if list := inbox(t, bin, storage); len(list) != 1 || list[0].ApprovalID == id || posts.Load() != 1 {
		t.Fatalf("after the policy changed: inbox %+v, %d posts", list, posts.Load())
	}
	if _, out, _ = runBin(t, bin, "transcript", "--storage", storage, "swap"); !strings.Contains(out, `"approval": "pending"`) {
		t.Errorf("transcript after the policy changed:\n%s", out)
	}

	// Interactive chat asks, and goes on with the answer.
	cmd := exec.Command(bin, append([]string{"chat", "--session", "ask"}, common...)...)
	cmd.Stdin = strings.NewReader("publish_post title=\"Asked\" body=\"Inline\"\ny\n")
	raw, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(raw), `approve publish_post {"body":"Inline","title":"Asked"}? [y/N/reason]`) ||
		!strings.Contains(string(raw), `The publish_post tool returned: {"status":"published"`) || posts.Load() != 2 {
		t.Fatalf("interactive chat: %v, %d posts\n%s", err, posts.Load(), raw)
	}
}

// TestApprovalTwoHostsRedis: two hosts on one Redis. Host A's interactive
// chat parks a run and asks; A is SIGKILLed while it waits. Host B, another
// process, finds the request in the inbox, approves it and continues the
// run: the post is published once and the answer closes the run. An edit
// and a response decided by host B after host A died likewise continue
// their runs: the edited post published once, the answered one never.
func TestApprovalTwoHostsRedis(t *testing.T) {
	bin := needBinary(t)
	srv := redistest.Start(t, redistest.Options{})
	model, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	blog, posts := blogServer(t)
	storage := fmt.Sprintf("redis://127.0.0.1:%d/0", srv.Port())
	common := append([]string{"--storage", storage, "--base-url", model.URL(), "--session", "shared"}, approvalPlugins(t, blog)...)

	a := startProc(t, "host A", bin, append([]string{"chat"}, common...)...)
	a.send(`publish_post title="Hello" body="From A"`)
	a.waitOut("approve publish_post", time.Minute)
	a.signal(syscall.SIGKILL)
	a.wait(10 * time.Second)
	if n := posts.Load(); n != 0 {
		t.Fatalf("the blog got %d posts before any approval", n)
	}

	list := inbox(t, bin, storage)
	if len(list) != 1 || list[0].SessionID != "shared" {
		t.Fatalf("inbox after host A died: %+v", list)
	}
	b := startProc(t, "host B", bin, append([]string{"approve", "shared", list[0].ApprovalID}, common...)...)
	if code := b.wait(time.Minute); code != 0 {
		t.Fatalf("host B's approve: exit %d\n%s\n%s", code, b.out.String(), b.err.String())
	}
	if !strings.Contains(b.out.String(), `The publish_post tool returned: {"status":"published"`) || posts.Load() != 1 {
		t.Fatalf("host B: %d posts\n%s", posts.Load(), b.out.String())
	}
	tr := transcriptOf(t, storage, "shared")
	last := tr.Items[len(tr.Items)-1]
	if last.Status != "completed" || !strings.Contains(last.Text, "The publish_post tool returned") {
		t.Errorf("transcript: %+v", tr.Items)
	}

	// The other decisions, likewise: host A parks and dies, host B edits
	// one call (published once, with the edit) and answers another in
	// the tool's place (never published).
	for _, tc := range []struct{ session, verb string }{{"edited", "approve"}, {"answered", "respond"}} {
		common := append([]string{"--storage", storage, "--base-url", model.URL(), "--session", tc.session}, approvalPlugins(t, blog)...)
		a := startProc(t, "host A, "+tc.session, bin, append([]string{"chat"}, common...)...)
		a.send(`publish_post title="Helo" body="From A"`)
		a.waitOut("approve publish_post", time.Minute)
		a.signal(syscall.SIGKILL)
		a.wait(10 * time.Second)
		var id string
		for _, p := range inbox(t, bin, storage) {
			if p.SessionID == tc.session {
				id = p.ApprovalID
			}
		}
		if id == "" {
			t.Fatalf("no approval request of %s after host A died", tc.session)
		}
		args := []string{tc.verb}
		if tc.verb == "approve" {
			edit := filepath.Join(t.TempDir(), "edit.json")
			if err := os.WriteFile(edit, []byte(`{"title":"Hello","body":"From B"}`), 0o644); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--input", edit, tc.session, id)
		} else {
			args = append(args, tc.session, id, "published by hand")
		}
		before := posts.Load()
		b := startProc(t, "host B, "+tc.session, bin, append(args, common...)...)
		if code := b.wait(time.Minute); code != 0 {
			t.Fatalf("host B's %s: exit %d\n%s\n%s", tc.verb, code, b.out.String(), b.err.String())
		}
		want := int64(0)
		if tc.verb == "approve" {
			want = 1
		}
		if n := posts.Load() - before; n != want {
			t.Errorf("%s: %d posts, want %d", tc.session, n, want)
		}
		out := transcriptJSON(t, bin, storage, tc.session)
		if tc.verb == "approve" && (!strings.Contains(out, `"edited_input": {`) || !strings.Contains(out, `"From B"`)) ||
			tc.verb == "respond" && !strings.Contains(out, `"approval": "responded"`) {
			t.Errorf("%s's transcript:\n%s", tc.session, out)
		}
	}
}

// transcriptJSON is the transcript command's output for a session.
func transcriptJSON(t *testing.T, bin, storage, session string) string {
	t.Helper()
	code, out, errOut := runBin(t, bin, "transcript", "--storage", storage, session)
	if code != 0 {
		t.Fatalf("transcript %s: exit %d: %s", session, code, errOut)
	}
	return out
}

// TestApprovalTask: a task whose call needs a person waits, saying how to
// decide; another process approves, continuing the run as the task, and
// the waiting task prints the outcome.
func TestApprovalTask(t *testing.T) {
	bin := needBinary(t)
	blog, posts := blogServer(t)
	storage := "file:" + t.TempDir()
	common := append([]string{"--offline", "--storage", storage}, approvalPlugins(t, blog)...)
	schema := filepath.Join(t.TempDir(), "schema.json")
	if err := os.WriteFile(schema, []byte(`{"type":"object","properties":{"status":{"type":"string"}},"required":["status"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	task := startProc(t, "task", bin, append([]string{"task", "--session", "job", "--schema", schema, "--prompt", `publish_post title="Hello" body="Task"`}, common...)...)
	var list []pendingApproval
	for deadline := time.Now().Add(time.Minute); len(list) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no approval request; task stderr:\n%s", task.err.String())
		}
		list = inbox(t, bin, storage)
	}
	if !strings.Contains(task.err.String(), "agentic-host approve job "+list[0].ApprovalID) {
		t.Errorf("the task does not say how to decide:\n%s", task.err.String())
	}
	if code, out, errOut := runBin(t, bin, append([]string{"approve", "job", list[0].ApprovalID}, common...)...); code != 0 {
		t.Fatalf("approve: exit %d\n%s\n%s", code, out, errOut)
	}
	if code := task.wait(time.Minute); code != 0 || !strings.Contains(task.out.String(), `"status": "submitted"`) || posts.Load() != 1 {
		t.Fatalf("task: exit %d, %d posts\n%s\n%s", code, posts.Load(), task.out.String(), task.err.String())
	}
}

// TestApproveEditRespondCLI: approve --input runs the call with the edited
// input (refused with exit 2 when the tool's schema does not take it), and
// respond answers a call in the tool's place: no post is made.
func TestApproveEditRespondCLI(t *testing.T) {
	bin := needBinary(t)
	var titles []string
	var mu sync.Mutex
	blog := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var post struct{ Title string }
		json.NewDecoder(r.Body).Decode(&post)
		mu.Lock()
		titles = append(titles, post.Title)
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"post-1","url":"https://blog.example/p/1"}`)
	}))
	t.Cleanup(blog.Close)
	storage := "file:" + t.TempDir()
	common := append([]string{"--offline", "--storage", storage}, approvalPlugins(t, blog)...)
	park := func(session string) string {
		t.Helper()
		if code, out, errOut := runBin(t, bin, append(append([]string{"chat", "--session", session}, common...), `publish_post title="Helo" body="First"`)...); code != 3 {
			t.Fatalf("chat: exit %d\n%s\n%s", code, out, errOut)
		}
		for _, p := range inbox(t, bin, storage) {
			if p.SessionID == session {
				return p.ApprovalID
			}
		}
		t.Fatalf("no approval request in %s", session)
		return ""
	}
	id := park("edit")
	bad := filepath.Join(t.TempDir(), "bad.json")
	good := filepath.Join(t.TempDir(), "good.json")
	os.WriteFile(bad, []byte(`{"title":7}`), 0o644)
	os.WriteFile(good, []byte(`{"title":"Hello","body":"First"}`), 0o644)
	if code, _, errOut := runBin(t, bin, append([]string{"approve", "--input", bad, "edit", id}, common...)...); code != 2 || !strings.Contains(errOut, "does not match tool publish_post's schema") {
		t.Errorf("an edit the schema refuses: exit %d, %q", code, errOut)
	}
	if code, out, errOut := runBin(t, bin, append([]string{"approve", "--input", good, "--by", "alice", "edit", id}, common...)...); code != 0 {
		t.Fatalf("approve --input: exit %d\n%s\n%s", code, out, errOut)
	}
	mu.Lock()
	got := slices.Clone(titles)
	mu.Unlock()
	if !slices.Equal(got, []string{"Hello"}) {
		t.Errorf("the blog got titles %q, want the edited one once", got)
	}
	if code, out, _ := runBin(t, bin, "transcript", "--storage", storage, "edit"); code != 0 || !strings.Contains(out, `"edited_input": {`) || !strings.Contains(out, `"decided_by": "alice"`) {
		t.Errorf("the edit's transcript:\n%s", out)
	}

	id = park("respond")
	if code, out, errOut := runBin(t, bin, append([]string{"respond", "respond", id, "posted by hand"}, common...)...); code != 0 || !strings.Contains(out, "posted by hand") {
		t.Fatalf("respond: exit %d\n%s\n%s", code, out, errOut)
	}
	mu.Lock()
	n := len(titles)
	mu.Unlock()
	if n != 1 {
		t.Errorf("the blog got %d posts, want the edit's one alone", n)
	}
	if code, out, _ := runBin(t, bin, "transcript", "--storage", storage, "respond"); code != 0 || !strings.Contains(out, `"approval": "responded"`) {
		t.Errorf("the response's transcript:\n%s", out)
	}
}
