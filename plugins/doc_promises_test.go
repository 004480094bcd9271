package plugins_test

import (
	"context"
	"encoding/json"
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
	"github.com/agentichost/agentic/host/hosttest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// Tests of promises docs/plugins.md and docs/architecture.md make: the
// bounds on a policy's and a validator's text, on a signature file, on a
// wait's event key and on the traffic record's errors; a plugin's own
// Idempotency-Key; and the engine TypeScript plugins share.

// loudScript is a TypeScript plugin whose validator and policy answer as
// much text as they are asked for: the validator the problems its
// deliverable counts ("problems" of "bytes" bytes each) or an error of
// "fail" bytes, the policy a denial whose reason and summary are as long
// as its input says, or an error of "fail" bytes. %q is the kit's module.
const loudScript = `import { policy, validator } from %q;

validator({
  name: "loud",
  description: "Invalid, with the problems its deliverable asks for.",
  schema: { type: "object" },
  validate: (d: { problems?: number; bytes?: number; fail?: number }) => {
    if (d.fail) throw new Error("f".repeat(d.fail));
    const errors: string[] = [];
    for (let i = 0; i < (d.problems ?? 0); i++) errors.push(String.fromCharCode(97 + (i %% 26)).repeat(d.bytes ?? 1));
    return { ok: false, errors };
  },
});

policy({
  name: "loud",
  description: "Denies, with the reason and summary its input asks for.",
  decide: (r) => {
    if (r.input.fail) throw new Error("f".repeat(r.input.fail));
    return { decision: "deny", reason: "r".repeat(r.input.reason ?? 0), summary: "s".repeat(r.input.summary ?? 0) };
  },
});
`

// loudWasm builds loudScript with the TypeScript kit, from a directory of
// its own.
func loudWasm(t *testing.T) []byte {
	t.Helper()
	kit, err := filepath.Abs("../pdk/ts")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "loud.ts"), fmt.Appendf(nil, loudScript, filepath.Join(kit, "agentic")), 0o644); err != nil {
		t.Fatal(err)
	}
	return plugintest.TypeScriptPlugin(t, dir, "loud.ts", kit)
}

// TestPolicyAndValidatorTextBounded: MaxErrorBytes bounds every text a
// plugin returns beside its output, not only a tool's error: a policy's
// reason and summary are each cut to it, saying how much was cut; a
// validator's problems together hold at most that much text, the rest
// counted; and the error a validator or a policy fails with is cut like a
// tool's. Text within the bound comes through whole.
func TestPolicyAndValidatorTextBounded(t *testing.T) {
	const max = 200
	ctx := context.Background()
	rt, _ := newRuntime(t)
	m := load(t, rt, "loud", loudWasm(t), plugins.Limits{MaxErrorBytes: max})
	cut := func(s string, c byte) bool {
		return strings.HasPrefix(s, strings.Repeat(string(c), max)+"… [") && strings.HasSuffix(s, " more bytes cut]") && len(s) <= max+40
	}

	p, ok := m.Policy("loud")
	if !ok {
		t.Fatal("no policy loud")
	}
	decide := func(input string) (host.Decision, error) {
		return p.Decide(ctx, host.PolicyRequest{Tool: host.ToolSpec{Name: "publish", Effect: host.EffectWrite}, Input: json.RawMessage(input)})
	}
	d, err := decide(`{"reason":10000,"summary":10000}`)
	if err != nil || d.Verdict != host.Deny {
		t.Fatalf("decide: %v %v", d.Verdict, err)
	}
	if !cut(d.Reason, 'r') || !cut(d.Summary, 's') {
		t.Errorf("a reason and a summary of 10,000 bytes under MaxErrorBytes %d: %d and %d bytes (%.60q…, %.60q…)", max, len(d.Reason), len(d.Summary), d.Reason, d.Summary)
	}
	if d, err := decide(`{"reason":50,"summary":50}`); err != nil || d.Reason != strings.Repeat("r", 50) || d.Summary != strings.Repeat("s", 50) {
		t.Errorf("a reason and a summary within the bound: %+v, %v", d, err)
	}
	if _, err := decide(`{"fail":10000}`); err == nil || len(err.Error()) > max+200 || !strings.Contains(err.Error(), "more bytes cut") {
		t.Errorf("a policy failing with 10,000 bytes: %d bytes: %.300v", len(err.Error()), err)
	}

	v, ok := m.Validator("loud")
	if !ok {
		t.Fatal("no validator loud")
	}
	res, err := validate(v, `{"problems":1,"bytes":10000}`)
	if err != nil || res.OK || len(res.Errors) != 1 || !cut(res.Errors[0], 'a') {
		t.Errorf("one problem of 10,000 bytes: %v, %d problems, %d bytes", err, len(res.Errors), len(strings.Join(res.Errors, "")))
	}
	// Ten problems of 60 bytes: three whole, the fourth cut to what is
	// left of the 200 bytes, the others counted.
	res, err = validate(v, `{"problems":10,"bytes":60}`)
	if err != nil || res.OK || len(res.Errors) != 5 || res.Errors[4] != "(and 6 more problems)" {
		t.Fatalf("ten problems of 60 bytes: %v, %q", err, res.Errors)
	}
	if n := len(strings.Join(res.Errors[:4], "")); n > max+40 || res.Errors[0] != strings.Repeat("a", 60) || !strings.HasPrefix(res.Errors[3], strings.Repeat("d", 20)+"… [") {
		t.Errorf("ten problems of 60 bytes under MaxErrorBytes %d: %d bytes of problems: %q", max, n, res.Errors)
	}
	if res, err := validate(v, `{"problems":2,"bytes":10}`); err != nil || strings.Join(res.Errors, ",") != strings.Repeat("a", 10)+","+strings.Repeat("b", 10) {
		t.Errorf("two problems within the bound: %q, %v", res.Errors, err)
	}
	if _, err := validate(v, `{"fail":10000}`); err == nil || len(err.Error()) > max+200 || !strings.Contains(err.Error(), "more bytes cut") {
		t.Errorf("a validator failing with 10,000 bytes: %d bytes: %.300v", len(err.Error()), err)
	}
}

