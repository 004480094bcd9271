package file

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agentichost/agentic/storage"
)

// blobFence is a blob's mark and holds (see [storage.BlobFence]). A Store
// keeps them in its process: the fence holds between the writers and the
// deleters that use one Store (serve's hosts, its sweeps), as the Store's
// other guarantees do.
type blobFence struct {
	mark  string
	holds map[string]time.Time // token → when it lapses
}

// fenceToken returns 16 random hex digits.
func fenceToken() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// HoldBlob implements [storage.BlobFence] (see [Store.BlobScope]).
func (st *Store) HoldBlob(ctx context.Context, digest string, ttl time.Duration) (string, error) {
	return st.own().HoldBlob(ctx, digest, ttl)
}

// ReleaseBlob implements [storage.BlobFence] (see [Store.BlobScope]).
func (st *Store) ReleaseBlob(ctx context.Context, digest, hold string) error {
	return st.own().ReleaseBlob(ctx, digest, hold)
}

// MarkBlob implements [storage.BlobFence] (see [Store.BlobScope]).
func (st *Store) MarkBlob(ctx context.Context, digest string) (string, error) {
	return st.own().MarkBlob(ctx, digest)
}

// DeleteMarkedBlob implements [storage.BlobFence] (see [Store.BlobScope]).
func (st *Store) DeleteMarkedBlob(ctx context.Context, digest, mark string) (bool, error) {
	return st.own().DeleteMarkedBlob(ctx, digest, mark)
}

// fenceLocked returns the fence of the blob file at path, made when
// missing. st.blobMu is held.
func (st *Store) fenceLocked(path string) *blobFence {
	if st.blobFences == nil {
		st.blobFences = map[string]*blobFence{}
	}
	f := st.blobFences[path]
	if f == nil {
		f = &blobFence{holds: map[string]time.Time{}}
		st.blobFences[path] = f
	}
	return f
}

// tidyLocked drops the fence's lapsed holds, and the fence once nothing is
// left of it. st.blobMu is held.
func (st *Store) tidyLocked(path string, f *blobFence) {
	now := time.Now()
	for t, until := range f.holds {
		if !now.Before(until) {
			delete(f.holds, t)
		}
	}
	if f.mark == "" && len(f.holds) == 0 {
		delete(st.blobFences, path)
	}
}

// clearMark clears the mark of the blob file at path.
func (st *Store) clearMark(path string) {
	st.blobMu.Lock()
	defer st.blobMu.Unlock()
	if f := st.blobFences[path]; f != nil {
		f.mark = ""
		st.tidyLocked(path, f)
	}
}

func (b blobScope) HoldBlob(ctx context.Context, digest string, ttl time.Duration) (string, error) {
	if err := b.ready(ctx, &digest); err != nil {
		return "", err
	}
	if ttl <= 0 {
		return "", fmt.Errorf("file: hold blob %s: ttl %v is not positive", digest, ttl)
	}
	b.st.blobMu.Lock()
	defer b.st.blobMu.Unlock()
	f := b.st.fenceLocked(b.path(digest))
	t := fenceToken()
	f.mark, f.holds[t] = "", time.Now().Add(ttl)
	return t, nil
}

func (b blobScope) ReleaseBlob(ctx context.Context, digest, hold string) error {
	if err := b.ready(ctx, &digest); err != nil {
		return err
	}
	path := b.path(digest)
	b.st.blobMu.Lock()
	defer b.st.blobMu.Unlock()
	if f := b.st.blobFences[path]; f != nil {
		delete(f.holds, hold)
		f.mark = ""
		b.st.tidyLocked(path, f)
	}
	return nil
}

func (b blobScope) MarkBlob(ctx context.Context, digest string) (string, error) {
	if err := b.ready(ctx, &digest); err != nil {
		return "", err
	}
	b.st.blobMu.Lock()
	defer b.st.blobMu.Unlock()
	f := b.st.fenceLocked(b.path(digest))
	f.mark = fenceToken()
	return f.mark, nil
}

// DeleteMarkedBlob removes the blob's file with the Store's fences locked,
// after it checked them: a PutBlob clears the mark before it looks at the
// file, so it either comes first (and the deletion is refused) or finds
// the file gone and writes it anew.
func (b blobScope) DeleteMarkedBlob(ctx context.Context, digest, mark string) (bool, error) {
	if err := b.ready(ctx, &digest); err != nil {
		return false, err
	}
	path := b.path(digest)
	b.st.blobMu.Lock()
	defer b.st.blobMu.Unlock()
	f := b.st.blobFences[path]
	if f == nil || mark == "" || f.mark != mark {
		return false, nil
	}
	b.st.tidyLocked(path, f)
	if len(f.holds) > 0 {
		return false, nil
	}
	delete(b.st.blobFences, path)
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("file: delete blob: %w", err)
	}
	if b.st.fsync {
		if err := syncDir(b.dir); err != nil {
			return true, fmt.Errorf("file: delete blob: %w", err)
		}
	}
	if os.Remove(b.dir) == nil && b.st.fsync {
		if err := syncDir(filepath.Dir(b.dir)); err != nil {
			return true, fmt.Errorf("file: delete blob: %w", err)
		}
	}
	return true, nil
}

var (
	_ storage.BlobFence = (*Store)(nil)
	_ storage.BlobFence = blobScope{}
)
