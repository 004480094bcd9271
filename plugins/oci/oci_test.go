package oci_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/oci"
	"github.com/agentichost/agentic/plugins/oci/ocitest"
	"github.com/agentichost/agentic/plugins/plugintest"
)

// echoWasm builds plugins/testdata/c/echo.c, a real module.
func echoWasm(t *testing.T) []byte {
	kit, _ := filepath.Abs("../../pdk/c")
	return plugintest.CPlugin(t, "../testdata/c", []string{"echo.c", kit + "/agentic.c"}, []string{kit}, nil)
}

// TestParseReference: a reference pins a manifest by digest; a tag alone
// is refused, saying how to pin it.
func TestParseReference(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		in   string
		want oci.Reference
		err  error
	}{
		{"oci://127.0.0.1:5000/plugins/echo@" + d, oci.Reference{Registry: "127.0.0.1:5000", Repository: "plugins/echo", Digest: d}, nil},
		{"oci://ghcr.io/acme/tools/echo:1.0@" + d, oci.Reference{Registry: "ghcr.io", Repository: "acme/tools/echo", Digest: d}, nil},
		{"oci://ghcr.io/acme/echo:1.0", oci.Reference{}, oci.ErrNotPinned},
		{"oci://ghcr.io/acme/echo", oci.Reference{}, oci.ErrNotPinned},
		{"ghcr.io/acme/echo@" + d, oci.Reference{}, oci.ErrReference},
		{"oci://ghcr.io/acme/echo@sha256:12", oci.Reference{}, oci.ErrReference},
		{"oci://ghcr.io/acme/echo@sha512:" + strings.Repeat("ab", 64), oci.Reference{}, oci.ErrReference},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := oci.ParseReference(tc.in)
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Fatalf("%+v %v, want %+v %v", got, err, tc.want, tc.err)
			}
			if err == nil && !strings.HasSuffix(tc.in, strings.TrimPrefix(got.String(), "oci://"+got.Registry+"/"+got.Repository)) {
				t.Errorf("String %s", got)
			}
		})
	}
	if _, err := oci.ParseReference("oci://ghcr.io/acme/echo:1.0"); err == nil || !strings.Contains(err.Error(), "oci://ghcr.io/acme/echo@sha256:") {
		t.Errorf("a tag's error says not how to pin it: %v", err)
	}
}

