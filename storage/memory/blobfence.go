package memory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/agentichost/agentic/storage"
)

// token returns 16 random hex digits.
func token() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// HoldBlob implements [storage.BlobFence].
func (s *Store) HoldBlob(ctx context.Context, digest string, ttl time.Duration) (string, error) {
	return blobScope{s, ""}.HoldBlob(ctx, digest, ttl)
}

// ReleaseBlob implements [storage.BlobFence].
func (s *Store) ReleaseBlob(ctx context.Context, digest, hold string) error {
	return blobScope{s, ""}.ReleaseBlob(ctx, digest, hold)
}

// MarkBlob implements [storage.BlobFence].
func (s *Store) MarkBlob(ctx context.Context, digest string) (string, error) {
	return blobScope{s, ""}.MarkBlob(ctx, digest)
}

// DeleteMarkedBlob implements [storage.BlobFence].
func (s *Store) DeleteMarkedBlob(ctx context.Context, digest, mark string) (bool, error) {
	return blobScope{s, ""}.DeleteMarkedBlob(ctx, digest, mark)
}

// clearMarkLocked clears the digest's mark, and forgets its fence when
// nothing is left of it. sp.mu is held.
func (sp *blobSpace) clearMarkLocked(k fenceKey) {
	if f := sp.fences[k]; f != nil {
		f.mark = ""
		sp.tidyLocked(k, f, time.Now())
	}
}

// tidyLocked drops the fence's lapsed holds, and the fence when nothing is
// left of it. sp.mu is held.
func (sp *blobSpace) tidyLocked(k fenceKey, f *fence, now time.Time) {
	for t, until := range f.holds {
		if !now.Before(until) {
			delete(f.holds, t)
		}
	}
	if f.mark == "" && len(f.holds) == 0 {
		delete(sp.fences, k)
	}
}

func (b blobScope) fenceLocked(digest string) (fenceKey, *fence) {
	sp := b.s.blobSpace
	k := fenceKey{b.scope, digest}
	f := sp.fences[k]
	if f == nil {
		f = &fence{holds: map[string]time.Time{}}
		sp.fences[k] = f
	}
	return k, f
}

func (b blobScope) HoldBlob(ctx context.Context, digest string, ttl time.Duration) (string, error) {
	if err := b.ready(ctx, &digest); err != nil {
		return "", err
	}
	if ttl <= 0 {
		return "", fmt.Errorf("memory: hold blob %s: ttl %v is not positive", digest, ttl)
	}
	sp := b.s.blobs()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	_, f := b.fenceLocked(digest)
	t := token()
	f.mark, f.holds[t] = "", time.Now().Add(ttl)
	return t, nil
}

func (b blobScope) ReleaseBlob(ctx context.Context, digest, hold string) error {
	if err := b.ready(ctx, &digest); err != nil {
		return err
	}
	sp := b.s.blobs()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	k := fenceKey{b.scope, digest}
	if f := sp.fences[k]; f != nil {
		delete(f.holds, hold)
		f.mark = ""
		sp.tidyLocked(k, f, time.Now())
	}
	return nil
}

func (b blobScope) MarkBlob(ctx context.Context, digest string) (string, error) {
	if err := b.ready(ctx, &digest); err != nil {
		return "", err
	}
	sp := b.s.blobs()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	_, f := b.fenceLocked(digest)
	f.mark = token()
	return f.mark, nil
}

func (b blobScope) DeleteMarkedBlob(ctx context.Context, digest, mark string) (bool, error) {
	if err := b.ready(ctx, &digest); err != nil {
		return false, err
	}
	sp := b.s.blobs()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	k := fenceKey{b.scope, digest}
	f := sp.fences[k]
	if f == nil || mark == "" || f.mark != mark {
		return false, nil
	}
	sp.tidyLocked(k, f, time.Now())
	if len(f.holds) > 0 {
		return false, nil
	}
	delete(sp.fences, k)
	if _, ok := sp.scopes[b.scope][digest]; !ok {
		return false, nil
	}
	delete(sp.scopes[b.scope], digest)
	return true, nil
}

var (
	_ storage.BlobFence = (*Store)(nil)
	_ storage.BlobFence = blobScope{}
)
