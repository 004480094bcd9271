package server_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// widenWasm builds plugins/testdata/c/widen.c with defines.
func widenWasm(t *testing.T, defines ...string) []byte {
	kit, _ := filepath.Abs("../pdk/c")
	flags := make([]string, len(defines))
	for i, d := range defines {
		flags[i] = "-D" + d
	}
	return plugintest.CPlugin(t, "../plugins/testdata/c", []string{"widen.c", kit + "/agentic.c"}, []string{kit}, flags)
}

// pluginsOf is GET /v1/plugins: each module's tools, and the held
// versions.
type pluginsOf struct {
	Plugins []struct {
		Name, Hash string
		Tools      []struct{ Name string }
	}
	Held []struct {
		Name, Hash, Previous string
		Widenings            []struct{ Kind, Name, Change string }
	}
}

func (p pluginsOf) tools(name string) []string {
	var out []string
	for _, m := range p.Plugins {
		if m.Name == name {
			for _, tl := range m.Tools {
				out = append(out, tl.Name)
			}
		}
	}
	return out
}

// TestPluginUpgradeHeld: through serve, an upload that widens the version
// serving (here: a new tool) is held — 202 with what it widens, kept
// aside, listed, the old version serving — across a restart too; approved,
// it serves, and its file takes the module's place; an upload that only
// narrows loads at once; a held version discarded is gone.
func TestPluginUpgradeHeld(t *testing.T) {
	dir, store := t.TempDir(), memory.New()
	setup := serverSetup{Store: store, Mutate: func(c *server.Config) { c.PluginsDir = dir }}
	ts := startServer(t, setup)
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/w", widenWasm(t)); code != 201 {
		t.Fatalf("the first version: %d %s", code, body)
	}
	wider := widenWasm(t, `VERSION="B"`, "EXTRA")
	code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/w", wider)
	held := decodeJSON[struct {
		Held struct {
			Hash      string
			Widenings []struct{ Kind, Name, Change string }
		}
	}](t, body).Held
	if code != 202 || held.Hash == "" || len(held.Widenings) != 1 || held.Widenings[0].Name != "extra" || held.Widenings[0].Change != "new" {
		t.Fatalf("a widening upload: %d %s, want 202 and the new tool", code, body)
	}
	list := func(ts *testServer) pluginsOf {
		_, body := ts.do(t, ts.acme, "GET", "/v1/plugins", "")
		return decodeJSON[pluginsOf](t, body)
	}
	if l := list(ts); slices.Contains(l.tools("w"), "extra") || len(l.Held) != 1 || l.Held[0].Hash != held.Hash {
		t.Fatalf("while held: %+v, want the old version serving and the new one held", l)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "acme", ".held", "w.*.wasm")); len(files) != 1 {
		t.Fatalf("the held version's file: %v", files)
	}
	// Uploading the version serving again leaves the held one waiting,
	// its file too.
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/w", widenWasm(t)); code != 200 {
		t.Fatalf("the version serving again: %d %s", code, body)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "acme", ".held", "w.*.wasm")); len(files) != 1 || len(list(ts).Held) != 1 {
		t.Fatalf("after uploading the version serving again: files %v, held %+v", files, list(ts).Held)
	}

	// A restart holds it again.
	ts.Close()
	ts = startServer(t, setup)
	waitFor(t, "the plugins to load", func() bool { return len(list(ts).Plugins) == 1 })
	if l := list(ts); slices.Contains(l.tools("w"), "extra") || len(l.Held) != 1 || l.Held[0].Hash != held.Hash {
		t.Fatalf("after a restart: %+v, want it held still", l)
	}

	if code, body := ts.do(t, ts.acme, "POST", "/v1/plugins/w/versions/sha256:nope", `{"approve":true}`); code != 404 {
		t.Errorf("approving a version not held: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/plugins/w/versions/"+held.Hash, `{}`); code != 400 {
		t.Errorf("a decision without approve: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/plugins/w/versions/"+strings.TrimPrefix(held.Hash, "sha256:"), `{"approve":true}`); code != 200 || !strings.Contains(body, `"extra"`) {
		t.Fatalf("approving: %d %s", code, body)
	}
	if l := list(ts); !slices.Contains(l.tools("w"), "extra") || len(l.Held) != 0 {
		t.Fatalf("after the approval: %+v", l)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "acme", "w.wasm")); string(b) != string(wider) {
		t.Error("the approved version's file did not take the module's place")
	}

	// A version written into the directory takes a held one's place, its
	// file too.
	if code, _ := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/w", widenWasm(t, `VERSION="B2"`, "EXTRA", `DESC="Report more."`)); code != 202 {
		t.Fatalf("a widening upload: %d", code)
	}
	if err := os.WriteFile(filepath.Join(dir, "acme", ".w.tmp"), widenWasm(t, `VERSION="B3"`, "EXTRA"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "acme", ".w.tmp"), filepath.Join(dir, "acme", "w.wasm")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the written version to take the held one's place", func() bool {
		files, _ := filepath.Glob(filepath.Join(dir, "acme", ".held", "*"))
		return len(list(ts).Held) == 0 && len(files) == 0
	})

	// Narrowing loads at once; a widening one discarded is gone.
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/w", widenWasm(t, `VERSION="C"`, "EXTRA", "NO_SECOND")); code != 200 {
		t.Fatalf("a narrowing upload: %d %s", code, body)
	}
	code, body = ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/w", widenWasm(t, `VERSION="D"`, "EXTRA", `EFFECT="external"`))
	if code != 202 {
		t.Fatalf("an effect that widens: %d %s", code, body)
	}
	hash := list(ts).Held[0].Hash
	if code, body := ts.do(t, ts.acme, "POST", "/v1/plugins/w/versions/"+hash, `{"approve":false}`); code != 204 {
		t.Fatalf("discarding: %d %s", code, body)
	}
	if l := list(ts); len(l.Held) != 0 || slices.Contains(l.tools("w"), "second") {
		t.Errorf("after the discard: %+v", l)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "acme", ".held", "*")); len(files) != 0 {
		t.Errorf("a discarded version's file is left: %v", files)
	}
}

