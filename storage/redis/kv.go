package redis

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/agentichost/agentic/storage"
	goredis "github.com/redis/go-redis/v9"
)

// kvKey returns the hash that holds a namespace's values: the namespace in
// hex (any bytes make a key without braces or colons) inside the hash tag,
// so that namespaces spread over a cluster's slots.
func (s *Store) kvKey(namespace string) string {
	return s.prefix + ":kv:{" + s.tenant + ":" + hex.EncodeToString([]byte(namespace)) + "}"
}

// kvReady checks ctx and the store before a KV operation, and passes on
// the caller's check of its bounds.
func (s *Store) kvReady(ctx context.Context, bounds error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return storage.ErrClosed
	}
	if bounds != nil {
		return fmt.Errorf("storage/redis: %w", bounds)
	}
	return nil
}

// Get implements [storage.KV] with HGET.
func (s *Store) Get(ctx context.Context, namespace, key string) ([]byte, bool, error) {
	if err := s.kvReady(ctx, storage.CheckKV(namespace, key, nil)); err != nil {
		return nil, false, err
	}
	v, err := s.client.HGet(ctx, s.kvKey(namespace), key).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, s.fail(ctx, fmt.Sprintf("get %q in namespace %q", key, namespace), err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, true, nil
}

// Set implements [storage.KV] with HSET (idempotent, so go-redis may retry
// it).
func (s *Store) Set(ctx context.Context, namespace, key string, value []byte) error {
	if err := s.kvReady(ctx, storage.CheckKV(namespace, key, value)); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	if err := s.client.HSet(ctx, s.kvKey(namespace), key, value).Err(); err != nil {
		return s.fail(ctx, fmt.Sprintf("set %q in namespace %q", key, namespace), err)
	}
	return nil
}

// Delete implements [storage.KV] with HDEL.
func (s *Store) Delete(ctx context.Context, namespace, key string) error {
	if err := s.kvReady(ctx, storage.CheckKV(namespace, key, nil)); err != nil {
		return err
	}
	if err := s.client.HDel(ctx, s.kvKey(namespace), key).Err(); err != nil {
		return s.fail(ctx, fmt.Sprintf("delete %q in namespace %q", key, namespace), err)
	}
	return nil
}

// Len implements [storage.KV] with HLEN.
func (s *Store) Len(ctx context.Context, namespace string) (int, error) {
	if err := s.kvReady(ctx, storage.CheckNamespace(namespace)); err != nil {
		return 0, err
	}
	n, err := s.client.HLen(ctx, s.kvKey(namespace)).Result()
	if err != nil {
		return 0, s.fail(ctx, fmt.Sprintf("len of namespace %q", namespace), err)
	}
	return int(n), nil
}

// Keys implements [storage.KV] with HKEYS.
func (s *Store) Keys(ctx context.Context, namespace string) ([]string, error) {
	if err := s.kvReady(ctx, storage.CheckNamespace(namespace)); err != nil {
		return nil, err
	}
	keys, err := s.client.HKeys(ctx, s.kvKey(namespace)).Result()
	if err != nil {
		return nil, s.fail(ctx, fmt.Sprintf("keys of namespace %q", namespace), err)
	}
	slices.Sort(keys)
	return keys, nil
}

// addWithinScript is AddWithin: KEYS the namespace's hash, ARGV the key,
// the delta and the limit.
var addWithinScript = goredis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local v = 0
if cur then
  if not string.match(cur, '^-?%d+$') then
    return redis.error_reply('` + codeNotCounter + ` the value is not a counter')
  end
  v = tonumber(cur)
end
local d = tonumber(ARGV[2])
if d > 0 and v + d > tonumber(ARGV[3]) then
  return {v, 0}
end
return {redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2]), 1}
`)

// AddWithin implements [storage.Counter] with a script on the namespace's
// hash (HGET, then HINCRBY unless past the limit), atomic on the server.
func (s *Store) AddWithin(ctx context.Context, namespace, key string, delta, limit int64) (int64, bool, error) {
	if err := s.kvReady(ctx, storage.CheckKV(namespace, key, nil)); err != nil {
		return 0, false, err
	}
	res, err := addWithinScript.Run(ctx, s.client, []string{s.kvKey(namespace)}, key, delta, limit).Int64Slice()
	if err != nil {
		return 0, false, s.fail(ctx, fmt.Sprintf("add to %q in namespace %q", key, namespace), err)
	}
	if len(res) != 2 {
		return 0, false, fmt.Errorf("storage/redis: add to %q in namespace %q: the script answered %v", key, namespace, res)
	}
	return res[0], res[1] == 1, nil
}

var (
	_ storage.KV      = (*Store)(nil)
	_ storage.Counter = (*Store)(nil)
)
