package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// rustKit is the Rust kit's directory, relative to testdata/rust.
const rustKit = "../../../pdk/rust"

// rustKitWasm builds testdata/rust/kit.rs, with --cfg flags.
func rustKitWasm(t testing.TB, flags ...string) []byte {
	return plugintest.RustPlugin(t, "testdata/rust", "kit.rs", []string{rustKit}, flags)
}

// TestRustKit runs the Rust kit's exports and host functions through the
// real sandbox: the key-value store, configuration, the idempotency key,
// logging, HTTP to a granted server (a text body, and one that is not
// UTF-8 both ways), waits outside a durable call, an error result, a
// panic, a validator, a policy, needs, and registration mistakes.
func TestRustKit(t *testing.T) {
	wasm := rustKitWasm(t)
	var seen http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			body, _ := io.ReadAll(r.Body)
			w.Write(body)
			return
		}
		seen = r.Header.Clone()
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("pong"))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	rt, logs := newRuntime(t)
	m := plugintest.Load(t, rt, plugins.Source{Name: "kit", Wasm: wasm, Tenant: "acme",
		Limits: plugins.Limits{KV: true, AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true},
		Config: map[string]string{"greeting": "héllo"}})

	tool, _ := m.Tool("remember")
	if s := tool.Spec(); s.Effect != host.EffectWrite || s.Idempotent || s.Timeout != 5*time.Second || !strings.Contains(string(s.InputSchema), `"note"`) {
		t.Fatalf("remember's spec: %+v", s)
	}
	desc := m.Description()
	byName := map[string]plugins.ToolDescription{}
	for _, d := range desc.Tools {
		byName[d.Name] = d
	}
	if desc.ABI != "1.1" || !byName["remember"].AtMostOnce || byName["json_echo"].AtMostOnce || !byName["json_echo"].Idempotent ||
		string(byName["fail"].InputSchema) != `{"type":"object"}` || len(desc.Tools) != 6 || desc.Needs != nil {
		t.Fatalf("description: %+v", desc)
	}

	res, err := callTool(t, m, "remember", `{"note":"héllo \"quoted\"","url":"`+srv.URL+`/ping"}`)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Value, Greeting, Key string
		Unset                *string
		Missing, Deleted     bool
		Get                  struct {
			Status      int
			Body        string
			ContentType string `json:"content_type"`
		}
		BinaryStatus int  `json:"binary_status"`
		BinaryEchoed bool `json:"binary_echoed"`
	}
	if err := json.Unmarshal([]byte(res.Output), &out); err != nil {
		t.Fatalf("%s: %v", res.Output, err)
	}
	if out.Value != `héllo "quoted"` || !out.Missing || !out.Deleted || out.Greeting != "héllo" || out.Unset != nil ||
		!strings.HasPrefix(out.Key, "agentic-") || out.Get.Status != 200 || out.Get.Body != "pong" ||
		out.Get.ContentType != "text/plain" || out.BinaryStatus != 200 || !out.BinaryEchoed {
		t.Fatalf("remember: %s", res.Output)
	}
	if seen.Get("X-Plugin") != "rust" || seen.Get("Idempotency-Key") != out.Key {
		t.Errorf("the server saw %v; the plugin's key was %s", seen, out.Key)
	}
	if !strings.Contains(logs.String(), `msg="remembering for acme in call call-1"`) {
		t.Errorf("log line missing:\n%s", logs.String())
	}

	// A host function's refusal reaches the plugin as an error, which its
	// handler returns with ?.
	bare := load(t, rt, "kit", wasm, plugins.Limits{})
	if _, err := callTool(t, bare, "remember", `{"note":"x"}`); !errors.Is(err, plugins.ErrToolFailed) ||
		!strings.Contains(err.Error(), "kv_set: denied: the key-value store is not enabled") {
		t.Fatalf("remember without the store: %v", err)
	}
	if _, err := callTool(t, bare, "remember", `{"note":"x","url":"`+srv.URL+`"}`); err == nil {
		t.Fatal("remember without the store or HTTP succeeded")
	}

	if _, err := callTool(t, m, "fail", `{}`); !errors.Is(err, plugins.ErrToolFailed) || !strings.Contains(err.Error(), "failed on purpose for acme") {
		t.Fatalf("fail: %v", err)
	}
	if _, err := callTool(t, m, "boom", `{}`); !errors.Is(err, plugins.ErrTrap) {
		t.Fatalf("boom: %v", err)
	}
	if !strings.Contains(logs.String(), "panic: ") || !strings.Contains(logs.String(), "index out of bounds") {
		t.Errorf("the panic was not logged:\n%s", logs.String())
	}
	res, err = callTool(t, m, "waits", `{}`)
	if err != nil || !strings.Contains(res.Output, `"waited":true`) || !strings.Contains(res.Output, `"denied":true`) ||
		!strings.Contains(res.Output, "wait_event: denied: only a durable call waits") {
		t.Fatalf("waits: %s %v", res.Output, err)
	}

	checkKitValidatorAndPolicy(t, m)

	// Needs: refused where the store is not granted.
	needs := rustKitWasm(t, "--cfg", "needs")
	if _, err := rt.Load(context.Background(), plugins.Source{Name: "needs", Wasm: needs}); err == nil || !strings.Contains(err.Error(), "it needs the key-value store") {
		t.Fatalf("needs without the store: %v", err)
	}
	if m := load(t, rt, "needs", needs, plugins.Limits{KV: true}); m.Description().Needs == nil || !m.Description().Needs.KV {
		t.Fatalf("needs: %+v", m.Description().Needs)
	}
	// Registration mistakes: describe fails, listing them all.
	_, err = rt.Load(context.Background(), plugins.Source{Name: "mistakes", Wasm: rustKitWasm(t, "--cfg", "mistakes")})
	if !errors.Is(err, plugins.ErrInvalidDescription) {
		t.Fatalf("mistakes: %v", err)
	}
	for _, want := range []string{`tool name "bad name": want 1 to 64 characters`, "tool boom is registered twice", "validator loose: the schema is not valid JSON"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("mistakes: no %q in %v", want, err)
		}
	}
}