// TestSignatureFileBounded: a module's signature file (NAME.wasm.minisig)
// is read no further than MaxSignatureBytes. One of exactly that size is
// read whole; one a byte longer, or one without end (a link to
// /dev/zero), is refused as a bad signature, from "verify", before
// anything compiles the module — by ReadSourceWithin and by LoadFile,
// whose tenant requires no signature.
func TestSignatureFileBounded(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	dir := t.TempDir()
	wasm := []byte("\x00asm\x01\x00\x00\x00") // refused, if ever compiled, for exporting nothing
	for _, name := range []string{"exact", "over", "endless"} {
		if err := os.WriteFile(filepath.Join(dir, name+".wasm"), wasm, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "exact.wasm.minisig"), make([]byte, plugins.MaxSignatureBytes), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "over.wasm.minisig"), make([]byte, plugins.MaxSignatureBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "endless.wasm.minisig")); err != nil {
		t.Fatal(err)
	}

	src, err := plugins.ReadSourceWithin(filepath.Join(dir, "exact.wasm"), plugins.Limits{})
	if err != nil || len(src.Signature) != plugins.MaxSignatureBytes {
		t.Fatalf("a signature of MaxSignatureBytes: %d bytes read, %v", len(src.Signature), err)
	}
	want := fmt.Sprintf("is over %d bytes: not read further", plugins.MaxSignatureBytes)
	refused := func(what string, err error) {
		t.Helper()
		pe, ok := errors.AsType[*plugins.PluginError](err)
		if !errors.Is(err, plugins.ErrBadSignature) || !strings.Contains(err.Error(), want) || !ok || pe.Export != "verify" {
			t.Errorf("%s: %v, want ErrBadSignature from verify saying %q", what, err, want)
		}
	}
	for _, name := range []string{"over", "endless"} {
		err := within(t, time.Minute, "reading "+name, func() error {
			_, err := plugins.ReadSourceWithin(filepath.Join(dir, name+".wasm"), plugins.Limits{})
			return err
		})
		refused("ReadSourceWithin "+name, err)
	}

	rt, _ := newRuntime(t)
	reg := plugins.NewRegistry(rt, plugins.RegistryOptions{})
	t.Cleanup(func() { _ = reg.Close(context.Background()) })
	for _, name := range []string{"over", "endless"} {
		err := within(t, time.Minute, "LoadFile of "+name, func() error {
			_, err := reg.LoadFile(context.Background(), "acme", filepath.Join(dir, name+".wasm"))
			return err
		})
		refused("LoadFile "+name, err)
	}
	if n := plugins.CompilerRuns(rt); n != 0 {
		t.Errorf("%d compiler processes for modules refused for their signature files, want none", n)
	}
}

