package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// TestPluginGrants: a tenant that names grants gives each plugin only its
// own, within its sandbox: publish_post, granted the blog and the
// key-value store, publishes; the same module where the tenant granted it
// nothing is denied both; GET /v1/plugins shows each module's grants; a
// grant beyond the sandbox is a configuration error naming the host.
func TestPluginGrants(t *testing.T) {
	var posts atomic.Int64
	blog := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"post-1","url":"https://blog.example/p/1"}`))
	}))
	defer blog.Close()
	u, _ := url.Parse(blog.URL)
	sandbox := server.SandboxConfig{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true, KV: true}
	tenant := func(grants map[string]server.GrantConfig) func(*server.TenantConfig) {
		return func(tc *server.TenantConfig) {
			tc.Sandbox = sandbox
			tc.Sandbox.Grants = grants
			tc.PluginConfig = map[string]map[string]string{"publish_post": {"endpoint": blog.URL + "/api/posts"}}
			tc.Agents = map[string]server.AgentConfig{"default": {Model: hosttest.DefaultModel, Approve: []string{"publish_post"}}}
		}
	}
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
		withTenant("acme", tenant(map[string]server.GrantConfig{"publish_post": {AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true, KV: true}}))(c)
		withTenant("beta", tenant(map[string]server.GrantConfig{"another": {KV: true}}))(c)
	}})
	for _, key := range []string{ts.acme, ts.beta} {
		if code, body := ts.doBytes(t, key, "PUT", "/v1/plugins/publish_post", publishPost(t)); code != 201 {
			t.Fatalf("upload: %d %s", code, body)
		}
	}
	_, body := ts.do(t, ts.acme, "GET", "/v1/plugins/publish_post", "")
	if g := decodeJSON[struct {
		Grants struct {
			AllowedHosts        []string `json:"allowed_hosts"`
			AllowPrivateNetwork bool     `json:"allow_private_network"`
			KV                  bool     `json:"kv"`
		}
	}](t, body).Grants; len(g.AllowedHosts) != 1 || g.AllowedHosts[0] != u.Host || !g.KV || !g.AllowPrivateNetwork {
		t.Errorf("acme's publish_post grants %+v, want the blog and the store", g)
	}
	if _, body := ts.do(t, ts.beta, "GET", "/v1/plugins/publish_post", ""); !strings.Contains(body, `"grants":{"allowed_hosts":null,"allow_private_network":false,"kv":false}`) {
		t.Errorf("beta's ungranted publish_post: %s", body)
	}
	transcript := func(key string) string {
		if code, body := ts.do(t, key, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"publish_post title=Hello body=First"}`); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		_, body := ts.do(t, key, "GET", "/v1/sessions/s/transcript", "")
		return body
	}
	if body := transcript(ts.acme); !strings.Contains(body, `published`) || posts.Load() != 1 {
		t.Errorf("acme's granted call: %s (posts %d)", body, posts.Load())
	}
	if body := transcript(ts.beta); !strings.Contains(body, "not enabled for this plugin") || posts.Load() != 1 {
		t.Errorf("beta's ungranted call: %s (posts %d)", body, posts.Load())
	}

	cfg := server.Config{Tenants: map[string]server.TenantConfig{"acme": {Keys: []server.KeyConfig{{Hash: server.HashKey("k")}}, Models: []string{hosttest.DefaultModel},
		Sandbox: server.SandboxConfig{AllowedHosts: []string{"api.example.com"}, Grants: map[string]server.GrantConfig{"x": {AllowedHosts: []string{"evil.example.org"}}}}}}}
	if _, err := server.New(server.Options{Config: cfg, Storage: memory.New(), Model: hosttest.NewModel()}); err == nil ||
		!strings.Contains(err.Error(), `sandbox: plugin x: plugins: granted host "evil.example.org" is not among the tenant's allowed hosts`) {
		t.Errorf("a grant beyond the sandbox: %v", err)
	}
}