// TestPluginNeeds: through serve, a module that says what it needs is
// shown with its needs and runs with them alone (its grants: the host it
// needs, not the tenant's other); an upload that needs a new host is held
// (202, the host named), one that needs a host beyond the sandbox refused
// (422, the host named), and the version serving goes on.
func TestPluginNeeds(t *testing.T) {
	ts := startServer(t, serverSetup{Mutate: withTenant("acme", func(tc *server.TenantConfig) {
		tc.Sandbox = server.SandboxConfig{AllowedHosts: []string{"127.0.0.1", "localhost"}, AllowPrivateNetwork: true, KV: true}
	})})
	needing := func(version, needs string) []byte {
		return widenWasm(t, "FETCH", `VERSION="`+version+`"`, `NEEDS="`+strings.ReplaceAll(needs, `"`, `\"`)+`"`)
	}
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/w", needing("A", `{"allowed_hosts":["127.0.0.1"],"allow_private_network":true}`)); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	_, body := ts.do(t, ts.acme, "GET", "/v1/plugins/w", "")
	info := decodeJSON[struct {
		Fingerprint string
		Needs       *struct {
			AllowedHosts []string `json:"allowed_hosts"`
		}
		Grants struct {
			AllowedHosts        []string `json:"allowed_hosts"`
			AllowPrivateNetwork bool     `json:"allow_private_network"`
			KV                  bool     `json:"kv"`
		}
	}](t, body)
	if info.Needs == nil || !slices.Equal(info.Needs.AllowedHosts, []string{"127.0.0.1"}) || !strings.HasPrefix(info.Fingerprint, "sha256:") ||
		!slices.Equal(info.Grants.AllowedHosts, []string{"127.0.0.1"}) || !info.Grants.AllowPrivateNetwork || info.Grants.KV {
		t.Errorf("the module: %s, want its needs, and grants narrowed to them", body)
	}
	code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/w", needing("B", `{"allowed_hosts":["127.0.0.1","localhost"],"allow_private_network":true}`))
	if code != 202 || !strings.Contains(body, `"kind":"needs","name":"localhost","change":"new host"`) {
		t.Errorf("an upload that needs a new host: %d %s, want it held", code, body)
	}
	code, body = ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/w", needing("C", `{"allowed_hosts":["evil.example.org"]}`))
	if code != 422 || !strings.Contains(body, `it needs host \"evil.example.org\", which it is not granted`) {
		t.Errorf("an upload that needs a host beyond the sandbox: %d %s, want it refused", code, body)
	}
	_, body = ts.do(t, ts.acme, "GET", "/v1/plugins", "")
	if l := decodeJSON[pluginsOf](t, body); len(l.Plugins) != 1 || len(l.Held) != 1 || !strings.Contains(body, `"allowed_hosts":["127.0.0.1"]`) {
		t.Errorf("after both: %s, want A serving and B held", body)
	}
}

