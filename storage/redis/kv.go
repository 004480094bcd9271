package redis

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/agentichost/agentic/storage"
	goredis "github.com/redis/go-redis/v9"
)

// kvKey returns the hash that holds a namespace's values: the namespace in
// hex (any bytes make a key without braces or colons) inside the hash tag,
// so that namespaces spread over a cluster's slots.
func (s *Store) kvKey(namespace string) string {
	return s.prefix + ":kv:{" + s.tenant + ":" + hex.EncodeToString([]byte(namespace)) + "}"
}

func (s *Store) kvReady(ctx context.Context, namespace, key string, value []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return storage.ErrClosed
	}
	if err := storage.CheckKV(namespace, key, value); err != nil {
		return fmt.Errorf("storage/redis: %w", err)
	}
	return nil
}

// Get implements [storage.KV] with HGET.
func (s *Store) Get(ctx context.Context, namespace, key string) ([]byte, bool, error) {
	if err := s.kvReady(ctx, namespace, key, nil); err != nil {
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
	if err := s.kvReady(ctx, namespace, key, value); err != nil {
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
	if err := s.kvReady(ctx, namespace, key, nil); err != nil {
		return err
	}
	if err := s.client.HDel(ctx, s.kvKey(namespace), key).Err(); err != nil {
		return s.fail(ctx, fmt.Sprintf("delete %q in namespace %q", key, namespace), err)
	}
	return nil
}

var _ storage.KV = (*Store)(nil)
