package mcp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/protocol/mcp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// site is an HTTP server the hostile plugin's external tool "fetch" may
// reach: it counts the requests, so a test sees whether a call ran.
type site struct {
	*httptest.Server
	hits atomic.Int64
}

func newSite(t *testing.T) *site {
	s := &site{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		fmt.Fprint(w, "fetched "+r.URL.Path)
	}))
	t.Cleanup(s.Close)
	return s
}

// limits lets the plugins reach the site.
func (s *site) limits() plugins.Limits {
	u, _ := url.Parse(s.URL)
	return plugins.Limits{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true}
}

// answering is a client that answers approval requests with action.
func answering(action string, asked *atomic.Value) *sdk.ClientOptions {
	return &sdk.ClientOptions{ElicitationHandler: func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
		if asked != nil {
			asked.Store(req.Params.Message)
		}
		return &sdk.ElicitResult{Action: action}, nil
	}}
}

// TestPolicyVerdicts: a plugin's policy (by_agent, which denies the agent
// "intern" and sends external tools for approval) decides every call: a
// denial is a tool error with the policy's reason; approval is asked
// through elicitation when the client can answer (accept runs the call,
// decline and cancel do not) and otherwise refused, saying how the
// operator can approve the tool.
func TestPolicyVerdicts(t *testing.T) {
	web := newSite(t)
	files := map[string][]byte{"get_account.wasm": getAccountWasm(t), "hostile.wasm": hostileWasm(t), "kit.wasm": kitWasm(t)}
	e := newEnv(t, files, web.limits(), mcp.Options{Policy: plugins.PolicyRef{Tenant: "acme", Module: "kit"}})
	fetch := map[string]any{"url": web.URL + "/page", "method": "GET"}
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			for _, tc := range []struct {
				name, client string
				opts         *sdk.ClientOptions
				tool         string
				args         any
				kind, text   string // kind "" means success
				ran          bool   // the site was fetched
			}{
				{"denied", "intern", nil, "get_account", map[string]any{"account_id": "7"}, mcp.KindDenied, "interns may not call get_account", false},
				{"allowed", "ops", nil, "get_account", map[string]any{"account_id": "7"}, "", `"account_id":"7"`, false},
				{"cannot ask", "ops", nil, "fetch", fetch, mcp.KindApprovalRequired, "--approve fetch", false},
				{"accepted", "ops", answering("accept", nil), "fetch", fetch, "", "fetched /page", true},
				{"declined", "ops", answering("decline", nil), "fetch", fetch, mcp.KindNotApproved, "declined", false},
				{"dismissed", "ops", answering("cancel", nil), "fetch", fetch, mcp.KindNotApproved, "dismissed", false},
				{"denied before asking", "intern", answering("accept", nil), "fetch", fetch, mcp.KindDenied, "interns may not call fetch", false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					before := web.hits.Load()
					res := call(t, e.connect(t, transport, tc.client, tc.opts), tc.tool, tc.args)
					if tc.kind == "" && res.IsError || tc.kind != "" && meta(res, mcp.MetaError) != tc.kind || !strings.Contains(text(res), tc.text) {
						t.Errorf("error %v, _meta %v, %q: want kind %q saying %q", res.IsError, res.Meta, text(res), tc.kind, tc.text)
					}
					if ran := web.hits.Load() > before; ran != tc.ran {
						t.Errorf("the call ran: %v, want %v", ran, tc.ran)
					}
				})
			}
		})
	}
	if !strings.Contains(e.log.String(), "call denied by the policy") {
		t.Errorf("denials are not logged:\n%s", e.log.String())
	}
}

// TestDefaultPolicy: with no policy, read and write tools run and external
// ones need approval; --approve (Options.Approve) lets a tool's calls run
// without asking, and the person asked sees what the call would do.
func TestDefaultPolicy(t *testing.T) {
	web := newSite(t)
	files := map[string][]byte{"hostile.wasm": hostileWasm(t)}
	limits := web.limits()
	limits.KV = true
	plain := newEnv(t, files, limits, mcp.Options{})
	approved := newEnv(t, files, limits, mcp.Options{Approve: []string{"fetch"}})
	fetch := map[string]any{"url": web.URL + "/x", "method": "GET"}

	cs := plain.connect(t, "stdio", "ops", nil)
	if res := call(t, cs, "kv", map[string]any{"key": "k", "value": "v"}); res.IsError {
		t.Errorf("write tool: %s", text(res))
	}
	if res := call(t, cs, "fetch", fetch); meta(res, mcp.MetaError) != mcp.KindApprovalRequired || web.hits.Load() != 0 {
		t.Errorf("external tool without approval: %q, %d fetches", text(res), web.hits.Load())
	}
	var asked atomic.Value
	cs = plain.connect(t, "http", "ops", answering("accept", &asked))
	if res := call(t, cs, "fetch", fetch); res.IsError || web.hits.Load() != 1 {
		t.Errorf("external tool, approved: %q, %d fetches", text(res), web.hits.Load())
	}
	if msg, _ := asked.Load().(string); !strings.Contains(msg, `fetch with {`) || !strings.Contains(msg, web.URL+"/x") || !strings.Contains(msg, "outside the host") {
		t.Errorf("the person was asked %q: want the call and why", msg)
	}
	cs = approved.connect(t, "stdio", "ops", nil)
	if res := call(t, cs, "fetch", fetch); res.IsError || web.hits.Load() != 2 {
		t.Errorf("external tool approved by the operator: %q, %d fetches", text(res), web.hits.Load())
	}
	if !strings.Contains(approved.log.String(), "approved by the operator") {
		t.Errorf("the operator's approval is not logged")
	}
}

