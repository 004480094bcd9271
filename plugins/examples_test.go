package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// The example plugins of examples/plugins, built from source.

func textStatsWasm(t testing.TB) []byte {
	return plugintest.AssemblyScriptPlugin(t, "../examples/plugins/text_stats", "text_stats.ts",
		"../../../pdk/assemblyscript", []string{"../../../pdk/assemblyscript"})
}

func rustTextWasm(t testing.TB) []byte {
	return plugintest.RustPlugin(t, "../examples/plugins/rust_text", "rust_text.rs", []string{"../../../pdk/rust"}, nil)
}

func cExampleWasm(t testing.TB, name string) []byte {
	return plugintest.CPlugin(t, "../examples/plugins/"+name, []string{name + ".c", cKit + "/agentic.c"}, []string{cKit}, nil)
}

func TestExampleGetAccount(t *testing.T) {
	rt, logs := newRuntime(t)
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{})
	defer reg.Close(context.Background())
	wasm := getAccountWasm(t)
	if _, err := reg.Load(context.Background(), "acme", plugins.Source{Name: "get_account", Wasm: wasm}); err != nil {
		t.Fatal(err)
	}
	tools := reg.Toolset("acme").Tools()
	if len(tools) != 1 {
		t.Fatalf("%d tools", len(tools))
	}
	var tool host.Tool = tools[0]
	spec := tool.Spec()
	if spec.Name != "get_account" || spec.Effect != host.EffectRead || !spec.Idempotent || !strings.Contains(string(spec.InputSchema), "account_id") {
		t.Fatalf("spec %+v", spec)
	}
	res, err := tool.Call(context.Background(), host.ToolCall{ID: "c1", SessionID: "s1", Name: "get_account", Input: json.RawMessage(`{"account_id":"42"}`)})
	if err != nil {
		t.Fatal(err)
	}
	// The same answer as the demo's Go tool (internal/demotools).
	want := `{"account_id":"42","owner":"Katherine Johnson","plan":"team","balance_usd":350.11}`
	if res.Output != want || res.Source != hashOf(wasm) {
		t.Fatalf("got %s from %s", res.Output, res.Source)
	}
	if _, err := tool.Call(context.Background(), host.ToolCall{Input: json.RawMessage(`{"account_id":""}`)}); !errors.Is(err, plugins.ErrInvalidInput) {
		t.Fatalf("empty id: %v", err)
	}
	if !strings.Contains(logs.String(), `msg="looking up account 42" plugin=get_account tenant=acme`) {
		t.Errorf("the plugin's log line is missing or untagged:\n%s", logs.String())
	}
}

