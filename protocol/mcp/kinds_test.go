package mcp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/protocol/mcp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// wantKind fails the test unless res is a tool error of kind: its text
// starts with "[kind] " and says want, and its _meta carries the kind.
func wantKind(t *testing.T, what string, res *sdk.CallToolResult, kind, want string) {
	t.Helper()
	if !res.IsError || meta(res, mcp.MetaError) != kind ||
		!strings.HasPrefix(text(res), "["+kind+"] ") || !strings.Contains(text(res), want) {
		t.Errorf("%s: error %v, _meta %v, %q: want a tool error of kind %s saying %q", what, res.IsError, res.Meta, text(res), kind, want)
	}
}

// TestSandboxBoundsAreToolErrors: a plugin that loops until it has used
// all the fuel of a call is an out_of_fuel tool error (well before its
// timeout: not a timeout), and arguments past the sandbox's input bound an
// input_too_large one, in the text and in _meta; the server serves the
// next call.
func TestSandboxBoundsAreToolErrors(t *testing.T) {
	// spin would time out at its own 1s: 20,000,000 fuel is spent in
	// milliseconds, and leaves a call of ok enough.
	e := newEnv(t, map[string][]byte{"hostile.wasm": hostileWasm(t)},
		plugins.Limits{CallTimeout: 2 * time.Minute, Fuel: 20_000_000, MaxInputBytes: 1024}, mcp.Options{})
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			cs := e.connect(t, transport, "caller", nil)
			for _, tc := range []struct {
				tool       string
				args       any
				kind, text string
			}{
				{"spin", nil, mcp.KindOutOfFuel, "out of fuel"},
				{"echo", map[string]any{"text": strings.Repeat("x", 4096)}, mcp.KindInputTooLarge, "input too large"},
			} {
				wantKind(t, tc.tool, call(t, cs, tc.tool, tc.args), tc.kind, tc.text)
				if res := call(t, cs, "ok", nil); res.IsError {
					t.Fatalf("after %s, ok failed: %s", tc.tool, text(res))
				}
			}
		})
	}
}

// slowSite is an HTTP site that holds every request until released (or
// its client leaves); entered receives a value when a request arrives.
type slowSite struct {
	*httptest.Server
	entered chan struct{}
	release func()
}

func newSlowSite(t *testing.T) *slowSite {
	entered, done := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	s := &slowSite{entered: entered, release: func() { once.Do(func() { close(done) }) }}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-done:
		case <-r.Context().Done():
		}
		fmt.Fprint(w, "answered")
	}))
	t.Cleanup(s.Server.Close)
	t.Cleanup(s.release) // run first: no request is held past the test
	return s
}

// limits are a sandbox that may reach the site, and wait for it as long
// as a test needs.
func (s *slowSite) limits() plugins.Limits {
	u, _ := url.Parse(s.URL)
	return plugins.Limits{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true,
		CallTimeout: 2 * time.Minute, HTTPTimeout: 2 * time.Minute}
}

// awaitEntered waits for a request to reach the site; a call that ends
// first fails the test.
func (s *slowSite) awaitEntered(t *testing.T, ended <-chan error) {
	t.Helper()
	select {
	case <-s.entered:
	case err := <-ended:
		t.Fatalf("the call ended before it reached the site: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the call did not reach the site (a guard against a hang)")
	}
}

// TestBusyIsToolError: a call that finds no free instance of its plugin
// within its deadline (the only one held by a call waiting for a slow
// site) did not run, and is a busy tool error; once the instance is free,
// calls run again.
func TestBusyIsToolError(t *testing.T) {
	site := newSlowSite(t)
	limits := site.limits()
	limits.Instances = 1
	e := newEnv(t, map[string][]byte{"hostile.wasm": hostileWasm(t)}, limits, mcp.Options{Approve: []string{"fetch"}})
	holder, waiter := e.connect(t, "http", "holder", nil), e.connect(t, "http", "waiter", nil)
	held := make(chan error, 1)
	go func() {
		res, err := holder.CallTool(context.Background(), &sdk.CallToolParams{Name: "fetch", Arguments: map[string]any{"url": site.URL, "method": "GET"}})
		if err == nil && res.IsError {
			err = errors.New(text(res))
		}
		held <- err
	}()
	site.awaitEntered(t, held)
	// sleep declares a 1s timeout of its own: it waits that long for the
	// instance.
	wantKind(t, "sleep", call(t, waiter, "sleep", nil), mcp.KindBusy, "busy")
	site.release()
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("the call holding the instance: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the call holding the instance did not end once the site answered (a guard against a hang)")
	}
	if res := call(t, waiter, "ok", nil); res.IsError {
		t.Fatalf("once the instance is free, ok failed: %s", text(res))
	}
}

// TestCancelledIsLogged: a call the client cancels while the plugin runs
// (waiting for a slow site) ends as cancelled: the server logs the failed
// call with the kind cancelled (the client, gone, reads no result), and
// serves the next call.
func TestCancelledIsLogged(t *testing.T) {
	site := newSlowSite(t)
	e := newEnv(t, map[string][]byte{"hostile.wasm": hostileWasm(t)}, site.limits(), mcp.Options{Approve: []string{"fetch"}})
	cs := e.connect(t, "stdio", "canceller", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "fetch", Arguments: map[string]any{"url": site.URL, "method": "GET"}})
		ended <- err
	}()
	site.awaitEntered(t, ended)
	cancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled call: %v, want context.Canceled", err)
	}
	var line string
	for deadline := time.Now().Add(time.Minute); line == ""; time.Sleep(10 * time.Millisecond) {
		for l := range strings.Lines(e.log.String()) {
			if strings.Contains(l, `msg="mcp: tool call failed"`) {
				line = l
			}
		}
		if line == "" && time.Now().After(deadline) {
			t.Fatalf("no failed call logged (a guard against a hang):\n%s", e.log.String())
		}
	}
	if !strings.Contains(line, " tool=fetch ") || !strings.Contains(line, " kind="+mcp.KindCancelled+" ") {
		t.Errorf("the failed call logged %q, want fetch of kind %s", line, mcp.KindCancelled)
	}
	if res := call(t, cs, "ok", nil); res.IsError {
		t.Fatalf("after the cancelled call, ok failed: %s", text(res))
	}
}

