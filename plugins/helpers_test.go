package plugins_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// The test plugins, built from source by the real toolchains (cached by
// source hash under plugintest.CacheDir).

func hostileWasm(t testing.TB) []byte { return plugintest.GoPlugin(t, "testdata/hostile") }

func getAccountWasm(t testing.TB) []byte {
	return plugintest.GoPlugin(t, "../examples/plugins/get_account")
}

func publishPostWasm(t testing.TB) []byte {
	return plugintest.GoPlugin(t, "../examples/plugins/publish_post")
}

// cKit is the C kit's directory, relative to testdata/c.
const cKit = "../../../pdk/c"

// liarWasm builds a variant of testdata/c/liar.c.
func liarWasm(t testing.TB, variant string) []byte {
	return plugintest.CPlugin(t, "testdata/c", []string{"liar.c"}, []string{cKit}, []string{"-DLIE_" + variant})
}

// versionWasm builds testdata/c/version.c reporting version v.
func versionWasm(t testing.TB, v string) []byte {
	return plugintest.CPlugin(t, "testdata/c", []string{"version.c", cKit + "/agentic.c"}, []string{cKit}, []string{`-DVERSION="` + v + `"`})
}

// cEchoWasm builds testdata/c/echo.c: a tool that answers its input.
func cEchoWasm(t testing.TB) []byte {
	return plugintest.CPlugin(t, "testdata/c", []string{"echo.c", cKit + "/agentic.c"}, []string{cKit}, nil)
}

func plainWasm(t testing.TB) []byte {
	return plugintest.CPlugin(t, "testdata/c", []string{"plain.c"}, []string{cKit}, nil)
}

// logBuffer collects a runtime's log output.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newRuntime(t testing.TB) (*plugins.Runtime, *logBuffer) {
	logs := &logBuffer{}
	rt := plugintest.Runtime(t, plugins.Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	return rt, logs
}

func load(t testing.TB, rt *plugins.Runtime, name string, wasm []byte, limits plugins.Limits) *plugins.Module {
	t.Helper()
	return plugintest.Load(t, rt, plugins.Source{Name: name, Wasm: wasm, Tenant: "acme", Limits: limits})
}

func callTool(t testing.TB, m *plugins.Module, name, input string) (host.ToolResult, error) {
	t.Helper()
	tool, ok := m.Tool(name)
	if !ok {
		t.Fatalf("no tool %s", name)
	}
	return tool.Call(context.Background(), hostCall(name, input))
}

// hostCall is a tool call of the test session.
func hostCall(name, input string) host.ToolCall {
	return host.ToolCall{ID: "call-1", SessionID: "s1", Name: name, Input: json.RawMessage(input)}
}

// verdict is a validator's answer, for tests to read.
type verdict struct {
	OK     bool
	Value  json.RawMessage
	Errors []string
}

// validate checks deliverable with v as the host does.
func validate(v host.Validator, deliverable string) (verdict, error) {
	value, problems, err := v.Validate(context.Background(), json.RawMessage(deliverable))
	return verdict{OK: err == nil && problems == nil, Value: value, Errors: problems}, err
}

// waitUntil polls cond every 10ms until it holds, failing the test with
// what after 15s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// checkKitValidatorAndPolicy checks the validator "even" and the policy
// "by_agent" that the kits' test plugins (the AssemblyScript and Rust
// kits') define alike.
func checkKitValidatorAndPolicy(t *testing.T, m *plugins.Module) {
	t.Helper()
	v, _ := m.Validator("even")
	for deliverable, want := range map[string]string{
		`{"count":4}`:  `ok {"count":4,"half":2}`,
		`{"count":3}`:  `invalid [/count: must be even]`,
		`{"count":-1}`: `error`,
		`{}`:           `invalid [/: missing property 'count']`,
	} {
		res, err := validate(v, deliverable)
		got := ""
		switch {
		case err != nil:
			got = "error"
		case res.OK:
			got = "ok " + string(res.Value)
		default:
			got = fmt.Sprintf("invalid %v", res.Errors)
		}
		if got != want {
			t.Errorf("validate %s: %s (%v), want %s", deliverable, got, err, want)
		}
	}
	p, _ := m.Policy("by_agent")
	for _, tt := range []struct {
		agent   string
		effect  host.Effect
		verdict host.Verdict
	}{{"intern", host.EffectRead, host.Deny}, {"lead", host.EffectExternal, host.RequireApproval}, {"lead", host.EffectRead, host.Allow}} {
		d, err := p.Decide(context.Background(), host.PolicyRequest{Tool: host.ToolSpec{Name: "publish", Effect: tt.effect}, Agent: tt.agent, Input: json.RawMessage(`{"x":1}`)})
		if err != nil || d.Verdict != tt.verdict {
			t.Errorf("%s/%s: %+v %v", tt.agent, tt.effect, d, err)
		}
		if tt.verdict == host.RequireApproval && d.Summary != `publish {"x":1}` {
			t.Errorf("summary %q", d.Summary)
		}
	}
}