// TestPluginRollback: through serve, the versions a plugin replaced are
// listed (newest first) and kept on disk; POST
// /v1/plugins/{name}/rollback loads the newest again, or the one named,
// and its file takes the module's place; after a restart the kept
// versions still roll back; a version not kept is 404; the audit log says
// who rolled back.
func TestPluginRollback(t *testing.T) {
	dir, store := t.TempDir(), memory.New()
	setup := serverSetup{Store: store, Mutate: func(c *server.Config) { c.PluginsDir = dir }}
	ts := startServer(t, setup)
	hashes := map[string]string{}
	for i, v := range []string{"A", "B", "C"} {
		code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/w", widenWasm(t, `VERSION="`+v+`"`))
		if code != []int{201, 200, 200}[i] {
			t.Fatalf("upload %s: %d %s", v, code, body)
		}
		hashes[v] = decodeJSON[struct{ Hash string }](t, body).Hash
	}
	type info struct {
		Hash     string
		Versions []struct{ Hash string }
	}
	get := func(ts *testServer) info {
		_, body := ts.do(t, ts.acme, "GET", "/v1/plugins/w", "")
		return decodeJSON[info](t, body)
	}
	names := func(i info) string {
		var out []string
		for _, v := range i.Versions {
			for n, h := range hashes {
				if h == v.Hash {
					out = append(out, n)
				}
			}
		}
		return strings.Join(out, ",")
	}
	if i := get(ts); i.Hash != hashes["C"] || names(i) != "B,A" {
		t.Fatalf("after three uploads: %+v (%s), want C serving, B and A kept", i, names(i))
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "acme", ".versions", "w.*.wasm")); len(files) != 2 {
		t.Errorf("the kept versions' files: %v", files)
	}
	code, body := ts.do(t, ts.acme, "POST", "/v1/plugins/w/rollback", "")
	if code != 200 || decodeJSON[struct{ Hash string }](t, body).Hash != hashes["B"] {
		t.Fatalf("rollback: %d %s, want B", code, body)
	}
	if file, _ := os.ReadFile(filepath.Join(dir, "acme", "w.wasm")); !bytes.Equal(file, widenWasm(t, `VERSION="B"`)) {
		t.Error("the module's file is not the version rolled back to")
	}
	if i := get(ts); names(i) != "C,A" {
		t.Errorf("after the rollback: %s, want C,A kept", names(i))
	}

	// A restart keeps the versions.
	ts.Close()
	ts = startServer(t, setup)
	waitFor(t, "the plugin to load", func() bool { return get(ts).Hash == hashes["B"] })
	if i := get(ts); names(i) != "C,A" {
		t.Errorf("after a restart: %s, want C,A kept", names(i))
	}
	if code, body := ts.do(t, ts.acme, "POST", "/v1/plugins/w/rollback", `{"hash":"`+strings.TrimPrefix(hashes["A"], "sha256:")+`"}`); code != 200 || get(ts).Hash != hashes["A"] {
		t.Fatalf("rollback to A after the restart: %d %s", code, body)
	}
	if code, _ := ts.do(t, ts.acme, "POST", "/v1/plugins/w/rollback", `{"hash":"sha256:nope"}`); code != 404 {
		t.Errorf("a version not kept: %d, want 404", code)
	}
	if code, _ := ts.do(t, ts.acme, "POST", "/v1/plugins/none/rollback", ""); code != 404 {
		t.Errorf("a plugin without versions: %d, want 404", code)
	}
	_, body = ts.do(t, ts.acme, "GET", "/v1/audit?plugin=w", "")
	if n := strings.Count(body, `"action":"rolled_back"`); n != 2 || !strings.Contains(body, `"by":"key `) {
		t.Errorf("the audit log has %d rollbacks: %s", n, body)
	}
}