// TestQuarantinedIsToolError: under a quarantine policy, a plugin that
// failed as often as the policy allows (a trap) is quarantined: a call of
// any of its tools does not run and is a quarantined tool error saying how
// it serves again.
func TestQuarantinedIsToolError(t *testing.T) {
	rt := plugintest.Runtime(t, plugins.Options{})
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{
		Quarantine: func(string) plugins.QuarantinePolicy {
			return plugins.QuarantinePolicy{Failures: 1, Window: time.Minute}
		},
	})
	t.Cleanup(func() { reg.Close(context.Background()) })
	if _, err := reg.Load(context.Background(), "acme", plugins.Source{Name: "hostile", Wasm: hostileWasm(t)}); err != nil {
		t.Fatal(err)
	}
	srv, err := mcp.New(mcp.Options{Registry: reg, Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{rt: rt, reg: reg, srv: srv, log: &logBuffer{}}
	cs := e.connect(t, "stdio", "caller", nil)
	if res := call(t, cs, "ok", nil); res.IsError {
		t.Fatalf("ok before the failure: %s", text(res))
	}
	wantKind(t, "trap", call(t, cs, "trap", nil), mcp.KindTrap, "trapped")
	if q := reg.Quarantined("acme"); len(q) != 1 {
		t.Fatalf("quarantined %+v, want hostile", q)
	}
	wantKind(t, "ok while quarantined", call(t, cs, "ok", nil), mcp.KindQuarantined, "a person releases it")
}

// TestToolsetFailuresAreErrors: a failure the other kinds do not name — a
// toolset's Go tool that returns an error of its own, or one that panics —
// is a tool error of the kind error, and the server serves the next call.
func TestToolsetFailuresAreErrors(t *testing.T) {
	tools := goTools{
		host.NewTool(host.ToolSpec{Name: "down"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
			return host.ToolResult{}, errors.New("the backend is down")
		}),
		host.NewTool(host.ToolSpec{Name: "panics"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
			panic("a bug in a Go tool")
		}),
		host.NewTool(host.ToolSpec{Name: "fine"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
			return host.ToolResult{Output: "fine"}, nil
		}),
	}
	e := newEnv(t, nil, plugins.Limits{}, mcp.Options{Toolsets: []host.Toolset{tools}})
	cs := e.connect(t, "stdio", "caller", nil)
	for _, tc := range []struct{ tool, text string }{
		{"down", "the backend is down"},
		{"panics", "a bug in a Go tool"},
	} {
		wantKind(t, tc.tool, call(t, cs, tc.tool, nil), mcp.KindError, tc.text)
		if res := call(t, cs, "fine", nil); res.IsError || text(res) != "fine" {
			t.Fatalf("after %s, fine answered %v %q", tc.tool, res.IsError, text(res))
		}
	}
}

// goTools is a toolset of Go tools that never changes.
type goTools []host.Tool

func (g goTools) Tools() []host.Tool { return g }

// TestUnloadedMidCallIsUnavailable: a call whose plugin is unloaded after
// the server resolved the tool and before the call started (here while the
// policy decides) does not run: it is a tool error of the kind
// unavailable, and the server serves the next call of another plugin.
func TestUnloadedMidCallIsUnavailable(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	policy := mcp.PolicyFunc("hold", func(ctx context.Context, req mcp.PolicyRequest) (mcp.Decision, error) {
		if req.Tool.Name == "ok" {
			once.Do(func() { close(held) })
			select {
			case <-release:
			case <-ctx.Done():
				return mcp.Decision{}, ctx.Err()
			}
		}
		return mcp.Decision{Verdict: mcp.Allow}, nil
	})
	tools := goTools{host.NewTool(host.ToolSpec{Name: "fine"}, func(context.Context, host.ToolCall) (host.ToolResult, error) {
		return host.ToolResult{Output: "fine"}, nil
	})}
	e := newEnv(t, map[string][]byte{"hostile.wasm": hostileWasm(t)}, plugins.Limits{},
		mcp.Options{Policy: policy, Toolsets: []host.Toolset{tools}})
	cs := e.connect(t, "stdio", "caller", nil)
	done := make(chan *sdk.CallToolResult, 1)
	go func() { done <- call(t, cs, "ok", nil) }()
	select {
	case <-held:
	case <-time.After(2 * time.Minute):
		t.Fatal("the call never reached the policy")
	}
	if err := os.Remove(filepath.Join(e.dir, "hostile.wasm")); err != nil {
		t.Fatal(err)
	}
	e.awaitChange(t, plugins.Removed, "hostile")
	close(release)
	wantKind(t, "ok unloaded mid-call", <-done, mcp.KindUnavailable, "unloaded")
	if res := call(t, cs, "fine", nil); res.IsError || text(res) != "fine" {
		t.Fatalf("after the unload, fine answered %v %q", res.IsError, text(res))
	}
}
