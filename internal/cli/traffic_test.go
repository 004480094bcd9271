package cli_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/plugins/plugintest"
)

// trafficPlugin builds plugins/testdata/c/traffic.c in version v.
func trafficPlugin(t *testing.T, v string) []byte {
	kit, _ := filepath.Abs("../../pdk/c")
	return plugintest.CPlugin(t, "../../plugins/testdata/c", []string{"traffic.c", kit + "/agentic.c"}, []string{kit}, []string{`-DVERSION="` + v + `"`})
}

// TestPluginTrafficCLI: a chat's plugin calls record their traffic, which
// transcript shows (in the JSON transcript without the bodies; with
// --traffic as text, or as JSON with them), and plugin replay runs the
// recorded calls again with the servers gone: the module of the recorded
// hash behaves the same (exit 0), a changed one diverges, named (exit 1),
// a module not found is not replayable; bad arguments are clear errors.
func TestPluginTrafficCLI(t *testing.T) {
	var posts atomic.Int64
	blog := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/posts":
			n := posts.Add(1)
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":"post-%d","url":"https://blog.example/p/%d"}`, n, n)
		case "/item":
			w.Write([]byte(`{"item":"apple"}`))
		case "/notes":
			body, _ := io.ReadAll(r.Body)
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"saved":%q}`, body)
		default:
			http.NotFound(w, r)
		}
	}))
	defer blog.Close()
	u, _ := url.Parse(blog.URL)
	dir := t.TempDir()
	publish := plugintest.GoPlugin(t, "../../examples/plugins/publish_post")
	for name, b := range map[string][]byte{"publish_post.wasm": publish, "traffic.wasm": trafficPlugin(t, "A")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	changed := filepath.Join(t.TempDir(), "traffic.wasm")
	if err := os.WriteFile(changed, trafficPlugin(t, "B"), 0o644); err != nil {
		t.Fatal(err)
	}
	storage := "file:" + t.TempDir()
	endpoint := blog.URL + "/api/posts"
	chat := func(session, message string) {
		t.Helper()
		code, out, errOut := run(t, "", "chat", "--offline", "--plugins", dir, "--storage", storage, "--session", session,
			"--plugin-kv", "--plugin-allow-host", u.Host, "--plugin-allow-private", "--plugin-config", "publish_post:endpoint="+endpoint,
			"--approve", "publish_post", "--approve", "sync", message)
		if code != 0 || strings.Contains(out, "error:") {
			t.Fatalf("chat %s: exit %d\n%s\n%s", session, code, out, errOut)
		}
	}
	chat("pub", `publish_post title="Hello" body="First"`)
	chat("sync", `sync base=`+blog.URL)
	if posts.Load() != 1 {
		t.Fatalf("%d posts", posts.Load())
	}

	// The JSON transcript: the tool call's traffic, without bodies.
	code, out, errOut := run(t, "", "transcript", "--storage", storage, "pub")
	var tr struct {
		Items []struct {
			ToolCalls []struct {
				Name    string `json:"name"`
				Traffic struct {
					HTTP []map[string]any `json:"http"`
					KV   []map[string]any `json:"kv"`
				} `json:"traffic"`
			} `json:"tool_calls"`
		} `json:"items"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &tr) != nil {
		t.Fatalf("transcript: exit %d\n%s\n%s", code, out, errOut)
	}
	var http0 map[string]any
	for _, it := range tr.Items {
		for _, c := range it.ToolCalls {
			if c.Name == "publish_post" && len(c.Traffic.HTTP) == 1 && len(c.Traffic.KV) == 2 {
				http0 = c.Traffic.HTTP[0]
			}
		}
	}
	if http0 == nil || http0["method"] != "POST" || http0["url"] != endpoint || http0["status"] != float64(201) ||
		http0["response_body"] != nil || http0["response_digest"] == nil {
		t.Errorf("the transcript's traffic: %v\n%s", http0, out)
	}

	// --traffic: text, in the order of the accesses.
	code, out, errOut = run(t, "", "transcript", "--storage", storage, "--traffic", "pub")
	if code != 0 || !strings.Contains(out, "publish_post (sha256:") || !strings.Contains(out, "1 HTTP request, 2 KV accesses (1 written)") ||
		!strings.Contains(out, `0 kv get "publish_post/`) || !strings.Contains(out, "1 http POST "+endpoint+" → 201, 48 bytes (sent ") ||
		!strings.Contains(out, `2 kv set "publish_post/`) {
		t.Errorf("transcript --traffic: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = run(t, "", "transcript", "--storage", storage, "--traffic", "--json", "pub")
	if code != 0 || !strings.Contains(out, `"response_body": "{\"id\":\"post-1\"`) {
		t.Errorf("transcript --traffic --json: exit %d\n%s", code, out)
	}
	if code, _, errOut = run(t, "", "transcript", "--storage", storage, "--json", "pub"); code != 2 || !strings.Contains(errOut, "--json goes with --traffic") {
		t.Errorf("transcript --json alone: exit %d %s", code, errOut)
	}

	// Replays, the blog gone.
	blog.Close()
	replay := func(args ...string) (int, string, string) {
		return run(t, "", append([]string{"plugin", "replay", "--storage", storage}, args...)...)
	}
	code, out, errOut = replay("--plugins", dir, "--config", "endpoint="+endpoint, "pub")
	if code != 0 || !strings.Contains(out, ": same") {
		t.Errorf("replay of pub: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = replay("--plugins", dir, "sync")
	if code != 0 || !strings.HasSuffix(strings.TrimSpace(out), "sync: same") {
		t.Errorf("replay of sync: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = replay("--module", changed, "--json", "sync")
	var rp struct {
		Verdict     string   `json:"verdict"`
		Divergences []string `json:"divergences"`
	}
	if code != 1 || json.Unmarshal([]byte(out), &rp) != nil || rp.Verdict != "diverged" || len(rp.Divergences) == 0 ||
		!strings.Contains(rp.Divergences[0], "HTTP request 2 (POST "+blog.URL+"/notes): body of ") {
		t.Errorf("replay on a changed module: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = replay("--module", changed, "sync")
	if code != 1 || !strings.Contains(out, "sync: diverged (on sha256:") || !strings.Contains(out, "\n  HTTP request 2 (POST ") {
		t.Errorf("replay on a changed module, as text: exit %d\n%s", code, out)
	}
	code, out, _ = replay("--plugins", t.TempDir(), "sync")
	if code != 0 || !strings.Contains(out, "sync: not replayable: its module sha256:") {
		t.Errorf("replay without the module: exit %d\n%s", code, out)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sync"}, 2, "want one of --plugins DIR or --module FILE.wasm"},
		{[]string{"--plugins", dir, "--module", changed, "sync"}, 2, "want one of --plugins DIR or --module FILE.wasm"},
		{[]string{"--plugins", dir}, 2, "want SESSION [CALL_ID]"},
		{[]string{"--plugins", dir, "nobody"}, 1, "no session nobody"},
		{[]string{"--plugins", dir, "sync", "call_nope"}, 1, "has no plugin tool call call_nope"},
		{[]string{"--plugins", filepath.Join(dir, "traffic.wasm"), "sync"}, 2, "not a directory"},
		{[]string{"--module", filepath.Join(dir, "missing.wasm"), "sync"}, 1, "--module"},
		{[]string{"--plugins", dir, "--config", "nokey", "sync"}, 2, `--config "nokey": want KEY=VALUE`},
	} {
		if code, _, errOut := replay(tc.args...); code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("replay %q: exit %d %q, want %d %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}
