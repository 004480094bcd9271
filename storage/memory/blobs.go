package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/agentichost/agentic/storage"
)

// blobSpace is the blobs of every scope of one store.
type blobSpace struct {
	mu     sync.RWMutex
	scopes map[string]map[string]blob // scope → digest → blob
	fences map[fenceKey]*fence        // the digests marked or held
}

// fenceKey names a digest of a scope in blobSpace.fences.
type fenceKey struct{ scope, digest string }

// fence is a digest's mark and holds (see storage.BlobFence).
type fence struct {
	mark  string
	holds map[string]time.Time // token → when it lapses
}

// blob is one stored blob; data is never modified in place.
type blob struct {
	data   []byte
	stored time.Time
}

// blobScope is the blobs of one scope of a store.
type blobScope struct {
	s     *Store
	scope string
}

func (s *Store) blobs() *blobSpace {
	s.blobOnce.Do(func() {
		s.blobSpace = &blobSpace{scopes: make(map[string]map[string]blob), fences: make(map[fenceKey]*fence)}
	})
	return s.blobSpace
}

// PutBlob implements [storage.Blobs].
func (s *Store) PutBlob(ctx context.Context, data []byte) (string, error) {
	return blobScope{s, ""}.PutBlob(ctx, data)
}

// GetBlob implements [storage.Blobs].
func (s *Store) GetBlob(ctx context.Context, digest string) ([]byte, bool, error) {
	return blobScope{s, ""}.GetBlob(ctx, digest)
}

// DeleteBlob implements [storage.Blobs].
func (s *Store) DeleteBlob(ctx context.Context, digest string) error {
	return blobScope{s, ""}.DeleteBlob(ctx, digest)
}

// ListBlobs implements [storage.Blobs].
func (s *Store) ListBlobs(ctx context.Context) ([]storage.BlobInfo, error) {
	return blobScope{s, ""}.ListBlobs(ctx)
}

// BlobScope implements [storage.BlobScoper]: the scope's blobs are kept
// apart from the store's own (the scope "").
func (s *Store) BlobScope(scope string) storage.Blobs { return blobScope{s, scope} }

// ready checks ctx and the store, and the digest when there is one.
func (b blobScope) ready(ctx context.Context, digest *string) error {
	if err := b.s.kvReady(ctx, nil); err != nil {
		return err
	}
	if digest != nil {
		if err := storage.CheckBlobDigest(*digest); err != nil {
			return fmt.Errorf("memory: %w", err)
		}
	}
	return nil
}

func (b blobScope) PutBlob(ctx context.Context, data []byte) (string, error) {
	if err := b.ready(ctx, nil); err != nil {
		return "", err
	}
	digest := storage.BlobDigest(data)
	sp := b.s.blobs()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	m := sp.scopes[b.scope]
	if m == nil {
		m = make(map[string]blob)
		sp.scopes[b.scope] = m
	}
	old, ok := m[digest]
	if !ok {
		old.data = append([]byte{}, data...)
	}
	old.stored = time.Now().UTC()
	m[digest] = old
	sp.clearMarkLocked(fenceKey{b.scope, digest})
	return digest, nil
}

func (b blobScope) GetBlob(ctx context.Context, digest string) ([]byte, bool, error) {
	if err := b.ready(ctx, &digest); err != nil {
		return nil, false, err
	}
	sp := b.s.blobs()
	sp.mu.RLock()
	v, ok := sp.scopes[b.scope][digest]
	sp.mu.RUnlock()
	if !ok {
		return nil, false, nil
	}
	return append([]byte{}, v.data...), true, nil
}

func (b blobScope) DeleteBlob(ctx context.Context, digest string) error {
	if err := b.ready(ctx, &digest); err != nil {
		return err
	}
	sp := b.s.blobs()
	sp.mu.Lock()
	delete(sp.scopes[b.scope], digest)
	sp.mu.Unlock()
	return nil
}

func (b blobScope) ListBlobs(ctx context.Context) ([]storage.BlobInfo, error) {
	if err := b.ready(ctx, nil); err != nil {
		return nil, err
	}
	sp := b.s.blobs()
	sp.mu.RLock()
	defer sp.mu.RUnlock()
	m := sp.scopes[b.scope]
	out := make([]storage.BlobInfo, 0, len(m))
	for _, d := range slices.Sorted(maps.Keys(m)) {
		out = append(out, storage.BlobInfo{Digest: d, Size: int64(len(m[d].data)), Stored: m[d].stored})
	}
	return out, nil
}

var (
	_ storage.Blobs      = (*Store)(nil)
	_ storage.BlobScoper = (*Store)(nil)
	_ storage.Blobs      = blobScope{}
)
