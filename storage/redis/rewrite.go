package redis

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/agentichost/agentic/storage"
)

// rewriteKey returns the key of the stream a Rewrite builds before it
// replaces the session's (in the stream's hash slot).
func (s *Store) rewriteKey(sessionID string) string {
	return s.prefix + ":{" + s.tenant + ":" + sessionID + "}:rewrite"
}

// replaceScript puts the rewritten stream in place of the session's, in
// one atomic step, while the rewriter holds the lease and nothing was
// appended since it read the stream, and drops the session's snapshot.
// KEYS: the stream, the rewritten stream, the lease, the snapshot. ARGV: the rewriter's owner, the id of the last entry
// it read, the number of entries.
var replaceScript = goredis.NewScript(`
if redis.call('GET', KEYS[3]) ~= ARGV[1] then
  redis.call('DEL', KEYS[2])
  return redis.error_reply('` + codeLeaseLost + ` the lease is not held by the rewriter')
end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
local n = tonumber(ARGV[3])
if not last or last[1] ~= ARGV[2] or redis.call('XLEN', KEYS[1]) ~= n or redis.call('XLEN', KEYS[2]) ~= n then
  redis.call('DEL', KEYS[2])
  return redis.error_reply('` + codeRaced + ` the stream changed while it was rewritten')
end
redis.call('RENAME', KEYS[2], KEYS[1])
redis.call('DEL', KEYS[4])
return n
`)

// rewriteTTL is how long the lease a Rewrite holds lasts; it is renewed
// before the stream is replaced.
const rewriteTTL = time.Minute

// Rewrite implements [storage.Rewriter]. It takes the session's lease
// (refusing a session another owner holds with [storage.ErrLeaseHeld]),
// reads the stream, passes each entry's event to fn and, when fn changed
// any, writes a new stream beside it with the same entry ids and fields
// (an entry of an earlier version keeps its field "b"), then replaces the
// session's stream with it in one script, provided that it still holds
// the lease and that nothing was appended meanwhile (a queued message may
// be, under a lease: then [storage.ErrRewriteRaced]). A dry run reads
// only, without the lease. An entry fn fails on fails the call with a
// [*CorruptError] naming it.
func (s *Store) Rewrite(ctx context.Context, sessionID string, fn func(event []byte) ([]byte, error), dryRun bool) (storage.RewriteStats, error) {
	var stats storage.RewriteStats
	if err := ctx.Err(); err != nil {
		return stats, err
	}
	if err := checkID(sessionID); err != nil {
		return stats, err
	}
	if s.closed.Load() {
		return stats, storage.ErrClosed
	}
	what := fmt.Sprintf("rewrite session %q", sessionID)
	owner := "rewrite:" + s.tokenBase
	var lease storage.Lease
	if !dryRun {
		l, err := s.AcquireLease(ctx, sessionID, owner, rewriteTTL)
		if err != nil {
			return stats, err
		}
		lease = l
		defer lease.Release(context.WithoutCancel(ctx))
	}
	key := s.eventsKey(sessionID)
	type entry struct {
		id     string
		values []any
	}
	var entries []entry
	err := s.eachEntry(ctx, key, what, func(m goredis.XMessage) error {
		old, err := entryEvent(key, m)
		if err != nil {
			return err
		}
		out, err := fn([]byte(old))
		if err != nil {
			return &CorruptError{Key: key, EntryID: m.ID, Err: err}
		}
		stats.Events++
		if string(out) != old {
			stats.Changed++
		}
		values := []any{"e", out}
		if b, ok := m.Values["b"].(string); ok {
			values = append(values, "b", b)
		}
		if len(m.Values) != len(values)/2 {
			return &CorruptError{Key: key, EntryID: m.ID, Err: fmt.Errorf("unknown fields in the entry (it has %d)", len(m.Values))}
		}
		entries = append(entries, entry{m.ID, values})
		return nil
	})
	if err != nil {
		return stats, err
	}
	if stats.Changed == 0 || dryRun {
		return stats, nil
	}
	tmp := s.rewriteKey(sessionID)
	if err := s.client.Del(ctx, tmp).Err(); err != nil {
		return stats, s.fail(ctx, what, err)
	}
	for i := 0; i < len(entries); i += s.pageSize {
		pipe := s.client.Pipeline()
		for _, e := range entries[i:min(i+s.pageSize, len(entries))] {
			pipe.XAdd(ctx, &goredis.XAddArgs{Stream: tmp, ID: e.id, Values: e.values})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			s.client.Del(context.WithoutCancel(ctx), tmp)
			return stats, s.fail(ctx, what, err)
		}
	}
	if err := lease.Renew(ctx); err != nil {
		s.client.Del(context.WithoutCancel(ctx), tmp)
		return stats, err
	}
	last := entries[len(entries)-1].id
	if err := replaceScript.Run(ctx, s.client, []string{key, tmp, s.leaseKey(sessionID), s.snapshotKey(sessionID)}, owner, last, len(entries)).Err(); err != nil {
		return stats, s.fail(ctx, what, err)
	}
	return stats, nil
}

var _ storage.Rewriter = (*Store)(nil)
