//go:build unix

package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/nodetest"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// needA2AClient returns the directory of the official A2A client (npm
// @a2a-js/sdk, pinned by protocol/a2a/testdata/a2a-client/package-lock.json),
// installed.
func needA2AClient(t *testing.T) string {
	t.Helper()
	return nodetest.Client(t, "../../protocol/a2a/testdata/a2a-client", "@a2a-js/sdk", "A2A client")
}

// a2aTask is a task as client.mjs summarises it.
type a2aTask struct {
	ID        string   `json:"id"`
	ContextID string   `json:"contextId"`
	State     string   `json:"state"`
	Text      string   `json:"text"`
	Status    string   `json:"status"`
	History   []string `json:"history"`
}

// a2aFollow is a stream as client.mjs followed it.
type a2aFollow struct {
	Kinds     []string `json:"kinds"`
	Text      string   `json:"text"`
	Pieces    int      `json:"pieces"`
	Final     string   `json:"final"`
	FinalText string   `json:"finalText"`
	TaskID    string   `json:"taskId"`
	ContextID string   `json:"contextId"`
}

type a2aError struct {
	Name    string `json:"name"`
	Code    int    `json:"code"`
	Message string `json:"message"`
	OK      bool   `json:"ok"`
}

// a2aReport is what client.mjs saw.
type a2aReport struct {
	Error string `json:"error"`
	Card  struct {
		Name       string `json:"name"`
		Streaming  bool   `json:"streaming"`
		Interfaces []struct {
			URL, Binding, Version string
		} `json:"interfaces"`
		TransportVersion string `json:"transportVersion"`
	} `json:"card"`
	Blocking    a2aTask `json:"blocking"`
	BlockingGet a2aTask `json:"blockingGet"`
	Polling     struct {
		First a2aTask `json:"first"`
		Done  a2aTask `json:"done"`
	} `json:"polling"`
	Stream a2aFollow `json:"stream"`
	Resume struct {
		Left          a2aFollow `json:"left"`
		Resumed       a2aFollow `json:"resumed"`
		FirstTaskText string    `json:"firstTaskText"`
		FirstState    string    `json:"firstState"`
		Task          a2aTask   `json:"task"`
		Again         a2aFollow `json:"again"`
	} `json:"resume"`
	Cancel struct {
		Task  a2aTask  `json:"task"`
		Again a2aError `json:"again"`
	} `json:"cancel"`
	Approval struct {
		Asked      a2aTask `json:"asked"`
		ApprovalID string  `json:"approvalId"`
		Done       a2aTask `json:"done"`
	} `json:"approval"`
	Keys struct {
		Wrong       a2aError `json:"wrong"`
		None        a2aError `json:"none"`
		WrongCall   a2aError `json:"wrongCall"`
		OtherTenant a2aError `json:"otherTenant"`
	} `json:"keys"`
}

// TestA2AClient: the official A2A client (npm @a2a-js/sdk 1.3.0, its v0.3
// transport) drives the real agentic-host serve: it finds the agent from
// its card (with the key), sends a message and waits, sends one and
// polls tasks/get, streams a reply that arrives in pieces, leaves a stream
// mid-run and resubscribes (the task so far, then the rest and the end),
// cancels a task in flight (a second cancel: not cancelable), sees a
// publish_post call wait as input-required and approves it with a data
// part, the post published once; a wrong key and no key are refused, and
// another tenant's key finds no task.
func TestA2AClient(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	client := needA2AClient(t)
	bin := needBinary(t)
	const key, otherKey = "ak_a2a_test_7d1e", "ak_a2a_other_2b90"

	var posts atomic.Int64
	blog := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := posts.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"post-%d","url":"https://blog.example/post-%d"}`, n, n)
	}))
	t.Cleanup(blog.Close)
	blogURL, _ := url.Parse(blog.URL)

	dir := t.TempDir()
	plugins := filepath.Join(dir, "plugins", "acme")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plugins, "publish_post.wasm"), plugintest.GoPlugin(t, "../../examples/plugins/publish_post"), 0o644); err != nil {
		t.Fatal(err)
	}
	hash := func(k string) string {
		out, err := exec.Command(bin, "keys", "hash", k).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	model := slowModel(t) // a word every 10ms: a long reply streams for seconds
	config := filepath.Join(dir, "serve.yaml")
	yaml := fmt.Sprintf(`listen: 127.0.0.1:0
