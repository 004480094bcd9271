package server_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