// TestApprovalBoundToCall: the approval a client brings back in a retry
// (multi round-trip requests) approves the call it was asked for and no
// other: other arguments, a forged state or another server's state are
// refused, and nothing runs.
func TestApprovalBoundToCall(t *testing.T) {
	web := newSite(t)
	files := map[string][]byte{"hostile.wasm": hostileWasm(t)}
	e := newEnv(t, files, web.limits(), mcp.Options{})
	other := newEnv(t, files, web.limits(), mcp.Options{})
	manual := &sdk.ClientOptions{
		MultiRoundTrip: &sdk.MultiRoundTripOptions{Disabled: true},
		ElicitationHandler: func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			return nil, errors.New("not used")
		},
	}
	cs := e.connect(t, "stdio", "ops", manual)
	args := map[string]any{"url": web.URL + "/asked", "method": "GET"}
	ctx := context.Background()
	first, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "fetch", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	ask, ok := first.InputRequests["approval"].(*sdk.ElicitParams)
	if !first.NeedsInput() || !ok || first.RequestState == "" || !strings.Contains(ask.Message, "/asked") {
		t.Fatalf("first answer: %s", jsonOf(first))
	}
	otherState := ""
	if res, err := other.connect(t, "stdio", "ops", manual).CallTool(ctx, &sdk.CallToolParams{Name: "fetch", Arguments: args}); err == nil {
		otherState = res.RequestState
	}
	accept := sdk.InputResponseMap{"approval": &sdk.ElicitResult{Action: "accept"}}
	for _, tc := range []struct {
		name  string
		args  map[string]any
		state string
		ok    bool
	}{
		{"other arguments", map[string]any{"url": web.URL + "/other", "method": "GET"}, first.RequestState, false},
		{"forged state", args, "v1.1.AAAA", false},
		{"no state", args, "", false},
		{"another server's state", args, otherState, false},
		{"the call asked", map[string]any{"method": "GET", "url": web.URL + "/asked"}, first.RequestState, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := web.hits.Load()
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "fetch", Arguments: tc.args, InputResponses: accept, RequestState: tc.state})
			if err != nil {
				t.Fatal(err)
			}
			ran := web.hits.Load() > before
			if tc.ok && (res.IsError || !ran) || !tc.ok && (meta(res, mcp.MetaError) != mcp.KindNotApproved || ran) {
				t.Errorf("ran %v: %s", ran, jsonOf(res))
			}
		})
	}
}

// TestPluginPolicyResolve: a policy named on the command line must be
// served; one that goes away (its module unloaded) makes calls require
// approval, with the reason.
func TestPluginPolicyResolve(t *testing.T) {
	files := map[string][]byte{"get_account.wasm": getAccountWasm(t), "kit.wasm": kitWasm(t)}
	e := newEnv(t, files, plugins.Limits{}, mcp.Options{})
	for _, tc := range []struct {
		module, name, err string
	}{
		{"kit", "", ""},
		{"kit", "by_agent", ""},
		{"kit", "nope", `offers no policy "nope" (it offers: by_agent)`},
		{"get_account", "", "offers no policy"},
		{"missing", "", `no plugin "missing" is loaded`},
	} {
		_, err := plugins.PolicyRef{Registry: e.reg, Tenant: "acme", Module: tc.module, Policy: tc.name}.Resolve()
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s:%s: %v, want %q", tc.module, tc.name, err, tc.err)
		}
	}

	withPolicy := newEnv(t, files, plugins.Limits{}, mcp.Options{Policy: plugins.PolicyRef{Tenant: "acme", Module: "kit"}})
	cs := withPolicy.connect(t, "stdio", "ops", nil)
	if res := call(t, cs, "get_account", map[string]any{"account_id": "1"}); res.IsError {
		t.Fatalf("with the policy served: %s", text(res))
	}
	withPolicy.reg.Unload("acme", "kit")
	res := call(t, cs, "get_account", map[string]any{"account_id": "1"})
	if meta(res, mcp.MetaError) != mcp.KindApprovalRequired || !strings.Contains(text(res), "the policy could not decide: no plugin \"kit\" is loaded") {
		t.Errorf("with the policy gone: %s", text(res))
	}
}