// TestPluginRollbackSidecar: a plain module's sidecar manifest is part of
// its version: the version kept keeps its manifest beside it, and rolling
// back to it puts that manifest back beside the module (here two versions
// of the same bytes, the second narrowed by its manifest to one tool).
func TestPluginRollbackSidecar(t *testing.T) {
	dir := t.TempDir()
	ts := startServer(t, serverSetup{Mutate: func(c *server.Config) { c.PluginsDir = dir }})
	kit, _ := filepath.Abs("../pdk/c")
	plain := plugintest.CPlugin(t, "../plugins/testdata/c", []string{"plain.c"}, []string{kit}, nil)
	tenantDir := filepath.Join(dir, "acme")
	two := `{"tools":[{"name":"count_vowels","description":"Count vowels.","export":"count_vowels","effect":"read"},{"name":"shout","description":"Fails.","export":"shout","effect":"external"}]}`
	one := `{"tools":[{"name":"count_vowels","description":"Count vowels.","export":"count_vowels","effect":"read"}]}`
	if err := os.WriteFile(filepath.Join(tenantDir, "plain.json"), []byte(two), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tenantDir, "plain.wasm"), plain, 0o644); err != nil {
		t.Fatal(err)
	}
	tools := func() string {
		code, body := ts.do(t, ts.acme, "GET", "/v1/plugins/plain", "")
		if code != 200 {
			return ""
		}
		var names []string
		for _, tl := range decodeJSON[struct{ Tools []struct{ Name string } }](t, body).Tools {
			names = append(names, tl.Name)
		}
		return strings.Join(names, ",")
	}
	waitFor(t, "two tools", func() bool { return tools() == "count_vowels,shout" })
	if err := os.WriteFile(filepath.Join(tenantDir, "plain.json"), []byte(one), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the narrowed version", func() bool { return tools() == "count_vowels" })
	// (The version serves before the change is reported, and kept.)
	waitFor(t, "the kept version's manifest", func() bool {
		kept, _ := filepath.Glob(filepath.Join(tenantDir, ".versions", "plain.*.json"))
		return len(kept) == 1
	})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/plugins/plain/rollback", ""); code != 200 {
		t.Fatalf("rollback: %d %s", code, body)
	}
	if got := tools(); got != "count_vowels,shout" {
		t.Errorf("after the rollback: %s", got)
	}
	side, err := plugins.ReadSource(filepath.Join(tenantDir, "plain.wasm"))
	if err != nil || side.Sidecar == nil || len(side.Sidecar.Tools) != 2 {
		t.Fatalf("the manifest beside the module after the rollback: %+v %v", side.Sidecar, err)
	}
	// The watcher reads the files written back as the version serving.
	time.Sleep(500 * time.Millisecond)
	if got := tools(); got != "count_vowels,shout" {
		t.Errorf("after the directory settled: %s", got)
	}
	if _, body := ts.do(t, ts.acme, "GET", "/v1/plugins", ""); len(decodeJSON[pluginsOf](t, body).Held) != 0 {
		t.Errorf("the files written back were held: %s", body)
	}
}
