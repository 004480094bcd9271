// Package oci pulls plugin modules from an OCI registry, pinned by
// digest: oci://REGISTRY/REPOSITORY@sha256:HEX names one image manifest,
// whose Wasm layer is the module (and an optional layer its minisign
// signature). What is pulled is verified against the digests — the
// manifest's against the reference, each layer's against the manifest —
// and bounded in size before it is read; a tag without a digest is
// refused, since pinning is the point. Pulled manifests and blobs are
// cached on disk by digest, so that a host restarts without the registry.
//
// The registry is reached through oras-go (oras.land/oras-go/v2),
// anonymously, over HTTPS, or plain HTTP for a loopback registry or one
// named in Options.Insecure, with plugins.PullClient: the registry may be
// at any address, a redirect (a blob served from a CDN) only to a public
// one, and no proxy is taken from the environment. A module is pushed
// with the oras tool:
//
//	oras push registry.example.com/plugins/get_account:1.4.0 \
//	  get_account.wasm:application/wasm \
//	  get_account.wasm.minisig:application/vnd.agentichost.minisig
//
// and named by the digest it prints: oci://registry.example.com/plugins/get_account@sha256:….
package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/agentichost/agentic/plugins"
)

// Sentinels; their messages are prefixed with the package name.
var (
	// ErrReference: the reference is not oci://REGISTRY/REPOSITORY@sha256:HEX.
	ErrReference = errors.New("oci: bad reference")
	// ErrNotPinned: the reference names a tag, not a digest.
	ErrNotPinned = errors.New("oci: the reference is not pinned by digest")
	// ErrDigest: what the registry (or the cache) gave does not match its
	// digest: the manifest the reference's, or a layer the manifest's.
	ErrDigest = errors.New("oci: digest mismatch")
	// ErrTooLarge: the manifest or a layer is larger than its bound.
	ErrTooLarge = errors.New("oci: too large")
	// ErrNoModule: the manifest is not an image manifest with exactly one
	// Wasm layer (and at most one signature layer).
	ErrNoModule = errors.New("oci: no plugin module in the manifest")
	// ErrPull: the registry could not be reached, or did not answer with
	// the manifest or a layer.
	ErrPull = errors.New("oci: pull failed")
)

// Media types and annotations.
const (
	// MediaTypeWasm is the module layer's media type (the CNCF Wasm OCI
	// artifact layout's). WasmLayerTypes lists those accepted.
	MediaTypeWasm = "application/wasm"
	// MediaTypeSignature is the media type of the layer holding the
	// module's minisign signature (NAME.wasm.minisig).
	MediaTypeSignature = "application/vnd.agentichost.minisig"
	// AnnotationName, on the manifest, names the module; without it the
	// module is named by the repository's last path element.
	AnnotationName = "org.agentichost.plugin.name"
	// MaxManifestBytes bounds a manifest.
	MaxManifestBytes = 4 << 20
)

// WasmLayerTypes are the media types a module layer may have.
var WasmLayerTypes = []string{MediaTypeWasm, "application/vnd.wasm.content.layer.v1+wasm", "application/vnd.module.wasm.content.layer.v1+wasm"}

// manifestTypes are the media types of the manifests pulled.
var manifestTypes = []string{ocispec.MediaTypeImageManifest, "application/vnd.docker.distribution.manifest.v2+json"}

// Reference names a module in a registry, pinned by digest.
type Reference struct {
	// Registry is the registry's host[:port]; Repository the repository's
	// path; Digest the manifest's digest, "sha256:HEX".
	Registry, Repository, Digest string
}

// String returns the reference as oci://REGISTRY/REPOSITORY@DIGEST.
func (r Reference) String() string {
	return "oci://" + r.Registry + "/" + r.Repository + "@" + r.Digest
}

// ParseReference reads oci://REGISTRY/REPOSITORY@sha256:HEX (a tag before
// the digest, REPOSITORY:TAG@sha256:HEX, is allowed and ignored). A
// reference with a tag and no digest is ErrNotPinned; anything else that
// is not a reference, ErrReference.
func ParseReference(s string) (Reference, error) {
	rest, ok := strings.CutPrefix(s, "oci://")
	if !ok {
		return Reference{}, fmt.Errorf("%w: %q does not start with oci://", ErrReference, s)
	}
	ref, err := registry.ParseReference(rest)
	if err != nil {
		return Reference{}, fmt.Errorf("%w: %q: %v", ErrReference, s, err)
	}
	if ref.Reference == "" || ref.ValidateReferenceAsDigest() != nil {
		return Reference{}, fmt.Errorf("%w: %s names a tag, not a digest: pin it, as oci://%s/%s@sha256:… (oras resolve prints the digest)", ErrNotPinned, s, ref.Registry, ref.Repository)
	}
	if !strings.HasPrefix(ref.Reference, "sha256:") {
		return Reference{}, fmt.Errorf("%w: %q: want a sha256 digest", ErrReference, s)
	}
	return Reference{Registry: ref.Registry, Repository: ref.Repository, Digest: ref.Reference}, nil
}

