package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/agentichost/agentic/storage"
)

// fenceKey returns the key of a blob's fence (see [storage.BlobFence]): a
// hash in the blob's hash slot whose field "m" is its mark and whose
// fields "h:<token>" are its holds, each valued with the unix ms at which
// it lapses. The key itself expires once its last hold has lapsed, or
// markTTL after its mark was set.
func (b blobScope) fenceKey(digest string) string { return b.dataKey(digest) + ":fence" }

// markTTL bounds a mark's life: a deleter that takes longer between its
// mark and its deletion finds the mark gone, and deletes nothing.
const markTTL = time.Hour

// touchScript clears a blob's mark and tells whether its bytes are
// stored. KEYS: the blob, its fence.
var touchScript = goredis.NewScript(`
redis.call('HDEL', KEYS[2], 'm')
return redis.call('EXISTS', KEYS[1])
`)

// fenceLua is what the fence scripts share: extend(ms) makes the fence
// key live ms from now at least.
const fenceLua = `
local function extend(ms)
  if redis.call('PTTL', KEYS[1]) < ms then
    redis.call('PEXPIRE', KEYS[1], ms)
  end
end
`

// holdScript adds a hold and clears the mark. KEYS: the fence. ARGV: the
// hold's token, when it lapses (unix ms), its ttl in ms.
var holdScript = goredis.NewScript(fenceLua + `
redis.call('HDEL', KEYS[1], 'm')
redis.call('HSET', KEYS[1], 'h:' .. ARGV[1], ARGV[2])
extend(tonumber(ARGV[3]))
return 1
`)

// releaseScript ends a hold and clears the mark. KEYS: the fence. ARGV:
// the hold's token.
var blobReleaseScript = goredis.NewScript(`
redis.call('HDEL', KEYS[1], 'h:' .. ARGV[1], 'm')
if redis.call('HLEN', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[1])
end
return 1
`)

// markScript sets the mark. KEYS: the fence. ARGV: the mark, its ttl in
// ms.
var markScript = goredis.NewScript(fenceLua + `
redis.call('HSET', KEYS[1], 'm', ARGV[1])
extend(tonumber(ARGV[2]))
return 1
`)

// deleteMarkedScript deletes the blob's bytes and its fence when the mark
// is still the one given and no hold is in force. KEYS: the blob, its
// fence. ARGV: the mark, the time (unix ms). It returns 1 when it deleted.
var deleteMarkedScript = goredis.NewScript(`
local f = redis.call('HGETALL', KEYS[2])
local mark = nil
local now = tonumber(ARGV[2])
for i = 1, #f, 2 do
  if f[i] == 'm' then
    mark = f[i + 1]
  elseif string.sub(f[i], 1, 2) == 'h:' and tonumber(f[i + 1]) > now then
    return 0
  end
end
if mark ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[2])
return redis.call('DEL', KEYS[1])
`)

// unindexScript removes a blob's index entry if it still reads as given.
// KEYS: the index. ARGV: the field, the entry.
var unindexScript = goredis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
`)

// fenceToken returns 16 random hex digits.
func fenceToken() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// HoldBlob implements [storage.BlobFence] (see [Store.BlobScope]).
func (s *Store) HoldBlob(ctx context.Context, digest string, ttl time.Duration) (string, error) {
	return blobScope{s, ""}.HoldBlob(ctx, digest, ttl)
}

// ReleaseBlob implements [storage.BlobFence] (see [Store.BlobScope]).
func (s *Store) ReleaseBlob(ctx context.Context, digest, hold string) error {
	return blobScope{s, ""}.ReleaseBlob(ctx, digest, hold)
}

// MarkBlob implements [storage.BlobFence] (see [Store.BlobScope]).
func (s *Store) MarkBlob(ctx context.Context, digest string) (string, error) {
	return blobScope{s, ""}.MarkBlob(ctx, digest)
}

// DeleteMarkedBlob implements [storage.BlobFence] (see [Store.BlobScope]).
func (s *Store) DeleteMarkedBlob(ctx context.Context, digest, mark string) (bool, error) {
	return blobScope{s, ""}.DeleteMarkedBlob(ctx, digest, mark)
}

// HoldBlob adds a hold to the blob's fence, lapsing at the host's clock's
// now plus ttl (a hold is checked against the deleter's clock: hosts that
// share a store keep their clocks close).
func (b blobScope) HoldBlob(ctx context.Context, digest string, ttl time.Duration) (string, error) {
	if err := b.ready(ctx, &digest); err != nil {
		return "", err
	}
	if ttl < time.Millisecond {
		return "", fmt.Errorf("storage/redis: hold blob %s: ttl %v is below Redis's resolution of 1ms", digest, ttl)
	}
	t := fenceToken()
	until := time.Now().Add(ttl).UnixMilli()
	if err := holdScript.Run(ctx, b.s.client, []string{b.fenceKey(digest)}, t, until, ttl.Milliseconds()).Err(); err != nil {
		return "", b.s.fail(ctx, "hold blob "+digest, err)
	}
	return t, nil
}

// ReleaseBlob removes the hold from the blob's fence, and its mark.
func (b blobScope) ReleaseBlob(ctx context.Context, digest, hold string) error {
	if err := b.ready(ctx, &digest); err != nil {
		return err
	}
	if err := blobReleaseScript.Run(ctx, b.s.client, []string{b.fenceKey(digest)}, hold).Err(); err != nil {
		return b.s.fail(ctx, "release blob "+digest, err)
	}
	return nil
}

// MarkBlob sets the blob's mark, for markTTL at most.
func (b blobScope) MarkBlob(ctx context.Context, digest string) (string, error) {
	if err := b.ready(ctx, &digest); err != nil {
		return "", err
	}
	m := fenceToken()
	if err := markScript.Run(ctx, b.s.client, []string{b.fenceKey(digest)}, m, markTTL.Milliseconds()).Err(); err != nil {
		return "", b.s.fail(ctx, "mark blob "+digest, err)
	}
	return m, nil
}

// DeleteMarkedBlob reads the blob's index entry, deletes its bytes and
// fence in one script that checks the mark and the holds, and then
// removes the index entry if it still reads as it did before (a PutBlob
// that wrote the blob again meanwhile has written it anew: see PutBlob).
func (b blobScope) DeleteMarkedBlob(ctx context.Context, digest, mark string) (bool, error) {
	if err := b.ready(ctx, &digest); err != nil {
		return false, err
	}
	if mark == "" {
		return false, nil
	}
	what := "delete blob " + digest
	field := strings.TrimPrefix(digest, "sha256:")
	entry, err := b.s.client.HGet(ctx, b.indexKey(), field).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return false, b.s.fail(ctx, what, err)
	}
	n, err := deleteMarkedScript.Run(ctx, b.s.client, []string{b.dataKey(digest), b.fenceKey(digest)}, mark, time.Now().UnixMilli()).Int64()
	if err != nil {
		return false, b.s.fail(ctx, what, err)
	}
	if n == 0 {
		return false, nil
	}
	if entry != "" {
		if err := unindexScript.Run(ctx, b.s.client, []string{b.indexKey()}, field, entry).Err(); err != nil {
			return true, b.s.fail(ctx, what, err)
		}
	}
	return true, nil
}

var (
	_ storage.BlobFence = (*Store)(nil)
	_ storage.BlobFence = blobScope{}
)
