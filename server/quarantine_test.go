package server_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage"
)

// TestPluginQuarantineAndAudit: through serve, a plugin whose calls trap
// twice within the tenant's quarantine window is quarantined: GET
// /v1/plugins and /metrics say so, its next call answers the model a
// quarantined error without running, POST /v1/plugins/{name}/release lets
// it serve again (409 when it is not quarantined). GET /v1/audit lists
// every transition, oldest first, with who made it: the upload and the
// release by the API key, the quarantine by the host, a refused upload.
func TestPluginQuarantineAndAudit(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.Sandbox.Quarantine = server.QuarantineConfig{Failures: 2, Window: server.Duration(time.Minute)}
	})})
	kit, _ := filepath.Abs("../pdk/c")
	bombs := plugintest.CPlugin(t, "../plugins/testdata/c", []string{"bombs.c", kit + "/agentic.c"}, []string{kit}, nil)
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/b", bombs); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	type transcript struct {
		Items []struct {
			ToolCalls []struct{ Name, Status, Output string } `json:"tool_calls"`
		}
	}
	call := func(session, tool string) (status, output string) {
		t.Helper()
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+session+"/messages?wait=true", `{"text":"`+tool+`"}`); code != 200 {
			t.Fatalf("%s: %d %s", session, code, body)
		}
		_, body := ts.do(t, ts.acme, "GET", "/v1/sessions/"+session+"/transcript", "")
		for _, it := range decodeJSON[transcript](t, body).Items {
			for _, c := range it.ToolCalls {
				return c.Status, c.Output
			}
		}
		t.Fatalf("%s: no tool call in %s", session, body)
		return
	}
	if status, out := call("s0", "ok"); status != "done" {
		t.Fatalf("ok: %s %s", status, out)
	}
	for _, s := range []string{"s1", "s2"} {
		if status, out := call(s, "trap"); status != "error" || strings.Contains(out, "quarantined") {
			t.Fatalf("trap on %s: %s %q, want its trap", s, status, out)
		}
	}
	_, body := ts.do(t, ts.acme, "GET", "/v1/plugins", "")
	if q := decodeJSON[struct {
		Quarantined []struct {
			Name     string
			Failures int
		}
	}](t, body).Quarantined; len(q) != 1 || q[0].Name != "b" || q[0].Failures != 2 {
		t.Fatalf("after two traps: %s, want b quarantined", body)
	}
	if line := metricLine(ts, t, "agentic_plugins_quarantined{"); !strings.Contains(line, `plugin="b"`) || !strings.Contains(line, `tenant="acme"`) || !strings.HasSuffix(line, " 1") {
		t.Errorf("/metrics: %q, want b quarantined", line)
	}
	if status, out := call("s3", "ok"); status != "error" || !strings.Contains(out, "quarantined") {
		t.Errorf("a call while quarantined: %s %q", status, out)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/plugins/b/release", ""); code != 204 {
		t.Fatalf("release: %d %s", code, body)
	}
	if code, _ := ts.do(t, ts.acme, "POST", "/v1/plugins/b/release", ""); code != 409 {
		t.Errorf("a release of a plugin not quarantined: %d, want 409", code)
	}
	if code, _ := ts.do(t, ts.acme, "POST", "/v1/plugins/nope/release", ""); code != 404 {
		t.Errorf("a release of no plugin: %d, want 404", code)
	}
	if status, out := call("s4", "ok"); status != "done" {
		t.Errorf("after the release: %s %q", status, out)
	}
	if line := metricLine(ts, t, "agentic_plugins_quarantined{"); line != "" {
		t.Errorf("/metrics after the release: %q", line)
	}
	if code, _ := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/junk", []byte("not wasm")); code != 422 {
		t.Errorf("a junk upload: %d", code)
	}

	type entry struct{ Action, Plugin, Hash, By, Host, Detail string }
	_, body = ts.do(t, ts.acme, "GET", "/v1/audit", "")
	var got []string
	entries := decodeJSON[struct{ Entries []entry }](t, body).Entries
	for _, e := range entries {
		got = append(got, e.Action+" "+e.Plugin+" by "+strings.Fields(e.By)[0])
		if e.Host == "" || e.Hash == "" {
			t.Errorf("entry %+v: no host or hash", e)
		}
	}
	want := []string{"loaded b by key", "quarantined b by host", "released b by key", "refused junk by key"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("the audit log: %q, want %q\n%s", got, want, body)
	}
	if len(entries) == 4 && (!strings.Contains(entries[1].Detail, "trap") || !strings.HasPrefix(entries[0].By, "key ") || !strings.Contains(entries[3].Detail, "not a WebAssembly module")) {
		t.Errorf("entries %+v", entries)
	}
	_, body = ts.do(t, ts.acme, "GET", "/v1/audit?plugin=b&limit=2", "")
	if e := decodeJSON[struct{ Entries []entry }](t, body).Entries; len(e) != 2 || e[0].Action != "quarantined" || e[1].Action != "released" {
		t.Errorf("the last two of b: %s", body)
	}
	if _, body := ts.do(t, ts.beta, "GET", "/v1/audit", ""); !strings.Contains(body, `"entries":[]`) {
		t.Errorf("another tenant's audit log: %s", body)
	}
	if code, _ := ts.do(t, ts.acme, "GET", "/v1/audit?limit=0", ""); code != 400 {
		t.Errorf("limit=0: %d", code)
	}
	if code, _ := ts.do(t, ts.acme, "GET", "/v1/audit?limit=1001", ""); code != 400 {
		t.Errorf("limit=1001: %d, want 400 (at most 1000)", code)
	}
	// Without ?limit, the last 100.
	kv := ts.store.(storage.KV)
	for i := range 150 {
		b, _ := json.Marshal(map[string]any{"seq": i + 1000, "action": "loaded", "plugin": fmt.Sprintf("p%03d", i)})
		if err := kv.Set(t.Context(), server.AuditNamespace("acme"), fmt.Sprintf("%020d", i+1000), b); err != nil {
			t.Fatal(err)
		}
	}
	_, body = ts.do(t, ts.acme, "GET", "/v1/audit", "")
	if e := decodeJSON[struct{ Entries []entry }](t, body).Entries; len(e) != 100 || e[0].Plugin != "p050" || e[99].Plugin != "p149" {
		t.Errorf("the audit log without a limit: %d entries (%v … %v), want the last 100, p050 to p149", len(e), e[0], e[len(e)-1])
	}
	_, body = ts.do(t, ts.acme, "GET", "/v1/audit?limit=1000", "")
	if e := decodeJSON[struct{ Entries []entry }](t, body).Entries; len(e) != 154 {
		t.Errorf("limit=1000: %d entries, want all 154", len(e))
	}
}