// Options configures [Pull].
type Options struct {
	// CacheDir keeps pulled manifests and layers by digest
	// (CacheDir/blobs/sha256/HEX), so that a module pulled once loads
	// again without its registry. Default: "", no cache.
	CacheDir string
	// MaxModuleBytes bounds the module's layer, refused before it is read
	// (the tenant's plugins.Limits.MaxModuleBytes). Default: 0, which
	// means plugins.DefaultMaxModuleBytes.
	MaxModuleBytes int
	// Insecure are registries (host[:port]) reached over plain HTTP.
	// Loopback registries (localhost, 127.0.0.0/8, ::1) always are.
	// Default: none, HTTPS.
	Insecure []string
	// Client sends the requests. Default: nil, plugins.PullClient of the
	// reference's registry: the registry at any address, its redirects
	// (to a CDN) only to public addresses, no proxy from the environment.
	// Either way, give Pull's context a deadline.
	Client *http.Client
}

// Module is a module pulled from a registry.
type Module struct {
	// Source is the module: its name (the manifest's AnnotationName,
	// else the repository's last path element), bytes and signature
	// (nil when the manifest has no signature layer).
	Source plugins.Source
	// Reference is what was pulled.
	Reference Reference
	// Cached tells that it came from Options.CacheDir, without the
	// registry.
	Cached bool
}

