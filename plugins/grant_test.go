package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// TestGrantsPerPlugin: with RegistryOptions.Grants a module gets only its
// grant of its tenant's sandbox. The same publish_post module reaches the
// blog and keeps its idempotency keys where it is granted them, is denied
// HTTP where it is granted nothing (its tenant's sandbox allows it), and a
// grant beyond the tenant's sandbox refuses the module, naming the host.
func TestGrantsPerPlugin(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"post-1","url":"https://blog.example/p/1"}`))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	rt, _ := newRuntime(t)
	ceiling := plugins.Limits{KV: true, AllowedHosts: []string{u.Host, "*.example.com"}, AllowPrivateNetwork: true}
	grants := map[string]plugins.Grant{
		"granted": {AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true, KV: true},
		"beyond":  {AllowedHosts: []string{"evil.example.org"}},
	}
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
		Limits: func(string) plugins.Limits { return ceiling },
		Grants: func(tenant, _ string) plugins.Grant { return grants[tenant] },
		Config: func(string, string) map[string]string { return map[string]string{"endpoint": srv.URL + "/api/posts"} },
	})
	defer reg.Close(context.Background())
	wasm := publishPostWasm(t)
	for _, tenant := range []string{"granted", "nothing"} {
		if _, err := reg.Load(context.Background(), tenant, plugins.Source{Name: "publish_post", Wasm: wasm}); err != nil {
			t.Fatalf("%s: %v", tenant, err)
		}
	}
	call := func(tenant string) (host.ToolResult, error) {
		tool, ok := reg.Tool(tenant, "publish_post")
		if !ok {
			t.Fatalf("%s: no publish_post", tenant)
		}
		return tool.Call(context.Background(), host.ToolCall{ID: "call-1", Input: []byte(`{"title":"Hello","body":"First post."}`)})
	}
	if res, err := call("granted"); err != nil || !strings.Contains(res.Output, "published") {
		t.Errorf("where it is granted: %q, %v", res.Output, err)
	}
	if _, err := call("nothing"); !errors.Is(err, plugins.ErrToolFailed) || !strings.Contains(err.Error(), "not enabled for this plugin") {
		t.Errorf("where it is granted nothing: %v, want its key-value store (and HTTP) denied", err)
	}
	if m, _ := reg.Module("nothing", "publish_post"); len(m.Limits().AllowedHosts) != 0 || m.Limits().KV || m.Limits().AllowPrivateNetwork {
		t.Errorf("the ungranted module's limits %+v, want none of the tenant's grants", plugins.GrantOf(m.Limits()))
	}
	_, err := reg.Load(context.Background(), "beyond", plugins.Source{Name: "publish_post", Wasm: wasm})
	if !errors.Is(err, plugins.ErrInvalidModule) || !strings.Contains(err.Error(), `granted host "evil.example.org" is not among the tenant's allowed hosts`) {
		t.Errorf("a grant beyond the tenant's: %v", err)
	}
}

// TestLimitsWithin: a grant's hosts must be within the tenant's, a
// wildcard covering its subdomains (not the domain itself), a port rule
// only that port, a rule without a port (the schemes' default ports) only
// rules without one; private networks and KV only where both allow them.
func TestLimitsWithin(t *testing.T) {
	l := plugins.Limits{AllowedHosts: []string{"*.example.com", "api.test:8443", "plain.test"}, KV: true}
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"a.example.com", true}, {"*.b.example.com", true}, {"a.example.com:9000", false}, {"a.example.com:443", false},
		{"example.com", false}, {"*.example.com", false}, {"api.test:8443", true}, {"api.test", false},
		{"api.test:9000", false}, {"plain.test", true}, {"plain.test:80", false}, {"*.plain.test", false}, {"other.test", false},
	} {
		_, err := l.Within(plugins.Grant{AllowedHosts: []string{tc.host}})
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want allowed %v", tc.host, err, tc.ok)
		}
	}
	got, err := l.Within(plugins.Grant{AllowPrivateNetwork: true, KV: true})
	if err != nil || got.AllowPrivateNetwork || !got.KV || len(got.AllowedHosts) != 0 {
		t.Errorf("Within: %+v, %v", plugins.GrantOf(got), err)
	}
}

// TestGrantsTwoPluginsOfOneTenant: two plugins of one tenant, each granted
// another host of the tenant's sandbox, each reach their own host and not
// the other's (two TypeScript plugins: the grant is the host's, whatever
// the language).
func TestGrantsTwoPluginsOfOneTenant(t *testing.T) {
	site := func(body string) (*httptest.Server, string) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(body)) }))
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		return srv, u.Host
	}
	a, aHost := site("site a")
	b, bHost := site(`{"current":{"time":"2026-12-06T14:00","temperature_2m":3,"wind_speed_10m":1}}`)
	rt, _ := newRuntime(t)
	endpoint := b.URL
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
		Limits: func(string) plugins.Limits {
			return plugins.Limits{KV: true, AllowedHosts: []string{aHost, bHost}, AllowPrivateNetwork: true}
		},
		Grants: func(_, module string) plugins.Grant {
			return map[string]plugins.Grant{
				"fetcher": {AllowedHosts: []string{aHost}, AllowPrivateNetwork: true},
				"weather": {AllowedHosts: []string{bHost}, AllowPrivateNetwork: true, KV: true},
			}[module]
		},
		Config: func(_, module string) map[string]string { return map[string]string{"endpoint": endpoint} },
	})
	defer reg.Close(context.Background())
	load := func(name string, wasm []byte) {
		if _, err := reg.Load(context.Background(), "acme", plugins.Source{Name: name, Wasm: wasm}); err != nil {
			t.Fatal(err)
		}
	}
	load("fetcher", jsHostileWasm(t))
	load("weather", plugintest.TypeScriptPlugin(t, "../examples/plugins/ts_weather", "ts_weather.ts", "../../../pdk/ts"))
	call := func(tool, input string) (host.ToolResult, error) {
		tl, ok := reg.Tool("acme", tool)
		if !ok {
			t.Fatalf("no tool %s", tool)
		}
		return tl.Call(context.Background(), host.ToolCall{ID: "c", SessionID: "s", Input: json.RawMessage(input)})
	}
	if res, err := call("fetch", `{"url":"`+a.URL+`"}`); err != nil || !strings.Contains(res.Output, "site a") {
		t.Errorf("fetcher to its host: %s, %v", res.Output, err)
	}
	if _, err := call("fetch", `{"url":"`+b.URL+`"}`); !errors.Is(err, plugins.ErrToolFailed) || !strings.Contains(err.Error(), "not among the hosts this plugin may reach") {
		t.Errorf("fetcher to weather's host: %v", err)
	}
	if _, err := call("kv", `{"key":"k","value":"v"}`); !errors.Is(err, plugins.ErrToolFailed) || !strings.Contains(err.Error(), "not enabled for this plugin") {
		t.Errorf("fetcher's key-value store, granted to weather only: %v", err)
	}
	if res, err := call("weather", `{"city":"Oslo","latitude":59.9,"longitude":10.7}`); err != nil || !strings.Contains(res.Output, `"temperature_c":3`) {
		t.Errorf("weather to its host: %s, %v", res.Output, err)
	}
	if m, _ := reg.Module("acme", "weather"); len(m.Limits().AllowedHosts) != 1 || m.Limits().AllowedHosts[0] != bHost {
		t.Errorf("weather's limits %+v", plugins.GrantOf(m.Limits()))
	}
}