// TestWaitEventKeyBounded: a wait's event key is 1 to MaxEventKeyBytes
// (256) bytes. In a durable call (a tool call of a run), a key of 256
// bytes (128 two-byte characters) parks the run waiting for it; one of
// 258 bytes is refused as a bad key — the call fails saying so and the
// run goes on, waiting for nothing.
func TestWaitEventKeyBounded(t *testing.T) {
	ctx := context.Background()
	rt, _ := newRuntime(t)
	m := load(t, rt, "wait_event", waitEventWasm(t), plugins.Limits{})
	hs := hosttest.New(t, host.Options{Agent: host.Agent{Tools: m.Tools()}})
	wait := func(session, key string) host.RunResult {
		t.Helper()
		args, _ := json.Marshal(map[string]string{"key": key})
		hs.Model.Enqueue(hosttest.Reply{ToolCalls: []hosttest.ToolCall{{Name: "wait_event", Arguments: string(args)}}})
		res, err := hs.Host.Session(session).Send(ctx, "wait for it", host.SendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	longest := strings.Repeat("é", host.MaxEventKeyBytes/2)
	if res := wait("s1", longest); res.Status != ledger.RunWaiting || len(res.Waits) != 1 || res.Waits[0].Event != longest {
		t.Fatalf("a key of %d bytes: %s, waits %+v; want the run waiting for it", len(longest), res.Status, res.Waits)
	}

	over := longest + "é"
	res := wait("s2", over)
	if res.Status != ledger.RunCompleted || len(res.Waits) != 0 {
		t.Fatalf("a key of %d bytes: %s, waits %+v; want the run to go on", len(over), res.Status, res.Waits)
	}
	var results []ledger.ToolResult
	for _, e := range hs.Events("s2") {
		if e.ToolResult != nil {
			results = append(results, *e.ToolResult)
		}
	}
	want := fmt.Sprintf("exceeds %d", host.MaxEventKeyBytes)
	if len(results) != 1 || !results[0].IsError || !strings.Contains(results[0].Output, "denied by the host") || !strings.Contains(results[0].Output, "bad key") || !strings.Contains(results[0].Output, want) {
		t.Errorf("a key of %d bytes: tool results %+v, want the call refused, saying %q", len(over), results, want)
	}
}

// TestTrafficErrorBounded: the error a call's traffic record keeps of a
// request is cut to 512 bytes (docs/plugins.md: "Error texts are cut to
// 512 bytes"), however long the error the plugin was told: here a
// refusal naming a host of 1,500 bytes.
func TestTrafficErrorBounded(t *testing.T) {
	rt, _ := newRuntime(t)
	m := load(t, rt, "hostile_js", jsHostileWasm(t), plugins.Limits{AllowedHosts: []string{"example.com"}})
	long := strings.Repeat("a", 1500) + ".example"
	res, err := callTool(t, m, "fetch", `{"url":"http://`+long+`/"}`)
	if !errors.Is(err, plugins.ErrToolFailed) || !strings.Contains(err.Error(), "not among the hosts") {
		t.Fatalf("a request to a host not allowed: %v", err)
	}
	if res.Traffic == nil || len(res.Traffic.HTTP) != 1 {
		t.Fatalf("traffic %+v, want the one request", res.Traffic)
	}
	x := res.Traffic.HTTP[0]
	if !x.Denied || !strings.HasPrefix(x.Error, "host "+strings.Repeat("a", 100)) || len(x.Error) > 512+len("…") || !strings.HasSuffix(x.Error, "…") {
		t.Errorf("the recorded error: %d bytes, denied %v: %.80q…; want it cut to 512 bytes", len(x.Error), x.Denied, x.Error)
	}
}

// TestPluginIdempotencyKeyKept: the host puts an Idempotency-Key on every
// request of a plugin unless the plugin sets its own (docs/plugins.md,
// "Durable calls"): a request that names one, in any case, reaches its
// server with the plugin's key alone; one that names none carries the
// host's (agentic- and 40 hex digits).
func TestPluginIdempotencyKeyKept(t *testing.T) {
	var mu sync.Mutex
	var seen [][]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Values("Idempotency-Key"))
		mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	rt, _ := newRuntime(t)
	m := load(t, rt, "reflect", reflectWasm(t), plugins.Limits{AllowedHosts: []string{u.Host}, AllowPrivateNetwork: true})
	for _, headers := range []map[string]string{
		{"Idempotency-Key": "order-42"},
		{"idempotency-key": "order-43"},
		nil,
	} {
		if res, err := callTool(t, m, "http", request(srv.URL+"/", headers)); err != nil || readAnswer(t, res.Output).Status != http.StatusOK {
			t.Fatalf("the request with %v: %s, %v", headers, res.Output, err)
		}
	}
	mu.Lock()
	got := seen[:len(seen):len(seen)]
	mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("the server saw %d requests, want 3", len(got))
	}
	if strings.Join(got[0], ",") != "order-42" || strings.Join(got[1], ",") != "order-43" {
		t.Errorf("requests with the plugin's own key carried %q and %q, want order-42 and order-43 alone", got[0], got[1])
	}
	if len(got[2]) != 1 || !strings.HasPrefix(got[2][0], "agentic-") || len(got[2][0]) != len("agentic-")+40 {
		t.Errorf("a request without a key carried %q, want the host's", got[2])
	}
	// In a durable call, the journal records the key the server saw: the
	// plugin's own (it is what an "outcome unknown" names).
	j := &memJournal{}
	call := host.ToolCall{ID: "call_1", SessionID: "sess_1", Name: "http", Input: json.RawMessage(request(srv.URL+"/", map[string]string{"Idempotency-Key": "order-44"})), Journal: j}
	if _, err := moduleTool(t, m, "http").Call(context.Background(), call); err != nil {
		t.Fatal(err)
	}
	keys := []string{}
	for _, e := range hostCalls(j.entries) {
		if e.Op == ledger.JournalHTTPSend {
			keys = append(keys, e.Key)
		}
	}
	if len(keys) != 1 || keys[0] != "order-44" {
		t.Errorf("the journal's keys %q, want the plugin's own, order-44", keys)
	}
	// Two spellings of the name: the journal records the one sent, every
	// time (the headers' order is not the map's).
	for range 8 {
		j := &memJournal{}
		call.Journal = j
		call.Input = json.RawMessage(request(srv.URL+"/", map[string]string{"Idempotency-Key": "upper", "idempotency-key": "lower"}))
		if _, err := moduleTool(t, m, "http").Call(context.Background(), call); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		sent := strings.Join(seen[len(seen)-1], ",")
		mu.Unlock()
		var journaled string
		for _, e := range hostCalls(j.entries) {
			if e.Op == ledger.JournalHTTPSend {
				journaled = e.Key
			}
		}
		if sent != "lower" || journaled != sent {
			t.Fatalf("two spellings: the server saw %q, the journal %q; want the last in sorted order, lower, in both", sent, journaled)
		}
	}
}

