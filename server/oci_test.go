package server_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentichost/agentic/plugins/oci/ocitest"
	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// TestPluginOCI: through serve, a tenant's plugins: list of oci://
// references pinned by digest, pulled from a real registry (in process)
// at start: a good one loads, is shown with its source, and its tool
// answers a run; a digest the registry does not have, a tampered layer, a
// module signed by a key the tenant does not trust are refused, listed
// and audited, while the others serve; its name is the configuration's
// (an upload of it is 409); a restart after the registry went away loads
// it from the cache. A tag without a digest is a configuration error.
func TestPluginOCI(t *testing.T) {
	reg := ocitest.NewRegistry(t)
	key, stranger := plugintest.NewMinisignKey(t), plugintest.NewMinisignKey(t)
	account := getAccount(t)
	good := reg.Push(t, ocitest.Artifact{Repository: "plugins/get_account", Wasm: account, Signature: key.Sign(t, account, "-t", "get_account from the registry")})
	w := widenWasm(t, `VERSION="T"`)
	tampered := reg.Push(t, ocitest.Artifact{Repository: "plugins/tampered", Wasm: w, Signature: key.Sign(t, w)})
	bad := bytes.Clone(w)
	bad[len(bad)/2] ^= 0xff // a byte flipped on its way
	reg.Tamper(ocitest.Layer(w), bad)
	w2 := widenWasm(t, `VERSION="S"`)
	strangers := reg.Push(t, ocitest.Artifact{Repository: "plugins/other", Name: "strangers", Wasm: w2, Signature: stranger.Sign(t, w2)})
	missing := good
	missing.Digest = "sha256:" + strings.Repeat("0", 64)
	missing.Repository = "plugins/missing"

	dir, cache, store := t.TempDir(), t.TempDir(), memory.New()
	setup := serverSetup{Store: store, Mutate: func(c *server.Config) {
		c.PluginsDir = dir
		c.OCI.CacheDir = cache
		withTenant("acme", func(tc *server.TenantConfig) {
			tc.Plugins = []string{good.String(), missing.String(), tampered.String(), strangers.String()}
			tc.Sandbox.TrustedKeys = []string{key.PublicKey}
		})(c)
	}}
	ts := startServer(t, setup)
	type listing struct {
		Plugins []struct {
			Name, Source string
			Signature    *struct {
				TrustedComment string `json:"trusted_comment"`
				Verified       bool
			}
		}
		Refusals []struct{ Name, Reason string }
	}
	_, body := ts.do(t, ts.acme, "GET", "/v1/plugins", "")
	l := decodeJSON[listing](t, body)
	if len(l.Plugins) != 1 || l.Plugins[0].Name != "get_account" || l.Plugins[0].Source != good.String() ||
		l.Plugins[0].Signature == nil || !l.Plugins[0].Signature.Verified || l.Plugins[0].Signature.TrustedComment != "get_account from the registry" {
		t.Fatalf("the plugins: %s", body)
	}
	reasons := map[string]string{}
	for _, r := range l.Refusals {
		reasons[r.Name] = r.Reason
	}
	for name, says := range map[string]string{
		"missing":   "oci: pull failed",
		"tampered":  "oci: digest mismatch: the layer",
		"strangers": "which the tenant does not trust",
	} {
		if !strings.Contains(reasons[name], says) {
			t.Errorf("the refusal of %s: %q, want %q in it\n%s", name, reasons[name], says, body)
		}
	}
	run := func(ts *testServer, session string) string {
		t.Helper()
		if code, body := ts.do(t, ts.acme, "POST", "/v1/sessions/"+session+"/messages?wait=true", `{"text":"get_account account_id=42"}`); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		_, body := ts.do(t, ts.acme, "GET", "/v1/sessions/"+session+"/transcript", "")
		return body
	}
	if body := run(ts, "s1"); !strings.Contains(body, `plan`) || !strings.Contains(body, `"status":"done"`) {
		t.Errorf("the tool's answer: %s", body)
	}
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/get_account", account); code != 409 || !strings.Contains(body, "comes from the configuration") {
		t.Errorf("an upload of the configuration's plugin: %d %s", code, body)
	}
	if code, body := ts.do(t, ts.acme, "DELETE", "/v1/plugins/get_account", ""); code != 409 {
		t.Errorf("removing the configuration's plugin: %d %s", code, body)
	}
	_, body = ts.do(t, ts.acme, "GET", "/v1/audit", "")
	if !strings.Contains(body, `"action":"loaded","plugin":"get_account"`) || strings.Count(body, `"by":"configuration"`) < 4 {
		t.Errorf("the audit log: %s", body)
	}

	// The registry goes away; a restart pulls from the cache.
	ts.stop(t)
	reg.Close()
	ts = startServer(t, setup)
	if body := run(ts, "s2"); !strings.Contains(body, `plan`) {
		t.Errorf("after a restart without the registry: %s", body)
	}
	if files, _ := filepath.Glob(filepath.Join(cache, "blobs", "sha256", "*")); len(files) < 3 {
		t.Errorf("the cache: %v", files)
	}
	// Only what verified is cached.
	for _, f := range []string{strings.TrimPrefix(ocitest.Layer(w), "sha256:"), strings.TrimPrefix(missing.Digest, "sha256:")} {
		if _, err := os.Stat(filepath.Join(cache, "blobs", "sha256", f)); err == nil {
			t.Errorf("%s was cached", f)
		}
	}

	// A tag is not a pin.
	cfg := server.Config{Tenants: map[string]server.TenantConfig{"acme": {Keys: []server.KeyConfig{{Hash: server.HashKey("k")}},
		Plugins: []string{"oci://" + reg.Host + "/plugins/get_account:latest"}}}}
	_, err := server.New(server.Options{Config: cfg, Storage: memory.New(), Model: ts.model})
	if err == nil || !strings.Contains(err.Error(), "tenants.acme: plugins[0]") || !strings.Contains(err.Error(), "names a tag, not a digest") {
		t.Errorf("a tag: %v", err)
	}
}
