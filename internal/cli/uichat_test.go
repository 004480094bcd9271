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

// needAIClient returns the directory of the AI SDK client (npm ai, pinned
// by protocol/uistream/testdata/ai-client/package-lock.json), installed.
func needAIClient(t *testing.T) string {
	t.Helper()
	return nodetest.Client(t, "../../protocol/uistream/testdata/ai-client", "ai", "AI SDK client")
}

// uiPart is a part of a UIMessage as the client ended with it.
type uiPart struct {
	Type       string          `json:"type"`
	Text       string          `json:"text"`
	State      string          `json:"state"`
	ToolCallID string          `json:"toolCallId"`
	Input      json.RawMessage `json:"input"`
	Output     json.RawMessage `json:"output"`
	Approval   *struct {
		ID       string `json:"id"`
		Approved *bool  `json:"approved"`
	} `json:"approval"`
}

type uiError struct {
	Message    string `json:"message"`
	StatusCode int    `json:"statusCode"`
}

type uiEnd struct {
	Status    string   `json:"status"`
	Error     *uiError `json:"error"`
	Roles     []string `json:"roles"`
	MessageID string   `json:"messageId"`
	Parts     []uiPart `json:"parts"`
	Text      string   `json:"text"`
}

// uiReport is what client.mjs saw.
type uiReport struct {
	Error string `json:"error"`
	Tool  struct {
		uiEnd
		Regenerate uiEnd `json:"regenerate"`
		Edit       uiEnd `json:"edit"`
	} `json:"tool"`
	Resume struct {
		Stopped uiEnd `json:"stopped"`
		Resumed struct {
			uiEnd
			Parts []string `json:"parts"`
		} `json:"resumed"`
		Again uiEnd `json:"again"`
	} `json:"resume"`
	Approval struct {
		Asked      uiEnd  `json:"asked"`
		ApprovalID string `json:"approvalId"`
		Done       uiEnd  `json:"done"`
	} `json:"approval"`
	NoKey uiEnd `json:"nokey"`
}