// TestJavaScriptEngineSharedAcrossScripts: every TypeScript plugin of the
// same configuration shares its engine's compiled module
// (docs/architecture.md): two plugins with different scripts, loaded by
// different tenants, are one compiled module, each running its own
// script; a plugin of another configuration compiles its own; one closed
// leaves the other serving on the module they share.
func TestJavaScriptEngineSharedAcrossScripts(t *testing.T) {
	ctx := context.Background()
	rt, _ := newRuntime(t)
	kitcallsWasm := plugintest.TypeScriptPlugin(t, "testdata/js", "kitcalls.ts", tsKit)
	hostile := plugintest.Load(t, rt, plugins.Source{Name: "hostile_js", Wasm: jsHostileWasm(t), Tenant: "acme"})
	kitcalls := plugintest.Load(t, rt, plugins.Source{Name: "kitcalls", Wasm: kitcallsWasm, Tenant: "beta"})
	if hostile.Hash() == kitcalls.Hash() {
		t.Fatal("two scripts, one hash")
	}
	if n := plugins.SharedPlugins(rt); n != 1 {
		t.Fatalf("two TypeScript plugins of one configuration: %d compiled modules, want 1 (the engine's)", n)
	}
	if _, ok := hostile.Tool("keyed"); ok {
		t.Error("hostile_js offers kitcalls' tool")
	}
	if res, err := callTool(t, hostile, "ok", `{}`); err != nil || res.Output != `{"ok":true}` {
		t.Errorf("hostile_js ok: %s, %v", res.Output, err)
	}
	waits := func(m *plugins.Module) {
		t.Helper()
		if res, err := callTool(t, m, "waits", `{}`); err != nil || !strings.Contains(res.Output, `"waited":true`) {
			t.Errorf("kitcalls waits: %s, %v", res.Output, err)
		}
	}
	waits(kitcalls)

	configured := plugintest.Load(t, rt, plugins.Source{Name: "kitcalls", Wasm: kitcallsWasm, Tenant: "gamma", Config: map[string]string{"region": "us"}})
	if n := plugins.SharedPlugins(rt); n != 2 {
		t.Errorf("with a plugin of another configuration: %d compiled modules, want 2", n)
	}
	waits(configured)

	hostile.Close(ctx)
	<-hostile.Done()
	if n := plugins.SharedPlugins(rt); n != 2 {
		t.Errorf("hostile_js closed, kitcalls serving: %d compiled modules, want 2", n)
	}
	waits(kitcalls)
}