// TestPluginSecrets: a tenant's secrets bound to publish_post and the blog
// (a bearer token from the environment, basic credentials from a file in
// a header of their own) reach the blog on the plugin's requests, and none of the API's answers nor the ledger; a secret whose
// value cannot be read, or for a host the plugin may not reach, is a
// configuration error that does not show the value.
func TestPluginSecrets(t *testing.T) {
	const token = "tok-9d1f-never-shown"
	t.Setenv("TEST_BLOG_TOKEN", token)
	var got, gotBasic atomic.Value
	blog := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		gotBasic.Store(r.Header.Get("X-Blog-Auth"))
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"post-1","url":"https://blog.example/p/1"}`))
	}))
	defer blog.Close()
	u, _ := url.Parse(blog.URL)
	store := memory.New()
	file := filepath.Join(t.TempDir(), "blog-secret")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, serverSetup{Store: store, Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.Sandbox = server.SandboxConfig{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true, KV: true,
			Secrets: []server.SecretConfig{{Plugin: "publish_post", Host: u.Host, Scheme: "bearer", ValueEnv: "TEST_BLOG_TOKEN"},
				{Plugin: "publish_post", Host: u.Host, Header: "X-Blog-Auth", Scheme: "basic", User: "bot", ValueFile: file}}}
		tc.PluginConfig = map[string]map[string]string{"publish_post": {"endpoint": blog.URL + "/api/posts"}}
		tc.Agents = map[string]server.AgentConfig{"default": {Model: hosttest.DefaultModel, Approve: []string{"publish_post"}}}
	})})
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/publish_post", publishPost(t)); code != 201 || strings.Contains(body, token) {
		t.Fatalf("upload: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"publish_post title=Hello body=First"}`); code != 200 || strings.Contains(body, token) {
		t.Fatalf("%d %s", code, body)
	}
	if v, _ := got.Load().(string); v != "Bearer "+token {
		t.Fatalf("the blog got Authorization %q, want the bearer token", v)
	}
	if v, _ := gotBasic.Load().(string); v != "Basic "+base64.StdEncoding.EncodeToString([]byte("bot:"+token)) {
		t.Fatalf("the blog got X-Blog-Auth %q, want basic credentials from the file", v)
	}
	var all strings.Builder
	for _, path := range []string{"/v1/plugins", "/v1/plugins/publish_post", "/v1/sessions/s", "/v1/sessions/s/transcript", "/v1/usage"} {
		_, body := ts.do(t, ts.acme, "GET", path, "")
		all.WriteString(body)
	}
	events, err := store.Load(context.Background(), "acme:s")
	if err != nil || len(events) == 0 {
		t.Fatalf("the session's ledger: %d events, %v", len(events), err)
	}
	for _, e := range events {
		b, _ := json.Marshal(e)
		all.Write(b)
	}
	if !strings.Contains(all.String(), `"header":"Authorization"`) || !strings.Contains(all.String(), "published") {
		t.Errorf("what was searched lacks the plugin's grants or its call:\n%.3000s", all.String())
	}
	if strings.Contains(all.String(), token) {
		t.Errorf("the token shows in the API or the ledger:\n%s", all.String())
	}

	for _, tc := range []struct {
		secret server.SecretConfig
		want   string
	}{
		{server.SecretConfig{Plugin: "p", Host: u.Host, ValueEnv: "TEST_NO_SUCH_VAR"}, "value_env TEST_NO_SUCH_VAR is not set"},
		{server.SecretConfig{Plugin: "p", Host: "evil.example.org", Value: token}, "is not among the allowed hosts"},
		{server.SecretConfig{Plugin: "p", Host: u.Host, Value: token, ValueEnv: "TEST_BLOG_TOKEN"}, "want exactly one of value, value_env and value_file"},
		{server.SecretConfig{Plugin: "p", Host: u.Host, Value: token, Scheme: "digest"}, `scheme "digest"`},
	} {
		cfg := server.Config{Tenants: map[string]server.TenantConfig{"acme": {Keys: []server.KeyConfig{{Hash: server.HashKey("k")}}, Models: []string{hosttest.DefaultModel},
			Sandbox: server.SandboxConfig{AllowedHosts: []string{u.Host}, Secrets: []server.SecretConfig{tc.secret}}}}}
		_, err := server.New(server.Options{Config: cfg, Storage: memory.New(), Model: hosttest.NewModel()})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), token) {
			t.Errorf("%+v: %v, want %q without the value", tc.secret.Host, err, tc.want)
		}
	}
}
