package redis

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/agentichost/agentic/storage"
)

// DeleteSession implements [storage.Deleter]: one DEL of the session's
// keys (its stream, lease, token, request ids, snapshot and any rewrite in
// progress, which share
// a hash slot) and a ZREM from the tenant's index. On a single server the
// two run in one MULTI/EXEC, so that no Append comes between them (an
// Append adds the session to the index only when its token key is new:
// one between would leave a session with events out of the index). In a
// cluster, where the index lives in another slot, the DEL comes first; a
// failure between the two leaves an index member whose stream is gone,
// which ListSessions already skips; deleting again removes it. There, a
// message another host queues into the session while it is deleted can
// outlive the deletion out of the index (its Append indexed the session
// just before the ZREM): the session is read by its id, and deleting it
// again removes it.
func (s *Store) DeleteSession(ctx context.Context, sessionID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkID(sessionID); err != nil {
		return err
	}
	if s.closed.Load() {
		return storage.ErrClosed
	}
	keys := []string{s.eventsKey(sessionID), s.leaseKey(sessionID), s.tokenKey(sessionID), s.rewriteKey(sessionID), s.requestsKey(sessionID),
		s.snapshotKey(sessionID)}
	if s.indexInScript {
		_, err := s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.Del(ctx, keys...)
			p.ZRem(ctx, s.indexKey(), sessionID)
			return nil
		})
		if err != nil {
			return s.fail(ctx, fmt.Sprintf("delete session %q", sessionID), err)
		}
		return nil
	}
	s.indexed.Delete(sessionID)
	if err := s.client.Del(ctx, keys...).Err(); err != nil {
		return s.fail(ctx, fmt.Sprintf("delete session %q", sessionID), err)
	}
	if err := s.client.ZRem(ctx, s.indexKey(), sessionID).Err(); err != nil {
		return s.fail(ctx, fmt.Sprintf("delete session %q: index", sessionID), err)
	}
	return nil
}

// kvHead is what starts the key of every namespace's hash (see kvKey).
func (s *Store) kvHead() string { return s.prefix + ":kv:{" + s.tenant + ":" }

// Namespaces implements [storage.NamespaceLister] with SCAN over the
// namespaces' hashes (on every primary of a cluster), in pages of
// [Options.PageSize]: meant for an operator's tools, not for every request.
func (s *Store) Namespaces(ctx context.Context, prefix string) ([]string, error) {
	if err := s.kvReady(ctx, nil); err != nil {
		return nil, err
	}
	head := s.kvHead()
	match := globEscape(head+hex.EncodeToString([]byte(prefix))) + "*}"
	var (
		mu  sync.Mutex
		set = map[string]bool{}
	)
	scan := func(ctx context.Context, node goredis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, match, int64(s.pageSize)).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, k := range keys {
				h, ok := strings.CutPrefix(k, head)
				if h, ok2 := strings.CutSuffix(h, "}"); ok && ok2 {
					if ns, err := hex.DecodeString(h); err == nil && len(ns) > 0 {
						set[string(ns)] = true
					}
				}
			}
			mu.Unlock()
			if next == 0 {
				return nil
			}
			cursor = next
		}
	}
	var err error
	if cluster, ok := s.client.(*goredis.ClusterClient); ok {
		err = cluster.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error { return scan(ctx, node) })
	} else {
		err = scan(ctx, s.client)
	}
	if err != nil {
		return nil, s.fail(ctx, "list namespaces", err)
	}
	out := make([]string, 0, len(set))
	for ns := range set {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out, nil
}

// globEscape escapes the characters of a SCAN MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// DeleteNamespace implements [storage.NamespaceLister]: a DEL of the
// namespace's hash.
func (s *Store) DeleteNamespace(ctx context.Context, namespace string) error {
	if err := s.kvReady(ctx, storage.CheckNamespace(namespace)); err != nil {
		return err
	}
	if err := s.client.Del(ctx, s.kvKey(namespace)).Err(); err != nil {
		return s.fail(ctx, fmt.Sprintf("delete namespace %q", namespace), err)
	}
	return nil
}

var (
	_ storage.Deleter         = (*Store)(nil)
	_ storage.NamespaceLister = (*Store)(nil)
)
