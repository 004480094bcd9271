//go:build unix

package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// TestPluginSignaturesCLI: agentic-host plugin verify checks a module's
// minisign signature (made by the minisign tool) with trusted keys and
// says who signed; describe shows the signature, verified with
// --trusted-key-file; plugin upload sends the signature beside the module
// to a serve whose tenant requires one, which refuses the module without
// it and shows who signed it once loaded.
func TestPluginSignaturesCLI(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	key, stranger := plugintest.NewMinisignKey(t), plugintest.NewMinisignKey(t)
	dir := t.TempDir()
	wasm := widenWasm(t)
	file := filepath.Join(dir, "w.wasm")
	if err := os.WriteFile(file, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file+".minisig", key.Sign(t, wasm, "-t", "w 1.0 by ci"), 0o644); err != nil {
		t.Fatal(err)
	}
	unsigned := filepath.Join(dir, "u.wasm")
	if err := os.WriteFile(unsigned, wasm, 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"verify", []string{"verify", "--trusted-key-file", key.PublicKeyFile, file}, 0, `"key_id": "` + key.ID + `"`},
		{"verify, the trusted comment", []string{"verify", "--trusted-key", key.PublicKey, file}, 0, `"trusted_comment": "w 1.0 by ci"`},
		{"verify, another key", []string{"verify", "--trusted-key", stranger.PublicKey, file}, 1, "which the tenant does not trust"},
		{"verify, unsigned", []string{"verify", "--trusted-key", key.PublicKey, unsigned}, 1, "module not signed"},
		{"verify, no key", []string{"verify", file}, 2, "want --trusted-key"},
		{"describe", []string{"describe", file}, 0, `"verified": false`},
		{"describe, verified", []string{"describe", "--trusted-key-file", key.PublicKeyFile, file}, 0, `"verified": true`},
		{"describe, unsigned and required", []string{"describe", "--trusted-key-file", key.PublicKeyFile, unsigned}, 1, "module not signed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runBin(t, bin, append([]string{"plugin"}, tc.args...)...)
			if code != tc.code || !strings.Contains(out+errOut, tc.says) {
				t.Errorf("exit %d, want %d saying %q\n%s%s", code, tc.code, tc.says, out, errOut)
			}
		})
	}

	model, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { model.Close() })
	config := writeServeConfig(t, "file:"+filepath.Join(dir, "data"), model.URL(), fmt.Sprintf("    sandbox: {trusted_key_files: [%q]}\nplugins_dir: %s\nplugin_cache_dir: %s\n",
		key.PublicKeyFile, filepath.Join(dir, "plugins"), filepath.Join(plugintest.CacheDir(), "sign-cli")))
	srv := startServe(t, "serve", bin, config)
	env := []string{"AGENTIC_SERVER=" + srv.url, "AGENTIC_API_KEY=" + serveKey}
	code, out, errOut := runBinEnv(t, bin, env, "plugin", "upload", "--unsigned", file)
	if code != 1 || !strings.Contains(errOut, "422") || !strings.Contains(errOut, "module not signed") {
		t.Errorf("an unsigned upload: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runBinEnv(t, bin, env, "plugin", "upload", "--signature", file+".minisig", unsigned, "w")
	if code != 0 || !strings.Contains(out, "uploaded w") || !strings.Contains(out, "signed by key "+key.ID) {
		t.Fatalf("a signed upload: exit %d\n%s%s", code, out, errOut)
	}
	body := srv.must("GET", "/v1/plugins/w", "", 200, nil)
	if !strings.Contains(body, `"trusted_comment":"w 1.0 by ci"`) || !strings.Contains(body, `"verified":true`) {
		t.Errorf("GET /v1/plugins/w: %s", body)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "plugins", "acme", "w.wasm.minisig")); err != nil || !strings.Contains(string(b), "w 1.0 by ci") {
		t.Errorf("the signature kept beside the module: %v %q", err, b)
	}
}