// uiTranscript is GET /v1/sessions/{id}/transcript.
type uiTranscript struct {
	Items []struct {
		ID        string `json:"id"`
		Kind      string `json:"kind"`
		RunID     string `json:"run_id"`
		Text      string `json:"text"`
		Status    string `json:"status"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Name     string `json:"name"`
			Status   string `json:"status"`
			Output   string `json:"output"`
			Approval string `json:"approval"`
		} `json:"tool_calls"`
	} `json:"items"`
}

// responses returns the transcript's response items.
func (tr uiTranscript) responses() []int {
	var out []int
	for i, it := range tr.Items {
		if it.Kind == "response" {
			out = append(out, i)
		}
	}
	return out
}

// TestUIChatAISDK: the AI SDK's own client (npm ai: AbstractChat, the
// class behind useChat, over DefaultChatTransport with the API key in its
// headers) drives the real agentic-host serve, whose tenant has the Wasm
// plugins get_account and publish_post: a reply that calls get_account
// streams its input, output and final text into one assistant message;
// regenerate and an edited message are refused; a reply stopped mid-way
// (the client leaves; the run goes on) is resumed with resumeStream and
// ends whole, the transcript's text; a publish_post call ends its stream
// with an approval request, addToolApprovalResponse (sent by
// sendAutomaticallyWhen) approves it, the run goes on in the same message,
// and the post is published once; a client without the key gets a 401.
func TestUIChatAISDK(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	client := needAIClient(t)
	bin := needBinary(t)
	const key = "ak_ui_test_3f9c"

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
	for _, name := range []string{"get_account", "publish_post"} {
		if err := os.WriteFile(filepath.Join(plugins, name+".wasm"), plugintest.GoPlugin(t, "../../examples/plugins/"+name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hash, err := exec.Command(bin, "keys", "hash", key).Output()
	if err != nil {
		t.Fatal(err)
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
`, filepath.Join(dir, "store"), filepath.Join(dir, "plugins"), model.URL(), strings.TrimSpace(string(hash)), blogURL.Host, blog.URL)
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
	// The plugins compile as serve starts (slowly on a loaded machine).
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
		if len(list.Plugins) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plugins did not load: %s\n%s", body, serve.err.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	long := words("w", 400)
	sessions := map[string]string{"tool": "ui-tool", "resume": "ui-resume", "approval": "ui-approval"}
	raw, _ := json.Marshal(map[string]any{"api": base + "/v1/ui/chat", "key": key, "long": long, "sessions": sessions})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(client, "client.mjs"), string(raw))
	cmd.Dir = client
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var rep uiReport
	if jerr := json.Unmarshal(out, &rep); err != nil || jerr != nil || rep.Error != "" {
		t.Fatalf("client.mjs: %v %v %s\nstdout %s\nstderr %s", err, jerr, rep.Error, out, stderr.String())
	}
	defer func() {
		if t.Failed() {
			t.Logf("report: %s\nclient stderr: %s", out, stderr.String())
		}
	}()
	transcript := func(session string) uiTranscript {
		t.Helper()
		code, body := get("/v1/sessions/" + session + "/transcript")
		var tr uiTranscript
		if err := json.Unmarshal([]byte(body), &tr); code != 200 || err != nil {
			t.Fatalf("transcript of %s: %d %v %s", session, code, err, body)
		}
		return tr
	}
	ok := func(what string, e uiEnd) {
		t.Helper()
		if e.Status != "ready" || e.Error != nil {
			t.Errorf("%s: status %s, error %+v; want ready, no error", what, e.Status, e.Error)
		}
	}
	oneAssistant := func(what string, e uiEnd) {
		t.Helper()
		if strings.Join(e.Roles, " ") != "user assistant" {
			t.Errorf("%s: messages %v, want one user and one assistant message", what, e.Roles)
		}
	}

	t.Run("tool", func(t *testing.T) {
		r := rep.Tool.uiEnd
		ok("the reply", r)
		oneAssistant("the reply", r)
		tr := transcript(sessions["tool"])
		resp := tr.responses()
		if len(resp) != 2 {
			t.Fatalf("transcript: %+v, want two passes", tr)
		}
		first, second := tr.Items[resp[0]], tr.Items[resp[1]]
		var kinds []string
		for _, p := range r.Parts {
			kinds = append(kinds, p.Type)
		}
		if got := strings.Join(kinds, " "); got != "step-start text tool-get_account step-start text" {
			t.Fatalf("parts %s, want step-start text tool-get_account step-start text", got)
		}
		call := r.Parts[2]
		var output map[string]any
		json.Unmarshal(call.Output, &output)
		if call.State != "output-available" || call.ToolCallID != first.ToolCalls[0].ID || string(call.Input) != `{"account_id":"42"}` ||
			output["owner"] != "Katherine Johnson" || output["plan"] != "team" {
			t.Errorf("the tool part: %+v, want get_account's call %s with its output", call, first.ToolCalls[0].ID)
		}
		if r.Parts[1].Text != first.Text || r.Parts[4].Text != second.Text || !strings.HasPrefix(second.Text, "The get_account tool returned: ") ||
			r.Parts[1].State != "done" || r.Parts[4].State != "done" {
			t.Errorf("texts %q, %q; the transcript's %q, %q", r.Parts[1].Text, r.Parts[4].Text, first.Text, second.Text)
		}
		if r.MessageID != first.RunID {
			t.Errorf("the message's id %s, want the run's %s", r.MessageID, first.RunID)
		}
		for what, e := range map[string]struct {
			end  uiEnd
			want string
		}{"regenerate": {rep.Tool.Regenerate, "regenerate-message is not supported"}, "an edit": {rep.Tool.Edit, "editing a sent message is not supported"}} {
			if e.end.Status != "error" || e.end.Error == nil || e.end.Error.StatusCode != 400 || !strings.Contains(e.end.Error.Message, e.want) {
				t.Errorf("%s: %+v, want a 400 saying %q", what, e.end, e.want)
			}
		}
		users := 0
		for _, it := range transcript(sessions["tool"]).Items {
			if it.Kind == "user" {
				users++
			}
		}
		if users != 1 {
			t.Errorf("%d user messages, want 1: the refused requests appended nothing", users)
		}
	})

	t.Run("resume", func(t *testing.T) {
		s := rep.Resume
		ok("stopped", s.Stopped)
		ok("resumed", s.Resumed.uiEnd)
		oneAssistant("resumed", s.Resumed.uiEnd)
		tr := transcript(sessions["resume"])
		resp := tr.responses()
		if len(resp) != 1 || tr.Items[resp[0]].Status != "completed" {
			t.Fatalf("transcript %+v: want one completed response (the client left, the run went on)", tr)
		}
		whole := tr.Items[resp[0]].Text
		if whole != "You said: "+long {
			t.Errorf("the run's text %q, want the whole echo", whole)
		}
		if s.Stopped.Text == "" || len(s.Stopped.Text) >= len(whole) || !strings.HasPrefix(whole, s.Stopped.Text) {
			t.Errorf("stopped with %q: want a part of the reply", s.Stopped.Text)
		}
		if s.Resumed.Text != whole || strings.Join(s.Resumed.Parts, " ") != "step-start text" || s.Resumed.MessageID != tr.Items[resp[0]].RunID {
			t.Errorf("resumed: %d chars, parts %v, id %s; want the whole reply (%d chars) once, in the run's message %s",
				len(s.Resumed.Text), s.Resumed.Parts, s.Resumed.MessageID, len(whole), tr.Items[resp[0]].RunID)
		}
		ok("resumed after the end", s.Again)
		if s.Again.Text != whole {
			t.Errorf("resuming once the run ended (204) changed the message: %q", s.Again.Text)
		}
		if code, body := get("/v1/ui/chat/" + sessions["resume"] + "/stream"); code != http.StatusNoContent || body != "" {
			t.Errorf("resume with no run in flight: %d %q, want 204", code, body)
		}
	})

	t.Run("approval", func(t *testing.T) {
		a := rep.Approval
		ok("asked", a.Asked)
		var asked *uiPart
		for i, p := range a.Asked.Parts {
			if p.Type == "tool-publish_post" {
				asked = &a.Asked.Parts[i]
			}
		}
		if asked == nil || asked.State != "approval-requested" || asked.Approval == nil || asked.Approval.ID == "" || asked.Approval.ID != a.ApprovalID {
			t.Fatalf("the first stream ended with %+v, want publish_post's approval request", a.Asked.Parts)
		}
		ok("approved", a.Done)
		oneAssistant("approved", a.Done)
		if n := posts.Load(); n != 1 {
			t.Errorf("%d posts published, want 1", n)
		}
		var kinds []string
		var call uiPart
		for _, p := range a.Done.Parts {
			kinds = append(kinds, p.Type)
			if p.Type == "tool-publish_post" {
				call = p
			}
		}
		if got := strings.Join(kinds, " "); got != "step-start text tool-publish_post step-start text" {
			t.Errorf("parts %s, want the continuation in the same message: step-start text tool-publish_post step-start text", got)
		}
		var output map[string]any
		json.Unmarshal(call.Output, &output)
		if call.State != "output-available" || output["status"] != "published" || output["post_id"] != "post-1" ||
			call.Approval == nil || call.Approval.Approved == nil || !*call.Approval.Approved {
			t.Errorf("the tool part: %+v, want it approved and published", call)
		}
		if last := a.Done.Parts[len(a.Done.Parts)-1]; !strings.HasPrefix(last.Text, "The publish_post tool returned: ") {
			t.Errorf("the final text %q", last.Text)
		}
		tr := transcript(sessions["approval"])
		var results []string
		for _, i := range tr.responses() {
			for _, c := range tr.Items[i].ToolCalls {
				results = append(results, c.Name+" "+c.Status+" "+c.Approval)
			}
		}
		if strings.Join(results, "; ") != "publish_post done approved" {
			t.Errorf("tool calls in the transcript: %v, want one approved publish_post with its result", results)
		}
		if a.Done.MessageID != tr.Items[tr.responses()[0]].RunID {
			t.Errorf("the message's id %s, want the run's", a.Done.MessageID)
		}
	})

	if e := rep.NoKey; e.Status != "error" || e.Error == nil || e.Error.StatusCode != 401 || !strings.Contains(e.Error.Message, "a valid API key is required") {
		t.Errorf("without the key: %+v, want a 401", e)
	}
}
