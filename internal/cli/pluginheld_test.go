package cli_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// widenWasm builds plugins/testdata/c/widen.c with defines ("NAME=VALUE"
// or "NAME"): versions of one module that differ in what they offer.
func widenWasm(t *testing.T, defines ...string) []byte {
	t.Helper()
	kit, _ := filepath.Abs("../../pdk/c")
	var flags []string
	for _, d := range defines {
		flags = append(flags, "-D"+d)
	}
	return plugintest.CPlugin(t, "../../plugins/testdata/c", []string{"widen.c", kit + "/agentic.c"}, []string{kit}, flags)
}

// TestPluginHeldCLI: agentic-host plugin held|approve|discard against a
// running serve: an upload that widens its plugin is listed with what it
// widens; approve loads it; a version not held, or no key, is refused
// with why; discard drops a held one.
func TestPluginHeldCLI(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	model, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { model.Close() })
	dir := t.TempDir()
	config := writeServeConfig(t, "file:"+filepath.Join(dir, "data"), model.URL(), fmt.Sprintf("plugins_dir: %s\nplugin_cache_dir: %s\n",
		filepath.Join(dir, "plugins"), filepath.Join(plugintest.CacheDir(), "held-cli")))
	srv := startServe(t, "serve", bin, config)
	widen := func(defines ...string) string { return string(widenWasm(t, defines...)) }
	srv.must("PUT", "/v1/plugins/w", widen(), http.StatusCreated, nil)
	var held struct {
		Held struct{ Hash string } `json:"held"`
	}
	srv.must("PUT", "/v1/plugins/w", widen(`VERSION="B"`, "EXTRA"), http.StatusAccepted, &held)

	env := []string{"AGENTIC_SERVER=" + srv.url, "AGENTIC_API_KEY=" + serveKey}
	code, out, errOut := runBinEnv(t, bin, env, "plugin", "held")
	if code != 0 || !strings.Contains(out, "w") || !strings.Contains(out, held.Held.Hash) || !strings.Contains(out, "tool extra: new") {
		t.Fatalf("plugin held: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = runBinEnv(t, bin, env, "plugin", "approve", "w", "sha256:"+strings.Repeat("0", 64))
	if code != 1 || !strings.Contains(errOut, "404") || !strings.Contains(errOut, "held version of plugin w") {
		t.Errorf("approving a version not held: exit %d %s", code, errOut)
	}
	code, _, errOut = runBinEnv(t, bin, []string{"AGENTIC_SERVER=" + srv.url, "AGENTIC_API_KEY="}, "plugin", "approve", "w", held.Held.Hash)
	if code != 2 || !strings.Contains(errOut, "AGENTIC_API_KEY is not set") {
		t.Errorf("without a key: exit %d %s", code, errOut)
	}
	code, out, errOut = runBinEnv(t, bin, env, "plugin", "approve", "w", held.Held.Hash)
	if code != 0 || !strings.Contains(out, "loaded w "+held.Held.Hash) {
		t.Fatalf("plugin approve: exit %d\n%s%s", code, out, errOut)
	}
	if body := srv.must("GET", "/v1/plugins/w", "", http.StatusOK, nil); !strings.Contains(body, `"extra"`) {
		t.Errorf("after the approval: %s", body)
	}
	if code, out, _ := runBinEnv(t, bin, env, "plugin", "held"); code != 0 || !strings.Contains(out, "no plugin versions held") {
		t.Errorf("plugin held after: exit %d %s", code, out)
	}

	srv.must("PUT", "/v1/plugins/w", widen(`VERSION="C"`, "EXTRA", `EFFECT="external"`), http.StatusAccepted, &held)
	if code, out, errOut := runBinEnv(t, bin, env, "plugin", "discard", "w", held.Held.Hash); code != 0 || !strings.Contains(out, "discarded w") {
		t.Fatalf("plugin discard: exit %d\n%s%s", code, out, errOut)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "plugins", "acme", ".held", "*")); len(files) != 0 {
		t.Errorf("a discarded version's file is left: %v", files)
	}
}