// TestPull: a module pushed to a real registry (in process) pulls by its
// digest, named by its annotation or its repository, with its signature;
// a registry that lies (a tampered manifest or layer), a digest it does
// not have, a layer over the size bound, a manifest without a Wasm layer
// are refused with a clear error and nothing is cached; a module pulled
// once pulls again from the cache after the registry went away.
func TestPull(t *testing.T) {
	wasm := echoWasm(t)
	ctx := context.Background()
	reg := ocitest.NewRegistry(t)
	good := reg.Push(t, ocitest.Artifact{Repository: "plugins/echo", Wasm: wasm, Signature: []byte("sig\n")})
	named := reg.Push(t, ocitest.Artifact{Repository: "plugins/x", Wasm: wasm, Name: "echo2", WasmMediaType: "application/vnd.wasm.content.layer.v1+wasm"})
	other := append(bytes.Clone(wasm), 0) // other bytes, in their own repository
	tamperedLayer := reg.Push(t, ocitest.Artifact{Repository: "plugins/tl", Wasm: other})
	reg.Tamper(ocitest.Layer(other), append(bytes.Clone(other[:len(other)-1]), 1))
	tamperedManifest := reg.Push(t, ocitest.Artifact{Repository: "plugins/tm", Wasm: wasm, Name: "tm"})
	reg.Tamper(tamperedManifest.Digest, []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[]}`))
	noWasm := reg.Push(t, ocitest.Artifact{Repository: "plugins/nw", Wasm: wasm, WasmMediaType: "application/octet-stream"})
	missing := good
	missing.Digest = "sha256:" + strings.Repeat("0", 64)

	for _, tc := range []struct {
		name     string
		ref      oci.Reference
		max      int
		err      error
		says     string
		wantName string
	}{
		{name: "good", ref: good, wantName: "echo"},
		{name: "named by annotation", ref: named, wantName: "echo2"},
		{name: "tampered layer", ref: tamperedLayer, err: oci.ErrDigest, says: "the layer"},
		{name: "tampered manifest", ref: tamperedManifest, err: oci.ErrDigest, says: "the manifest of " + tamperedManifest.String()},
		{name: "digest not in the registry", ref: missing, err: oci.ErrPull, says: missing.Digest},
		{name: "over the size bound", ref: good, max: 100, err: oci.ErrTooLarge, says: "not pulled"},
		{name: "no Wasm layer", ref: noWasm, err: oci.ErrNoModule, says: "no layer of media type application/wasm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			m, err := oci.Pull(ctx, tc.ref, oci.Options{CacheDir: cache, MaxModuleBytes: tc.max})
			if tc.wantName != "" {
				if err != nil {
					t.Fatal(err)
				}
				if m.Source.Name != tc.wantName || !bytes.Equal(m.Source.Wasm, wasm) || m.Cached {
					t.Fatalf("pulled %s (%d bytes, cached %v), want %s", m.Source.Name, len(m.Source.Wasm), m.Cached, tc.wantName)
				}
				return
			}
			if err == nil || (tc.err != nil && !errors.Is(err, tc.err)) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err %v, want %v saying %q", err, tc.err, tc.says)
			}
			if files, _ := filepath.Glob(filepath.Join(cache, "blobs", "sha256", "*")); len(files) != 0 {
				t.Errorf("a refused pull cached %v", files)
			}
		})
	}

	// The cache: a second pull needs no registry.
	cache := t.TempDir()
	m, err := oci.Pull(ctx, good, oci.Options{CacheDir: cache})
	if err != nil || string(m.Source.Signature) != "sig\n" {
		t.Fatalf("%v, signature %q", err, m.Source.Signature)
	}
	reg.Close()
	m, err = oci.Pull(ctx, good, oci.Options{CacheDir: cache})
	if err != nil || !m.Cached || !bytes.Equal(m.Source.Wasm, wasm) {
		t.Fatalf("from the cache without the registry: %v, cached %v", err, m.Cached)
	}
	// A cache whose layer was changed is not trusted: without the
	// registry, the pull fails.
	layer := filepath.Join(cache, "blobs", "sha256", strings.TrimPrefix(ocitest.Layer(wasm), "sha256:"))
	if err := os.WriteFile(layer, []byte("not the module"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := oci.Pull(ctx, good, oci.Options{CacheDir: cache}); !errors.Is(err, oci.ErrPull) {
		t.Errorf("a corrupted cache without the registry: %v, want ErrPull", err)
	}
	// What it pulled loads.
	rt := plugintest.Runtime(t, plugins.Options{})
	mod := plugintest.Load(t, rt, m.Source)
	if len(mod.Tools()) == 0 {
		t.Error("the pulled module offers no tool")
	}
}

// TestPullRedirects: a registry's redirect of a blob (to its CDN) is
// followed back to the registry, which may be at any address the operator
// named; to another host only at a public address: one to a loopback or
// private address is refused (the guarded client, not Go's default one,
// which followed it anywhere).
func TestPullRedirects(t *testing.T) {
	wasm := echoWasm(t)
	ctx := context.Background()
	reg := ocitest.NewRegistry(t)
	ref := reg.Push(t, ocitest.Artifact{Repository: "plugins/echo", Wasm: wasm})
	layer := ocitest.Layer(wasm)

	reg.Redirect(layer, reg.URL+"/v2/plugins/echo/blobs/"+layer+"?redirected")
	if m, err := oci.Pull(ctx, ref, oci.Options{}); err != nil || !bytes.Equal(m.Source.Wasm, wasm) {
		t.Fatalf("a redirect back to the registry: %v", err)
	}

	var reached atomic.Bool
	inside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Store(true)
		w.Write(wasm)
	}))
	defer inside.Close()
	reg.Redirect(layer, inside.URL+"/metadata")
	_, err := oci.Pull(ctx, ref, oci.Options{})
	if !errors.Is(err, oci.ErrPull) || !strings.Contains(err.Error(), "is not a public address") || reached.Load() {
		t.Errorf("a redirect to a loopback address not the registry's: %v (reached: %v)", err, reached.Load())
	}
}
