package oci_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/plugins/oci"
)

// floodBytes is what a lying registry offers past a bound: far more than
// any bound of a pull, and than what the sockets between it and the pull
// hold.
const floodBytes = 64 << 20

// lyingRegistry is a registry (an httptest server) that serves manifests
// and blobs as they are, or floods: answers a GET with floodBytes bytes,
// whatever its manifest says, written until the pull stops reading.
type lyingRegistry struct {
	srv *httptest.Server

	mu      sync.Mutex
	objects map[string][]byte // path → body, served whole
	floods  map[string]http.Header
	gets    map[string]int   // path → GETs
	written map[string]int64 // path → bytes of a flood written
	ended   map[string]chan struct{}
}

func newLyingRegistry(t *testing.T) *lyingRegistry {
	r := &lyingRegistry{objects: map[string][]byte{}, floods: map[string]http.Header{}, gets: map[string]int{},
		written: map[string]int64{}, ended: map[string]chan struct{}{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *lyingRegistry) host() string { return strings.TrimPrefix(r.srv.URL, "http://") }

func (r *lyingRegistry) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.gets[req.URL.Path]++
	body, whole := r.objects[req.URL.Path]
	flood, flooding := r.floods[req.URL.Path]
	ended := r.ended[req.URL.Path]
	r.mu.Unlock()
	switch {
	case whole:
		if strings.Contains(req.URL.Path, "/manifests/") {
			w.Header().Set("Content-Type", ocispec.MediaTypeImageManifest)
			w.Header().Set("Docker-Content-Digest", digest.FromBytes(body).String())
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	case flooding:
		defer close(ended)
		for k, v := range flood {
			w.Header()[k] = v
		}
		chunk := bytes.Repeat([]byte(" "), 32<<10)
		for n := int64(0); n < floodBytes; n += int64(len(chunk)) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			r.mu.Lock()
			r.written[req.URL.Path] += int64(len(chunk))
			r.mu.Unlock()
		}
	default:
		http.NotFound(w, req)
	}
}

// object serves b at the repository's manifest or blob of its digest.
func (r *lyingRegistry) object(repo, kind string, b []byte) string {
	d := digest.FromBytes(b).String()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.objects["/v2/"+repo+"/"+kind+"/"+d] = b
	return d
}

// flood makes the repository's manifest or blob of digest d a flood,
// with headers h.
func (r *lyingRegistry) flood(repo, kind, d string, h http.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	path := "/v2/" + repo + "/" + kind + "/" + d
	r.floods[path], r.ended[path] = h, make(chan struct{})
}

// manifest serves, in repo, a manifest of the layers and returns the
// reference that pins it.
func (r *lyingRegistry) manifest(t *testing.T, repo string, layers ...ocispec.Descriptor) oci.Reference {
	t.Helper()
	config := []byte("{}")
	man := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: ocispec.Descriptor{MediaType: "application/vnd.wasm.config.v0+json", Digest: digest.FromBytes(config), Size: int64(len(config))},
		Layers: layers}
	raw, err := json.Marshal(man)
	if err != nil {
		t.Fatal(err)
	}
	return oci.Reference{Registry: r.host(), Repository: repo, Digest: r.object(repo, "manifests", raw)}
}

// stopped waits for the flood of the repository's manifest or blob of d
// to end, and returns how much of it was written.
func (r *lyingRegistry) stopped(t *testing.T, repo, kind, d string) int64 {
	t.Helper()
	path := "/v2/" + repo + "/" + kind + "/" + d
	r.mu.Lock()
	ended := r.ended[path]
	r.mu.Unlock()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatalf("the registry is still writing %s: the pull did not stop reading it", path)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.written[path]
}

