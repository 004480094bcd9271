package server_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// versionWasm builds plugins/testdata/c/version.c: tool "version" answers
// v (or traps, with -DTRAP_VERSION among more).
func versionWasm(t *testing.T, v string, more ...string) []byte {
	kit, _ := filepath.Abs("../pdk/c")
	return plugintest.CPlugin(t, "../plugins/testdata/c", []string{"version.c", kit + "/agentic.c"}, []string{kit}, append([]string{`-DVERSION="` + v + `"`}, more...))
}

// TestPluginCanary: through serve, PUT /v1/plugins/{name}/canary starts a
// version beside the one serving: the tool calls of its share of sessions
// run on it, each session always on the same version, the ledger naming
// the version that answered; GET /v1/plugins/{name} shows it with its
// counts; a restart starts it again from its files; promoted, it serves
// every session and its file takes the module's place, the old version
// kept for a rollback; a canary that traps rolls back by itself; the audit
// log says who did what; bad requests change nothing.
func TestPluginCanary(t *testing.T) {
	dir, store := t.TempDir(), memory.New()
	setup := serverSetup{Store: store, Mutate: func(c *server.Config) { c.PluginsDir = dir }}
	ts := startServer(t, setup)
	a, b := versionWasm(t, "A"), versionWasm(t, "B")
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/v", a); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/v/canary?share=0.5", b); code != 201 || !strings.Contains(body, `"share":0.5`) {
		t.Fatalf("canary: %d %s", code, body)
	}
	type transcript struct {
		Items []struct {
			ToolCalls []struct{ Output, Source string } `json:"tool_calls"`
		}
	}
	turn := 0
	version := func(ts *testServer, session string) string {
		t.Helper()
		turn++
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+session+"/messages?wait=true", `{"text":"version"}`); code != 200 {
			t.Fatalf("%s: %d %s", session, code, body)
		}
		_, body := ts.do(t, ts.acme, "GET", "/v1/sessions/"+session+"/transcript", "")
		var last string
		for _, it := range decodeJSON[transcript](t, body).Items {
			for _, c := range it.ToolCalls {
				last = c.Output
			}
		}
		return last
	}
	seen, onB := map[string]string{}, 0
	for i := range 12 {
		s := fmt.Sprint("s", i)
		seen[s] = version(ts, s)
		if seen[s] == `{"version":"B"}` {
			onB++
		}
	}
	if onB == 0 || onB == 12 {
		t.Fatalf("%d of 12 sessions on the canary at a share of 0.5: %v", onB, seen)
	}
	for s, v := range seen {
		if got := version(ts, s); got != v {
			t.Errorf("session %s saw %s, then %s", s, v, got)
		}
	}
	type info struct {
		Hash   string
		Canary *struct {
			Hash, Serving string
			Share         float64
			Calls         int
		}
		Versions []struct{ Hash string }
	}
	get := func(ts *testServer) info {
		_, body := ts.do(t, ts.acme, "GET", "/v1/plugins/v", "")
		return decodeJSON[info](t, body)
	}
	i := get(ts)
	if i.Canary == nil || i.Canary.Serving != i.Hash || i.Canary.Calls != 2*onB {
		t.Fatalf("the plugin: %+v, want its canary with %d calls", i, 2*onB)
	}
	canaryHash := i.Canary.Hash
	if line := metricLine(ts, t, "agentic_plugins_canary_share_ratio{"); !strings.Contains(line, `plugin="v"`) || !strings.HasSuffix(line, " 0.5") {
		t.Errorf("/metrics: %q", line)
	}

	// A restart starts it again.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts.Close()
	ts.srv.Close(ctx)
	ts = startServer(t, setup)
	waitFor(t, "the plugin to load", func() bool { return get(ts).Hash != "" })
	if i := get(ts); i.Canary == nil || i.Canary.Hash != canaryHash || i.Canary.Share != 0.5 {
		t.Fatalf("after a restart: %+v", i)
	}
	for s, v := range seen {
		if got := version(ts, s); got != v {
			t.Errorf("after a restart, session %s saw %s, then %s", s, v, got)
		}
	}

	// Promoted: every session on B, its file in the module's place.
	code, body := ts.do(t, ts.acme, "POST", "/v1/plugins/v/canary/promote", "")
	if code != 200 || decodeJSON[info](t, body).Hash != canaryHash {
		t.Fatalf("promote: %d %s", code, body)
	}
	for s := range seen {
		if got := version(ts, s); got != `{"version":"B"}` {
			t.Errorf("after the promotion, session %s: %s", s, got)
		}
	}
	if file, _ := os.ReadFile(filepath.Join(dir, "acme", "v.wasm")); !bytes.Equal(file, b) {
		t.Error("the module's file is not the canary promoted")
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "acme", ".canary", "*")); len(files) != 0 {
		t.Errorf("the canary's files after its promotion: %v", files)
	}
	if i := get(ts); i.Canary != nil || len(i.Versions) == 0 {
		t.Errorf("after the promotion: %+v, want no canary and A kept", i)
	}

	// A canary that traps is rolled back by itself.
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/v/canary?share=1", versionWasm(t, "T", "-DTRAP_VERSION")); code != 201 {
		t.Fatalf("the trapping canary: %d %s", code, body)
	}
	if got := version(ts, "t1"); !strings.Contains(got, "trap") {
		t.Errorf("the trapping canary answered %q", got)
	}
	waitFor(t, "the canary rolled back", func() bool { return get(ts).Canary == nil })
	if got := version(ts, "t1"); got != `{"version":"B"}` {
		t.Errorf("after the rollback: %s", got)
	}
	waitFor(t, "its files removed", func() bool {
		files, _ := filepath.Glob(filepath.Join(dir, "acme", ".canary", "*"))
		return len(files) == 0
	})

	// Bad requests change nothing.
	for _, c := range []struct {
		method, path string
		body         []byte
		want         int
	}{
		{"PUT", "/v1/plugins/v/canary?share=2", b, 400},
		{"PUT", "/v1/plugins/v/canary?rollback_after=x", b, 400},
		{"PUT", "/v1/plugins/none/canary", b, 404},
		{"PUT", "/v1/plugins/v/canary", []byte("not wasm"), 422},
		{"PUT", "/v1/plugins/v/canary", b, 422}, // the version serving
		{"POST", "/v1/plugins/v/canary/promote", nil, 404},
		{"DELETE", "/v1/plugins/v/canary", nil, 404},
	} {
		if code, body := ts.doBytes(t, ts.acme, c.method, c.path, c.body); code != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, code, body, c.want)
		}
	}
	if i := get(ts); i.Canary != nil || i.Hash != canaryHash {
		t.Errorf("after the bad requests: %+v", i)
	}

	// A person rolls one back.
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/v/canary", versionWasm(t, "C")); code != 201 {
		t.Fatalf("canary C: %d %s", code, body)
	}
	if code, _ := ts.do(t, ts.acme, "DELETE", "/v1/plugins/v/canary", ""); code != 204 || get(ts).Canary != nil {
		t.Errorf("rolling back: %d", code)
	}

	_, body = ts.do(t, ts.acme, "GET", "/v1/audit?plugin=v", "")
	var got []string
	for _, e := range decodeJSON[struct{ Entries []struct{ Action, By string } }](t, body).Entries {
		if strings.HasPrefix(e.Action, "canary") {
			got = append(got, e.Action+" by "+strings.Fields(e.By)[0])
		}
	}
	want := "canary_started by key|canary_started by host|canary_promoted by key|canary_started by key|canary_rolled_back by host|canary_started by key|canary_rolled_back by key"
	if strings.Join(got, "|") != want {
		t.Errorf("the audit log's canary entries:\n%s\nwant\n%s", strings.Join(got, "|"), want)
	}
}

