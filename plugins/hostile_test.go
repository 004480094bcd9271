package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// okCalls calls the hostile plugin's "ok" tool and returns how many calls
// its instance has served: 1 means a fresh instance.
func okCalls(t *testing.T, m *plugins.Module) int {
	t.Helper()
	res, err := callTool(t, m, "ok", `{}`)
	if err != nil {
		t.Fatalf("ok after misbehaviour: %v", err)
	}
	var out struct {
		OK    bool `json:"ok"`
		Calls int  `json:"calls"`
	}
	if err := json.Unmarshal([]byte(res.Output), &out); err != nil || !out.OK {
		t.Fatalf("ok answered %q (%v)", res.Output, err)
	}
	if res.Source != m.Hash() {
		t.Fatalf("ok's source is %q, want %q", res.Source, m.Hash())
	}
	return out.Calls
}

// TestHostile runs each misbehaviour of the hostile Go plugin: each must be
// a clear error of the expected kind, within its time, with the instance
// discarded whenever the plugin ran (even when it answered its error
// properly: a panic its kit recovered may have left the instance's state
// half-written, so the next call starts on a fresh one), kept when it did
// not run, and the next call must work.
func TestHostile(t *testing.T) {
	rt, logs := newRuntime(t)
	// spin and sleep declare their own 1s timeout; the tenant's limit is
	// one a loaded machine cannot reach, for the misbehaviours that end on
	// their own (the memory bomb, the big output) even under -race. The
	// fuel is more than a second of spinning (the default is spent in
	// about one, sooner on an idle machine): here the spin ends at its
	// timeout; TestOutOfFuel runs it out of fuel.
	limits := plugins.Limits{Instances: 1, CallTimeout: 2 * time.Minute, Fuel: 1 << 50}
	m := load(t, rt, "hostile", hostileWasm(t), limits)
	healthy := load(t, rt, "get_account", getAccountWasm(t), plugins.Limits{})

	tests := []struct {
		tool, input string
		want        []error // any of them
		contains    string
		kept        bool // the instance survives (the plugin did not run)
		maxTime     time.Duration
	}{
		{tool: "spin", want: []error{plugins.ErrTimeout, context.DeadlineExceeded}, contains: "timed out after 1s"},
		{tool: "sleep", want: []error{plugins.ErrTimeout}},
		{tool: "memory_bomb", want: []error{plugins.ErrOutOfMemory}, contains: "512 pages"},
		{tool: "trap", want: []error{plugins.ErrTrap}, contains: "out of bounds memory access"},
		{tool: "var_bomb", want: []error{plugins.ErrTrap}, contains: "Variable store is full"},
		{tool: "exit", want: []error{plugins.ErrExited}, contains: "exit code 3"},
		{tool: "exit0", want: []error{plugins.ErrMalformedOutput}},
		{tool: "big_output", input: `{}`, want: []error{plugins.ErrOutOfMemory, plugins.ErrOutputTooLarge}},
		{tool: "big_output", input: `{"bytes":2097152}`, want: []error{plugins.ErrOutputTooLarge}, contains: "the limit is 1048576"},
		{tool: "panic", want: []error{plugins.ErrToolFailed}, contains: "panic in call: boom"},
		{tool: "fail", want: []error{plugins.ErrToolFailed}, contains: "account 7 not found"},
		{tool: "read_file", want: []error{plugins.ErrToolFailed}, contains: "/etc/passwd"},
		{tool: "list_root", want: []error{plugins.ErrToolFailed}},
		{tool: "fetch", input: `{"url":"https://example.com/"}`, want: []error{plugins.ErrToolFailed}, contains: "HTTP is not allowed for this plugin"},
		{tool: "kv", input: `{"key":"k","value":"v"}`, want: []error{plugins.ErrToolFailed}, contains: "key-value store is not enabled"},
		{tool: "ok", input: `[1,2]`, want: []error{plugins.ErrInvalidInput}, contains: "/: got array, want object", kept: true},
		{tool: "echo", input: `{"x":"` + strings.Repeat("y", 2<<20) + `"}`, want: []error{plugins.ErrInputTooLarge}, kept: true},
	}
	for _, tt := range tests {
		t.Run(tt.tool+tt.input[:min(len(tt.input), 16)], func(t *testing.T) {
			before := okCalls(t, m)
			start := time.Now()
			res, err := callTool(t, m, tt.tool, tt.input)
			elapsed := time.Since(start)
			if err == nil {
				t.Fatalf("%s: no error; output %.200q", tt.tool, res.Output)
			}
			matched := false
			for _, w := range tt.want {
				matched = matched || errors.Is(err, w)
			}
			if !matched {
				t.Fatalf("%s: error %v, want one of %v", tt.tool, err, tt.want)
			}
			var pe *plugins.PluginError
			if !errors.As(err, &pe) || pe.Plugin != "hostile" || pe.Name != tt.tool {
				t.Errorf("%s: error %#v is not a *PluginError naming the plugin and tool", tt.tool, err)
			}
			if tt.contains != "" && !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("%s: error %q does not mention %q", tt.tool, err, tt.contains)
			}
			// A guard against a call that is never interrupted, not a speed check.
			if max := 90 * time.Second; elapsed > max {
				t.Errorf("%s: took %s", tt.tool, elapsed)
			}
			after := okCalls(t, m)
			switch {
			case tt.kept && after != before+1:
				t.Errorf("%s: instance replaced (calls %d then %d), want it kept", tt.tool, before, after)
			case !tt.kept && after != 1:
				t.Errorf("%s: instance kept (calls %d then %d), want it discarded", tt.tool, before, after)
			}
			if _, err := callTool(t, healthy, "get_account", `{"account_id":"42"}`); err != nil {
				t.Errorf("healthy plugin after %s: %v", tt.tool, err)
			}
		})
	}
	if t.Failed() {
		t.Log(logs.String())
	}
}

