package redis

import (
	"context"
	"fmt"
	"iter"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// versionLua computes a session's version in a script: the token of its
// last batch (every Append sets a new one) and the id of its stream's last
// entry, "" when the stream has none. KEYS[1] is the stream, KEYS[2] the
// token.
const versionLua = `
local function version()
  local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
  if not last then
    return ''
  end
  return (redis.call('GET', KEYS[2]) or '') .. '/' .. last[1]
end
`

// versionScript returns a session's version. KEYS: the stream, the token.
var versionScript = goredis.NewScript(versionLua + `
return version()
`)

// swapScript puts the stream a ReplaceSession built in place of the
// session's, with the request ids of its messages, or deletes the session,
// while its version is still the one given. KEYS: the stream, the token,
// the built stream, the lease, the stream of a rewrite in progress, the
// session's request ids, the built request ids, the session's snapshot
// (dropped with the stream it was taken of), and (on a single server) the index. ARGV: the version, the number of events built (0: delete),
// the new token, the time in ms, the session id. It deletes what was
// built when it refuses.
var swapScript = goredis.NewScript(versionLua + `
if version() ~= ARGV[1] then
  redis.call('DEL', KEYS[3], KEYS[7])
  return redis.error_reply('` + codeChanged + ` the session changed since its version was read')
end
local n = tonumber(ARGV[2])
if n == 0 then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
  if KEYS[9] then
    redis.call('ZREM', KEYS[9], ARGV[5])
  end
  return 0
end
if redis.call('XLEN', KEYS[3]) ~= n then
  redis.call('DEL', KEYS[3], KEYS[7])
  return redis.error_reply('` + codeChanged + ` the replacement was changed while it was built')
end
redis.call('RENAME', KEYS[3], KEYS[1])
redis.call('DEL', KEYS[6], KEYS[8])
if redis.call('EXISTS', KEYS[7]) == 1 then
  redis.call('RENAME', KEYS[7], KEYS[6])
end
redis.call('SET', KEYS[2], ARGV[3])
redis.call('DEL', KEYS[5])
if KEYS[9] then
  redis.call('ZADD', KEYS[9], 'NX', ARGV[4], ARGV[5])
end
return n
`)

// SessionVersion implements [storage.Fencer]: the token of the session's
// last batch and the id of its stream's last entry, read in one script.
func (s *Store) SessionVersion(ctx context.Context, sessionID string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := checkID(sessionID); err != nil {
		return "", err
	}
	if s.closed.Load() {
		return "", storage.ErrClosed
	}
	v, err := versionScript.Run(ctx, s.client, []string{s.eventsKey(sessionID), s.tokenKey(sessionID)}).Text()
	if err != nil {
		return "", s.fail(ctx, fmt.Sprintf("version of session %q", sessionID), err)
	}
	return v, nil
}

// ReplaceSession implements [storage.Fencer]. It writes the events to a
// stream of its own beside the session's (in its hash slot), a page of
// [Options.PageSize] at a time, then swaps it in with one script that
// checks the session's version first (and deletes the built stream when
// it refuses). The request ids of its messages are built beside it and
// swapped in with it. No events delete the session, its lease, token and
// request ids with it.
// In a cluster, where the session index lives in another slot, the
// session is added to the index before the swap (so that a session with
// events is always listed), or, for a deletion, removed from it before
// the swap and added back when the swap is refused.
func (s *Store) ReplaceSession(ctx context.Context, sessionID, version string, events iter.Seq2[ledger.Event, error]) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkID(sessionID); err != nil {
		return err
	}
	if s.closed.Load() {
		return storage.ErrClosed
	}
	what := fmt.Sprintf("replace session %q", sessionID)
	token := s.tokenBase + strconv.FormatUint(s.tokenSeq.Add(1), 36)
	built := s.eventsKey(sessionID) + ":replace:" + token
	builtRequests := built + ":requests"
	drop := func() { s.client.Del(context.WithoutCancel(ctx), built, builtRequests) }
	n := 0
	page := make([]*goredis.XAddArgs, 0, s.pageSize)
	type request struct {
		e  ledger.Event
		at int // its place in the page
	}
	var requests []request // the page's inputs sent under a request id
	flush := func() error {
		if len(page) == 0 {
			return nil
		}
		pipe := s.client.Pipeline()
		added := make([]*goredis.StringCmd, len(page))
		for i, a := range page {
			added[i] = pipe.XAdd(ctx, a)
		}
		_, err := pipe.Exec(ctx)
		if err == nil && len(requests) > 0 {
			pipe := s.client.Pipeline()
			for _, r := range requests {
				pipe.HSetNX(ctx, builtRequests, r.e.Input.RequestID, r.e.Input.MessageID+" "+added[r.at].Val())
			}
			_, err = pipe.Exec(ctx)
		}
		page, requests = page[:0], requests[:0]
		if err != nil {
			return s.fail(ctx, what, err)
		}
		return nil
	}
	for e, err := range events {
		if err != nil {
			drop()
			return err
		}
		n++
		b, err := ledger.Encode(e)
		if err != nil {
			drop()
			return fmt.Errorf("storage/redis: %s: event %d: %w", what, n, err)
		}
		if e.Kind == ledger.KindInput && e.Input != nil && e.Input.RequestID != "" {
			requests = append(requests, request{e, len(page)})
		}
		page = append(page, &goredis.XAddArgs{Stream: built, ID: "*", Values: []any{"e", b}})
		if len(page) == s.pageSize {
			if err := flush(); err != nil {
				drop()
				return err
			}
		}
	}
	if err := flush(); err != nil {
		drop()
		return err
	}
	now := time.Now().UnixMilli()
	keys := []string{s.eventsKey(sessionID), s.tokenKey(sessionID), built, s.leaseKey(sessionID), s.rewriteKey(sessionID),
		s.requestsKey(sessionID), builtRequests, s.snapshotKey(sessionID)}
	if s.indexInScript {
		keys = append(keys, s.indexKey())
	} else {
		// The index first: see the method's documentation.
		var err error
		if n > 0 {
			err = s.client.ZAddNX(ctx, s.indexKey(), goredis.Z{Score: float64(now), Member: sessionID}).Err()
		} else {
			s.indexed.Delete(sessionID)
			err = s.client.ZRem(ctx, s.indexKey(), sessionID).Err()
		}
		if err != nil {
			drop()
			return s.fail(ctx, what, err)
		}
	}
	args := []any{version, n, token, now, sessionID}
	var err error
	if s.replicas > 0 {
		err = s.runReplicated(ctx, swapScript, keys, args...)
	} else {
		err = swapScript.Run(ctx, s.client, keys, args...).Err()
	}
	if err != nil {
		drop()
		if !s.indexInScript && n == 0 {
			// Refused (or failed): the session may still have events,
			// and must stay listed.
			s.client.ZAddNX(context.WithoutCancel(ctx), s.indexKey(), goredis.Z{Score: float64(now), Member: sessionID})
		}
		return s.fail(ctx, what, err)
	}
	if !s.indexInScript && n > 0 {
		s.rememberIndexed(sessionID)
	}
	return nil
}

var _ storage.Fencer = (*Store)(nil)
