package redis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// snapshotKey returns the key of the session's snapshot (see
// storage.Snapshotter), in the stream's hash slot.
func (s *Store) snapshotKey(sessionID string) string {
	return s.prefix + ":{" + s.tenant + ":" + sessionID + "}:snapshot"
}

// codeSnapPoint: putSnapshotScript found no entry where the snapshot was
// taken (the stream changed since it was found).
const codeSnapPoint = "AGENTIC_SNAPSHOT_POINT"

// putSnapshotScript keeps a snapshot, provided that the entry it was taken
// at is still in the stream (a load checks its encoding). KEYS: the stream, the
// snapshot. ARGV: the entry id, the event id, the SHA-256 of the entry's
// encoding (hex), the data.
var putSnapshotScript = goredis.NewScript(`
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then
  return redis.error_reply('` + codeSnapPoint + ` the entry is gone')
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'entry', ARGV[1], 'event', ARGV[2], 'sum', ARGV[3], 'data', ARGV[4])
return 1
`)

// PutSnapshot implements [storage.Snapshotter]: it reads the stream back
// from its last entry, in pages of [Options.PageSize], for the event's
// entry, then keeps the snapshot in the session's snapshot hash with one
// script, which checks that the entry is still there. The snapshot is not
// waited for on replicas ([Options.Replicas]): a snapshot lost in a
// failover costs the next load its speed, not its truth.
func (s *Store) PutSnapshot(ctx context.Context, sessionID, eventID string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkID(sessionID); err != nil {
		return err
	}
	if s.closed.Load() {
		return storage.ErrClosed
	}
	if len(data) > storage.MaxSnapshotBytes {
		return fmt.Errorf("storage/redis: snapshot of session %q: %d bytes, more than %d", sessionID, len(data), storage.MaxSnapshotBytes)
	}
	what := fmt.Sprintf("snapshot of session %q", sessionID)
	key := s.eventsKey(sessionID)
	quoted, _ := json.Marshal(eventID)
	needle := `"id":` + string(quoted)
	end, seen := "+", 0
	for seen < storage.MaxSnapshotLag {
		count := min(s.pageSize, storage.MaxSnapshotLag-seen)
		msgs, err := s.client.XRevRangeN(ctx, key, end, "-", int64(count)).Result()
		if err != nil {
			return s.fail(ctx, what, err)
		}
		for _, m := range msgs {
			seen++
			v, err := entryEvent(key, m)
			if err != nil || !strings.Contains(v, needle) {
				continue
			}
			if e, err := ledger.Decode([]byte(v)); err != nil || e.ID != eventID {
				continue // the id in a text, or an entry that does not decode
			}
			sum := sha256.Sum256([]byte(v))
			err = putSnapshotScript.Run(ctx, s.client, []string{key, s.snapshotKey(sessionID)}, m.ID, eventID, hex.EncodeToString(sum[:]), data).Err()
			if err != nil && strings.HasPrefix(err.Error(), codeSnapPoint) {
				return fmt.Errorf("storage/redis: %s at %s: %w", what, eventID, storage.ErrSnapshotPoint)
			}
			if err != nil {
				return s.fail(ctx, what, err)
			}
			return nil
		}
		if len(msgs) < count {
			break
		}
		end = "(" + msgs[len(msgs)-1].ID
	}
	return fmt.Errorf("storage/redis: %s at %s: %w", what, eventID, storage.ErrSnapshotPoint)
}

// LoadSnapshot implements [storage.Snapshotter]: the snapshot hash, then
// the stream from the snapshot's entry on, in pages of
// [Options.PageSize]; the entry must still hold the event the snapshot
// was taken at, with the same encoding (a rewrite keeps the entry ids but
// not the encodings, a replacement keeps neither), or the whole stream is
// loaded.
func (s *Store) LoadSnapshot(ctx context.Context, sessionID string) ([]byte, string, []ledger.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", nil, err
	}
	if err := checkID(sessionID); err != nil {
		return nil, "", nil, err
	}
	if s.closed.Load() {
		return nil, "", nil, storage.ErrClosed
	}
	what := fmt.Sprintf("load session %q", sessionID)
	vals, err := s.client.HMGet(ctx, s.snapshotKey(sessionID), "entry", "event", "sum", "data").Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, "", nil, s.fail(ctx, what, err)
	}
	entry, _ := vals[0].(string)
	eventID, _ := vals[1].(string)
	sum, _ := vals[2].(string)
	data, hasData := vals[3].(string)
	if entry == "" || eventID == "" || !hasData {
		events, err := s.Load(ctx, sessionID)
		return nil, "", events, err
	}
	key := s.eventsKey(sessionID)
	events := []ledger.Event{}
	first, valid := true, false
	errStale := errors.New("stale")
	err = s.eachEntryFrom(ctx, key, entry, what, func(m goredis.XMessage) error {
		if first {
			first = false
			v, err := entryEvent(key, m)
			if err != nil || m.ID != entry {
				return errStale
			}
			if h := sha256.Sum256([]byte(v)); hex.EncodeToString(h[:]) != sum {
				return errStale
			}
			valid = true
			return nil
		}
		e, err := decodeEntry(key, m)
		if err != nil {
			return fmt.Errorf("storage/redis: load session %q: %w", sessionID, err)
		}
		events = append(events, e)
		return nil
	})
	if err != nil && !errors.Is(err, errStale) {
		return nil, "", nil, err
	}
	if !valid {
		events, err := s.Load(ctx, sessionID)
		return nil, "", events, err
	}
	return []byte(data), eventID, events, nil
}

var _ storage.Snapshotter = (*Store)(nil)