// moduleName is what a module pulled may be called.
var moduleName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$`)

// Pull fetches the module ref names, from Options.CacheDir when it holds
// it, else from the registry (then caches it). The manifest must match
// ref's digest, each layer the manifest's digest and size, and the module
// layer be no larger than MaxModuleBytes; any other answer is an error
// (ErrDigest, ErrTooLarge, ErrNoModule, ErrPull) and nothing is cached.
func Pull(ctx context.Context, ref Reference, opts Options) (Module, error) {
	if opts.MaxModuleBytes <= 0 {
		opts.MaxModuleBytes = plugins.DefaultMaxModuleBytes
	}
	if opts.CacheDir != "" {
		if m, err := pullFrom(ctx, ref, opts, cacheFetcher{opts.CacheDir}); err == nil {
			m.Cached = true
			return m, nil
		}
	}
	repo, err := remote.NewRepository(ref.Registry + "/" + ref.Repository)
	if err != nil {
		return Module{}, fmt.Errorf("%w: %v", ErrReference, err)
	}
	repo.PlainHTTP = plainHTTP(ref.Registry, opts.Insecure)
	if opts.Client != nil {
		repo.Client = opts.Client
	} else {
		repo.Client = plugins.PullClient(ref.Registry)
	}
	f := &remoteFetcher{repo: repo}
	if opts.CacheDir != "" {
		f.keep = map[string][]byte{}
	}
	m, err := pullFrom(ctx, ref, opts, f)
	if err != nil {
		return Module{}, err
	}
	for digest, b := range f.keep {
		if err := cacheWrite(opts.CacheDir, digest, b); err != nil {
			return m, fmt.Errorf("oci: caching %s: %w", ref, err)
		}
	}
	return m, nil
}

// plainHTTP reports whether a registry is reached over plain HTTP.
func plainHTTP(reg string, insecure []string) bool {
	if slices.Contains(insecure, reg) {
		return true
	}
	host := reg
	if h, _, err := net.SplitHostPort(reg); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// fetcher reads a manifest or a blob by digest, no more than max bytes.
type fetcher interface {
	fetch(ctx context.Context, desc ocispec.Descriptor, manifest bool, max int64) ([]byte, error)
}

// pullFrom pulls ref through f, verifying what it reads.
func pullFrom(ctx context.Context, ref Reference, opts Options, f fetcher) (Module, error) {
	raw, err := f.fetch(ctx, ocispec.Descriptor{Digest: digest.Digest(ref.Digest), MediaType: ocispec.MediaTypeImageManifest, Size: -1}, true, MaxManifestBytes)
	if err != nil {
		return Module{}, err
	}
	if got := sha256Of(raw); got != ref.Digest {
		return Module{}, fmt.Errorf("%w: the manifest of %s hashes to %s", ErrDigest, ref, got)
	}
	var man ocispec.Manifest
	var index struct {
		Manifests []json.RawMessage `json:"manifests"`
	}
	if err := json.Unmarshal(raw, &man); err != nil {
		return Module{}, fmt.Errorf("%w: %s: the manifest does not read: %v", ErrNoModule, ref, err)
	}
	_ = json.Unmarshal(raw, &index)
	if man.MediaType == ocispec.MediaTypeImageIndex || len(index.Manifests) > 0 {
		return Module{}, fmt.Errorf("%w: %s is an index, not a manifest: pin the digest of the module's manifest", ErrNoModule, ref)
	}
	if man.MediaType != "" && !slices.Contains(manifestTypes, man.MediaType) {
		return Module{}, fmt.Errorf("%w: %s is a %s, not an image manifest", ErrNoModule, ref, man.MediaType)
	}
	var wasmL, sigL *ocispec.Descriptor
	for i := range man.Layers {
		l := &man.Layers[i]
		switch {
		case slices.Contains(WasmLayerTypes, l.MediaType):
			if wasmL != nil {
				return Module{}, fmt.Errorf("%w: %s has more than one Wasm layer", ErrNoModule, ref)
			}
			wasmL = l
		case l.MediaType == MediaTypeSignature:
			if sigL != nil {
				return Module{}, fmt.Errorf("%w: %s has more than one signature layer", ErrNoModule, ref)
			}
			sigL = l
		}
	}
	if wasmL == nil {
		return Module{}, fmt.Errorf("%w: %s has no layer of media type %s", ErrNoModule, ref, MediaTypeWasm)
	}
	if wasmL.Size > int64(opts.MaxModuleBytes) {
		return Module{}, fmt.Errorf("%w: the module of %s is %d bytes, over the limit of %d (max module bytes): not pulled", ErrTooLarge, ref, wasmL.Size, opts.MaxModuleBytes)
	}
	wasm, err := fetchLayer(ctx, f, ref, *wasmL, int64(opts.MaxModuleBytes))
	if err != nil {
		return Module{}, err
	}
	var sig []byte
	if sigL != nil {
		if sigL.Size > plugins.MaxSignatureBytes {
			return Module{}, fmt.Errorf("%w: the signature of %s is %d bytes, over %d", ErrTooLarge, ref, sigL.Size, plugins.MaxSignatureBytes)
		}
		if sig, err = fetchLayer(ctx, f, ref, *sigL, plugins.MaxSignatureBytes); err != nil {
			return Module{}, err
		}
	}
	name := man.Annotations[AnnotationName]
	if name == "" {
		name = ref.Repository[strings.LastIndexByte(ref.Repository, '/')+1:]
	}
	if !moduleName.MatchString(name) {
		return Module{}, fmt.Errorf("%w: %s: the module's name %q is not 1 to 64 of [A-Za-z0-9._-] (set the annotation %s)", ErrNoModule, ref, name, AnnotationName)
	}
	return Module{Source: plugins.Source{Name: name, Wasm: wasm, Signature: sig}, Reference: ref}, nil
}

// fetchLayer reads a layer and checks it against its descriptor.
func fetchLayer(ctx context.Context, f fetcher, ref Reference, l ocispec.Descriptor, max int64) ([]byte, error) {
	if l.Size < 0 {
		return nil, fmt.Errorf("%w: %s: a layer of negative size", ErrNoModule, ref)
	}
	b, err := f.fetch(ctx, l, false, max)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != l.Size || sha256Of(b) != l.Digest.String() {
		return nil, fmt.Errorf("%w: the layer %s of %s: got %d bytes hashing to %s, the manifest says %d bytes", ErrDigest, l.Digest, ref, len(b), sha256Of(b), l.Size)
	}
	return b, nil
}

// remoteFetcher reads from the registry, keeping what it read for the
// cache (keep, when not nil).
type remoteFetcher struct {
	repo *remote.Repository
	keep map[string][]byte
}

func (f *remoteFetcher) fetch(ctx context.Context, desc ocispec.Descriptor, manifest bool, max int64) ([]byte, error) {
	var rc io.ReadCloser
	var err error
	if manifest {
		_, rc, err = f.repo.Manifests().FetchReference(ctx, desc.Digest.String())
	} else {
		rc, err = f.repo.Blobs().Fetch(ctx, desc)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s/%s@%s: %v", ErrPull, f.repo.Reference.Registry, f.repo.Reference.Repository, desc.Digest, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrPull, desc.Digest, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: %s is over %d bytes: not read further", ErrTooLarge, desc.Digest, max)
	}
	if f.keep != nil {
		f.keep[desc.Digest.String()] = b
	}
	return b, nil
}

// cacheFetcher reads from a cache directory.
type cacheFetcher struct{ dir string }

func (f cacheFetcher) fetch(_ context.Context, desc ocispec.Descriptor, _ bool, max int64) ([]byte, error) {
	path, err := cachePath(f.dir, desc.Digest.String())
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%w: %s in the cache", ErrTooLarge, desc.Digest)
	}
	return os.ReadFile(path)
}

// cachePath is the file of a digest in the cache.
func cachePath(dir, digest string) (string, error) {
	hexDigest, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexDigest) != 64 || strings.Trim(hexDigest, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%w: %q is not a sha256 digest", ErrReference, digest)
	}
	return filepath.Join(dir, "blobs", "sha256", hexDigest), nil
}

// cacheWrite keeps b, verified, as digest's file in the cache, written
// through a temporary file renamed into place.
func cacheWrite(dir, digest string, b []byte) error {
	path, err := cachePath(dir, digest)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".pull-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, bytes.NewReader(b)); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// sha256Of is b's digest, "sha256:HEX".
func sha256Of(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