storage: file:%s
plugins_dir: %s
model:
  base_url: %s
tenants:
  acme:
    keys: [%s]
    models: [fake/echo]
    sandbox:
      allowed_hosts: [%q]
      allow_private_network: true
      kv: true
      compile_timeout: 5m # the machine may be loaded
    plugin_config:
      publish_post:
        endpoint: %s/posts
  beta:
    keys: [%s]
    models: [fake/echo]
`, filepath.Join(dir, "store"), filepath.Join(dir, "plugins"), model.URL(), hash(key), blogURL.Host, blog.URL, hash(otherKey))
	if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	serve := startProc(t, "serve", bin, "serve", "--config", config)
	listening := regexp.MustCompile(`listening on (http://\S+)`)
	var base string
	for deadline := time.Now().Add(2 * time.Minute); base == ""; {
		if m := listening.FindStringSubmatch(serve.out.String()); m != nil {
			base = m[1]
			break
		}
		select {
		case <-serve.done:
			t.Fatalf("serve exited: %s", serve.err.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve does not listen (a guard against a hang): %s", serve.err.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	get := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	// The plugin compiles as serve starts (slowly on a loaded machine).
	for deadline := time.Now().Add(6 * time.Minute); ; {
		_, body := get("/v1/plugins")
		var list struct {
			Plugins  []struct{ Name string }
			Refusals []struct{ Name, Reason string }
		}
		json.Unmarshal([]byte(body), &list)
		if len(list.Refusals) > 0 {
			t.Fatalf("plugins refused: %+v", list.Refusals)
		}
		if len(list.Plugins) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plugin did not load: %s\n%s", body, serve.err.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	long := words("w", 300)
	raw, _ := json.Marshal(map[string]any{"base": base, "key": key, "otherKey": otherKey, "long": long})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(client, "client.mjs"), string(raw))
	cmd.Dir = client
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var rep a2aReport
	if jerr := json.Unmarshal(out, &rep); err != nil || jerr != nil || rep.Error != "" {
		t.Fatalf("client.mjs: %v %v %s\nstdout %s\nstderr %s", err, jerr, rep.Error, out, stderr.String())
	}
	defer func() {
		if t.Failed() {
			t.Logf("report: %.4000s\nclient stderr: %s", out, stderr.String())
		}
	}()
	// ledgerText is the answer of a task as the session's transcript has
	// it: its response items' text.
	ledgerText := func(session, run string) string {
		t.Helper()
		code, body := get("/v1/sessions/" + session + "/transcript")
		var tr uiTranscript
		if err := json.Unmarshal([]byte(body), &tr); code != 200 || err != nil {
			t.Fatalf("transcript of %s: %d %v %s", session, code, err, body)
		}
		var b strings.Builder
		for _, it := range tr.Items {
			if it.Kind == "response" && it.RunID == run {
				b.WriteString(it.Text)
			}
		}
		return b.String()
	}
	whole := "You said: " + long

	t.Run("card", func(t *testing.T) {
		c := rep.Card
		if c.Name != "default" || !c.Streaming || len(c.Interfaces) != 1 || c.Interfaces[0].URL != base+"/a2a/default" ||
			c.Interfaces[0].Binding != "JSONRPC" || c.Interfaces[0].Version != "0.3.0" || c.TransportVersion != "0.3" {
			t.Errorf("card %+v", c)
		}
	})
	t.Run("blocking", func(t *testing.T) {
		b := rep.Blocking
		if b.State != "TASK_STATE_COMPLETED" || b.Text != "You said: hello there" || ledgerText(b.ContextID, b.ID) != b.Text {
			t.Errorf("%+v", b)
		}
		if g := rep.BlockingGet; g.ID != b.ID || g.State != b.State || g.Text != b.Text || strings.Join(g.History, "|") != "hello there" {
			t.Errorf("tasks/get: %+v", g)
		}
	})
	t.Run("polling", func(t *testing.T) {
		p := rep.Polling
		if p.First.State != "TASK_STATE_WORKING" || p.Done.ID != p.First.ID || p.Done.State != "TASK_STATE_COMPLETED" || p.Done.Text != whole {
			t.Errorf("first %+v, done %+v", p.First, p.Done)
		}
	})
	t.Run("stream", func(t *testing.T) {
		s := rep.Stream
		if s.Kinds[0] != "task" || s.Final != "TASK_STATE_COMPLETED" || s.Kinds[len(s.Kinds)-1] != "status-update(TASK_STATE_COMPLETED)" {
			t.Errorf("kinds %v, final %s", s.Kinds, s.Final)
		}
		if s.Text != whole || s.Pieces < 10 {
			t.Errorf("streamed %d pieces of %q, want the whole reply in pieces", s.Pieces, s.Text)
		}
	})
	t.Run("resume", func(t *testing.T) {
		r := rep.Resume
		if r.Left.Final != "" || r.Left.Pieces < 5 || r.Left.TaskID == "" {
			t.Fatalf("the stream left: %+v", r.Left)
		}
		if r.Resumed.Kinds[0] != "task" || r.Resumed.Final != "TASK_STATE_COMPLETED" || r.Resumed.Text != whole {
			t.Errorf("resubscribed: %+v", r.Resumed)
		}
		// It resubscribed mid-run: the task had some of the text, not all.
		if r.FirstState != "TASK_STATE_WORKING" || len(r.FirstTaskText) == 0 || len(r.FirstTaskText) >= len(whole) || !strings.HasPrefix(whole, r.FirstTaskText) {
			t.Errorf("the task resubscribed to: %s with %q", r.FirstState, r.FirstTaskText)
		}
		if r.Task.State != "TASK_STATE_COMPLETED" || r.Task.Text != whole || ledgerText(r.Task.ContextID, r.Task.ID) != whole {
			t.Errorf("the task after: %+v", r.Task)
		}
		if strings.Join(r.Again.Kinds, " ") != "task status-update(TASK_STATE_COMPLETED)" || r.Again.Text != whole {
			t.Errorf("a finished task resubscribed: %+v", r.Again)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		c := rep.Cancel
		if c.Task.State != "TASK_STATE_CANCELED" || !strings.Contains(c.Task.Status, "tasks/cancel") {
			t.Errorf("cancelled: %+v", c.Task)
		}
		if c.Again.Code != -32002 || c.Again.Name != "TaskNotCancelableError" {
			t.Errorf("a second cancel: %+v", c.Again)
		}
		code, body := get("/v1/sessions/" + c.Task.ContextID)
		if code != 200 || !strings.Contains(body, `"state":"cancelled"`) {
			t.Errorf("the session: %d %s", code, body)
		}
	})
	t.Run("approval", func(t *testing.T) {
		a := rep.Approval
		if a.Asked.State != "TASK_STATE_INPUT_REQUIRED" || a.ApprovalID == "" || !strings.Contains(a.Asked.Status, a.ApprovalID) ||
			!strings.Contains(a.Asked.Status, "publish_post") {
			t.Fatalf("asked: %+v (%s)", a.Asked, a.ApprovalID)
		}
		if a.Done.ID != a.Asked.ID || a.Done.State != "TASK_STATE_COMPLETED" || !strings.Contains(a.Done.Text, "post-1") {
			t.Errorf("after the decision: %+v", a.Done)
		}
		if n := posts.Load(); n != 1 {
			t.Errorf("%d posts, want 1", n)
		}
	})
	t.Run("keys", func(t *testing.T) {
		k := rep.Keys
		for what, e := range map[string]a2aError{"a wrong key": k.Wrong, "no key": k.None, "a wrong key's call": k.WrongCall} {
			if e.OK || !strings.Contains(e.Message, "401") {
				t.Errorf("%s: %+v, want a 401", what, e)
			}
		}
		if k.OtherTenant.Code != -32001 || k.OtherTenant.Name != "TaskNotFoundError" {
			t.Errorf("another tenant's task: %+v", k.OtherTenant)
		}
	})
}