// TestHostileEnvironment: a plugin sees no environment variables.
func TestHostileEnvironment(t *testing.T) {
	t.Setenv("AGENTIC_SECRET_FOR_TEST", "hunter2")
	rt, _ := newRuntime(t)
	m := load(t, rt, "hostile", hostileWasm(t), plugins.Limits{})
	res, err := callTool(t, m, "env", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "null" && res.Output != "[]" {
		t.Fatalf("environment visible to the plugin: %s", res.Output)
	}
}

// TestHostileNetwork: HTTP reaches only allowed hosts, never a private
// address unless allowed, and every redirect is checked again.
func TestHostileNetwork(t *testing.T) {
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		switch r.URL.Path {
		case "/redirect-out":
			http.Redirect(w, r, "http://forbidden.example/", http.StatusFound)
		case "/redirect-in":
			http.Redirect(w, r, "/hello", http.StatusFound)
		case "/big":
			w.Write([]byte(strings.Repeat("z", 4096)))
		default:
			w.Write([]byte("hello from the test server"))
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	rt, _ := newRuntime(t)
	wasm := hostileWasm(t)

	fetch := func(m *plugins.Module, target string) (string, error) {
		res, err := callTool(t, m, "fetch", `{"url":"`+target+`"}`)
		return res.Output, err
	}

	// Allowed by name (and port: a host without one is its default
	// port), but loopback: refused at dial time.
	noPrivate := load(t, rt, "hostile", wasm, plugins.Limits{AllowedHosts: []string{u.Host, "localhost:" + u.Port()}})
	for _, target := range []string{srv.URL + "/", "http://localhost:" + u.Port() + "/"} {
		_, err := fetch(noPrivate, target)
		if !errors.Is(err, plugins.ErrToolFailed) || !strings.Contains(err.Error(), "not public") {
			t.Errorf("loopback %s without AllowPrivateNetwork: %v", target, err)
		}
	}
	for _, target := range []string{"http://10.1.2.3/", "http://169.254.169.254/latest/meta-data/", "http://[::1]:" + u.Port() + "/"} {
		_, err := fetch(noPrivate, target)
		if err == nil || !strings.Contains(err.Error(), "not among the hosts this plugin may reach") {
			t.Errorf("unlisted %s: %v", target, err)
		}
	}
	if hits != 0 {
		t.Fatalf("the test server was reached %d times", hits)
	}

	limits := plugins.Limits{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true, MaxRedirects: 2, MaxHTTPResponseBytes: 1024}
	m := load(t, rt, "hostile", wasm, limits)
	out, err := fetch(m, srv.URL+"/")
	if err != nil || !strings.Contains(out, "hello from the test server") || !strings.Contains(out, `"status":200`) {
		t.Fatalf("allowed fetch: %s, %v", out, err)
	}
	out, err = fetch(m, srv.URL+"/redirect-in")
	if err != nil || !strings.Contains(out, "hello from the test server") {
		t.Fatalf("redirect within the allowed host: %s, %v", out, err)
	}
	_, err = fetch(m, srv.URL+"/redirect-out")
	if err == nil || !strings.Contains(err.Error(), "forbidden.example") || !strings.Contains(err.Error(), "not among the hosts this plugin may reach") {
		t.Fatalf("redirect to a host not allowed: %v", err)
	}
	_, err = fetch(m, srv.URL+"/big")
	if err == nil || !strings.Contains(err.Error(), "exceeds 1024 bytes") {
		t.Fatalf("response over the cap: %v", err)
	}
	_, err = fetch(m, "file:///etc/passwd")
	if err == nil || !strings.Contains(err.Error(), "scheme") {
		t.Fatalf("file URL: %v", err)
	}

	// No redirects by default: the plugin gets the 3xx.
	m0 := load(t, rt, "hostile", wasm, plugins.Limits{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true})
	out, err = fetch(m0, srv.URL+"/redirect-out")
	if err != nil || !strings.Contains(out, `"status":302`) || !strings.Contains(out, "forbidden.example") {
		t.Fatalf("redirect not followed: %s, %v", out, err)
	}
}

// TestHostileKV: the key-value store is scoped to the tenant, and bounds
// a value (MaxKVValueBytes) and a key (MaxKVKeyBytes, 256 bytes by
// default).
func TestHostileKV(t *testing.T) {
	rt, _ := newRuntime(t)
	wasm := hostileWasm(t)
	a := load(t, rt, "hostile", wasm, plugins.Limits{KV: true, MaxKVValueBytes: 16})
	b := plugintestLoad(t, rt, "hostile", wasm, "other", plugins.Limits{KV: true})
	if res, err := callTool(t, a, "kv", `{"key":"k","value":"from acme"}`); err != nil || !strings.Contains(res.Output, `"value":"from acme"`) {
		t.Fatalf("set: %s %v", res.Output, err)
	}
	if res, err := callTool(t, b, "kv", `{"key":"k"}`); err != nil || !strings.Contains(res.Output, `"found":false`) {
		t.Fatalf("another tenant sees the key: %s %v", res.Output, err)
	}
	if _, err := callTool(t, a, "kv", `{"key":"k","value":"`+strings.Repeat("v", 17)+`"}`); err == nil || !strings.Contains(err.Error(), "exceeds 16") {
		t.Fatalf("value over the cap: %v", err)
	}
	// A key is at most MaxKVKeyBytes, 256 by default.
	if _, err := callTool(t, a, "kv", `{"key":"`+strings.Repeat("k", 256)+`","value":"v"}`); err != nil {
		t.Fatalf("a key of 256 bytes: %v", err)
	}
	if _, err := callTool(t, a, "kv", `{"key":"`+strings.Repeat("k", 257)+`","value":"v"}`); err == nil || !strings.Contains(err.Error(), "bad key") || !strings.Contains(err.Error(), "exceeds 256") {
		t.Fatalf("a key of 257 bytes: %v", err)
	}
}

// TestHostileKVQuota: a plugin cannot fill the host's storage with keys:
// beyond MaxKVKeys a new key is refused, while overwrites still work.
func TestHostileKVQuota(t *testing.T) {
	rt, _ := newRuntime(t)
	m := load(t, rt, "hostile", hostileWasm(t), plugins.Limits{KV: true, MaxKVKeys: 3})
	for i := range 3 {
		if _, err := callTool(t, m, "kv", fmt.Sprintf(`{"key":"k%d","value":"v"}`, i)); err != nil {
			t.Fatalf("key %d of 3: %v", i, err)
		}
	}
	_, err := callTool(t, m, "kv", `{"key":"k3","value":"v"}`)
	if !errors.Is(err, plugins.ErrToolFailed) || !strings.Contains(err.Error(), "key-value store is full (3 keys, the limit is 3)") {
		t.Fatalf("a 4th key: %v", err)
	}
	if res, err := callTool(t, m, "kv", `{"key":"k1","value":"overwritten"}`); err != nil || !strings.Contains(res.Output, `"value":"overwritten"`) {
		t.Fatalf("an overwrite at the limit: %s, %v", res.Output, err)
	}
	if res, err := callTool(t, m, "kv", `{"key":"k3"}`); err != nil || !strings.Contains(res.Output, `"found":false`) {
		t.Fatalf("the refused key: %s, %v", res.Output, err)
	}
}

// TestLiars: modules whose describe lies or is malformed are rejected with
// the reason, and the host keeps serving.
func TestLiars(t *testing.T) {
	rt, _ := newRuntime(t)
	tests := []struct {
		variant  string
		want     error
		contains string
	}{
		{"BAD_SCHEMA", plugins.ErrInvalidDescription, "input_schema"},
		{"REMOTE_REF", plugins.ErrInvalidDescription, "file:///etc/passwd"},
		{"NOT_OBJECT", plugins.ErrInvalidDescription, "object schema"},
		{"ABI2", plugins.ErrABIVersion, `abi "2.0": this host speaks 1.x`},
		{"NO_ABI", plugins.ErrABIVersion, "no \"abi\""},
		{"BAD_EFFECT", plugins.ErrInvalidDescription, `unknown effect "sometimes"`},
		{"BAD_NAME", plugins.ErrInvalidDescription, "no spaces allowed"},
		{"DUPLICATE", plugins.ErrInvalidDescription, "described twice"},
		{"NOT_JSON", plugins.ErrMalformedOutput, "describe"},
		{"NO_VALIDATE", plugins.ErrInvalidDescription, `no "validate" export`},
		{"INIT_TRAP", plugins.ErrTrap, "failed to initialize runtime"},
	}
	for _, tt := range tests {
		t.Run(tt.variant, func(t *testing.T) {
			_, err := rt.Load(context.Background(), plugins.Source{Name: "liar", Wasm: liarWasm(t, tt.variant)})
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.contains) {
				t.Fatalf("load: %v, want %v mentioning %q", err, tt.want, tt.contains)
			}
			var pe *plugins.PluginError
			if !errors.As(err, &pe) || pe.Plugin != "liar" {
				t.Fatalf("not a *PluginError: %#v", err)
			}
		})
	}

	t.Run("value", func(t *testing.T) {
		m := load(t, rt, "liar", liarWasm(t, "VALUE"), plugins.Limits{})
		v, _ := m.Validator("v")
		res, err := validate(v, `{"title":"ok"}`)
		if !errors.Is(err, plugins.ErrMalformedOutput) || !strings.Contains(err.Error(), "does not match the validator's own schema") {
			t.Fatalf("lying validator: %+v, %v", res, err)
		}
		res, err = validate(v, `{"title":7}`)
		if err != nil || res.OK || len(res.Errors) != 1 || !strings.HasPrefix(res.Errors[0], "/title: ") {
			t.Fatalf("invalid deliverable: %+v, %v", res, err)
		}
	})

	t.Run("malformed", func(t *testing.T) {
		m := load(t, rt, "liar", liarWasm(t, "MALFORMED"), plugins.Limits{})
		for _, mode := range []string{"json", "array", "empty", "trailing"} {
			_, err := callTool(t, m, "t", `{"mode":"`+mode+`"}`)
			if !errors.Is(err, plugins.ErrMalformedOutput) {
				t.Errorf("%s: %v, want ErrMalformedOutput", mode, err)
			}
		}
		if _, err := callTool(t, m, "t", `{"mode":"trap"}`); !errors.Is(err, plugins.ErrTrap) || !strings.Contains(err.Error(), "unreachable") {
			t.Errorf("trap: %v", err)
		}
		if _, err := callTool(t, m, "t", `{"mode":"error_set"}`); !errors.Is(err, plugins.ErrToolFailed) || !strings.Contains(err.Error(), "set through error_set") {
			t.Errorf("error_set: %v", err)
		}
		if res, err := callTool(t, m, "t", `{"mode":"ok"}`); err != nil || res.Output != "fine" {
			t.Errorf("ok after the rest: %q %v", res.Output, err)
		}
		p, _ := m.Policy("p")
		if _, err := p.Decide(context.Background(), host.PolicyRequest{Tool: host.ToolSpec{Name: "x", Effect: "read"}}); !errors.Is(err, plugins.ErrMalformedOutput) || !strings.Contains(err.Error(), `unknown decision "maybe"`) {
			t.Errorf("policy: %v", err)
		}
	})
}

func plugintestLoad(t *testing.T, rt *plugins.Runtime, name string, wasm []byte, tenant string, limits plugins.Limits) *plugins.Module {
	t.Helper()
	m, err := rt.Load(context.Background(), plugins.Source{Name: name, Wasm: wasm, Tenant: tenant, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// TestGoPluginWithoutCShared: a Go plugin built as a command (without
// -buildmode=c-shared) traps at its first export; the error says how to
// build it.
func TestGoPluginWithoutCShared(t *testing.T) {
	rt, _ := newRuntime(t)
	wasm := plugintest.MustBuild(t, plugintest.Build{Kind: "go", Dir: "../examples/plugins/get_account", Flags: []string{"-buildmode=exe"}})
	_, err := rt.Load(context.Background(), plugins.Source{Name: "get_account", Wasm: wasm})
	if !errors.Is(err, plugins.ErrTrap) || !strings.Contains(err.Error(), "go build -buildmode=c-shared") {
		t.Fatalf("load: %v, want a trap saying how to build the plugin", err)
	}
}

// TestToolTimeoutNeverLengthens: a tool's own timeout (timeout_ms, 1s for
// the hostile module's spin) shortens the tenant's CallTimeout, never
// lengthens it: under a tenant's 300ms, the spin is stopped at 300ms.
func TestToolTimeoutNeverLengthens(t *testing.T) {
	rt, _ := newRuntime(t)
	m := load(t, rt, "hostile", hostileWasm(t), plugins.Limits{Instances: 1, CallTimeout: 300 * time.Millisecond, Fuel: 1 << 50})
	_, err := callTool(t, m, "spin", `{}`)
	if !errors.Is(err, plugins.ErrTimeout) || !strings.Contains(err.Error(), "timed out after 300ms") {
		t.Fatalf("spin under a tenant's 300ms: %v, want timed out after 300ms", err)
	}
}
