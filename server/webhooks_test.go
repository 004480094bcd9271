package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/webhook"
)

const webhookSecret = "whsec-test-0123456789"

// hookSink is a webhook endpoint that records the deliveries whose
// signature holds.
type hookSink struct {
	*httptest.Server
	mu  sync.Mutex
	got []webhook.Payload
	bad int
}

func newHookSink(t *testing.T) *hookSink {
	h := &hookSink{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		var p webhook.Payload
		if webhook.Verify([]byte(webhookSecret), r.Header.Get(webhook.SignatureHeader), body, 0, time.Now()) != nil || json.Unmarshal(body, &p) != nil {
			h.bad++
			http.Error(w, "bad signature", http.StatusBadRequest)
			return
		}
		h.got = append(h.got, p)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookSink) payloads() []webhook.Payload {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]webhook.Payload(nil), h.got...)
}

// withWebhooks configures acme's webhooks to url, its sandbox allowing
// url's host (and private networks, when private).
func withWebhooks(url string, private bool) func(*server.Config) {
	return func(cfg *server.Config) {
		acme := cfg.Tenants["acme"]
		acme.Sandbox.AllowedHosts = []string{strings.TrimPrefix(url, "http://")}
		acme.Sandbox.AllowPrivateNetwork = private
		acme.Webhooks = &server.WebhooksConfig{Secret: webhookSecret, Endpoints: []server.WebhookEndpointConfig{{URL: url + "/hook?token=t0k"}}}
		cfg.Tenants["acme"] = acme
	}
}

// TestServeWebhooks: a tenant's run is told to its endpoint, signed, as
// run.ended; the API lists the endpoint (its URL without the query) and
// the delivery; another tenant sees neither.
func TestServeWebhooks(t *testing.T) {
	sink := newHookSink(t)
	ts := startServer(t, serverSetup{Mutate: withWebhooks(sink.URL, true)})
	code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s1/messages?wait=true", `{"text":"hello"}`)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	runID := decodeJSON[struct {
		RunID string `json:"run_id"`
	}](t, body).RunID
	waitFor(t, "the delivery", func() bool { return len(sink.payloads()) == 1 })
	p := sink.payloads()[0]
	if p.Type != webhook.RunEnded || p.SessionID != "s1" || p.RunID != runID || p.Tenant != "acme" {
		t.Fatalf("payload %+v", p)
	}
	var list struct{ Deliveries []webhook.Delivery }
	waitFor(t, "the delivery listed delivered", func() bool {
		_, body := ts.do(t, ts.acme, "GET", "/v1/webhooks/deliveries", "")
		list = decodeJSON[struct{ Deliveries []webhook.Delivery }](t, body)
		return len(list.Deliveries) == 1 && list.Deliveries[0].State == webhook.StateDelivered
	})
	d := list.Deliveries[0]
	if d.ID != p.ID || d.Targets[0].URL != sink.URL+"/hook" || d.Targets[0].LastStatus != 200 {
		t.Errorf("delivery %+v", d)
	}
	if code, body := ts.do(t, ts.acme, "GET", "/v1/webhooks/deliveries/"+d.ID, ""); code != 200 || !strings.Contains(body, `"state":"delivered"`) || strings.Contains(body, "t0k") {
		t.Errorf("one delivery: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "GET", "/v1/webhooks", ""); code != 200 || !strings.Contains(body, `"url":"`+sink.URL+`/hook"`) || strings.Contains(body, "t0k") || strings.Contains(body, webhookSecret) {
		t.Errorf("endpoints: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.beta, "GET", "/v1/webhooks/deliveries/"+d.ID, ""); code != 404 {
		t.Errorf("beta reads acme's delivery: %d %s", code, body)
	}
	if _, body := ts.do(t, ts.beta, "GET", "/v1/webhooks/deliveries", ""); body != "{\"deliveries\":[]}\n" {
		t.Errorf("beta's deliveries: %s", body)
	}
	if code, _ := ts.do(t, ts.acme, "GET", "/v1/webhooks/deliveries?state=lost", ""); code != 400 {
		t.Errorf("a bad state: %d", code)
	}
}

// TestServeWebhooksEgress: deliveries go through the tenant's sandbox: an
// endpoint on a private address is refused unless the sandbox allows
// private networks (the delivery waits, its failure shown), and one whose
// host the sandbox does not allow is a configuration error.
func TestServeWebhooksEgress(t *testing.T) {
	sink := newHookSink(t)
	ts := startServer(t, serverSetup{Mutate: withWebhooks(sink.URL, false)})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s1/messages?wait=true", `{"text":"hello"}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	waitFor(t, "a failed attempt", func() bool {
		_, body := ts.do(t, ts.acme, "GET", "/v1/webhooks/deliveries?state=pending", "")
		l := decodeJSON[struct{ Deliveries []webhook.Delivery }](t, body)
		return len(l.Deliveries) == 1 && l.Deliveries[0].Targets[0].Attempts > 0 && strings.Contains(l.Deliveries[0].Targets[0].LastError, "not public")
	})
	if n := len(sink.payloads()); n != 0 {
		t.Fatalf("%d deliveries reached a private address", n)
	}

	cfg := server.Config{Tenants: map[string]server.TenantConfig{"acme": {Models: []string{"m"},
		Webhooks: &server.WebhooksConfig{Endpoints: []server.WebhookEndpointConfig{{URL: "https://hooks.example.com/x", Events: []string{"run.started"}}}}}}}
	_, err := server.New(server.Options{Config: cfg, Storage: ts.store, Model: ts.model})
	for _, want := range []string{"not among the tenant's sandbox.allowed_hosts", `unknown event "run.started"`, "want exactly one of secret, secret_env and secret_file"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config error %v, want %q", err, want)
		}
	}
}

