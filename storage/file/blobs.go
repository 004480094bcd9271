package file

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentichost/agentic/storage"
)

// blobDir is the subdirectory of the blob store; it is not a session file
// (its name has no .jsonl extension).
const blobDir = "blobs"

// ErrCorruptBlob is matched (errors.Is) by the error of a GetBlob whose
// file does not hold the bytes its name says (damage, or a crash without
// [Options.Fsync] on a file system that does not order a rename after the
// data it names). Putting the bytes again repairs it.
var ErrCorruptBlob = errors.New("file: corrupt blob file")

// blobScope is the blobs of one scope of a Store: the files of one
// directory.
type blobScope struct {
	st  *Store
	dir string
}

// scopeDir returns the directory of a scope's blobs: <dir>/blobs for the
// store's own (""), <dir>/blobs/@<scope> for a scope that is a valid
// session id (so the operator reads the tenant in the name), and
// <dir>/blobs/@~<SHA-256 of scope> for any other. '@' and '~' are in no
// session id, and blob files are named by 64 hex digits, so no two meet.
func (st *Store) scopeDir(scope string) string {
	switch {
	case scope == "":
		return filepath.Join(st.dir, blobDir)
	case storage.ValidSessionID(scope):
		return filepath.Join(st.dir, blobDir, "@"+scope)
	default:
		sum := sha256.Sum256([]byte(scope))
		return filepath.Join(st.dir, blobDir, "@~"+hex.EncodeToString(sum[:]))
	}
}

// PutBlob implements [storage.Blobs] (see [Store.BlobScope]).
func (st *Store) PutBlob(ctx context.Context, data []byte) (string, error) {
	return st.own().PutBlob(ctx, data)
}

// GetBlob implements [storage.Blobs] (see [Store.BlobScope]).
func (st *Store) GetBlob(ctx context.Context, digest string) ([]byte, bool, error) {
	return st.own().GetBlob(ctx, digest)
}

// DeleteBlob implements [storage.Blobs] (see [Store.BlobScope]).
func (st *Store) DeleteBlob(ctx context.Context, digest string) error {
	return st.own().DeleteBlob(ctx, digest)
}

// ListBlobs implements [storage.Blobs] (see [Store.BlobScope]).
func (st *Store) ListBlobs(ctx context.Context) ([]storage.BlobInfo, error) {
	return st.own().ListBlobs(ctx)
}

func (st *Store) own() blobScope { return blobScope{st, st.scopeDir("")} }

// BlobScope implements [storage.BlobScoper]: the blobs of scope are the
// files of their own directory under <dir>/blobs/ (see the package
// documentation).
func (st *Store) BlobScope(scope string) storage.Blobs {
	return blobScope{st, st.scopeDir(scope)}
}

// path returns the file of a blob: its digest's hex digits.
func (b blobScope) path(digest string) string {
	return filepath.Join(b.dir, strings.TrimPrefix(digest, "sha256:"))
}

// ready checks ctx, the store and the digest, when there is one.
func (b blobScope) ready(ctx context.Context, digest *string) error {
	var bounds error
	if digest != nil {
		bounds = storage.CheckBlobDigest(*digest)
	}
	return b.st.kvReady(ctx, bounds)
}

