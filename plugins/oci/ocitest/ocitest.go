// Package ocitest runs an OCI registry for tests — go-containerregistry's
// registry, in process, on a loopback port — and pushes plugin modules to
// it as the oras tool does, so that code pulling plugins is tested against
// a real registry, never the network. The registry can be made to lie
// (Registry.Tamper) to test what a pull refuses.
package ocitest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/agentichost/agentic/plugins/oci"
)

// Registry is a running OCI registry.
type Registry struct {
	// Server serves it, on 127.0.0.1.
	*httptest.Server
	// Host is its host:port, as a reference names it.
	Host string

	mu       sync.Mutex
	tamper   map[string][]byte // digest → the body served in its place
	redirect map[string]string // digest → where a GET of it is sent
}

// NewRegistry starts a registry, stopped when tb ends (or by Close).
func NewRegistry(tb testing.TB) *Registry {
	tb.Helper()
	r := &Registry{tamper: map[string][]byte{}, redirect: map[string]string{}}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		var body []byte
		var to string
		for d, b := range r.tamper {
			if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/"+d) {
				body = b
			}
		}
		for d, u := range r.redirect {
			if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/"+d) && !req.URL.Query().Has("redirected") {
				to = u
			}
		}
		r.mu.Unlock()
		if to != "" {
			http.Redirect(w, req, to, http.StatusTemporaryRedirect)
			return
		}
		if body == nil {
			inner.ServeHTTP(w, req)
			return
		}
		rec := httptest.NewRecorder()
		inner.ServeHTTP(rec, req)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(rec.Code)
		w.Write(body)
	}))
	tb.Cleanup(r.Server.Close)
	r.Host = strings.TrimPrefix(r.Server.URL, "http://")
	return r
}

// Tamper makes the registry answer body for the manifest or blob of
// digest (its headers as they were), as a compromised registry or a
// corrupting proxy would.
func (r *Registry) Tamper(digest string, body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tamper[digest] = body
}

// Redirect makes the registry answer a GET of the manifest or blob of
// digest with a redirect to url, as a registry that serves its blobs from
// a CDN does. A request with the query "redirected" is answered as usual:
// a redirect to the same path with it comes back to the registry.
func (r *Registry) Redirect(digest, url string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.redirect[digest] = url
}

// Artifact is a plugin module to push.
type Artifact struct {
	// Repository is the repository's path ("plugins/get_account").
	Repository string
	// Tag tags the manifest. Default: "latest".
	Tag string
	// Wasm is the module; Signature its minisign signature, pushed as a
	// layer of oci.MediaTypeSignature when not nil.
	Wasm, Signature []byte
	// Name, when set, is the manifest's oci.AnnotationName.
	Name string
	// WasmMediaType is the module layer's media type. Default:
	// oci.MediaTypeWasm.
	WasmMediaType string
}

// Push pushes a's layers and manifest (an OCI image manifest, as oras
// push makes) and returns the reference that pins it.
func (r *Registry) Push(tb testing.TB, a Artifact) oci.Reference {
	tb.Helper()
	ctx := context.Background()
	repo, err := remote.NewRepository(r.Host + "/" + a.Repository)
	if err != nil {
		tb.Fatal(err)
	}
	repo.PlainHTTP = true
	push := func(mediaType string, b []byte) ocispec.Descriptor {
		d := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(b), Size: int64(len(b))}
		if err := repo.Push(ctx, d, bytes.NewReader(b)); err != nil {
			tb.Fatal(err)
		}
		return d
	}
	if a.WasmMediaType == "" {
		a.WasmMediaType = oci.MediaTypeWasm
	}
	config := push("application/vnd.wasm.config.v0+json", []byte("{}"))
	layers := []ocispec.Descriptor{push(a.WasmMediaType, a.Wasm)}
	if a.Signature != nil {
		layers = append(layers, push(oci.MediaTypeSignature, a.Signature))
	}
	man := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		ArtifactType: "application/vnd.wasm.config.v0+json", Config: config, Layers: layers}
	if a.Name != "" {
		man.Annotations = map[string]string{oci.AnnotationName: a.Name}
	}
	raw, err := json.Marshal(man)
	if err != nil {
		tb.Fatal(err)
	}
	md := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(raw), Size: int64(len(raw))}
	if a.Tag == "" {
		a.Tag = "latest"
	}
	if err := repo.PushReference(ctx, md, bytes.NewReader(raw), a.Tag); err != nil {
		tb.Fatal(err)
	}
	return oci.Reference{Registry: r.Host, Repository: a.Repository, Digest: md.Digest.String()}
}

// Layer returns the digest of the module layer of a pushed artifact's
// bytes, for Tamper.
func Layer(wasm []byte) string { return digest.FromBytes(wasm).String() }