// TestWebhookSecretBound: a webhook secret shorter than 16 bytes is
// refused at start, saying so; 16 bytes pass.
func TestWebhookSecretBound(t *testing.T) {
	for _, tc := range []struct {
		secret string
		ok     bool
	}{{strings.Repeat("s", 15), false}, {strings.Repeat("s", 16), true}} {
		cfg := server.Config{PluginsDir: t.TempDir(), Tenants: map[string]server.TenantConfig{"acme": {
			Models:   []string{hosttest.DefaultModel},
			Sandbox:  server.SandboxConfig{AllowedHosts: []string{"hooks.example.com"}},
			Webhooks: &server.WebhooksConfig{Endpoints: []server.WebhookEndpointConfig{{URL: "https://hooks.example.com/in"}}, Secret: tc.secret},
		}}}
		srv, err := server.New(server.Options{Config: cfg, Storage: memory.New(), Model: hosttest.NewModel()})
		if srv != nil {
			srv.Close(context.Background())
		}
		if tc.ok != (err == nil) || !tc.ok && !strings.Contains(err.Error(), "the secret: want at least 16 bytes") {
			t.Errorf("a secret of %d bytes: %v", len(tc.secret), err)
		}
	}
}

// TestServeWebhooksBudgetExceeded: budget.exceeded is told for what a
// budget really does to a run, as the host writes it: a run stopped past
// the tenant's daily budget (outcome run_failed, its reason "model:
// budget_exceeded: …") and a plugin call refused past the plugin budget
// (tool_refused, its output "error: plugin_budget_exceeded: …"). The
// outbox's own test fed a reason without the host's prefix, and neither
// was told.
func TestServeWebhooksBudgetExceeded(t *testing.T) {
	for _, kind := range []string{"budget_exceeded", "plugin_budget_exceeded"} {
		t.Run(kind, func(t *testing.T) {
			sink := newHookSink(t)
			hooks := withWebhooks(sink.URL, true)
			ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
				hooks(c)
				withTenant("acme", func(tc *server.TenantConfig) {
					if kind == "budget_exceeded" {
						tc.BudgetUSDPerDay = 1
					} else {
						tc.PluginFuelPerDay = 1
					}
				})(c)
			}})
			if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/accounts", getAccount(t)); code != 201 {
				t.Fatalf("upload: %d %s", code, body)
			}
			lookup := func(id string) hosttest.Reply {
				return hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "get_account", Arguments: `{"account_id":"` + id + `"}`}}}
			}
			want := "run_failed"
			if kind == "budget_exceeded" {
				ts.model.Enqueue(costing(lookup("1"), 0.6), costing(lookup("2"), 0.6), hosttest.Reply{Text: "never said"})
			} else {
				want = "tool_refused"
				ts.model.Enqueue(lookup("1"), hosttest.Reply{Text: "one"}, lookup("2"), hosttest.Reply{Text: "two"})
				if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/first/messages?wait=true", `{"text":"look it up"}`); code != 200 {
					t.Fatalf("the run that crosses the plugin budget: %d %s", code, body)
				}
			}
			if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/s/messages?wait=true", `{"text":"look it up"}`); code != 200 {
				t.Fatalf("the run past the budget: %d %s", code, body)
			}
			var got webhook.Payload
			waitFor(t, "budget.exceeded", func() bool {
				for _, p := range sink.payloads() {
					if p.Type == webhook.BudgetExceeded {
						got = p
						return true
					}
				}
				return false
			})
			data, _ := json.Marshal(got.Data)
			var d webhook.BudgetExceededData
			if err := json.Unmarshal(data, &d); err != nil || d.Kind != kind || d.Outcome != want || !strings.Contains(d.Reason, kind+":") || got.SessionID != "s" {
				t.Errorf("budget.exceeded = %+v (%s), want kind %s, outcome %s, session s", got, data, kind, want)
			}
		})
	}
}