func TestExamplePublishPost(t *testing.T) {
	var (
		mu    sync.Mutex
		posts []string
		keys  []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if r.Method != "POST" || r.URL.Path != "/api/posts" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		posts = append(posts, string(body))
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]string{"id": "post-" + string(rune('0'+len(posts))), "url": "https://blog.example/p/" + string(rune('0'+len(posts)))})
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)

	rt, _ := newRuntime(t)
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
		Limits: func(tenant string) plugins.Limits {
			// The test server listens on loopback: allowed explicitly.
			return plugins.Limits{KV: true, AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true}
		},
		Config: func(tenant, module string) map[string]string {
			return map[string]string{"endpoint": srv.URL + "/api/posts"}
		},
	})
	defer reg.Close(context.Background())
	if _, err := reg.Load(context.Background(), "acme", plugins.Source{Name: "publish_post", Wasm: publishPostWasm(t)}); err != nil {
		t.Fatal(err)
	}
	tool, _ := reg.Tool("acme", "publish_post")
	if s := tool.Spec(); s.Effect != host.EffectExternal || !s.Idempotent {
		t.Fatalf("spec %+v", s)
	}
	call := func(id string) map[string]any {
		t.Helper()
		res, err := tool.Call(context.Background(), host.ToolCall{ID: id, Input: json.RawMessage(`{"title":"Hello","body":"First post."}`)})
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		if err := json.Unmarshal([]byte(res.Output), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := call("call-1")
	if first["status"] != "published" || first["post_id"] != "post-1" || first["replayed"] != nil {
		t.Fatalf("first: %v", first)
	}
	// The host re-runs the call after a crash: no second post.
	again := call("call-1")
	if again["post_id"] != "post-1" || again["replayed"] != true {
		t.Fatalf("re-run: %v", again)
	}
	second := call("call-2")
	if second["post_id"] != "post-2" {
		t.Fatalf("second: %v", second)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posts) != 2 || keys[0] != "call-1" || keys[1] != "call-2" || !strings.Contains(posts[0], `"title":"Hello"`) {
		t.Fatalf("server saw %q with keys %q", posts, keys)
	}
}

func TestExamplePublishPostDenied(t *testing.T) {
	rt, _ := newRuntime(t)
	// No endpoint configured.
	m := plugintestLoad(t, rt, "publish_post", publishPostWasm(t), "acme", plugins.Limits{KV: true})
	// An endpoint, but no allowed hosts.
	m2, err := rt.Load(context.Background(), plugins.Source{Name: "publish_post", Wasm: publishPostWasm(t), Tenant: "acme",
		Limits: plugins.Limits{KV: true}, Config: map[string]string{"endpoint": "https://blog.example.com/api/posts"}})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close(context.Background())
	_, err = callTool(t, m, "publish_post", `{"title":"t","body":"b"}`)
	if !errors.Is(err, plugins.ErrToolFailed) || !strings.Contains(err.Error(), "not configured") {
		t.Fatalf("without an endpoint: %v", err)
	}
	_, err = callTool(t, m2, "publish_post", `{"title":"t","body":"b"}`)
	if !errors.Is(err, plugins.ErrToolFailed) || !strings.Contains(err.Error(), "HTTP is not allowed") {
		t.Fatalf("without allowed hosts: %v", err)
	}
}

func TestExampleTextStats(t *testing.T) {
	rt, _ := newRuntime(t)
	m := load(t, rt, "text_stats", textStatsWasm(t), plugins.Limits{})
	res, err := callTool(t, m, "text_stats", `{"text":"Héllo wörld. This is 🎉 fun!\nSecond line?"}`)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"characters":40,"bytes":45,"words":8,"lines":2,"sentences":3,"first_words":"Héllo wörld. This is 🎉"}`
	if res.Output != want {
		t.Fatalf("got  %s\nwant %s", res.Output, want)
	}
	if _, err := callTool(t, m, "text_stats", `{"text":7}`); !errors.Is(err, plugins.ErrInvalidInput) {
		t.Fatalf("non-string text: %v", err)
	}
}

func TestExampleRustText(t *testing.T) {
	rt, _ := newRuntime(t)
	// It needs nothing of the sandbox: it loads without a grant.
	m := load(t, rt, "rust_text", rustTextWasm(t), plugins.Limits{})
	tool, _ := m.Tool("rust_text")
	if s := tool.Spec(); s.Effect != host.EffectRead || !s.Idempotent {
		t.Fatalf("spec %+v", s)
	}
	if n := m.Description().Needs; n == nil || len(n.AllowedHosts) != 0 || n.KV {
		t.Fatalf("needs %+v", n)
	}
	for _, tt := range []struct{ in, want string }{
		{`{"text":"The cat and the hat.\nThe END, don’t stop: the cat’s héllo 🎉!","top":2}`,
			`{"characters":60,"bytes":68,"words":12,"unique_words":9,"lines":2,"longest_word":"don’t","top_words":[{"word":"the","count":4},{"word":"and","count":1}]}`},
		// Ties in alphabetical order; three by default.
		{`{"text":"b a c b a"}`,
			`{"characters":9,"bytes":9,"words":5,"unique_words":3,"lines":1,"longest_word":"b","top_words":[{"word":"a","count":2},{"word":"b","count":2},{"word":"c","count":1}]}`},
		{`{"text":""}`, `{"characters":0,"bytes":0,"words":0,"unique_words":0,"lines":0,"longest_word":"","top_words":[]}`},
	} {
		res, err := callTool(t, m, "rust_text", tt.in)
		if err != nil || res.Output != tt.want {
			t.Errorf("%s:\ngot  %s (%v)\nwant %s", tt.in, res.Output, err, tt.want)
		}
	}
	for _, in := range []string{`{"text":7}`, `{}`, `{"text":"x","top":0}`, `{"text":"x","extra":1}`} {
		if _, err := callTool(t, m, "rust_text", in); !errors.Is(err, plugins.ErrInvalidInput) {
			t.Errorf("%s: %v", in, err)
		}
	}
}

func TestExampleReleaseNotes(t *testing.T) {
	rt, _ := newRuntime(t)
	m := load(t, rt, "release_notes", cExampleWasm(t, "release_notes"), plugins.Limits{})
	v, ok := m.Validator("release_notes")
	if !ok {
		t.Fatal("no validator")
	}
	tests := []struct {
		deliverable string
		ok          bool
		value       string
		errors      []string
	}{
		{`{"version":"1.4.0","title":"  Faster search ","changes":["Index rebuilt","New filters"]}`, true,
			`{"version":"1.4.0","title":"Faster search","changes":["Index rebuilt","New filters"]}`, nil},
		{`{"version":"1.04","title":"Done.","changes":["TODO: write this","a","a"]}`, false, "", []string{
			"/version: must be a semantic version MAJOR.MINOR.PATCH, e.g. 1.4.0",
			"/title: must not end with a period",
			"/changes/0: is a leftover TODO",
			"/changes/2: repeats an earlier change"}},
		// The schema is checked by the host before the plugin runs.
		{`{"version":"1.0.0","title":"x","changes":[]}`, false, "", []string{"/changes: minItems: got 0, want 1"}},
		{`{"version":"1.0.0"}`, false, "", []string{"/: missing properties 'title', 'changes'"}},
	}
	mv, ok := v.(host.MeteredValidator)
	if !ok || !host.IsMetered(v) {
		t.Fatal("a plugin's validator is not metered")
	}
	for _, tt := range tests {
		res, err := validate(v, tt.deliverable)
		if err != nil {
			t.Fatalf("%s: %v", tt.deliverable, err)
		}
		if res.OK != tt.ok || string(res.Value) != tt.value || strings.Join(res.Errors, "|") != strings.Join(tt.errors, "|") {
			t.Errorf("%s:\n got %+v\nwant ok=%v value=%s errors=%q", tt.deliverable, res, tt.ok, tt.value, tt.errors)
		}
		// The same check, metered: the same verdict, and the fuel the
		// plugin used — none when the host's schema check refused the
		// deliverable before the plugin ran.
		got, err := mv.ValidateMetered(context.Background(), json.RawMessage(tt.deliverable))
		ranPlugin := !strings.Contains(strings.Join(tt.errors, ""), "minItems") && !strings.Contains(strings.Join(tt.errors, ""), "missing properties")
		if err != nil || string(got.Value) != tt.value || strings.Join(got.Problems, "|") != strings.Join(tt.errors, "|") ||
			(got.Fuel > 0) != ranPlugin || got.Source != m.Hash() {
			t.Errorf("%s: metered %+v, %v; want the plugin's fuel (%v) and its hash %s", tt.deliverable, got, err, ranPlugin, m.Hash())
		}
	}
}

// TestSchemaProblemsMatchHost: a validator plugin's schema problems are
// the ones the host's own task validator gives for the same schema and
// deliverable: one renderer, one root path, one bound.
func TestSchemaProblemsMatchHost(t *testing.T) {
	rt, _ := newRuntime(t)
	m := load(t, rt, "release_notes", cExampleWasm(t, "release_notes"), plugins.Limits{})
	v, _ := m.Validator("release_notes")
	var sch json.RawMessage
	for _, d := range m.Description().Validators {
		if d.Name == "release_notes" {
			sch = d.Schema
		}
	}
	hv, err := host.SchemaValidator(sch)
	if err != nil {
		t.Fatal(err)
	}
	for _, deliverable := range []string{`{"version":"1.0.0"}`, `{"version":"1.0.0","title":"x","changes":[]}`, `[1]`, `{"version":7,"title":[],"changes":"no"}`} {
		res, err := validate(v, deliverable)
		if err != nil {
			t.Fatal(err)
		}
		_, want, _ := hv.Validate(context.Background(), json.RawMessage(deliverable))
		if res.OK || len(want) == 0 || strings.Join(res.Errors, "|") != strings.Join(want, "|") {
			t.Errorf("%s: plugin %q, host %q", deliverable, res.Errors, want)
		}
	}
}

func TestExampleSideEffects(t *testing.T) {
	rt, _ := newRuntime(t)
	m := load(t, rt, "side_effects", cExampleWasm(t, "side_effects"), plugins.Limits{})
	p, ok := m.Policy("side_effects")
	if !ok {
		t.Fatal("no policy")
	}
	tests := []struct {
		effect  host.Effect
		verdict host.Verdict
		summary string
	}{
		{host.EffectRead, host.Allow, ""},
		{host.EffectWrite, host.Allow, ""},
		{host.EffectExternal, host.RequireApproval, `publish_post with {"title":"Hello"}`},
		{"teleport", host.Deny, ""},
	}
	for _, tt := range tests {
		d, err := p.Decide(context.Background(), host.PolicyRequest{Tool: host.ToolSpec{Name: "publish_post", Effect: tt.effect}, Input: json.RawMessage(`{"title":"Hello"}`), SessionID: "s1", Agent: "default"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Verdict != tt.verdict || d.Summary != tt.summary || d.Reason == "" || d.Source != m.Hash() || d.Fuel <= 0 {
			t.Errorf("%s: %+v (want the fuel the decision used)", tt.effect, d)
		}
	}
	if !host.IsMetered(p) {
		t.Error("a plugin's policy does not say it is metered")
	}
}

// TestSidecar: a plain Extism module (no describe) becomes tools through
// a sidecar manifest.
func TestSidecar(t *testing.T) {
	rt, _ := newRuntime(t)
	wasm := plainWasm(t)
	side, err := plugins.ParseSidecar([]byte(`{"tools":[
		{"name":"count_vowels","description":"Count vowels.","input_schema":{"type":"object","properties":{"text":{"type":"string"}}},"export":"count_vowels","effect":"read","idempotent":true},
		{"name":"shout","description":"Fails.","export":"shout","effect":"external"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := rt.Load(context.Background(), plugins.Source{Name: "plain", Wasm: wasm, Sidecar: side})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	res, err := callTool(t, m, "count_vowels", `{"text":"Hello, plugins"}`)
	if err != nil || res.Output != `{"count":5}` /* the export sees the whole input JSON */ || res.Source != hashOf(wasm) {
		t.Fatalf("count_vowels: %+v %v", res, err)
	}
	if _, err := callTool(t, m, "shout", `{}`); !errors.Is(err, plugins.ErrToolFailed) || !strings.Contains(err.Error(), "shout: no") {
		t.Fatalf("shout: %v", err)
	}
	if s, _ := m.Tool("shout"); s.Spec().Effect != host.EffectExternal {
		t.Fatalf("shout spec %+v", s.Spec())
	}

	// Without a sidecar the module loads bare: raw exports only, and the
	// registry refuses it.
	bare, err := rt.Load(context.Background(), plugins.Source{Name: "plain", Wasm: wasm})
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close(context.Background())
	if bare.Described() || len(bare.Tools()) != 0 {
		t.Fatal("a bare module offers tools")
	}
	out, err := bare.CallExport(context.Background(), "count_vowels", []byte("aeiou"))
	if err != nil || string(out) != `{"count":5}` {
		t.Fatalf("CallExport: %s %v", out, err)
	}
	if _, err := bare.CallExport(context.Background(), "nope", nil); !errors.Is(err, plugins.ErrNotFound) {
		t.Fatalf("unknown export: %v", err)
	}
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{})
	defer reg.Close(context.Background())
	if _, err := reg.Load(context.Background(), "acme", plugins.Source{Name: "plain", Wasm: wasm}); !errors.Is(err, plugins.ErrNoDescription) {
		t.Fatalf("registry, bare module: %v", err)
	}

	// Sidecar mistakes are caught.
	for _, bad := range []string{
		`{"name":"x","export":"missing","effect":"read"}`,
		`{"name":"x","export":"count_vowels"}`,
		`{"name":"x","export":"count_vowels","effect":"read","typo":1}`,
	} {
		side, err := plugins.ParseSidecar([]byte(bad))
		if err == nil {
			_, err = rt.Load(context.Background(), plugins.Source{Name: "plain", Wasm: wasm, Sidecar: side})
		}
		if !errors.Is(err, plugins.ErrInvalidDescription) {
			t.Errorf("sidecar %s: %v", bad, err)
		}
	}
}

// TestExampleCountVowels: the plain Extism example and its sidecar, loaded
// from a watched directory; changing the sidecar alone reloads the tool.
func TestExampleCountVowels(t *testing.T) {
	wasm := plugintest.CPlugin(t, "../examples/plugins/count_vowels", []string{"count_vowels.c"}, nil, nil)
	side, err := os.ReadFile("../examples/plugins/count_vowels/count_vowels.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "count_vowels.wasm"), wasm, 0o644)
	os.WriteFile(filepath.Join(dir, "count_vowels.json"), side, 0o644)
	rt, _ := newRuntime(t)
	ch := newChanges()
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{OnChange: ch.observe})
	defer reg.Close(context.Background())
	w, err := reg.Watch(context.Background(), "acme", dir, plugins.WatchOptions{Debounce: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tool, ok := reg.Tool("acme", "count_vowels")
	if !ok {
		t.Fatalf("no tool; changes %+v", ch.all)
	}
	res, err := tool.Call(context.Background(), host.ToolCall{ID: "c", Input: json.RawMessage(`{"text":"Hello, plugins"}`)})
	if err != nil || res.Output != `{"count":4,"total":14,"vowels":"aeiouAEIOU"}` || res.Source != hashOf(wasm) {
		t.Fatalf("count_vowels: %+v %v", res, err)
	}
	if s := tool.Spec(); s.Timeout != time.Second || !s.Idempotent || s.Effect != host.EffectRead {
		t.Fatalf("spec %+v", s)
	}
	if _, err := tool.Call(context.Background(), host.ToolCall{Input: json.RawMessage(`{}`)}); !errors.Is(err, plugins.ErrInvalidInput) {
		t.Fatalf("no text: %v", err)
	}

	renamed := strings.Replace(string(side), `"name": "count_vowels"`, `"name": "vowels"`, 1)
	os.WriteFile(filepath.Join(dir, "count_vowels.json"), []byte(renamed), 0o644)
	ch.wait(t, "the sidecar's reload", func(c plugins.Change) bool { return c.Kind == plugins.Replaced })
	if _, ok := reg.Tool("acme", "vowels"); !ok {
		t.Fatal("the renamed tool is missing")
	}
	if _, ok := reg.Tool("acme", "count_vowels"); ok {
		t.Fatal("the old name is still served")
	}
}

// TestAssemblyScriptKit runs every part of the AssemblyScript kit.
func TestAssemblyScriptKit(t *testing.T) {
	wasm := plugintest.AssemblyScriptPlugin(t, "testdata/as", "kit.ts", "../../../pdk/assemblyscript", []string{"../../../pdk/assemblyscript"})
	rt, logs := newRuntime(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("pong")) }))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	m := load(t, rt, "kit", wasm, plugins.Limits{KV: true, AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true})

	res, err := callTool(t, m, "remember", `{"note":"héllo \"quoted\"","url":"`+srv.URL+`"}`)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Found, Missing, Deleted bool
		Value                   string
		Fetched                 struct {
			Status int
			Body   string
		}
	}
	if err := json.Unmarshal([]byte(res.Output), &out); err != nil {
		t.Fatalf("%s: %v", res.Output, err)
	}
	if !out.Found || out.Value != `héllo "quoted"` || out.Missing || !out.Deleted || out.Fetched.Status != 200 || out.Fetched.Body != "pong" {
		t.Fatalf("remember: %s", res.Output)
	}
	if !strings.Contains(logs.String(), `msg="remembering for acme in call call-1"`) {
		t.Errorf("log line missing:\n%s", logs.String())
	}
	if _, err := callTool(t, m, "crash", `{"items":[1]}`); !errors.Is(err, plugins.ErrTrap) {
		t.Fatalf("crash: %v", err)
	}
	if !strings.Contains(logs.String(), "abort: ") {
		t.Errorf("the abort message was not logged:\n%s", logs.String())
	}

	checkKitValidatorAndPolicy(t, m)
}