// TestSignedCanary: a tenant that trusts keys takes a canary only signed
// by one of them, as an upload; the signature is kept with the canary and
// goes with it into the module's place when it is promoted.
func TestSignedCanary(t *testing.T) {
	key := plugintest.NewMinisignKey(t)
	dir := t.TempDir()
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) {
		c.PluginsDir = dir
		acme := c.Tenants["acme"]
		acme.Sandbox.TrustedKeyFiles = []string{key.PublicKeyFile}
		c.Tenants["acme"] = acme
	}})
	a, b := versionWasm(t, "A"), versionWasm(t, "B")
	if code, body := ts.uploadSigned(t, ts.acme, "v", a, key.Sign(t, a)); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/v/canary", b); code != 422 || !strings.Contains(body, "not signed") {
		t.Errorf("an unsigned canary: %d %s", code, body)
	}
	sig := key.Sign(t, b)
	if code, body := ts.putSigned(t, ts.acme, "/v1/plugins/v/canary?share=1", "v", b, sig); code != 201 {
		t.Fatalf("a signed canary: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/plugins/v/canary/promote", ""); code != 200 {
		t.Fatalf("promote: %d %s", code, body)
	}
	waitFor(t, "the promoted canary's files in place", func() bool {
		got, _ := os.ReadFile(filepath.Join(dir, "acme", "v.wasm"))
		gotSig, _ := os.ReadFile(filepath.Join(dir, "acme", "v.wasm"+plugins.SignatureSuffix))
		return bytes.Equal(got, b) && bytes.Equal(gotSig, sig)
	})
}

