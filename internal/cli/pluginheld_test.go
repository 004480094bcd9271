package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
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
// with why; discard drops a held one; plugin release lets a quarantined
// plugin serve again, and plugin audit lists what happened, by whom.
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

	// plugin release: a plugin not quarantined is an error; one that
	// trapped five times (serve's default) serves again.
	if code, _, errOut := runBinEnv(t, bin, env, "plugin", "release", "w"); code != 1 || !strings.Contains(errOut, "409") || !strings.Contains(errOut, "not quarantined") {
		t.Errorf("releasing a plugin not quarantined: exit %d %s", code, errOut)
	}
	kit := cKitDir(t)
	srv.must("PUT", "/v1/plugins/b", string(plugintest.CPlugin(t, "../../plugins/testdata/c", []string{"bombs.c", kit + "/agentic.c"}, []string{kit}, nil)), http.StatusCreated, nil)
	for i := range 5 {
		srv.must("POST", fmt.Sprintf("/v1/sessions/trap%d/messages?wait=true", i), `{"text":"trap"}`, http.StatusOK, nil)
	}
	if body := srv.must("GET", "/v1/plugins", "", http.StatusOK, nil); !strings.Contains(body, `"quarantined":[{"name":"b"`) {
		t.Fatalf("after five traps: %s", body)
	}
	if code, out, errOut := runBinEnv(t, bin, env, "plugin", "release", "b"); code != 0 || !strings.Contains(out, "released b") {
		t.Fatalf("plugin release: exit %d\n%s%s", code, out, errOut)
	}
	if body := srv.must("GET", "/v1/plugins", "", http.StatusOK, nil); !strings.Contains(body, `"quarantined":[]`) {
		t.Errorf("after the release: %s", body)
	}

	// plugin versions and plugin rollback: w replaced one version (the
	// first: the approved one serves); rolling back loads it again.
	code, out, errOut = runBinEnv(t, bin, env, "plugin", "versions", "w")
	if code != 0 || !strings.Contains(out, "serving") || strings.Count(out, "replaced") != 1 {
		t.Fatalf("plugin versions: exit %d\n%s%s", code, out, errOut)
	}
	first := strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[2])[0]
	if code, out, errOut := runBinEnv(t, bin, env, "plugin", "rollback", "w"); code != 0 || !strings.Contains(out, "rolled back w to "+first) {
		t.Fatalf("plugin rollback: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := runBinEnv(t, bin, env, "plugin", "rollback", "w", "sha256:"+strings.Repeat("0", 64)); code != 1 || !strings.Contains(errOut, "404") {
		t.Errorf("a rollback to a version not kept: exit %d %s", code, errOut)
	}

	// plugin canary: a version serving every session beside the one
	// serving, listed by plugin versions, promoted; another rolled back.
	canaryFile := filepath.Join(dir, "d.wasm")
	if err := os.WriteFile(canaryFile, widenWasm(t, `VERSION="D"`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runBinEnv(t, bin, env, "plugin", "canary", "--share", "1", "w", canaryFile); code != 0 || !strings.Contains(out, "serves 1 of the sessions") {
		t.Fatalf("plugin canary: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runBinEnv(t, bin, env, "plugin", "versions", "w"); code != 0 || !strings.Contains(out, "canary: 1 of the sessions, 0 calls") {
		t.Errorf("plugin versions with a canary: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runBinEnv(t, bin, env, "plugin", "canary", "promote", "w"); code != 0 || !strings.Contains(out, "promoted w") {
		t.Fatalf("plugin canary promote: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runBinEnv(t, bin, env, "plugin", "canary", "w", canaryFile); code != 1 || !strings.Contains(errOut, "422") || !strings.Contains(errOut, "is the version serving") {
		t.Errorf("the version serving as its canary: exit %d\n%s%s", code, out, errOut)
	}
	if err := os.WriteFile(canaryFile, widenWasm(t, `VERSION="E"`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runBinEnv(t, bin, env, "plugin", "canary", "w", canaryFile); code != 0 || !strings.Contains(out, "serves 0.1 of the sessions") {
		t.Fatalf("plugin canary (default share): exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runBinEnv(t, bin, env, "plugin", "canary", "rollback", "w"); code != 0 || !strings.Contains(out, "rolled back the canary of w") {
		t.Fatalf("plugin canary rollback: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := runBinEnv(t, bin, env, "plugin", "canary", "rollback", "w"); code != 1 || !strings.Contains(errOut, "404") {
		t.Errorf("rolling back no canary: exit %d %s", code, errOut)
	}

	// plugin audit: what happened to w, oldest first, by the key.
	code, out, errOut = runBinEnv(t, bin, env, "plugin", "audit", "w")
	var actions []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 4 {
			actions = append(actions, f[1]+" "+f[4])
		}
	}
	want := "loaded key|held key|approved key|replaced key|held key|discarded key|rolled_back key|replaced key|" +
		"canary_started key|replaced key|canary_promoted key|refused key|canary_started key|canary_rolled_back key"
	if code != 0 || strings.Join(actions, "|") != want {
		t.Errorf("plugin audit w: exit %d, %q, want %q\n%s%s", code, actions, want, out, errOut)
	}
	code, out, _ = runBinEnv(t, bin, env, "plugin", "audit", "--json", "-n", "2", "b")
	var entries []struct{ Action, Plugin string }
	if code != 0 || json.Unmarshal([]byte(out), &entries) != nil || len(entries) != 2 || entries[0].Action != "quarantined" || entries[1].Action != "released" {
		t.Errorf("plugin audit --json -n 2 b: exit %d %s", code, out)
	}
}
