package plugins_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/plugins"
)

// TestEgressSecrets: a secret bound to a host is added to the plugin's
// requests to that host — publish_post's post carries it — and to no
// other: a redirect to another allowed host goes without it. The value
// never reaches the plugin's output, the ledger, the logs, the traces
// (content recorded) or an error's text, and a secret for a host the
// plugin may not reach is refused.
func TestEgressSecrets(t *testing.T) {
	const secret = "s3cr3t-7Qx9-never-shown"
	var mu sync.Mutex
	seen := map[string][]string{} // server → the X-Api-Key headers it got
	record := func(name string, next http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[name] = append(seen[name], r.Header.Get("X-Api-Key"))
			mu.Unlock()
			next(w, r)
		}
	}
	created := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"post-1","url":"https://blog.example/p/1"}`))
	}
	other := httptest.NewServer(record("other", created))
	defer other.Close()
	blog := httptest.NewServer(record("blog", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, other.URL+"/api/posts", http.StatusTemporaryRedirect)
			return
		}
		if r.URL.Path == "/fail" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		created(w, r)
	}))
	defer blog.Close()
	bu, _ := url.Parse(blog.URL)
	ou, _ := url.Parse(other.URL)

	rt, logs := newRuntime(t)
	endpoint := blog.URL + "/api/posts"
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
		Limits: func(string) plugins.Limits {
			return plugins.Limits{KV: true, AllowedHosts: []string{bu.Host, ou.Host}, AllowPrivateNetwork: true, MaxRedirects: 2}
		},
		Grants: func(_, module string) plugins.Grant {
			return plugins.Grant{KV: true, AllowedHosts: []string{bu.Host, ou.Host}, AllowPrivateNetwork: true,
				Secrets: []plugins.EgressSecret{{Host: bu.Host, Header: "X-Api-Key", Value: secret}}}
		},
		Config: func(string, string) map[string]string { return map[string]string{"endpoint": endpoint} },
	})
	defer reg.Close(context.Background())
	if _, err := reg.Load(context.Background(), "acme", plugins.Source{Name: "publish_post", Wasm: publishPostWasm(t)}); err != nil {
		t.Fatal(err)
	}

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	hs := hosttest.New(t, host.Options{Telemetry: &host.Telemetry{TracerProvider: tp, RecordContent: true},
		Agent: host.Agent{Toolsets: []host.Toolset{reg.Toolset("acme")}, ToolApprovals: map[string]host.ApprovalMode{"publish_post": host.ApproveAlways}}})
	call := func(session string) {
		t.Helper()
		hs.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "publish_post", Arguments: `{"title":"Hello","body":"First post."}`}}})
		if res, err := hs.Host.Session(session).Send(context.Background(), "publish it", host.SendOptions{}); err != nil || res.Status != "completed" {
			t.Fatalf("%s: %+v, %v", session, res, err)
		}
	}
	call("direct")
	// The module takes its configuration when it loads: load it again for
	// each endpoint.
	for _, tc := range []struct{ path, session string }{{"/moved", "redirected"}, {"/fail", "failed"}} {
		endpoint = blog.URL + tc.path
		reg.Unload("acme", "publish_post")
		if _, err := reg.Load(context.Background(), "acme", plugins.Source{Name: "publish_post", Wasm: publishPostWasm(t)}); err != nil {
			t.Fatal(err)
		}
		call(tc.session)
	}

	mu.Lock()
	if got := seen["blog"]; len(got) != 3 || got[0] != secret || got[1] != secret || got[2] != secret {
		t.Errorf("the blog got X-Api-Key %q, want the secret on each request", got)
	}
	if got := seen["other"]; len(got) != 1 || got[0] != "" {
		t.Errorf("the host redirected to got X-Api-Key %q, want none (Go's client copies such a header on a redirect)", got)
	}
	mu.Unlock()

	// Nowhere else.
	var all bytes.Buffer
	for _, s := range []string{"direct", "redirected", "failed"} {
		for _, e := range hs.Events(s) {
			b, _ := json.Marshal(e)
			all.Write(b)
		}
	}
	for _, s := range spans.GetSpans() {
		for _, kv := range s.Attributes {
			all.WriteString(kv.Value.String())
		}
		all.WriteString(s.Status.Description)
	}
	all.WriteString(logs.String())
	if m, _ := reg.Module("acme", "publish_post"); m != nil {
		b, _ := json.Marshal(plugins.GrantOf(m.Limits()))
		all.Write(b)
		all.WriteString(fmtAll(m.Limits()))
	}
	if strings.Contains(all.String(), "s3cr3t") {
		t.Errorf("the secret shows in the ledger, the traces, the logs or the limits:\n%s", all.String())
	}
	if !strings.Contains(all.String(), "401") {
		t.Errorf("the failed call's error is not in what was searched (the search would not see it):\n%.2000s", all.String())
	}

	_, err := (plugins.Limits{AllowedHosts: []string{bu.Host}}).Within(plugins.Grant{AllowedHosts: []string{bu.Host},
		Secrets: []plugins.EgressSecret{{Host: ou.Host, Header: "Authorization", Value: secret}}})
	if err == nil || !strings.Contains(err.Error(), "is not among the allowed hosts") || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("a secret for a host the plugin may not reach: %v", err)
	}
}

// fmtAll prints v as %v, %+v and %#v would.
func fmtAll(v any) string {
	return strings.Join([]string{sprint("%v", v), sprint("%+v", v), sprint("%#v", v)}, "\n")
}

func sprint(format string, v any) string { return fmt.Sprintf(format, v) }

// TestSecretNeverEchoed: a plugin that asks the host its secret is bound
// to for an echo of its own request (a debug endpoint, an error quoting
// the request) gets the answer with every form of the secret withheld —
// a header's value, a bearer token, basic credentials encoded and decoded
// and their password — in the body and the headers alike.
func TestSecretNeverEchoed(t *testing.T) {
	const token, password = "tok-echo-5e1f9a", "pw-echo-77c3"
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth, basic := r.Header.Get("Authorization"), r.Header.Get("X-Basic")
		decoded, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(basic, "Basic "))
		w.Header().Set("X-Echo", auth)
		w.Header().Set("Location", "/next?token="+strings.TrimPrefix(auth, "Bearer "))
		fmt.Fprintf(w, "you sent %q, %q (%s); the token alone: %s; the password: %s", auth, basic, decoded, strings.TrimPrefix(auth, "Bearer "), password)
	}))
	defer echo.Close()
	eu, _ := url.Parse(echo.URL)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("agent:"+password))
	rt, _ := newRuntime(t)
	m := load(t, rt, "hostile", hostileWasm(t), plugins.Limits{AllowedHosts: []string{eu.Host}, AllowPrivateNetwork: true,
		Secrets: []plugins.EgressSecret{{Host: eu.Host, Header: "Authorization", Value: "Bearer " + token}, {Host: eu.Host, Header: "X-Basic", Value: basic}}})
	tl, _ := m.Tool("fetch")
	res, err := tl.Call(context.Background(), hostCall("fetch", `{"url":"`+echo.URL+`/debug"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Output, "[secret withheld]") {
		t.Errorf("the echo as the plugin got it: %s", res.Output)
	}
	for _, form := range []string{token, password, strings.TrimPrefix(basic, "Basic ")} {
		if strings.Contains(res.Output, form) {
			t.Errorf("the plugin read %q: %s", form, res.Output)
		}
		if b, _ := json.Marshal(res.Traffic); strings.Contains(string(b), form) {
			t.Errorf("the call's record holds %q: %s", form, b)
		}
	}
}