// TestPluginCanaryWideningHeld: through serve, a canary that widens the
// version serving (a tool more) is held — 202, listed among the held
// versions as a canary's, serving no session, held again after a restart
// — until a person approves it: it then starts as the canary, approved
// over the version serving, its files the canary's; it starts again so
// after a restart, and promotes itself after its calls as any canary.
// Fails where a PUT canary started any version at once (201), which then
// promoted itself unapproved.
func TestPluginCanaryWideningHeld(t *testing.T) {
	dir := t.TempDir()
	setup := serverSetup{Mutate: func(c *server.Config) { c.PluginsDir = dir }}
	ts := startServer(t, setup)
	a, b := widenWasm(t, `VERSION="A"`), widenWasm(t, `VERSION="B"`, "EXTRA")
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/w", a); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	type info struct {
		Hash   string
		Canary *struct {
			Hash, Serving string
			ApprovedOver  string `json:"approved_over"`
		}
	}
	get := func(ts *testServer) info {
		_, body := ts.do(t, ts.acme, "GET", "/v1/plugins/w", "")
		return decodeJSON[info](t, body)
	}
	held := func(ts *testServer) []plugins.HeldVersion {
		_, body := ts.do(t, ts.acme, "GET", "/v1/plugins", "")
		return decodeJSON[struct{ Held []plugins.HeldVersion }](t, body).Held
	}
	report := func(ts *testServer, session string) string {
		t.Helper()
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+session+"/messages?wait=true", `{"text":"report"}`); code != 200 {
			t.Fatalf("%s: %d %s", session, code, body)
		}
		_, body := ts.do(t, ts.acme, "GET", "/v1/sessions/"+session+"/transcript", "")
		var last string
		for _, it := range decodeJSON[struct {
			Items []struct {
				ToolCalls []struct{ Output string } `json:"tool_calls"`
			}
		}](t, body).Items {
			for _, c := range it.ToolCalls {
				last = c.Output
			}
		}
		return last
	}
	servingA := get(ts).Hash

	code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/w/canary?share=1&promote_after=1", b)
	if code != 202 || !strings.Contains(body, `"canary":true`) || !strings.Contains(body, `"name":"extra","change":"new"`) {
		t.Fatalf("a widening canary: %d %s, want it held", code, body)
	}
	if i := get(ts); i.Canary != nil {
		t.Fatalf("the held canary runs: %+v", i)
	}
	if got := report(ts, "s1"); got != `{"version":"A"}` {
		t.Errorf("a session while the canary is held: %s", got)
	}
	h := held(ts)
	if len(h) != 1 || !h[0].Canary {
		t.Fatalf("held: %+v", h)
	}
	hash := h[0].Hash

	// A restart holds it again.
	restart := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ts.Close()
		ts.srv.Close(ctx)
		ts = startServer(t, setup)
		waitFor(t, "the plugin to load", func() bool { return get(ts).Hash != "" })
	}
	restart()
	if h := held(ts); len(h) != 1 || !h[0].Canary || h[0].Hash != hash || get(ts).Canary != nil {
		t.Fatalf("after a restart: held %+v, plugin %+v", h, get(ts))
	}

	// Approved: it starts as the canary.
	if code, body := ts.do(t, ts.acme, "POST", "/v1/plugins/w/versions/"+hash, `{"approve":true}`); code != 200 {
		t.Fatalf("approve: %d %s", code, body)
	}
	if i := get(ts); i.Hash != servingA || i.Canary == nil || i.Canary.Hash != hash || i.Canary.ApprovedOver != servingA {
		t.Fatalf("after the approval: %+v, want A serving and the approved canary beside it", i)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "acme", ".held", "*")); len(files) != 0 {
		t.Errorf("the held files after the approval: %v", files)
	}
	restart()
	if i := get(ts); i.Canary == nil || i.Canary.Hash != hash || len(held(ts)) != 0 {
		t.Fatalf("after a restart, the approved canary: %+v, held %+v", i, held(ts))
	}
	if got := report(ts, "s2"); got != `{"version":"B"}` {
		t.Errorf("a session on the approved canary: %s", got)
	}
	waitFor(t, "the canary promoted by itself, its file in the module's place", func() bool {
		file, _ := os.ReadFile(filepath.Join(dir, "acme", "w.wasm"))
		files, _ := filepath.Glob(filepath.Join(dir, "acme", ".canary", "*"))
		return get(ts).Hash == hash && bytes.Equal(file, b) && len(files) == 0
	})
}