// TestPullBounds: what a pull reads is bounded before it is read whole
// (docs/plugins.md, "Modules from an OCI registry"): a manifest past
// MaxManifestBytes, a module layer past MaxModuleBytes and a signature
// layer past plugins.MaxSignatureBytes, whatever the manifest says of
// their size, are refused with ErrTooLarge once the bound's worth was
// read — the registry, which offered 64 MiB, was not read to the end — and
// a signature layer the manifest says is past its bound is refused
// without being asked for. Nothing is cached.
func TestPullBounds(t *testing.T) {
	ctx := context.Background()
	reg := newLyingRegistry(t)
	wasm := []byte("\x00asm\x01\x00\x00\x00")
	wasmLayer := func(repo string) ocispec.Descriptor {
		return ocispec.Descriptor{MediaType: oci.MediaTypeWasm, Digest: digest.Digest(reg.object(repo, "blobs", wasm)), Size: int64(len(wasm))}
	}
	small := []byte("a signature\n")
	smallDigest := digest.FromBytes(small)

	// A manifest without end, its headers those of a real one.
	hugeManifest := digest.FromString("a manifest without end").String()
	reg.flood("plugins/manifest", "manifests", hugeManifest, http.Header{
		"Content-Type":          {ocispec.MediaTypeImageManifest},
		"Docker-Content-Digest": {hugeManifest},
		"Content-Length":        {strconv.Itoa(floodBytes)},
	})
	// A module layer the manifest says is 8 bytes.
	moduleRef := reg.manifest(t, "plugins/module", ocispec.Descriptor{MediaType: oci.MediaTypeWasm, Digest: digest.FromBytes(wasm), Size: int64(len(wasm))})
	reg.flood("plugins/module", "blobs", digest.FromBytes(wasm).String(), nil)
	// A signature layer the manifest says is 12 bytes.
	sigRef := reg.manifest(t, "plugins/sig", wasmLayer("plugins/sig"), ocispec.Descriptor{MediaType: oci.MediaTypeSignature, Digest: smallDigest, Size: int64(len(small))})
	reg.flood("plugins/sig", "blobs", smallDigest.String(), nil)
	// A signature layer the manifest says is a byte past the bound.
	big := make([]byte, plugins.MaxSignatureBytes+1)
	bigRef := reg.manifest(t, "plugins/bigsig", wasmLayer("plugins/bigsig"),
		ocispec.Descriptor{MediaType: oci.MediaTypeSignature, Digest: digest.Digest(reg.object("plugins/bigsig", "blobs", big)), Size: int64(len(big))})

	for _, tc := range []struct {
		name       string
		ref        oci.Reference
		kind, what string // the flood, if any
		says       string
	}{
		{"manifest", oci.Reference{Registry: reg.host(), Repository: "plugins/manifest", Digest: hugeManifest}, "manifests", hugeManifest,
			fmt.Sprintf("over %d bytes: not read further", oci.MaxManifestBytes)},
		{"module layer", moduleRef, "blobs", digest.FromBytes(wasm).String(), "over 1048576 bytes: not read further"},
		{"signature layer", sigRef, "blobs", smallDigest.String(), fmt.Sprintf("over %d bytes: not read further", plugins.MaxSignatureBytes)},
		{"signature layer said to be past the bound", bigRef, "", "", fmt.Sprintf("is %d bytes, over %d", len(big), plugins.MaxSignatureBytes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			pullCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			_, err := oci.Pull(pullCtx, tc.ref, oci.Options{CacheDir: cache, MaxModuleBytes: 1 << 20})
			if !errors.Is(err, oci.ErrTooLarge) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("err %v, want ErrTooLarge saying %q", err, tc.says)
			}
			if tc.kind != "" {
				n := reg.stopped(t, tc.ref.Repository, tc.kind, tc.what)
				if n >= floodBytes {
					t.Errorf("the pull read all %d bytes the registry offered", n)
				}
				t.Logf("the registry wrote %d of the %d bytes it offered", n, floodBytes)
			}
			if files, _ := filepath.Glob(filepath.Join(cache, "blobs", "sha256", "*")); len(files) != 0 {
				t.Errorf("a refused pull cached %v", files)
			}
		})
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if n := reg.gets["/v2/plugins/bigsig/blobs/"+digest.FromBytes(big).String()]; n != 0 {
		t.Errorf("a signature layer said to be %d bytes was asked for %d times, want none", len(big), n)
	}
}