// TestExtismHTTPDenied: Extism's own http_request (extism:host/env) is
// denied, even to a host the tenant's allowed hosts name: it matches names
// only, uses Go's default client and follows redirects unchecked. The
// call fails and the server is never asked; the host's own http_request
// is the only way out.
func TestExtismHTTPDenied(t *testing.T) {
	rt, _ := newRuntime(t)
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { asked.Add(1) }))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	m, err := rt.Load(context.Background(), plugins.Source{Name: "plain", Wasm: plainWasm(t),
		Limits: plugins.Limits{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	out, err := m.CallExport(context.Background(), "extism_fetch", []byte(`{"url":"`+srv.URL+`/","method":"GET"}`))
	if err == nil {
		t.Fatalf("Extism's http_request answered %s", out)
	}
	if n := asked.Load(); n != 0 {
		t.Fatalf("the server was asked %d times through Extism's http_request", n)
	}
}

// TestKitsKeysAndWaits: the C, AssemblyScript and TypeScript kits reach
// the idempotency key and the waits (the Go and Rust kits' are in their
// own tests): a call's key is the Idempotency-Key header its next request
// carries, and a wait for an event outside a durable call is refused with
// the host's words, while a wait for a time just waits.
func TestKitsKeysAndWaits(t *testing.T) {
	var seen atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("Idempotency-Key"))
		w.Write([]byte("pong"))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	for _, kit := range []struct {
		name string
		wasm func(t *testing.T) []byte
	}{
		{"c", func(t *testing.T) []byte {
			return plugintest.CPlugin(t, "testdata/c", []string{"kitcalls.c", cKit + "/agentic.c"}, []string{cKit}, nil)
		}},
		{"assemblyscript", func(t *testing.T) []byte {
			return plugintest.AssemblyScriptPlugin(t, "testdata/as", "kit.ts", "../../../pdk/assemblyscript", []string{"../../../pdk/assemblyscript"})
		}},
		{"typescript", func(t *testing.T) []byte { return plugintest.TypeScriptPlugin(t, "testdata/js", "kitcalls.ts", tsKit) }},
	} {
		t.Run(kit.name, func(t *testing.T) {
			rt, _ := newRuntime(t)
			m := load(t, rt, "kitcalls", kit.wasm(t), plugins.Limits{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true})
			res, err := callTool(t, m, "keyed", `{"url":"`+srv.URL+`"}`)
			if err != nil {
				t.Fatal(err)
			}
			var out struct{ Key string }
			if err := json.Unmarshal([]byte(res.Output), &out); err != nil || !strings.HasPrefix(out.Key, "agentic-") || seen.Load() != out.Key {
				t.Errorf("keyed: %s (%v); the server saw the key %v", res.Output, err, seen.Load())
			}
			res, err = callTool(t, m, "waits", `{}`)
			if err != nil || !strings.Contains(res.Output, `"waited":true`) || !strings.Contains(res.Output, "denied: only a durable call waits") {
				t.Errorf("waits: %s %v", res.Output, err)
			}
		})
	}
}
