package server_test

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentichost/agentic/plugins/plugintest"
	"github.com/agentichost/agentic/server"
	"github.com/agentichost/agentic/storage/memory"
)

// uploadSigned sends PUT /v1/plugins/{name} as curl -F module=@… -F
// signature=@… does (parts "module" and, when sig is not nil,
// "signature").
func (ts *testServer) uploadSigned(t *testing.T, key, name string, wasm, sig []byte) (int, string) {
	t.Helper()
	return ts.putSigned(t, key, "/v1/plugins/"+name, name, wasm, sig)
}

// putSigned sends a module and its signature to path, as uploadSigned
// does.
func (ts *testServer) putSigned(t *testing.T, key, path, name string, wasm, sig []byte) (int, string) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	parts := []struct {
		field string
		data  []byte
	}{{"module", wasm}}
	if sig != nil {
		parts = append(parts, struct {
			field string
			data  []byte
		}{"signature", sig})
	}
	for _, p := range parts {
		fw, err := mw.CreateFormFile(p.field, name+".wasm")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(p.data)
	}
	mw.Close()
	req, err := http.NewRequest("PUT", ts.URL+path, &body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// stop closes the test server and the server under it (its plugin
// watchers too), as a host that stops: a test that starts another on the
// same directory then sees that one's doing alone.
func (ts *testServer) stop(t *testing.T) {
	t.Helper()
	ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts.srv.Close(ctx)
}

// pluginSigner is a module's signature as GET /v1/plugins/{name} shows
// it.
type pluginSigner struct {
	Signature *struct {
		KeyID          string `json:"key_id"`
		TrustedComment string `json:"trusted_comment"`
		Verified       bool
	}
}

// TestPluginSignatures: through serve, a tenant with sandbox.trusted_keys
// takes only uploads signed by one of its keys (the minisign tool's
// signature in the "signature" part): an unsigned upload, one signed by
// another key, a signature of other bytes and a truncated one are refused
// (422, the reason said and audited) and the version serving goes on; a
// signed one loads, shows who signed, and its signature is kept beside it,
// so that a restart loads it again; a file written into the directory
// without a signature is refused and listed. A tenant without keys takes
// unsigned modules. A version kept from before keys were required does
// not roll back; a held version keeps its signature across a restart and
// is checked again on its approval.
func TestPluginSignatures(t *testing.T) {
	key, stranger := plugintest.NewMinisignKey(t), plugintest.NewMinisignKey(t)
	dir, store := t.TempDir(), memory.New()
	withKeys := func(on bool) serverSetup {
		return serverSetup{Store: store, Mutate: func(c *server.Config) {
			c.PluginsDir = dir
			if on {
				acme := c.Tenants["acme"]
				acme.Sandbox.TrustedKeyFiles = []string{key.PublicKeyFile}
				c.Tenants["acme"] = acme
			}
		}}
	}
	// Before keys: an unsigned version serves, then a signed one. (After
	// each upload the directory's watcher gets its debounce to see the
	// files written: one that read the first upload's file after the
	// second upload loaded would load the first again for a moment.)
	settle := func() { time.Sleep(300 * time.Millisecond) }
	ts := startServer(t, withKeys(false))
	v1 := widenWasm(t)
	if code, body := ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/w", v1); code != 201 {
		t.Fatalf("an unsigned upload without keys: %d %s", code, body)
	}
	settle()
	v2 := widenWasm(t, `VERSION="B"`)
	if code, body := ts.uploadSigned(t, ts.acme, "w", v2, key.Sign(t, v2, "-t", "w 2.0 from ci")); code != 200 {
		t.Fatalf("a signed upload without keys: %d %s", code, body)
	}
	settle()
	ts.stop(t)

	ts = startServer(t, withKeys(true))
	waitFor(t, "w to load", func() bool { code, _ := ts.do(t, ts.acme, "GET", "/v1/plugins/w", ""); return code == 200 })
	_, body := ts.do(t, ts.acme, "GET", "/v1/plugins/w", "")
	if s := decodeJSON[pluginSigner](t, body).Signature; s == nil || !s.Verified || s.KeyID != key.ID || s.TrustedComment != "w 2.0 from ci" {
		t.Fatalf("the signed version after a restart with keys: %s", body)
	}
	// The version kept from before keys were required does not come back.
	if code, body := ts.do(t, ts.acme, "POST", "/v1/plugins/w/rollback", ""); code != 422 || !strings.Contains(body, "not signed") {
		t.Errorf("rolling back to an unsigned version: %d %s", code, body)
	}

	v3 := widenWasm(t, `VERSION="C"`)
	for _, tc := range []struct {
		name  string
		sig   []byte
		multi bool
		says  string
	}{
		{"unsigned", nil, false, "module not signed"},
		{"unsigned, multipart", nil, true, "module not signed"},
		{"another key", stranger.Sign(t, v3), true, "which the tenant does not trust"},
		{"other bytes", key.Sign(t, v2), true, "does not match the module's bytes"},
		{"truncated", key.Sign(t, v3)[:100], true, "not a minisign signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var code int
			var body string
			if tc.multi {
				code, body = ts.uploadSigned(t, ts.acme, "w", v3, tc.sig)
			} else {
				code, body = ts.doBytes(t, ts.acme, "PUT", "/v1/plugins/w", v3)
			}
			if code != 422 || !strings.Contains(body, tc.says) {
				t.Errorf("%d %s, want 422 saying %q", code, body, tc.says)
			}
			_, body = ts.do(t, ts.acme, "GET", "/v1/plugins/w", "")
			if !strings.Contains(body, "w 2.0 from ci") {
				t.Errorf("the version serving changed: %s", body)
			}
		})
	}
	if code, body := ts.do(t, ts.acme, "PUT", "/v1/plugins/w", "--x\r\n", "Content-Type", "multipart/form-data; boundary=x"); code != 400 {
		t.Errorf("a malformed multipart body: %d %s", code, body)
	}

	if code, body := ts.uploadSigned(t, ts.acme, "w", v3, key.Sign(t, v3, "-t", "w 3.0")); code != 200 || !strings.Contains(body, `"trusted_comment":"w 3.0"`) {
		t.Fatalf("a signed upload: %d %s", code, body)
	}
	if sig, err := os.ReadFile(filepath.Join(dir, "acme", "w.wasm.minisig")); err != nil || !strings.Contains(string(sig), "w 3.0") {
		t.Errorf("the signature beside the module: %v %q", err, sig)
	}

	// A widening version, signed, is held with its signature, across a
	// restart too.
	wide := widenWasm(t, `VERSION="D"`, "EXTRA")
	code, body := ts.uploadSigned(t, ts.acme, "w", wide, key.Sign(t, wide, "-t", "w 4.0"))
	if code != 202 {
		t.Fatalf("a widening signed upload: %d %s", code, body)
	}
	hash := decodeJSON[struct{ Held struct{ Hash string } }](t, body).Held.Hash

	// A file written into the directory without a signature: refused,
	// listed, audited.
	if err := os.WriteFile(filepath.Join(dir, "acme", "stray.wasm"), v1, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stray module to be refused", func() bool {
		_, body := ts.do(t, ts.acme, "GET", "/v1/plugins", "")
		return strings.Contains(body, `"name":"stray"`) && strings.Contains(body, "module not signed")
	})

	ts.stop(t)
	ts = startServer(t, withKeys(true))
	waitFor(t, "w to be held again", func() bool {
		_, body := ts.do(t, ts.acme, "GET", "/v1/plugins", "")
		return strings.Contains(body, hash)
	})
	if code, body := ts.do(t, ts.acme, "POST", "/v1/plugins/w/versions/"+hash, `{"approve":true}`); code != 200 || !strings.Contains(body, `"trusted_comment":"w 4.0"`) {
		t.Fatalf("approving the held signed version: %d %s", code, body)
	}
	if sig, _ := os.ReadFile(filepath.Join(dir, "acme", "w.wasm.minisig")); !strings.Contains(string(sig), "w 4.0") {
		t.Errorf("the approved version's signature did not take the module's place: %q", sig)
	}

	// A tenant without keys takes an unsigned module.
	if code, body := ts.doBytes(t, ts.beta, "PUT", "/v1/plugins/w", v1); code != 201 {
		t.Errorf("beta's unsigned upload: %d %s", code, body)
	}

	type entry struct{ Action, Plugin, By, Detail string }
	_, body = ts.do(t, ts.acme, "GET", "/v1/audit", "")
	var refused []string
	for _, e := range decodeJSON[struct{ Entries []entry }](t, body).Entries {
		if e.Action == "refused" {
			refused = append(refused, e.Plugin+" by "+strings.Fields(e.By)[0]+": "+e.Detail)
		}
	}
	want := []string{"not signed", "not signed", "not signed", "does not trust", "does not match", "not a minisign signature", "stray by directory"}
	if len(refused) < len(want) {
		t.Fatalf("refused entries %q, want %d", refused, len(want))
	}
	for i, w := range want {
		if !strings.Contains(refused[i], w) {
			t.Errorf("refused entry %d: %q, want %q in it", i, refused[i], w)
		}
	}
}