// PutBlob writes data to a new file (".put-*") in the scope's directory,
// sets its modification time (the blob's Stored) and renames it to the
// digest's name, so that a GetBlob, even after a crash, finds the blob
// whole or not at all; with [Options.Fsync] the file and then the
// directory are fsynced. Bytes already there (a file of the same name
// holding them) are not written again: their file's modification time
// moves to now. A damaged file is written anew.
func (b blobScope) PutBlob(ctx context.Context, data []byte) (string, error) {
	if err := b.ready(ctx, nil); err != nil {
		return "", err
	}
	digest := storage.BlobDigest(data)
	path := b.path(digest)
	b.st.clearMark(path) // before the file is looked at: see DeleteMarkedBlob
	now := time.Now()
	if fi, err := os.Stat(path); err == nil && fi.Size() == int64(len(data)) {
		// Bytes there already, unless damaged: a read costs less than a
		// write (and its fsyncs), and a damaged file is written anew.
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
			if err := os.Chtimes(path, now, now); err == nil {
				return digest, nil
			}
		}
		// Damaged, or gone meanwhile (a delete): write it anew.
	}
	var tmp *os.File
	for try := 0; ; try++ {
		if err := b.st.mkdirKV(b.dir); err != nil {
			return "", fmt.Errorf("file: put blob: %w", err)
		}
		var err error
		tmp, err = os.CreateTemp(b.dir, ".put-*")
		if errors.Is(err, fs.ErrNotExist) && try < 3 {
			continue // a DeleteBlob removed the scope's empty directory meanwhile
		}
		if err != nil {
			return "", fmt.Errorf("file: put blob: %w", err)
		}
		break
	}
	_, err := tmp.Write(data)
	if err == nil && b.st.fsync {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chtimes(tmp.Name(), now, now)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return "", fmt.Errorf("file: put blob: %w", err)
	}
	if b.st.fsync {
		if err := syncDir(b.dir); err != nil {
			return "", fmt.Errorf("file: put blob: %w", err)
		}
	}
	return digest, nil
}

// GetBlob reads the blob's file and checks its bytes against the digest:
// a mismatch fails with [ErrCorruptBlob].
func (b blobScope) GetBlob(ctx context.Context, digest string) ([]byte, bool, error) {
	if err := b.ready(ctx, &digest); err != nil {
		return nil, false, err
	}
	path := b.path(digest)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("file: get blob: %w", err)
	}
	if got := storage.BlobDigest(data); got != digest {
		return nil, false, fmt.Errorf("file: get blob: %s holds %d bytes of digest %s: %w", path, len(data), got, ErrCorruptBlob)
	}
	return data, true, nil
}

// DeleteBlob removes the blob's file, and the scope's directory once it is
// empty.
func (b blobScope) DeleteBlob(ctx context.Context, digest string) error {
	if err := b.ready(ctx, &digest); err != nil {
		return err
	}
	err := os.Remove(b.path(digest))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("file: delete blob: %w", err)
	}
	if b.st.fsync {
		if err := syncDir(b.dir); err != nil {
			return fmt.Errorf("file: delete blob: %w", err)
		}
	}
	// A scope left without blobs leaves no directory (it fails, and
	// stays, while it holds any file; a PutBlob that loses its directory
	// to this makes it again).
	if os.Remove(b.dir) == nil && b.st.fsync {
		if err := syncDir(filepath.Dir(b.dir)); err != nil {
			return fmt.Errorf("file: delete blob: %w", err)
		}
	}
	return nil
}

// ListBlobs lists the scope's directory: every file named by 64 hex
// digits, with its size and modification time.
func (b blobScope) ListBlobs(ctx context.Context) ([]storage.BlobInfo, error) {
	if err := b.ready(ctx, nil); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(b.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []storage.BlobInfo{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("file: list blobs: %w", err)
	}
	out := make([]storage.BlobInfo, 0, len(entries))
	for _, e := range entries {
		digest := "sha256:" + e.Name()
		if !e.Type().IsRegular() || storage.CheckBlobDigest(digest) != nil {
			continue // a temporary file, or a scope's directory
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("file: list blobs: %w", err)
		}
		out = append(out, storage.BlobInfo{Digest: digest, Size: fi.Size(), Stored: fi.ModTime().UTC()})
	}
	slices.SortFunc(out, func(x, y storage.BlobInfo) int { return strings.Compare(x.Digest, y.Digest) })
	return out, nil
}

// removeTornBlobs removes the temporary files of PutBlobs a crash
// interrupted, once they are tornAge old.
func removeTornBlobs(dir string, removeOld func(string)) {
	for _, pattern := range []string{filepath.Join(dir, blobDir, ".put-*"), filepath.Join(dir, blobDir, "@*", ".put-*")} {
		torn, _ := filepath.Glob(pattern)
		for _, f := range torn {
			removeOld(f)
		}
	}
}

var (
	_ storage.Blobs      = (*Store)(nil)
	_ storage.BlobScoper = (*Store)(nil)
	_ storage.Blobs      = blobScope{}
)