// TestRustKitJSON runs the kit's JSON parser and writer through a tool:
// what it parses, written back; and what it refuses.
func TestRustKitJSON(t *testing.T) {
	rt, _ := newRuntime(t)
	m := load(t, rt, "kit", rustKitWasm(t), plugins.Limits{})
	echo := func(text string) (map[string]json.RawMessage, error) {
		t.Helper()
		in, _ := json.Marshal(map[string]string{"text": text})
		res, err := callTool(t, m, "json_echo", string(in))
		if err != nil {
			return nil, err
		}
		var out map[string]json.RawMessage
		if err := json.Unmarshal([]byte(res.Output), &out); err != nil {
			t.Fatalf("%s: %v", res.Output, err)
		}
		return out, nil
	}
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tt := range []struct{ in, want string }{
		{`{"a":{"b":[1,{"c":"x"}]},"d":[],"e":{}}`, `{"a":{"b":[1,{"c":"x"}]},"d":[],"e":{}}`},
		{" \t\n{ \"a\" : [ 1 , true , false , null ] }\r\n", `{"a":[1,true,false,null]}`},
		// Escapes: decoded, then written back with the fewest escapes.
		{`"\"\\\/\b\f\n\r\t\u0001\u001f"`, `"\"\\/\u0008\u000c\n\r\t\u0001\u001f"`},
		// Unicode: \u escapes (a surrogate pair too) and raw UTF-8 alike; a
		// lone surrogate becomes U+FFFD.
		{`"\u00e9\ud83c\udf89 é🎉 \u4e2d"`, `"é🎉 é🎉 中"`},
		{`["\ud800x","\udc00"]`, `["` + "\uFFFD" + `x","` + "\uFFFD" + `"]`},
		// Numbers keep their text: an integer past 64 bits too.
		{`[0,-0,1.5,-1.5e10,1E+2,2e-3,12345678901234567890123,0.1]`, `[0,-0,1.5,-1.5e10,1E+2,2e-3,12345678901234567890123,0.1]`},
		// A member named twice is kept twice; get reads the last.
		{`{"int":1,"int":2}`, `{"int":1,"int":2}`},
		{deep(128), deep(128)},
	} {
		out, err := echo(tt.in)
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		var text string
		json.Unmarshal(out["text"], &text)
		if text != tt.want || string(out["stable"]) != "true" {
			t.Errorf("%s: written back as %s (stable %s), want %s", tt.in, text, out["stable"], tt.want)
		}
		if tt.want != deep(128) && !strings.Contains(tt.want, "\uFFFD") && !strings.Contains(tt.want, `"int":1`) {
			// What the kit wrote back is what Go reads from the original.
			var a, b any
			if json.Unmarshal([]byte(tt.in), &a) != nil || json.Unmarshal(out["value"], &b) != nil || fmt.Sprint(a) != fmt.Sprint(b) {
				t.Errorf("%s: Go reads %v, the kit's value %s", tt.in, a, out["value"])
			}
		}
	}

	out, err := echo(`{"int":-9007199254740993,"float":2.5e-3,"a":{"b":[0,"x"]}}`)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"int":    `-9007199254740993`,
		"float":  `0.0025`,
		"nested": `"x"`,
		"made":   `{"f":1.5,"nan":null,"big":18446744073709551615,"neg":-7}`,
		"input":  `{"text":"{\"int\":-9007199254740993,\"float\":2.5e-3,\"a\":{\"b\":[0,\"x\"]}}"}`,
	} {
		if string(out[key]) != want {
			t.Errorf("%s: %s, want %s", key, out[key], want)
		}
	}
	if out, _ := echo(`{"int":12345678901234567890}`); string(out["int"]) != "null" {
		t.Errorf("an integer past i64 read as one: %s", out["int"])
	}

	for _, in := range []string{
		``, `{"a":1,}`, `[1 2]`, `01`, `1.`, `-`, `1e`, `"\x"`, "\"a\u0001\"", `"\u12"`, `tru`, `[`, `{"a"}`, `{a:1}`,
		`{"a":1} x`, `"open`, deep(129),
	} {
		if _, err := echo(in); !errors.Is(err, plugins.ErrToolFailed) || !strings.Contains(err.Error(), "json: ") {
			t.Errorf("%q: %v, want the parser's error", in, err)
		}
	}
}
