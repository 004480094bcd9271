package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// TestSessionReplay: through serve, a publish_post call's traffic shows on
// the transcript's tool call (without the response body, never the
// secret added at egress), and POST /v1/sessions/{id}/replay runs it again
// with the blog gone: the same, on the version serving and, once another
// version replaced it, on the version kept; one call by id; a call or a
// body that is not there is a clear error.
func TestSessionReplay(t *testing.T) {
	const token = "tok-replay-never-shown"
	var posts atomic.Int64
	blog := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		posts.Add(1)
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"post-1","url":"https://blog.example/p/1"}`))
	}))
	defer blog.Close()
	u, _ := url.Parse(blog.URL)
	ts := startServer(t, serverSetup{Store: memory.New(), Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.Sandbox = server.SandboxConfig{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true, KV: true,
			Secrets: []server.SecretConfig{{Plugin: "publish_post", Host: u.Host, Scheme: "bearer", Value: token}}}
		tc.PluginConfig = map[string]map[string]string{"publish_post": {"endpoint": blog.URL + "/api/posts"}}
		tc.Agents = map[string]server.AgentConfig{"default": {Model: hosttest.DefaultModel, Approve: []string{"publish_post"}}}
	})})
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/publish_post", publishPost(t)); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"publish_post title=Hello body=First"}`); code != 200 || posts.Load() != 1 {
		t.Fatalf("%d %s (%d posts)", code, body, posts.Load())
	}

	_, body := ts.do(t, ts.acme, "GET", "/v1/sessions/s/transcript", "")
	var tr struct {
		Items []struct {
			ToolCalls []struct {
				ID      string `json:"id"`
				Traffic struct {
					HTTP []map[string]any `json:"http"`
					KV   []map[string]any `json:"kv"`
				} `json:"traffic"`
			} `json:"tool_calls"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(body), &tr); err != nil {
		t.Fatal(err)
	}
	var callID string
	var x map[string]any
	for _, it := range tr.Items {
		for _, c := range it.ToolCalls {
			if len(c.Traffic.HTTP) == 1 {
				callID, x = c.ID, c.Traffic.HTTP[0]
			}
		}
	}
	if x == nil || x["method"] != "POST" || x["status"] != float64(201) || x["response_body"] != nil || x["response_bytes"] == nil {
		t.Fatalf("the transcript's traffic: %v\n%s", x, body)
	}
	if strings.Contains(body, token) {
		t.Errorf("the token shows in the transcript:\n%s", body)
	}

	blog.Close()
	replay := func(body string, want int) (out struct {
		Replays []struct {
			CallID      string   `json:"call_id"`
			Verdict     string   `json:"verdict"`
			Divergences []string `json:"divergences"`
			Reason      string   `json:"reason"`
		} `json:"replays"`
		Diverged bool `json:"diverged"`
	}) {
		t.Helper()
		code, b := ts.do(t, ts.acme, "POST", "/v1/sessions/s/replay", body)
		if code != want {
			t.Fatalf("replay %s: %d %s", body, code, b)
		}
		if strings.Contains(b, token) {
			t.Errorf("the token shows in the replay:\n%s", b)
		}
		if code == 200 {
			if err := json.Unmarshal([]byte(b), &out); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	if out := replay("", 200); len(out.Replays) != 1 || out.Replays[0].Verdict != "same" || out.Diverged || out.Replays[0].CallID != callID {
		t.Errorf("replay: %+v", out)
	}
	if out := replay(`{"call_id":"`+callID+`"}`, 200); len(out.Replays) != 1 || out.Replays[0].Verdict != "same" {
		t.Errorf("replay of the call: %+v", out)
	}
	replay(`{"call_id":"call_nope"}`, 404)
	replay(`{"call":"x"}`, 400)

	// Another module takes publish_post's place (held, as it widens, then
	// approved): the recorded version, kept, replays the call.
	kit, _ := filepath.Abs("../pdk/c")
	other := plugintest.CPlugin(t, "../plugins/testdata/c", []string{"traffic.c", kit + "/agentic.c"}, []string{kit}, nil)
	code, b := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/publish_post", other)
	var held struct {
		Held struct {
			Hash string `json:"hash"`
		} `json:"held"`
	}
	_ = json.Unmarshal([]byte(b), &held)
	if code != 202 || held.Held.Hash == "" {
		t.Fatalf("upload of another module: %d %s", code, b)
	}
	if code, b := ts.do(t, ts.acme, "POST", "/v1/plugins/publish_post/versions/"+held.Held.Hash, `{"approve":true}`); code != 200 {
		t.Fatalf("approve: %d %s", code, b)
	}
	if out := replay("", 200); len(out.Replays) != 1 || out.Replays[0].Verdict != "same" {
		t.Errorf("replay on the version kept: %+v", out)
	}
	if posts.Load() != 1 {
		t.Errorf("%d posts", posts.Load())
	}
}
