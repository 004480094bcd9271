//go:build unix

package cli_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentichost/agentic/internal/fakemodel"
	"github.com/agentichost/agentic/plugins/oci/ocitest"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// TestPluginOCICLI: a serve process whose tenant lists a module of an OCI
// registry (a real one, in the test's process, on loopback) pulls it by
// digest at start, verifies its signature and serves it; agentic-host
// plugin pull writes the module and its signature, which plugin verify
// checks; a tag alone is refused, saying how to pin it; a restart of serve
// after the registry went away serves the module from its cache.
func TestPluginOCICLI(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	bin := needBinary(t)
	key := plugintest.NewMinisignKey(t)
	reg := ocitest.NewRegistry(t)
	wasm := widenWasm(t, `VERSION="oci"`)
	ref := reg.Push(t, ocitest.Artifact{Repository: "plugins/w", Wasm: wasm, Signature: key.Sign(t, wasm, "-t", "w from oci")})

	dir := t.TempDir()
	code, out, errOut := runBin(t, bin, "plugin", "pull", ref.String(), dir)
	if code != 0 || !strings.Contains(out, "pulled "+ref.String()) || !strings.Contains(out, "signed by key "+key.ID) {
		t.Fatalf("plugin pull: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runBin(t, bin, "plugin", "verify", "--trusted-key", key.PublicKey, filepath.Join(dir, "w.wasm"))
	if code != 0 || !strings.Contains(out, `"trusted_comment": "w from oci"`) {
		t.Errorf("plugin verify of what was pulled: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = runBin(t, bin, "plugin", "pull", "oci://"+reg.Host+"/plugins/w:latest", dir)
	if code != 2 || !strings.Contains(errOut, "names a tag, not a digest") {
		t.Errorf("plugin pull of a tag: exit %d %s", code, errOut)
	}

	model, err := fakemodel.Start(fakemodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { model.Close() })
	config := writeServeConfig(t, "file:"+filepath.Join(dir, "data"), model.URL(), fmt.Sprintf("    plugins: [%q]\n    sandbox: {trusted_keys: [%q]}\nplugins_dir: %s\nplugin_cache_dir: %s\n",
		ref.String(), key.PublicKey, filepath.Join(dir, "plugins"), filepath.Join(plugintest.CacheDir(), "oci-cli")))
	srv := startServe(t, "serve", bin, config)
	body := srv.must("GET", "/v1/plugins/w", "", 200, nil)
	if !strings.Contains(body, `"source":"`+ref.String()+`"`) || !strings.Contains(body, `"verified":true`) {
		t.Fatalf("GET /v1/plugins/w: %s", body)
	}
	srv.signal(syscall.SIGTERM)
	srv.wait(30 * time.Second)
	reg.Close()
	if _, err := os.Stat(filepath.Join(dir, "plugins", ".oci", "blobs", "sha256", strings.TrimPrefix(ref.Digest, "sha256:"))); err != nil {
		t.Errorf("the manifest is not cached: %v", err)
	}
	srv = startServe(t, "serve again", bin, config)
	if body := srv.must("GET", "/v1/plugins/w", "", 200, nil); !strings.Contains(body, `"source":"`+ref.String()+`"`) {
		t.Errorf("after a restart without the registry: %s", body)
	}
}

// TestPluginPullTimeout: plugin pull gives up a registry that never
// answers after its --timeout, saying so, and refuses a timeout that is
// not positive.
func TestPluginPullTimeout(t *testing.T) {
	release := make(chan struct{})
	asked := make(chan struct{}, 1)
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		<-release
	}))
	defer stuck.Close()
	defer close(release) // (before Close: the handler lets go)
	ref := "oci://" + strings.TrimPrefix(stuck.URL, "http://") + "/plugins/w@sha256:" + strings.Repeat("ab", 32)
	code, _, errOut := run(t, "", "plugin", "pull", "--timeout", "200ms", ref, t.TempDir())
	if code != 1 || !strings.Contains(errOut, "the pull took longer than --timeout 200ms") {
		t.Errorf("a registry that never answers: exit %d, %s", code, errOut)
	}
	select {
	case <-asked:
	default:
		t.Error("the registry was never asked")
	}
	if code, _, errOut := run(t, "", "plugin", "pull", "--timeout", "0s", ref, t.TempDir()); code != 2 || !strings.Contains(errOut, "want a positive duration") {
		t.Errorf("--timeout 0s: exit %d, %s", code, errOut)
	}
}
