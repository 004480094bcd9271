package redis

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentichost/agentic/storage"
	goredis "github.com/redis/go-redis/v9"
)

// blobScope is the blobs of one scope of a Store (see the package
// documentation's key layout).
type blobScope struct {
	s     *Store
	scope string // hex of the scope
}

// PutBlob implements [storage.Blobs] (see [Store.BlobScope]).
func (s *Store) PutBlob(ctx context.Context, data []byte) (string, error) {
	return blobScope{s, ""}.PutBlob(ctx, data)
}

// GetBlob implements [storage.Blobs] (see [Store.BlobScope]).
func (s *Store) GetBlob(ctx context.Context, digest string) ([]byte, bool, error) {
	return blobScope{s, ""}.GetBlob(ctx, digest)
}

// DeleteBlob implements [storage.Blobs] (see [Store.BlobScope]).
func (s *Store) DeleteBlob(ctx context.Context, digest string) error {
	return blobScope{s, ""}.DeleteBlob(ctx, digest)
}

// ListBlobs implements [storage.Blobs] (see [Store.BlobScope]).
func (s *Store) ListBlobs(ctx context.Context) ([]storage.BlobInfo, error) {
	return blobScope{s, ""}.ListBlobs(ctx)
}

// BlobScope implements [storage.BlobScoper]: the blobs of scope have keys
// of their own, apart from the store's (the scope "") and every other
// scope's.
func (s *Store) BlobScope(scope string) storage.Blobs {
	return blobScope{s, hex.EncodeToString([]byte(scope))}
}

// dataKey returns the key of a blob's bytes: its own hash slot, so that
// blobs spread over a cluster.
func (b blobScope) dataKey(digest string) string {
	return b.s.prefix + ":blob:{" + b.s.tenant + ":" + b.scope + ":" + strings.TrimPrefix(digest, "sha256:") + "}"
}

// indexKey returns the key of the scope's blob index.
func (b blobScope) indexKey() string {
	return b.s.prefix + ":{" + b.s.tenant + "}:blobs:" + b.scope
}

// ready checks ctx, the store and the digest, when there is one.
func (b blobScope) ready(ctx context.Context, digest *string) error {
	var bounds error
	if digest != nil {
		bounds = storage.CheckBlobDigest(*digest)
	}
	return b.s.kvReady(ctx, bounds)
}

// PutBlob records the blob in the scope's index (its Stored time and
// size, HSET), then, in one script, clears the blob's mark (see
// [storage.BlobFence]) and tells whether its key exists, SETs its bytes
// unless it does (bytes already stored are not sent again), and records
// it in the index again, a millisecond later at least: a DeleteMarkedBlob
// that removed the blob between the two index writes removes the first
// one only if it reads it unchanged (see DeleteMarkedBlob). Each step is
// idempotent, so go-redis may retry it.
func (b blobScope) PutBlob(ctx context.Context, data []byte) (string, error) {
	if err := b.ready(ctx, nil); err != nil {
		return "", err
	}
	digest := storage.BlobDigest(data)
	what := "put blob " + digest
	field := strings.TrimPrefix(digest, "sha256:")
	first := time.Now().UnixMilli()
	entry := func(ms int64) string { return strconv.FormatInt(ms, 10) + " " + strconv.Itoa(len(data)) }
	if err := b.s.client.HSet(ctx, b.indexKey(), field, entry(first)).Err(); err != nil {
		return "", b.s.fail(ctx, what, err)
	}
	n, err := touchScript.Run(ctx, b.s.client, []string{b.dataKey(digest), b.fenceKey(digest)}).Int64()
	if err != nil {
		return "", b.s.fail(ctx, what, err)
	}
	if n == 0 {
		if data == nil {
			data = []byte{}
		}
		if err := b.s.client.Set(ctx, b.dataKey(digest), data, 0).Err(); err != nil {
			return "", b.s.fail(ctx, what, err)
		}
	}
	again := max(time.Now().UnixMilli(), first+1)
	if err := b.s.client.HSet(ctx, b.indexKey(), field, entry(again)).Err(); err != nil {
		return "", b.s.fail(ctx, what, err)
	}
	return digest, nil
}

// GetBlob GETs the blob's key.
func (b blobScope) GetBlob(ctx context.Context, digest string) ([]byte, bool, error) {
	if err := b.ready(ctx, &digest); err != nil {
		return nil, false, err
	}
	v, err := b.s.client.Get(ctx, b.dataKey(digest)).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, b.s.fail(ctx, "get blob "+digest, err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, true, nil
}

// DeleteBlob DELs the blob's key, then removes it from the index (HDEL).
func (b blobScope) DeleteBlob(ctx context.Context, digest string) error {
	if err := b.ready(ctx, &digest); err != nil {
		return err
	}
	if err := b.s.client.Del(ctx, b.dataKey(digest)).Err(); err != nil {
		return b.s.fail(ctx, "delete blob "+digest, err)
	}
	if err := b.s.client.HDel(ctx, b.indexKey(), strings.TrimPrefix(digest, "sha256:")).Err(); err != nil {
		return b.s.fail(ctx, "delete blob "+digest, err)
	}
	return nil
}

// ListBlobs reads the scope's index with HSCAN, in pages of
// [Options.PageSize].
func (b blobScope) ListBlobs(ctx context.Context) ([]storage.BlobInfo, error) {
	if err := b.ready(ctx, nil); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	out := []storage.BlobInfo{}
	var cursor uint64
	for {
		page, next, err := b.s.client.HScan(ctx, b.indexKey(), cursor, "", int64(b.s.pageSize)).Result()
		if err != nil {
			return nil, b.s.fail(ctx, "list blobs", err)
		}
		for i := 0; i+1 < len(page); i += 2 {
			digest := "sha256:" + page[i]
			if seen[digest] || storage.CheckBlobDigest(digest) != nil {
				continue
			}
			seen[digest] = true
			ms, size, ok := strings.Cut(page[i+1], " ")
			stored, err1 := strconv.ParseInt(ms, 10, 64)
			n, err2 := strconv.ParseInt(size, 10, 64)
			if !ok || err1 != nil || err2 != nil {
				return nil, fmt.Errorf("storage/redis: list blobs: the index %s holds %q for %s, not \"<unix ms> <size>\"", b.indexKey(), page[i+1], digest)
			}
			out = append(out, storage.BlobInfo{Digest: digest, Size: n, Stored: time.UnixMilli(stored).UTC()})
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	slices.SortFunc(out, func(x, y storage.BlobInfo) int { return strings.Compare(x.Digest, y.Digest) })
	return out, nil
}

var (
	_ storage.Blobs      = (*Store)(nil)
	_ storage.BlobScoper = (*Store)(nil)
	_ storage.Blobs      = blobScope{}
)
